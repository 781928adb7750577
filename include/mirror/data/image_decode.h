// defines: the image decoders behind image folders: ImageHeader (what a JPEG or PNG file says
// before decoding), DecodedImage, ImageDecoder (libjpeg-turbo + libpng on the CPU, nvJPEG on a
// GPU) and the conversions to the model's input (colour, size, [C, H, W] floats in [0, 1]).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace mirror::data {

enum class ImageFormat { kUnknown, kJpeg, kPng };
const char* image_format_name(ImageFormat format);
/// By the first bytes (JPEG FF D8 FF, PNG's 8-byte signature), never by the file name.
ImageFormat sniff_image(std::span<const std::uint8_t> bytes);

/// What the header of an image file says. `channels` is the source's colour model: 1 for
/// grayscale (with or without alpha), 3 for colour (RGB, YCbCr, a palette; alpha is dropped).
struct ImageHeader {
  ImageFormat format = ImageFormat::kUnknown;
  int height = 0, width = 0;
  int channels = 0;
};

/// Reads the header (PNG's IHDR, a JPEG's frame header) from the first bytes of a file; DataError
/// naming `name` for an unknown format, a truncated or corrupt header, absurd sizes (above
/// 32768 pixels a side), and an image mode Mirror does not read (CMYK or YCCK JPEG, a PNG of an
/// unknown colour type).
ImageHeader read_image_header(std::span<const std::uint8_t> bytes, const std::string& name);

/// Pixels as decoded: height x width x channels bytes, interleaved (HWC), channels 1 or 3.
struct DecodedImage {
  int height = 0, width = 0, channels = 0;
  std::vector<std::uint8_t> pixels;
};

/// A rectangle of an image in pixels: rows [top, top + height), columns [left, left + width).
struct PixelRegion {
  int top = 0, left = 0, height = 0, width = 0;
};

/// Part of an image as decoded: `image` holds the rows and columns of the full (possibly
/// reduced) image of full_height x full_width that start at (top, left).
struct DecodedRegion {
  DecodedImage image;
  int top = 0, left = 0;
  int full_height = 0, full_width = 0;
};

/// Decodes whole files. Implementations are safe to call from several threads at once (each
/// thread gets its own decoder state).
class ImageDecoder {
 public:
  virtual ~ImageDecoder() = default;
  /// "cpu (libjpeg-turbo, libpng)" or "gpu (nvJPEG on cuda:0; PNG on the CPU)".
  virtual std::string name() const = 0;
  /// The image in its own colour model (1 or 3 channels). DataError naming `name` for a corrupt
  /// or truncated file (a JPEG that decodes only with warnings counts as corrupt: its missing
  /// part would be filled with grey) or an unsupported mode.
  virtual DecodedImage decode(std::span<const std::uint8_t> bytes,
                              const std::string& name) const = 0;
  /// Note [Reduced decode]: the image at 1/`denominator` of its size (2, 4 or 8; each side
  /// ceil(side / denominator)), which a JPEG decoder computes from the low frequencies of each
  /// block, several times faster than the whole image. A PNG, denominator 1, or a decoder that
  /// cannot scale returns the whole image: the result's size says which.
  virtual DecodedImage decode_reduced(std::span<const std::uint8_t> bytes,
                                      const std::string& name, int denominator) const {
    (void)denominator;
    return decode(bytes, name);
  }
  /// Note [Region decode]: at least `region` of the image at 1/`denominator` scale (region in
  /// the reduced image's pixels), each pixel exactly as the whole image's decode gives it. A
  /// JPEG decoder skips the work outside the region (the colour conversion, upsampling and
  /// inverse DCT of the blocks left out; the entropy-coded data is still read, so a truncated
  /// or corrupt file fails as in a whole decode). By default: the whole image.
  virtual DecodedRegion decode_region(std::span<const std::uint8_t> bytes, const std::string& name,
                                      int denominator, const PixelRegion& region) const {
    (void)region;
    DecodedRegion out;
    out.image = decode_reduced(bytes, name, denominator);
    out.full_height = out.image.height;
    out.full_width = out.image.width;
    return out;
  }
};

/// libjpeg-turbo for JPEG, libpng for PNG (8- and 16-bit, grey, RGB, palette; 16-bit is cut to
/// its high byte, alpha dropped).
std::shared_ptr<const ImageDecoder> cpu_image_decoder();

/// Where JPEGs are decoded: `--decode cpu|gpu`.
enum class DecodeDevice { kCpu, kGpu };
DecodeDevice parse_decode_device(const std::string& text);  // InvalidArgument naming --decode
/// The decoder for `device`; Unavailable with the reason when this build or machine has no GPU
/// decoder (built without nvJPEG, no CUDA device). Note [Backend choice]: the GPU decoder is
/// registered by the factory file, src/backend_registry.cpp.
std::shared_ptr<const ImageDecoder> make_image_decoder(DecodeDevice device);

using ImageDecoderFactory = std::shared_ptr<const ImageDecoder> (*)();
/// Called by the factory file only: the GPU decoder, or why there is none.
void register_gpu_image_decoder(ImageDecoderFactory factory, std::string unavailable);

/// `image` converted to `channels` (1: ITU-R 601 luma (299 R + 587 G + 114 B) / 1000, rounded,
/// as PIL's "L"; 3: grey copied to each channel) and resized to height x width (bilinear with
/// half-pixel centres, as tf.image.resize without antialiasing; the same size copies exactly),
/// written as [channels, height, width] floats divided by `divisor` (255: values in [0, 1]; 1:
/// 0..255 as stored, for a model that rescales its own input).
void image_to_chw(const DecodedImage& image, int channels, int height, int width, float* dst,
                  double divisor = 255.0);

/// Encoders for fixtures and benchmarks (loader-bench --write-images): an 8-bit greyscale or RGB
/// PNG (libpng), and a baseline JPEG of `quality` 1..100 with 4:4:4 sampling (libjpeg-turbo).
std::vector<std::uint8_t> encode_png(const DecodedImage& image);
std::vector<std::uint8_t> encode_jpeg(const DecodedImage& image, int quality = 95);
/// How encode_jpeg compresses: 4:4:4 baseline by default; chroma subsampled 4:2:0 (what cameras
/// and PIL write) and progressive on request.
struct JpegEncoding {
  int quality = 95;
  bool subsample_chroma = false;
  bool progressive = false;
};
std::vector<std::uint8_t> encode_jpeg(const DecodedImage& image, const JpegEncoding& encoding);

}  // namespace mirror::data
