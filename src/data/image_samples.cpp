// What image folders and tar shards share (image_samples.h): the header check at load and the
// decode of one sample, plain or with the photograph recipe, at the batch.
#include "data/image_samples.h"

#include <algorithm>
#include <cmath>
#include <thread>

#include "mirror/data/augment.h"
#include "mirror/error.h"

namespace mirror::data::detail {
namespace {

constexpr std::size_t kHeadBytes = 64 << 10;  // enough for nearly every JPEG's frame header

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

}  // namespace

ImageSamples::ImageSamples(std::string root, std::vector<std::string> classes,
                           const ImageFolderOptions& o)
    : root_(std::move(root)), classes_(std::move(classes)), options_(o) {
  if (!options_.decoder) options_.decoder = cpu_image_decoder();
}

void ImageSamples::check_index(std::int64_t index) const {
  MIRROR_CHECK(index >= 0 && index < size(), InvalidArgument,
               root_ + ": image index " + std::to_string(index) + " outside [0, " +
                   std::to_string(size()) + ")");
}

std::string ImageSamples::what_it_holds() const { return std::to_string(size()) + " images"; }

ImageHeader ImageSamples::header_of(std::int64_t index) const {
  const std::string name = sample_name(index);
  std::vector<std::uint8_t> head = read_sample(index, kHeadBytes);
  MIRROR_CHECK(!head.empty(), DataError, name + " is empty (0 bytes); remove it or replace it");
  try {
    return read_image_header(head, name);
  } catch (const DataError&) {
    if (head.size() < kHeadBytes) throw;
  }
  return read_image_header(read_sample(index, kWhole), name);  // a frame header past 64 KiB
}

void ImageSamples::check_headers() {
  const std::int64_t n = size();
  std::vector<ImageHeader> headers(static_cast<std::size_t>(n));
  std::vector<std::string> errors(static_cast<std::size_t>(n));
  const int threads = static_cast<int>(std::clamp<std::int64_t>(options_.check_threads, 1, 64));
  auto work = [&](int t) {
    for (std::int64_t i = t; i < n; i += threads) {
      try {
        headers[static_cast<std::size_t>(i)] = header_of(i);
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
      errors[k] = sample_name(i) + " is " + (headers[k].channels == 1 ? "grayscale" : "RGB") +
                  " but the first image, " +
                  sample_name(static_cast<std::int64_t>(first - headers.data())) + ", is " +
                  (first->channels == 1 ? "grayscale" : "RGB") +
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
                     "(--skip-bad-samples); the first: " +
                     bad_.begin()->second);
  }
  description_ = root_ + ": " + what_it_holds() + " (" + std::to_string(jpeg) + " JPEG, " +
                 std::to_string(png) + " PNG), " + std::to_string(classes_.size()) + " classes, " +
                 (channels_ == 1 ? "grayscale " : "RGB ") + std::to_string(height_) + "x" +
                 std::to_string(width_) + ", decoded by " + options_.decoder->name();
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

std::optional<double> ImageSamples::input_bound() const {
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

DecodedImage ImageSamples::decode_bytes(std::int64_t index, const std::string& file,
                                        std::span<const std::uint8_t> bytes,
                                        int denominator) const {
  DecodedImage image = bad_sample_on_error(
      index, [&] { return options_.decoder->decode_reduced(bytes, file, denominator); });
  check_mode(index, file, image);
  return image;
}

void ImageSamples::check_mode(std::int64_t index, const std::string& file,
                              const DecodedImage& image) const {
  if (options_.color == ColorMode::kAuto && image.channels != source_channels_) {
    throw BadSample(file + " decodes as " + (image.channels == 1 ? "grayscale" : "RGB") +
                        " but the dataset is " + (source_channels_ == 1 ? "grayscale" : "RGB") +
                        ": an image of another mode; pass --color to convert (sample " +
                        std::to_string(index) + ")",
                    index);
  }
}

void ImageSamples::decode_float_drawn(std::int64_t index, std::uint64_t seed, int epoch,
                                      float* dst) const {
  check_not_bad(index);
  if (options_.photo.enabled()) return decode_photo(index, seed, epoch, dst);
  const std::string file = sample_name(index);
  const std::vector<std::uint8_t> bytes =
      bad_sample_on_error(index, [&] { return read_sample(index, kWhole); });
  const DecodedImage image = decode_bytes(index, file, bytes, 1);
  image_to_chw(image, static_cast<int>(channels_), static_cast<int>(height_),
               static_cast<int>(width_), dst, options_.scale_to_unit ? 255.0 : 1.0);
}

void ImageSamples::decode_photo(std::int64_t index, std::uint64_t seed, int epoch,
                                float* dst) const {
  const std::string file = sample_name(index);
  const std::vector<std::uint8_t> bytes =
      bad_sample_on_error(index, [&] { return read_sample(index, kWhole); });
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
  const int denominator = header.format == ImageFormat::kJpeg && options_.reduced_decode
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
  DecodedRegion region = bad_sample_on_error(
      index, [&] { return options_.decoder->decode_region(bytes, file, denominator, wanted); });
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

}  // namespace mirror::data::detail
