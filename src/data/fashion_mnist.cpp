#include "mirror/data/fashion_mnist.h"

#include <array>
#include <filesystem>

#include "mirror/data/idx.h"
#include "mirror/error.h"

namespace mirror::data {
namespace {

constexpr const char* kPackageHint =
    "install the Debian package dataset-fashion-mnist (scripts/setup.sh does: apt-get install "
    "dataset-fashion-mnist) or point --data-dir at a folder holding the Fashion-MNIST IDX files";

/// `<dir>/<stem>.gz`, else `<dir>/<stem>`; DataError naming both and the package otherwise.
std::string find_file(const std::string& dir, const std::string& stem) {
  namespace fs = std::filesystem;
  const fs::path gz = fs::path(dir) / (stem + ".gz");
  const fs::path raw = fs::path(dir) / stem;
  std::error_code ec;
  if (fs::is_regular_file(gz, ec)) return gz.string();
  if (fs::is_regular_file(raw, ec)) return raw.string();
  throw DataError("Fashion-MNIST file not found: " + gz.string() + " (nor " + raw.string() + "); " +
                  kPackageHint);
}

const std::array<float, 256>& byte_to_unit() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int i = 0; i < 256; ++i) t[i] = static_cast<float>(i) / 255.0f;
    return t;
  }();
  return table;
}

/// The file's bytes; a file named .gz must be gzip (else it would be reported as a wrong IDX
/// magic, which hides that the download or copy is broken).
std::vector<std::uint8_t> read_idx_file(const std::string& path) {
  std::vector<std::uint8_t> bytes = read_file_bytes(path, kPackageHint);
  MIRROR_CHECK(is_gzip(bytes) || !path.ends_with(".gz"), DataError,
               path +
                   ": not gzip (it is named .gz but does not start with the gzip magic 1f 8b): "
                   "the file is damaged or not Fashion-MNIST; reinstall it (" +
                   std::string(kPackageHint) + ")");
  return bytes;
}

}  // namespace

std::shared_ptr<FashionMnist> FashionMnist::load(const std::string& dir, Split split,
                                                 Layout layout) {
  const std::string prefix = split == Split::kTrain ? "train" : "t10k";
  const std::string image_path = find_file(dir, prefix + "-images-idx3-ubyte");
  const std::string label_path = find_file(dir, prefix + "-labels-idx1-ubyte");
  IdxArray images = parse_idx(read_idx_file(image_path), image_path);
  IdxArray labels = parse_idx(read_idx_file(label_path), label_path);
  MIRROR_CHECK(images.dims.size() == 3, DataError,
               image_path + ": expected a rank-3 IDX array [count, rows, cols], found rank " +
                   std::to_string(images.dims.size()) + "; is this the labels file?");
  MIRROR_CHECK(labels.dims.size() == 1, DataError,
               label_path + ": expected a rank-1 IDX array [count], found rank " +
                   std::to_string(labels.dims.size()) + "; is this the images file?");
  MIRROR_CHECK(images.dims[0] == labels.dims[0], DataError,
               "Fashion-MNIST " + std::string(split_name(split)) + ": " +
                   std::to_string(images.dims[0]) + " images in " + image_path + " but " +
                   std::to_string(labels.dims[0]) + " labels in " + label_path +
                   "; the files do not belong together");
  return std::make_shared<FashionMnist>(images.dims[0], images.dims[1], images.dims[2],
                                        std::move(images.bytes), std::move(labels.bytes), split,
                                        layout);
}

FashionMnist::FashionMnist(std::int64_t count, std::int64_t rows, std::int64_t cols,
                           std::vector<std::uint8_t> pixels, std::vector<std::uint8_t> labels,
                           Split split, Layout layout)
    : count_(count),
      rows_(rows),
      cols_(cols),
      pixels_(std::move(pixels)),
      labels_(std::move(labels)),
      split_(split),
      layout_(layout) {
  MIRROR_CHECK(count > 0 && rows > 0 && cols > 0, DataError,
               "Fashion-MNIST: empty dataset (" + std::to_string(count) + " images of " +
                   std::to_string(rows) + "x" + std::to_string(cols) + ")");
  MIRROR_CHECK(static_cast<std::int64_t>(pixels_.size()) == count * rows * cols, DataError,
               "Fashion-MNIST: " + std::to_string(pixels_.size()) + " pixel bytes for " +
                   std::to_string(count) + " images of " + std::to_string(rows) + "x" +
                   std::to_string(cols));
  MIRROR_CHECK(static_cast<std::int64_t>(labels_.size()) == count, DataError,
               "Fashion-MNIST: " + std::to_string(labels_.size()) + " labels for " +
                   std::to_string(count) + " images");
  for (std::size_t i = 0; i < labels_.size(); ++i) {
    MIRROR_CHECK(labels_[i] < kClasses, DataError,
                 "Fashion-MNIST " + std::string(split_name(split)) + ": label " +
                     std::to_string(labels_[i]) + " of sample " + std::to_string(i) +
                     " is outside [0, 10); the labels file is corrupt");
  }
}

Shape FashionMnist::sample_shape() const {
  return layout_ == Layout::kNCHW ? Shape{1, rows_, cols_} : Shape{rows_, cols_};
}

std::int32_t FashionMnist::label(std::int64_t index) const {
  MIRROR_CHECK(index >= 0 && index < count_, InvalidArgument,
               "Fashion-MNIST index " + std::to_string(index) + " outside [0, " +
                   std::to_string(count_) + ")");
  return labels_[static_cast<std::size_t>(index)];
}

void FashionMnist::decode_float(std::int64_t index, float* dst) const {
  MIRROR_CHECK(index >= 0 && index < count_, InvalidArgument,
               "Fashion-MNIST index " + std::to_string(index) + " outside [0, " +
                   std::to_string(count_) + ")");
  const auto& table = byte_to_unit();
  const std::int64_t n = rows_ * cols_;
  const std::uint8_t* src = pixels_.data() + index * n;
  for (std::int64_t i = 0; i < n; ++i) dst[i] = table[src[i]];
}

std::uint8_t FashionMnist::pixel(std::int64_t index, std::int64_t row, std::int64_t col) const {
  MIRROR_CHECK(index >= 0 && index < count_ && row >= 0 && row < rows_ && col >= 0 && col < cols_,
               InvalidArgument, "Fashion-MNIST pixel index out of range");
  return pixels_[static_cast<std::size_t>((index * rows_ + row) * cols_ + col)];
}

std::string FashionMnist::describe() const {
  return "Fashion-MNIST " + std::string(split_name(split_)) + ": " + std::to_string(count_) +
         " samples, 10 classes, " + (layout_ == Layout::kNCHW ? "images " : "rows ") +
         shape_str(sample_shape());
}

}  // namespace mirror::data
