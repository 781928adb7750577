// Image folders and image file lists: the listing and header checks at load, decoding per sample
// when a batch needs it.
#include "mirror/data/image_folder.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <thread>

#include "mirror/data/augment.h"
#include "mirror/data/idx.h"
#include "mirror/error.h"

namespace mirror::data {
namespace fs = std::filesystem;
namespace {

constexpr std::size_t kHeadBytes = 64 << 10;  // enough for nearly every JPEG's frame header

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

ImageHeader header_of(const std::string& path) {
  std::vector<std::uint8_t> head = read_head(path, kHeadBytes);
  MIRROR_CHECK(!head.empty(), DataError, path + " is empty (0 bytes); remove it or replace it");
  try {
    return read_image_header(head, path);
  } catch (const DataError&) {
    if (head.size() < kHeadBytes) throw;
  }
  return read_image_header(read_file_bytes(path), path);  // a frame header past 64 KiB
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

class ImageFiles : public Dataset {
 public:
  ImageFiles(std::string root, std::vector<std::string> classes, const ImageFolderOptions& o)
      : root_(std::move(root)), classes_(std::move(classes)), options_(o) {
    if (!options_.decoder) options_.decoder = cpu_image_decoder();
  }
  void add(const std::string& path, std::int32_t label) {
    names_ += path;
    ends_.push_back(names_.size());
    labels_.push_back(label);
  }
  /// Reads every header, settles the size and mode, and finds the files that are bad.
  void check_headers();
  void set_notes(std::vector<std::string> notes) { notes_ = std::move(notes); }

  std::int64_t size() const override { return static_cast<std::int64_t>(labels_.size()); }
  int num_classes() const override { return static_cast<int>(classes_.size()); }
  DType input_dtype() const override { return DType::kFloat32; }
  Shape sample_shape() const override { return {channels_, height_, width_}; }
  bool is_sequence() const override { return false; }
  std::int32_t label(std::int64_t index) const override {
    check_index(index);
    return labels_[static_cast<std::size_t>(index)];
  }
  void decode_float(std::int64_t index, float* dst) const override {
    decode_float_drawn(index, 0, 0, dst);
  }
  void decode_float_drawn(std::int64_t index, std::uint64_t seed, int epoch,
                          float* dst) const override;
  std::string describe() const override { return description_; }
  std::vector<std::string> notes() const override { return notes_; }
  std::optional<double> input_bound() const override;
  bool checks_at_batch() const override { return true; }
  std::vector<std::string> class_names() const override { return classes_; }
  std::string path(std::int64_t index) const {
    check_index(index);
    const std::size_t i = static_cast<std::size_t>(index);
    const std::size_t begin = i == 0 ? 0 : ends_[i - 1];
    return names_.substr(begin, ends_[i] - begin);
  }

 private:
  /// The decoded file, or BadSample naming it.
  DecodedImage decode_file(std::int64_t index, const std::string& file,
                           std::span<const std::uint8_t> bytes, int denominator) const;
  /// BadSample when --color auto meets an image of the other mode.
  void check_mode(std::int64_t index, const std::string& file, const DecodedImage& image) const;
  void check_not_bad(std::int64_t index) const {
    if (auto it = bad_.find(index); it != bad_.end())
      throw BadSample(it->second + " (sample " + std::to_string(index) + ")", index);
  }
  void decode_photo(std::int64_t index, std::uint64_t seed, int epoch, float* dst) const;
  void check_index(std::int64_t index) const {
    MIRROR_CHECK(index >= 0 && index < size(), InvalidArgument,
                 root_ + ": image index " + std::to_string(index) + " outside [0, " +
                     std::to_string(size()) + ")");
  }
  std::string root_;
  std::vector<std::string> classes_;
  ImageFolderOptions options_;
  std::string names_;               // every file's path, one after the other
  std::vector<std::size_t> ends_;   // where each path ends in names_
  std::vector<std::int32_t> labels_;
  std::map<std::int64_t, std::string> bad_;  // failed the header check (skip_bad_samples)
  std::int64_t channels_ = 0, height_ = 0, width_ = 0;
  int source_channels_ = 0;  // --color auto: the mode every image must have
  std::string description_;
  std::vector<std::string> notes_;
};

void ImageFiles::check_headers() {
  const std::int64_t n = size();
  std::vector<ImageHeader> headers(static_cast<std::size_t>(n));
  std::vector<std::string> errors(static_cast<std::size_t>(n));
  const int threads = static_cast<int>(std::clamp<std::int64_t>(options_.check_threads, 1, 64));
  auto work = [&](int t) {
    for (std::int64_t i = t; i < n; i += threads) {
      try {
        headers[static_cast<std::size_t>(i)] = header_of(path(i));
      } catch (const DataError& e) {
        errors[static_cast<std::size_t>(i)] = e.what();
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work, t);
  work(0);
  for (auto& t : pool) t.join();
  // Settle size and mode from the first good image, then judge every image in index order, so
  // the error reported (or the set of bad files) is the same for any thread count.
  const ImageHeader* first = nullptr;
  std::int64_t jpeg = 0, png = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const auto k = static_cast<std::size_t>(i);
    if (errors[k].empty() && !first) first = &headers[k];
    if (errors[k].empty() && options_.color == ColorMode::kAuto && first &&
        headers[k].channels != first->channels) {
      errors[k] = path(i) + " is " + (headers[k].channels == 1 ? "grayscale" : "RGB") +
                  " but the first image, " + path(static_cast<std::int64_t>(first - headers.data())) +
                  ", is " + (first->channels == 1 ? "grayscale" : "RGB") +
                  ": an image of another mode; pass --color grayscale or --color rgb to convert "
                  "every image to one mode";
    }
    if (!errors[k].empty()) {
      MIRROR_CHECK(options_.skip_bad_samples, DataError,
                   errors[k] + " (sample " + std::to_string(i) + ")");
      bad_.emplace(i, errors[k]);
      continue;
    }
    (headers[k].format == ImageFormat::kJpeg ? jpeg : png) += 1;
  }
  MIRROR_CHECK(first != nullptr, DataError,
               root_ + ": no image can be read (the first error: " + bad_.begin()->second + ")");
  source_channels_ = first->channels;
  channels_ = options_.color == ColorMode::kGrayscale ? 1
              : options_.color == ColorMode::kRgb     ? 3
                                                      : first->channels;
  height_ = options_.height > 0 ? options_.height : first->height;
  width_ = options_.width > 0 ? options_.width : first->width;
  if (!bad_.empty()) {
    notes_.push_back(std::to_string(bad_.size()) +
                     " image(s) failed the header check and are replaced by the next good one "
                     "(--skip-bad-samples); the first: " + bad_.begin()->second);
  }
  description_ = root_ + ": " + std::to_string(n) + " images (" + std::to_string(jpeg) +
                 " JPEG, " + std::to_string(png) + " PNG), " + std::to_string(classes_.size()) +
                 " classes, " + (channels_ == 1 ? "grayscale " : "RGB ") +
                 std::to_string(height_) + "x" + std::to_string(width_) + ", decoded by " +
                 options_.decoder->name();
  const PhotoRecipe& p = options_.photo;
  if (!p.enabled()) return;
  MIRROR_CHECK(options_.height > 0 && options_.width > 0, InvalidArgument,
               "the photograph recipe (" + data::describe(p) +
                   ") resizes to the model's input size: give --image-size HEIGHT,WIDTH");
  MIRROR_CHECK(p.mean.empty() || options_.scale_to_unit, InvalidArgument,
               "--normalize works on pixel values in [0, 1], but this model rescales 0..255 "
               "input itself (Rescaling or Normalization first); drop --normalize or that layer");
  check_normalize_channels(p, static_cast<int>(channels_));
  // Each split names the part of the recipe it applies.
  PhotoRecipe applied;
  applied.mean = p.mean;
  applied.std = p.std;
  if (options_.evaluation) {
    applied.eval_resize = p.eval_resize;
  } else {
    applied.random_resized_crop = p.random_resized_crop;
    applied.scale_min = p.scale_min;
    applied.scale_max = p.scale_max;
    applied.flip = p.flip;
  }
  if (applied.enabled())
    description_ += (options_.evaluation ? "; evaluated with " : "; photograph recipe: ") +
                    data::describe(applied);
}

std::optional<double> ImageFiles::input_bound() const {
  const double top = options_.scale_to_unit ? 1.0 : 255.0;
  const PhotoRecipe& p = options_.photo;
  double bound = top;
  for (std::size_t k = 0; k < p.mean.size(); ++k) {
    bound = k == 0 ? 0.0 : bound;
    const double m = p.mean[k], sd = p.std[k];
    bound = std::max({bound, std::fabs(m) / sd, std::fabs(top - m) / sd});
  }
  return bound;
}

/// Wraps what fails in `f` as BadSample naming sample `index` (Note [Bad samples], loader.h).
template <class F>
auto bad_sample_on_error(std::int64_t index, F&& f) {
  try {
    return f();
  } catch (const BadSample&) {
    throw;
  } catch (const DataError& e) {
    throw BadSample(e.what() + std::string(" (sample ") + std::to_string(index) + ")", index);
  }
}

DecodedImage ImageFiles::decode_file(std::int64_t index, const std::string& file,
                                     std::span<const std::uint8_t> bytes, int denominator) const {
  DecodedImage image = bad_sample_on_error(
      index, [&] { return options_.decoder->decode_reduced(bytes, file, denominator); });
  check_mode(index, file, image);
  return image;
}

void ImageFiles::check_mode(std::int64_t index, const std::string& file,
                            const DecodedImage& image) const {
  if (options_.color == ColorMode::kAuto && image.channels != source_channels_) {
    throw BadSample(file + " decodes as " + (image.channels == 1 ? "grayscale" : "RGB") +
                        " but the dataset is " + (source_channels_ == 1 ? "grayscale" : "RGB") +
                        ": an image of another mode; pass --color to convert (sample " +
                        std::to_string(index) + ")",
                    index);
  }
}

void ImageFiles::decode_float_drawn(std::int64_t index, std::uint64_t seed, int epoch,
                                    float* dst) const {
  check_not_bad(index);
  if (options_.photo.enabled()) return decode_photo(index, seed, epoch, dst);
  const std::string file = path(index);
  const std::vector<std::uint8_t> bytes =
      bad_sample_on_error(index, [&] { return read_file_bytes(file); });
  const DecodedImage image = decode_file(index, file, bytes, 1);
  image_to_chw(image, static_cast<int>(channels_), static_cast<int>(height_),
               static_cast<int>(width_), dst, options_.scale_to_unit ? 255.0 : 1.0);
}

/// `image` with `channels` channels: ITU-R 601 luma or grey copied, as image_to_chw does.
DecodedImage convert_channels(const DecodedImage& image, int channels) {
  if (image.channels == channels) return image;
  DecodedImage out{image.height, image.width, channels, {}};
  const std::size_t n = static_cast<std::size_t>(image.height) * image.width;
  out.pixels.resize(n * static_cast<std::size_t>(channels));
  const std::uint8_t* src = image.pixels.data();
  for (std::size_t p = 0; p < n; ++p) {
    if (channels == 1) {
      const unsigned v = 299u * src[p * 3] + 587u * src[p * 3 + 1] + 114u * src[p * 3 + 2];
      out.pixels[p] = static_cast<std::uint8_t>((v + 500) / 1000);
    } else {
      for (int k = 0; k < 3; ++k) out.pixels[p * 3 + k] = src[p];
    }
  }
  return out;
}

/// Note [Reduced decode]: the largest denominator (8, 4, 2) at which the crop still has at least
/// the output's pixels along both axes, so the resample still shrinks (or keeps) the image and
/// nothing the output could show is lost; 1 when the crop is already smaller.
int reduced_denominator(const CropBox& box, int out_h, int out_w) {
  for (int d : {8, 4, 2})
    if (box.height / d >= out_h && box.width / d >= out_w) return d;
  return 1;
}

void ImageFiles::decode_photo(std::int64_t index, std::uint64_t seed, int epoch,
                              float* dst) const {
  const std::string file = path(index);
  const std::vector<std::uint8_t> bytes =
      bad_sample_on_error(index, [&] { return read_file_bytes(file); });
  const ImageHeader header =
      bad_sample_on_error(index, [&] { return read_image_header(bytes, file); });
  const int out_h = static_cast<int>(height_), out_w = static_cast<int>(width_);
  const PhotoRecipe& p = options_.photo;
  CropBox box = eval_crop_box(header.height, header.width, options_.evaluation ? p.eval_resize : 0,
                              out_h, out_w);
  bool flip = false;
  if (!options_.evaluation && p.training_random()) {
    std::mt19937_64 rng = augment_rng(seed, epoch, index);  // Note [Augmentation draws]
    if (p.random_resized_crop) box = random_resized_crop(header.height, header.width, p, rng);
    flip = p.flip && (rng() >> 63) != 0;
  }
  const int denominator =
      header.format == ImageFormat::kJpeg && options_.reduced_decode
          ? reduced_denominator(box, out_h, out_w)
          : 1;
  const CropBox source_box = box;
  if (denominator > 1) {
    // A reduced decode: pixel i covers source pixels [i * d, i * d + d).
    const double f = 1.0 / denominator;
    box = {box.top * f, box.left * f, box.height * f, box.width * f};
  }
  // Note [Region decode]: only the pixels the resample reads (a JPEG skips the rest).
  const int full_h = (header.height + denominator - 1) / denominator;
  const int full_w = (header.width + denominator - 1) / denominator;
  const PixelRegion wanted = options_.region_decode
                                 ? resample_source_region(full_h, full_w, box, out_h, out_w)
                                 : PixelRegion{0, 0, full_h, full_w};
  DecodedRegion region = bad_sample_on_error(index, [&] {
    return options_.decoder->decode_region(bytes, file, denominator, wanted);
  });
  DecodedImage& image = region.image;
  check_mode(index, file, image);
  if (region.full_height != full_h || region.full_width != full_w) {
    // A decoder that cannot scale returned the whole image at its own size.
    const double fy = static_cast<double>(region.full_height) / header.height;
    const double fx = static_cast<double>(region.full_width) / header.width;
    box = {source_box.top * fy, source_box.left * fx, source_box.height * fy,
           source_box.width * fx};
  }
  if (image.channels != channels_) image = convert_channels(image, static_cast<int>(channels_));
  // value / divisor, then (x - mean) / std: one multiply-add per channel.
  const double divisor = options_.scale_to_unit ? 255.0 : 1.0;
  float scale[3], bias[3];
  for (int k = 0; k < channels_; ++k) {
    const std::size_t at = p.mean.size() > 1 ? static_cast<std::size_t>(k) : 0;
    const double mean = p.mean.empty() ? 0.0 : p.mean[at], sd = p.std.empty() ? 1.0 : p.std[at];
    scale[k] = static_cast<float>(1.0 / (divisor * sd));
    bias[k] = static_cast<float>(-mean / sd);
  }
  const PixelRegion window{region.top, region.left, image.height, image.width};
  resample_window_to_chw(image.pixels.data(), window, region.full_height, region.full_width,
                         image.channels, box, out_h, out_w, flip, scale, bias, dst);
}

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
  const auto* files = dynamic_cast<const ImageFiles*>(&dataset);
  MIRROR_CHECK(files != nullptr, InvalidArgument,
               dataset.describe() + " is not an image folder or image file list");
  return files->path(index);
}

}  // namespace mirror::data
