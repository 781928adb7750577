// Keras 3's .weights.h5 files (Note [Keras weights] in include/mirror/train/keras_weights.h),
// written and read with the HDF5 C library: "<path>/vars/<i>" float32 datasets. Compiled when
// HDF5 is found (cmake/KerasWeights.cmake); keras_h5_none.cpp stands in otherwise.
#include <fcntl.h>
#include <hdf5.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "mirror/error.h"
#include "mirror/train/keras_weights.h"

namespace mirror::train {
namespace {

namespace fs = std::filesystem;

constexpr int kMaxDepth = 32;  // nested groups: Keras's deepest path is a few levels
constexpr std::size_t kMaxObjects = 1u << 20;
constexpr int kMaxRank = 8;
constexpr std::int64_t kMaxElements = std::int64_t{1} << 31;

/// Closes an HDF5 handle with its own close function; never throws.
class Handle {
 public:
  Handle(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  ~Handle() {
    if (id_ >= 0) close_(id_);
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  hid_t get() const { return id_; }
  bool ok() const { return id_ >= 0; }
  /// Closes now; false when HDF5 reports an error (a failed flush at file close).
  bool close() {
    const herr_t rc = id_ >= 0 ? close_(id_) : 0;
    id_ = -1;
    return rc >= 0;
  }

 private:
  hid_t id_;
  herr_t (*close_)(hid_t);
};

/// The innermost message of HDF5's error stack (its automatic printing is off).
std::string hdf5_reason() {
  std::string out;
  H5Ewalk2(
      H5E_DEFAULT, H5E_WALK_DOWNWARD,
      [](unsigned n, const H5E_error2_t* e, void* data) -> herr_t {
        auto* s = static_cast<std::string*>(data);
        if (n == 0 && e->desc != nullptr) *s = e->desc;
        return 0;
      },
      &out);
  return out.empty() ? "HDF5 reported an error" : out;
}

void quiet_hdf5() {
  static const bool once = [] {
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    return true;
  }();
  (void)once;
}

// ---------------------------------------------------------------- writing

void write_dataset(hid_t group, const std::string& name, const Tensor& value,
                   const std::string& where) {
  const Tensor v = keras_layout::host_float(value);
  std::vector<hsize_t> dims(v.shape().begin(), v.shape().end());
  Handle space(dims.empty() ? H5Screate(H5S_SCALAR)
                            : H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr),
               H5Sclose);
  Handle set(space.ok() ? H5Dcreate2(group, name.c_str(), H5T_IEEE_F32LE, space.get(), H5P_DEFAULT,
                                     H5P_DEFAULT, H5P_DEFAULT)
                        : -1,
             H5Dclose);
  MIRROR_CHECK(set.ok() && (v.numel() == 0 || H5Dwrite(set.get(), H5T_NATIVE_FLOAT, H5S_ALL,
                                                       H5S_ALL, H5P_DEFAULT, v.data<float>()) >= 0),
               Error, where + "/" + name + ": cannot write: " + hdf5_reason());
}

void write_groups(hid_t file, const std::vector<KerasVariables>& variables,
                  const std::string& what) {
  Handle lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  MIRROR_CHECK(lcpl.ok() && H5Pset_create_intermediate_group(lcpl.get(), 1) >= 0, Error,
               what + ": " + hdf5_reason());
  // The model's own (empty) variables and the layers' folder, as Keras writes them.
  for (const char* g : {"vars", "layers"}) {
    Handle h(H5Gcreate2(file, g, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose);
    MIRROR_CHECK(h.ok(), Error, what + ": cannot create group " + g + ": " + hdf5_reason());
  }
  for (const KerasVariables& v : variables) {
    const std::string where = v.path + "/vars";
    Handle group(H5Gcreate2(file, where.c_str(), lcpl.get(), H5P_DEFAULT, H5P_DEFAULT), H5Gclose);
    MIRROR_CHECK(group.ok(), Error,
                 what + ": cannot create group " + where + " (given twice?): " + hdf5_reason());
    for (std::size_t i = 0; i < v.values.size(); ++i) {
      write_dataset(group.get(), std::to_string(i), v.values[i], what + ": " + where);
    }
  }
}

void sync_path(const fs::path& p, int flags, const std::string& what) {
  const int fd = ::open(p.c_str(), flags);
  MIRROR_CHECK(fd >= 0 && ::fsync(fd) == 0, Error,
               "cannot write " + what + ": " + std::strerror(errno));
  ::close(fd);
}

// ---------------------------------------------------------------- reading

struct Reader {
  std::string file;
  std::uintmax_t file_bytes = 0;
  std::vector<KerasVariables> out;
  std::size_t objects = 0;

  [[noreturn]] void bad(const std::string& what) const {
    throw DataError(file + ": not a Keras .weights.h5 file: " + what);
  }

  /// The names of a group's links, each checked to be a hard link (no soft or external links:
  /// a weights file names nothing outside itself).
  std::vector<std::string> links(hid_t group, const std::string& at) {
    struct Found {
      std::vector<std::string> names;
      std::string soft;
    } found;
    hsize_t idx = 0;
    const herr_t rc = H5Literate(
        group, H5_INDEX_NAME, H5_ITER_INC, &idx,
        [](hid_t, const char* name, const H5L_info_t* info, void* data) -> herr_t {
          auto* f = static_cast<Found*>(data);
          if (info->type != H5L_TYPE_HARD) {
            f->soft = name;
            return 1;
          }
          f->names.emplace_back(name);
          return 0;
        },
        &found);
    if (!found.soft.empty()) bad("'" + at + found.soft + "' is a soft or external link");
    if (rc < 0) bad("cannot list group '" + at + "': " + hdf5_reason());
    objects += found.names.size();
    if (objects > kMaxObjects) bad("more than " + std::to_string(kMaxObjects) + " objects");
    return found.names;
  }

  Tensor dataset(hid_t set, const std::string& where) {
    Handle type(H5Dget_type(set), H5Tclose);
    const H5T_class_t cls = type.ok() ? H5Tget_class(type.get()) : H5T_NO_CLASS;
    if (cls != H5T_FLOAT && cls != H5T_INTEGER) {
      bad("'" + where +
          "' is not a numeric array (bfloat16 variables are stored opaque: save "
          "the Keras model with float32 variables)");
    }
    Handle space(H5Dget_space(set), H5Sclose);
    const int rank = space.ok() ? H5Sget_simple_extent_ndims(space.get()) : -1;
    if (rank < 0 || rank > kMaxRank) bad("'" + where + "' has an unreadable or absurd rank");
    std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
    if (rank > 0) H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
    Shape shape;
    std::int64_t n = 1;
    for (hsize_t d : dims) {
      if (d > static_cast<hsize_t>(kMaxElements)) bad("'" + where + "' has an absurd dimension");
      shape.push_back(static_cast<std::int64_t>(d));
      n *= static_cast<std::int64_t>(d);
      if (n > kMaxElements) bad("'" + where + "' declares more than 2^31 elements");
    }
    // A shape bomb declares far more than the file stores (Keras refuses those too).
    const std::uintmax_t declared = static_cast<std::uintmax_t>(n) * H5Tget_size(type.get());
    if (declared > 1000 * std::max<std::uintmax_t>(file_bytes, 1) + (1u << 20)) {
      bad("'" + where + "' declares " + std::to_string(declared) + " bytes, far more than the " +
          std::to_string(file_bytes) + "-byte file holds");
    }
    Tensor t = Tensor::empty(shape, DType::kFloat32);
    if (n > 0 &&
        H5Dread(set, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, t.data<float>()) < 0) {
      bad("cannot read '" + where + "': " + hdf5_reason());
    }
    return t;
  }

  /// A "vars" group: datasets "0" .. "n-1".
  void vars(hid_t group, const std::string& at, const std::string& owner) {
    const std::vector<std::string> names = links(group, at);
    std::map<std::size_t, Tensor> values;
    for (const std::string& name : names) {
      const bool number = !name.empty() && name.size() < 9 &&
                          name.find_first_not_of("0123456789") == std::string::npos &&
                          (name == "0" || name[0] != '0');
      if (!number) bad("'" + at + name + "' is not a variable number 0, 1, ...");
      Handle set(H5Dopen2(group, name.c_str(), H5P_DEFAULT), H5Dclose);
      if (!set.ok()) bad("'" + at + name + "' is not a dataset");
      values[std::stoul(name)] = dataset(set.get(), at + name);
    }
    KerasVariables v{owner, "", {}};
    for (const auto& [i, t] : values) {
      if (i != v.values.size())
        bad("'" + at + "' numbers its variables with a gap at " + std::to_string(v.values.size()));
      v.values.push_back(t);
    }
    out.push_back(std::move(v));
  }

  void group(hid_t g, const std::string& at, int depth) {
    if (depth > kMaxDepth) bad("groups nested deeper than " + std::to_string(kMaxDepth));
    for (const std::string& name : links(g, at)) {
      Handle obj(H5Oopen(g, name.c_str(), H5P_DEFAULT), H5Oclose);
      if (!obj.ok()) bad("cannot open '" + at + name + "': " + hdf5_reason());
      if (H5Iget_type(obj.get()) != H5I_GROUP) continue;  // a dataset outside "vars": not Keras's
      if (name == "vars") {
        vars(obj.get(), at + name + "/", at.empty() ? "" : at.substr(0, at.size() - 1));
      } else {
        group(obj.get(), at + name + "/", depth + 1);
      }
    }
  }
};

}  // namespace

bool keras_weights_file_supported() { return true; }

void write_keras_weights_file(const fs::path& path, const std::vector<KerasVariables>& variables) {
  quiet_hdf5();
  const std::string what = path.string();
  const fs::path tmp = path.string() + ".tmp." + std::to_string(::getpid());
  {
    Handle file(H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose);
    const int err = errno;
    MIRROR_CHECK(
        file.ok(), Error,
        "cannot write " + what + ": " + (err != 0 ? std::strerror(err) : hdf5_reason().c_str()));
    try {
      write_groups(file.get(), variables, what);
    } catch (...) {
      file.close();
      fs::remove(tmp);
      throw;
    }
    const bool flushed = H5Fflush(file.get(), H5F_SCOPE_GLOBAL) >= 0 && file.close();
    if (!flushed) fs::remove(tmp);
    MIRROR_CHECK(flushed, Error, "cannot write " + what + ": " + hdf5_reason());
  }
  sync_path(tmp, O_RDONLY, what);
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) fs::remove(tmp);
  MIRROR_CHECK(!ec, Error, "cannot write " + what + ": " + ec.message());
  const fs::path dir = path.has_parent_path() ? path.parent_path() : fs::path(".");
  sync_path(dir, O_RDONLY | O_DIRECTORY, what);
}

std::vector<KerasVariables> read_keras_weights_file(const fs::path& path) {
  quiet_hdf5();
  const std::string what = path.string();
  std::error_code ec;
  MIRROR_CHECK(fs::exists(path, ec), Error,
               "cannot open " + what + ": " + std::strerror(ec ? ec.value() : ENOENT));
  MIRROR_CHECK(!fs::is_directory(path, ec), Error,
               "cannot open " + what + ": " + std::strerror(EISDIR) + "; give a .weights.h5 file");
  const int fd = ::open(path.c_str(), O_RDONLY);
  MIRROR_CHECK(fd >= 0, Error, "cannot open " + what + ": " + std::strerror(errno));
  ::close(fd);
  Reader r{what, fs::file_size(path, ec), {}, 0};
  if (H5Fis_hdf5(path.c_str()) <= 0) r.bad("it is not an HDF5 file");
  Handle file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  if (!file.ok()) r.bad("HDF5 cannot open it: " + hdf5_reason());
  Handle root(H5Gopen2(file.get(), "/", H5P_DEFAULT), H5Gclose);
  if (!root.ok()) r.bad("no root group");
  // Keras 2's (and Keras 3's legacy) .h5 weights: layer_names and per-layer weight_names.
  if (H5Aexists(root.get(), "layer_names") > 0 ||
      H5Lexists(root.get(), "model_weights", H5P_DEFAULT) > 0) {
    r.bad(
        "it is Keras's legacy .h5 layout (layer_names), which Keras 3 writes for a name ending in "
        ".h5 but not .weights.h5; load the model in Keras 3 and "
        "save_weights(\"model.weights.h5\")");
  }
  r.group(root.get(), "", 0);
  return r.out;
}

}  // namespace mirror::train
