// Image folders and image file lists: the listing at load; the header checks and the decoding
// per sample are ImageSamples' (image_samples.cpp), which tar shards share.
#include "mirror/data/image_folder.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "data/image_samples.h"
#include "mirror/data/idx.h"
#include "mirror/error.h"

namespace mirror::data {
namespace fs = std::filesystem;
namespace {

bool is_image_name(const std::string& name) {
  if (name.empty() || name[0] == '.') return false;
  std::string ext = fs::path(name).extension().string();
  for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return ext == ".jpg" || ext == ".jpeg" || ext == ".png";
}

/// The first `limit` bytes of a file (all of it when shorter); DataError with the system's reason.
std::vector<std::uint8_t> read_head(const std::string& path, std::size_t limit) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  MIRROR_CHECK(fd >= 0, DataError, "cannot open " + path + ": " + std::strerror(errno));
  std::vector<std::uint8_t> out(limit);
  std::size_t got = 0;
  int err = 0;
  while (got < limit) {
    const ssize_t n = ::read(fd, out.data() + got, limit - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) err = errno;
    if (n <= 0) break;
    got += static_cast<std::size_t>(n);
  }
  ::close(fd);
  MIRROR_CHECK(err == 0, DataError, "cannot read " + path + ": " + std::strerror(err));
  out.resize(got);
  return out;
}

/// Every image file below `dir` (recursively), sorted by path; `ignored` counts other files.
std::vector<std::string> images_below(const fs::path& dir, std::int64_t& ignored,
                                      std::string& example) {
  std::vector<std::string> out;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code type_ec;
    if (it->is_directory(type_ec)) continue;
    if (is_image_name(it->path().filename().string())) {
      out.push_back(it->path().string());
    } else {
      if (ignored++ == 0) example = it->path().string();
    }
  }
  MIRROR_CHECK(!ec, DataError, "cannot list the folder " + dir.string() + ": " + ec.message());
  std::sort(out.begin(), out.end());
  return out;
}

/// Note [Image samples] (image_samples.h): a folder's samples are files, read whole per batch.
class ImageFiles : public detail::ImageSamples {
 public:
  using ImageSamples::ImageSamples;
  void add(const std::string& path, std::int32_t label) {
    names_ += path;
    ends_.push_back(names_.size());
    add_label(label);
  }
  std::string sample_name(std::int64_t index) const override {
    check_index(index);
    const std::size_t i = static_cast<std::size_t>(index);
    const std::size_t begin = i == 0 ? 0 : ends_[i - 1];
    return names_.substr(begin, ends_[i] - begin);
  }

 private:
  std::vector<std::uint8_t> read_sample(std::int64_t index, std::size_t limit) const override {
    const std::string file = sample_name(index);
    return limit == kWhole ? read_file_bytes(file) : read_head(file, limit);
  }
  std::string names_;               // every file's path, one after the other
  std::vector<std::size_t> ends_;   // where each path ends in names_
};

std::string ignored_note(std::int64_t ignored, const std::string& example) {
  if (ignored == 0) return "";
  return "ignored " + std::to_string(ignored) +
         " file(s) that are not .jpg/.jpeg/.png images (e.g. " + example + ")";
}

}  // namespace

ColorMode parse_color_mode(const std::string& text) {
  if (text == "auto") return ColorMode::kAuto;
  if (text == "grayscale" || text == "greyscale" || text == "gray") return ColorMode::kGrayscale;
  if (text == "rgb") return ColorMode::kRgb;
  throw InvalidArgument("--color must be auto, grayscale or rgb, got '" + text + "'");
}

const char* color_mode_name(ColorMode mode) {
  return mode == ColorMode::kGrayscale ? "grayscale" : mode == ColorMode::kRgb ? "rgb" : "auto";
}

std::shared_ptr<const Dataset> load_image_folder(const std::string& dir,
                                                 const ImageFolderOptions& options) {
  std::error_code ec;
  MIRROR_CHECK(fs::is_directory(dir, ec), DataError,
               dir + " is not a folder" + (ec ? " (" + ec.message() + ")" : "") +
                   "; an image folder holds one subfolder of images per class");
  std::vector<std::string> found;
  std::int64_t ignored = 0;
  std::string example;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code type_ec;
    if (it->is_directory(type_ec))
      found.push_back(it->path().filename().string());
    else if (ignored++ == 0)
      example = it->path().string();
  }
  MIRROR_CHECK(!ec, DataError, "cannot list the folder " + dir + ": " + ec.message());
  std::sort(found.begin(), found.end());
  MIRROR_CHECK(!found.empty(), DataError,
               dir + " holds no class folder; an image folder holds one subfolder per class "
                     "(e.g. " + dir + "/cat/1.jpg, " + dir + "/dog/2.jpg)");
  const std::vector<std::string> classes = options.classes.empty() ? found : options.classes;
  auto ds = std::make_shared<ImageFiles>(dir, classes, options);
  for (const std::string& name : found) {
    const auto pos = std::find(classes.begin(), classes.end(), name);
    MIRROR_CHECK(pos != classes.end(), DataError,
                 dir + "/" + name + " is a class the training images do not have (their " +
                     std::to_string(classes.size()) + " classes: " + classes.front() + ", ...)" +
                     "; the test folder must use the training folder's class names");
    const auto files = images_below(fs::path(dir) / name, ignored, example);
    MIRROR_CHECK(!files.empty(), DataError,
                 dir + "/" + name + " is an empty class folder (no .jpg, .jpeg or .png file); "
                                    "remove it or add its images");
    for (const std::string& f : files) ds->add(f, static_cast<std::int32_t>(pos - classes.begin()));
  }
  ds->check_headers();
  std::vector<std::string> notes = ds->notes();
  if (const std::string note = ignored_note(ignored, example); !note.empty())
    notes.insert(notes.begin(), dir + ": " + note);
  ds->set_notes(std::move(notes));
  return ds;
}

std::shared_ptr<const Dataset> load_image_files(const std::vector<std::string>& paths,
                                                const ImageFolderOptions& options) {
  MIRROR_CHECK(!paths.empty(), InvalidArgument, "no image file given");
  auto ds = std::make_shared<ImageFiles>(paths.size() == 1 ? paths.front() : "images",
                                         std::vector<std::string>{"images"}, options);
  std::int64_t ignored = 0;
  std::string example;
  for (const std::string& p : paths) {
    std::error_code ec;
    if (fs::is_directory(p, ec)) {
      const auto files = images_below(p, ignored, example);
      MIRROR_CHECK(!files.empty(), DataError, p + " holds no .jpg, .jpeg or .png file");
      for (const std::string& f : files) ds->add(f, 0);
    } else {
      ds->add(p, 0);
    }
  }
  ds->check_headers();
  std::vector<std::string> notes = ds->notes();
  if (const std::string note = ignored_note(ignored, example); !note.empty())
    notes.insert(notes.begin(), note);
  ds->set_notes(std::move(notes));
  return ds;
}

std::string image_file_of(const Dataset& dataset, std::int64_t index) {
  const auto* samples = dynamic_cast<const detail::ImageSamples*>(&dataset);
  MIRROR_CHECK(samples != nullptr, InvalidArgument,
               dataset.describe() + " is not an image folder, image file list or tar shard set");
  return samples->sample_name(index);
}

}  // namespace mirror::data
