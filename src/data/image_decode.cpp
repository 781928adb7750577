// Image headers read by hand (a JPEG's markers up to its frame header, a PNG's IHDR), JPEG
// decoded by libjpeg-turbo's TurboJPEG API (regions by its libjpeg API, jpeg_region.cpp), PNG by libpng, and the conversion to [C, H, W] floats.
#include "mirror/data/image_decode.h"

#include <png.h>
#include <turbojpeg.h>

#include <algorithm>
#include <cmath>
#include <csetjmp>
#include <cstring>
#include <mutex>

#include "backend.h"
#include "data/jpeg_region.h"
#include "mirror/error.h"

namespace mirror::data {
namespace {

constexpr int kMaxSide = 32768;
constexpr std::uint8_t kPngSignature[8] = {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A};

std::uint32_t be32(const std::uint8_t* p) {
  return std::uint32_t{p[0]} << 24 | std::uint32_t{p[1]} << 16 | std::uint32_t{p[2]} << 8 | p[3];
}

void check_size(int height, int width, const std::string& name) {
  MIRROR_CHECK(height >= 1 && width >= 1 && height <= kMaxSide && width <= kMaxSide, DataError,
               name + ": image size " + std::to_string(width) + "x" + std::to_string(height) +
                   " is outside 1..32768 pixels a side; the header is corrupt");
}

ImageHeader png_header(std::span<const std::uint8_t> b, const std::string& name) {
  // Signature (8), IHDR length (4), "IHDR" (4), width, height, depth, colour type, ...
  MIRROR_CHECK(b.size() >= 29, DataError, name + ": PNG file is truncated inside its header");
  MIRROR_CHECK(std::memcmp(b.data() + 12, "IHDR", 4) == 0 && be32(b.data() + 8) == 13, DataError,
               name + ": corrupt PNG: the first chunk is not a 13-byte IHDR");
  ImageHeader h;
  h.format = ImageFormat::kPng;
  const std::uint32_t w = be32(b.data() + 16), hgt = be32(b.data() + 20);
  h.width = static_cast<int>(std::min<std::uint32_t>(w, kMaxSide + 1));
  h.height = static_cast<int>(std::min<std::uint32_t>(hgt, kMaxSide + 1));
  check_size(h.height, h.width, name);
  const int depth = b[24], type = b[25];
  const bool depth_ok = (type == 0 && (depth == 1 || depth == 2 || depth == 4 || depth == 8 ||
                                       depth == 16)) ||
                        (type == 3 && (depth == 1 || depth == 2 || depth == 4 || depth == 8)) ||
                        ((type == 2 || type == 4 || type == 6) && (depth == 8 || depth == 16));
  MIRROR_CHECK(depth_ok, DataError,
               name + ": PNG colour type " + std::to_string(type) + " with bit depth " +
                   std::to_string(depth) +
                   " is not a valid PNG image mode; the file is corrupt or not a PNG image");
  h.channels = type == 0 || type == 4 ? 1 : 3;
  return h;
}

/// Walks the JPEG markers to the frame header (SOFn). DataError for a truncated or corrupt
/// header and for 4-component (CMYK / YCCK) images.
ImageHeader jpeg_header(std::span<const std::uint8_t> b, const std::string& name) {
  std::size_t at = 2;  // after SOI
  for (;;) {
    while (at < b.size() && b[at] == 0xFF && at + 1 < b.size() && b[at + 1] == 0xFF) ++at;
    MIRROR_CHECK(at + 4 <= b.size(), DataError,
                 name + ": JPEG file is truncated before its frame header");
    MIRROR_CHECK(b[at] == 0xFF, DataError,
                 name + ": corrupt JPEG: expected a marker at byte " + std::to_string(at));
    const int marker = b[at + 1];
    const std::size_t length = std::size_t{b[at + 2]} << 8 | b[at + 3];
    MIRROR_CHECK(marker != 0xD9 && marker != 0xDA, DataError,
                 name + ": corrupt JPEG: image data before any frame header");
    MIRROR_CHECK(length >= 2, DataError,
                 name + ": corrupt JPEG: marker segment of length " + std::to_string(length));
    const bool sof = marker >= 0xC0 && marker <= 0xCF && marker != 0xC4 && marker != 0xC8 &&
                     marker != 0xCC;
    if (sof) {
      MIRROR_CHECK(at + 10 <= b.size() && length >= 8, DataError,
                   name + ": JPEG file is truncated inside its frame header");
      ImageHeader h;
      h.format = ImageFormat::kJpeg;
      h.height = b[at + 5] << 8 | b[at + 6];
      h.width = b[at + 7] << 8 | b[at + 8];
      check_size(h.height, h.width, name);
      const int components = b[at + 9];
      MIRROR_CHECK(components == 1 || components == 3, DataError,
                   name + ": a JPEG with " + std::to_string(components) + " colour components" +
                       (components == 4 ? " (CMYK or YCCK)" : "") +
                       " is an image mode Mirror does not read; convert it to RGB or greyscale "
                       "(e.g. PIL: Image.open(f).convert('RGB').save(f))");
      h.channels = components;
      return h;
    }
    at += 2 + length;
  }
}

// ---------------------------------------------------------------- PNG

/// libpng reports errors by longjmp: this state lives outside the jumping frame, and
/// png_read_into holds no object with a destructor.
struct PngState {
  std::span<const std::uint8_t> bytes;
  std::size_t pos = 0;
  char error[256] = "";
};

void png_read_fn(png_structp png, png_bytep out, png_size_t n) {
  auto* s = static_cast<PngState*>(png_get_io_ptr(png));
  if (n > s->bytes.size() - s->pos) png_error(png, "the file is truncated");
  std::memcpy(out, s->bytes.data() + s->pos, n);
  s->pos += n;
}

void png_error_fn(png_structp png, png_const_charp message) {
  auto* s = static_cast<PngState*>(png_get_error_ptr(png));
  std::snprintf(s->error, sizeof s->error, "%s", message);
  std::longjmp(png_jmpbuf(png), 1);
}

void png_warning_fn(png_structp, png_const_charp) {}  // benign (e.g. a bad sRGB profile)

/// Decodes into `out` (sized by the caller from the header) and `rows`; false on error, with
/// the reason in state.error.
bool png_read_into(png_structp png, png_infop info, DecodedImage& out,
                   std::vector<png_bytep>& rows) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_set_read_fn(png, png_get_error_ptr(png), png_read_fn);
  png_read_info(png, info);
  const int type = png_get_color_type(png, info);
  png_set_expand(png);  // palette -> RGB, grey below 8 bits -> 8 bits, tRNS -> alpha
  png_set_strip_16(png);
  png_set_strip_alpha(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  out.channels = (type & PNG_COLOR_MASK_COLOR) ? 3 : 1;
  if (static_cast<int>(png_get_channels(png, info)) != out.channels ||
      static_cast<int>(png_get_image_width(png, info)) != out.width ||
      static_cast<int>(png_get_image_height(png, info)) != out.height)
    png_error(png, "unexpected layout after conversion");
  for (int r = 0; r < out.height; ++r)
    rows[static_cast<std::size_t>(r)] =
        out.pixels.data() + static_cast<std::size_t>(r) * out.width * out.channels;
  png_read_image(png, rows.data());
  png_read_end(png, nullptr);
  return true;
}

DecodedImage decode_png(std::span<const std::uint8_t> bytes, const std::string& name) {
  const ImageHeader h = png_header(bytes, name);
  PngState state;
  state.bytes = bytes;
  png_structp png =
      png_create_read_struct(PNG_LIBPNG_VER_STRING, &state, png_error_fn, png_warning_fn);
  MIRROR_CHECK(png != nullptr, Error, "libpng: cannot create a reader");
  png_infop info = png_create_info_struct(png);
  DecodedImage out;
  out.height = h.height;
  out.width = h.width;
  out.pixels.resize(static_cast<std::size_t>(h.height) * h.width * h.channels);
  std::vector<png_bytep> rows(static_cast<std::size_t>(h.height));
  const bool ok = info != nullptr && png_read_into(png, info, out, rows);
  png_destroy_read_struct(&png, info ? &info : nullptr, nullptr);
  MIRROR_CHECK(ok, DataError,
               name + ": corrupt or truncated PNG (libpng: " +
                   (state.error[0] ? state.error : "cannot allocate its state") + ")");
  return out;
}

// ---------------------------------------------------------------- JPEG

/// One TurboJPEG decompressor per thread (a handle is not safe to share).
struct TjHandle {
  tjhandle h = tjInitDecompress();
  ~TjHandle() {
    if (h) tjDestroy(h);
  }
};

DecodedImage decode_jpeg(std::span<const std::uint8_t> bytes, const std::string& name,
                         int denominator = 1) {
  const ImageHeader header = jpeg_header(bytes, name);
  thread_local TjHandle tj;
  MIRROR_CHECK(tj.h != nullptr, Error, "libjpeg-turbo: cannot create a decompressor");
  auto fail = [&](const char* where) {
    return DataError(name + ": corrupt or truncated JPEG (libjpeg-turbo, " + where + ": " +
                     tjGetErrorStr2(tj.h) + ")");
  };
  int width = 0, height = 0, subsamp = 0, colorspace = 0;
  if (tjDecompressHeader3(tj.h, bytes.data(), static_cast<unsigned long>(bytes.size()), &width,
                          &height, &subsamp, &colorspace) != 0)
    throw fail("header");
  if (denominator > 1) {  // Note [Reduced decode]: TurboJPEG picks the factor from the size
    const tjscalingfactor f{1, denominator};
    width = TJSCALED(width, f);
    height = TJSCALED(height, f);
  }
  DecodedImage out;
  out.width = width;
  out.height = height;
  out.channels = header.channels;
  out.pixels.resize(static_cast<std::size_t>(width) * height * out.channels);
  // A warning ("Premature end of JPEG file") fails too: the missing part would be grey.
  if (tjDecompress2(tj.h, bytes.data(), static_cast<unsigned long>(bytes.size()),
                    out.pixels.data(), width, 0, height, out.channels == 1 ? TJPF_GRAY : TJPF_RGB,
                    0) != 0)
    throw fail("decode");
  return out;
}

class CpuImageDecoder final : public ImageDecoder {
 public:
  std::string name() const override { return "cpu (libjpeg-turbo, libpng)"; }
  DecodedImage decode(std::span<const std::uint8_t> bytes,
                      const std::string& name) const override {
    switch (sniff_image(bytes)) {
      case ImageFormat::kJpeg:
        return decode_jpeg(bytes, name);
      case ImageFormat::kPng:
        return decode_png(bytes, name);
      default:
        return read_image_header(bytes, name), DecodedImage{};  // throws: unknown format
    }
  }
  DecodedImage decode_reduced(std::span<const std::uint8_t> bytes, const std::string& name,
                              int denominator) const override {
    if (sniff_image(bytes) != ImageFormat::kJpeg) return decode(bytes, name);
    MIRROR_CHECK(denominator == 1 || denominator == 2 || denominator == 4 || denominator == 8,
                 InvalidArgument,
                 "decode_reduced: denominator " + std::to_string(denominator) +
                     " is not 1, 2, 4 or 8");
    return decode_jpeg(bytes, name, denominator);
  }
  DecodedRegion decode_region(std::span<const std::uint8_t> bytes, const std::string& name,
                              int denominator, const PixelRegion& region) const override {
    if (sniff_image(bytes) != ImageFormat::kJpeg)
      return ImageDecoder::decode_region(bytes, name, denominator, region);
    return decode_jpeg_region(bytes, name, jpeg_header(bytes, name).channels, denominator, region);
  }
};

struct GpuRegistry {
  std::mutex mutex;
  ImageDecoderFactory factory = nullptr;
  std::string unavailable = "no GPU image decoder was registered";
};
GpuRegistry& gpu_registry() {
  static GpuRegistry r;
  return r;
}

}  // namespace

const char* image_format_name(ImageFormat format) {
  switch (format) {
    case ImageFormat::kJpeg:
      return "JPEG";
    case ImageFormat::kPng:
      return "PNG";
    default:
      return "unknown";
  }
}

ImageFormat sniff_image(std::span<const std::uint8_t> b) {
  if (b.size() >= 3 && b[0] == 0xFF && b[1] == 0xD8 && b[2] == 0xFF) return ImageFormat::kJpeg;
  if (b.size() >= 8 && std::memcmp(b.data(), kPngSignature, 8) == 0) return ImageFormat::kPng;
  return ImageFormat::kUnknown;
}

ImageHeader read_image_header(std::span<const std::uint8_t> bytes, const std::string& name) {
  switch (sniff_image(bytes)) {
    case ImageFormat::kJpeg:
      return jpeg_header(bytes, name);
    case ImageFormat::kPng:
      return png_header(bytes, name);
    default:
      break;
  }
  std::string first;
  for (std::size_t i = 0; i < std::min<std::size_t>(bytes.size(), 8); ++i) {
    char hex[4];
    std::snprintf(hex, sizeof hex, "%02x ", bytes[i]);
    first += hex;
  }
  throw DataError(name + ": not a JPEG or PNG image (" +
                  (bytes.empty() ? std::string("empty file") : "first bytes " + first) +
                  "); image folders hold .jpg/.jpeg and .png files");
}

std::shared_ptr<const ImageDecoder> cpu_image_decoder() {
  static const auto decoder = std::make_shared<const CpuImageDecoder>();
  return decoder;
}

DecodeDevice parse_decode_device(const std::string& text) {
  if (text == "cpu") return DecodeDevice::kCpu;
  if (text == "gpu") return DecodeDevice::kGpu;
  throw InvalidArgument("--decode must be cpu or gpu, got '" + text + "'");
}

void register_gpu_image_decoder(ImageDecoderFactory factory, std::string unavailable) {
  GpuRegistry& r = gpu_registry();
  std::lock_guard lock(r.mutex);
  r.factory = factory;
  r.unavailable = std::move(unavailable);
}

std::shared_ptr<const ImageDecoder> make_image_decoder(DecodeDevice device) {
  if (device == DecodeDevice::kCpu) return cpu_image_decoder();
  ensure_builtin_backends();  // the factory file registers the GPU decoder
  GpuRegistry& r = gpu_registry();
  std::lock_guard lock(r.mutex);
  MIRROR_CHECK(r.factory != nullptr, Unavailable, "--decode gpu: " + r.unavailable);
  return r.factory();
}

void image_to_chw(const DecodedImage& image, int channels, int height, int width, float* dst,
                  double divisor) {
  const int h = image.height, w = image.width, c = image.channels;
  // Colour first, at the source size: one plane per output channel.
  std::vector<std::uint8_t> planes(static_cast<std::size_t>(channels) * h * w);
  const std::uint8_t* src = image.pixels.data();
  const std::size_t n = static_cast<std::size_t>(h) * w;
  for (std::size_t p = 0; p < n; ++p) {
    if (c == channels) {
      for (int k = 0; k < c; ++k) planes[k * n + p] = src[p * c + k];
    } else if (channels == 1) {  // RGB -> luma, rounded to nearest
      const unsigned v = 299u * src[p * 3] + 587u * src[p * 3 + 1] + 114u * src[p * 3 + 2];
      planes[p] = static_cast<std::uint8_t>((v + 500) / 1000);
    } else {  // grey -> RGB
      for (int k = 0; k < 3; ++k) planes[k * n + p] = src[p];
    }
  }
  if (h == height && w == width) {
    const auto d = static_cast<float>(divisor);
    for (std::size_t i = 0; i < planes.size(); ++i) dst[i] = static_cast<float>(planes[i]) / d;
    return;
  }
  // Bilinear, half-pixel centres: output pixel y samples source row (y + 0.5) * h / H - 0.5.
  const double sy = static_cast<double>(h) / height, sx = static_cast<double>(w) / width;
  for (int k = 0; k < channels; ++k) {
    const std::uint8_t* plane = planes.data() + k * n;
    float* out = dst + static_cast<std::size_t>(k) * height * width;
    for (int y = 0; y < height; ++y) {
      const double fy = std::clamp((y + 0.5) * sy - 0.5, 0.0, static_cast<double>(h - 1));
      const int y0 = static_cast<int>(fy), y1 = std::min(y0 + 1, h - 1);
      const double wy = fy - y0;
      for (int x = 0; x < width; ++x) {
        const double fx = std::clamp((x + 0.5) * sx - 0.5, 0.0, static_cast<double>(w - 1));
        const int x0 = static_cast<int>(fx), x1 = std::min(x0 + 1, w - 1);
        const double wx = fx - x0;
        const double top = plane[y0 * w + x0] * (1 - wx) + plane[y0 * w + x1] * wx;
        const double bottom = plane[y1 * w + x0] * (1 - wx) + plane[y1 * w + x1] * wx;
        out[y * width + x] = static_cast<float>((top * (1 - wy) + bottom * wy) / divisor);
      }
    }
  }
}

}  // namespace mirror::data
