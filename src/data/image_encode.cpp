// encode_png (libpng's simplified write API) and encode_jpeg (TurboJPEG): fixtures and benchmark
// data; training never encodes.
#include <png.h>
#include <turbojpeg.h>

#include <cstring>

#include "mirror/data/image_decode.h"
#include "mirror/error.h"

namespace mirror::data {
namespace {

void check_image(const DecodedImage& image) {
  MIRROR_CHECK(image.height >= 1 && image.width >= 1 &&
                   (image.channels == 1 || image.channels == 3) &&
                   image.pixels.size() ==
                       static_cast<std::size_t>(image.height) * image.width * image.channels,
               InvalidArgument, "encode: an image needs 1 or 3 channels and height x width x "
                                "channels bytes");
}

}  // namespace

std::vector<std::uint8_t> encode_png(const DecodedImage& image) {
  check_image(image);
  png_image png;
  std::memset(&png, 0, sizeof png);
  png.version = PNG_IMAGE_VERSION;
  png.width = static_cast<png_uint_32>(image.width);
  png.height = static_cast<png_uint_32>(image.height);
  png.format = image.channels == 1 ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB;
  png_alloc_size_t size = 0;
  MIRROR_CHECK(png_image_write_get_memory_size(png, size, 0, image.pixels.data(), 0, nullptr),
               Error, std::string("libpng: ") + png.message);
  std::vector<std::uint8_t> out(size);
  MIRROR_CHECK(png_image_write_to_memory(&png, out.data(), &size, 0, image.pixels.data(), 0,
                                         nullptr),
               Error, std::string("libpng: ") + png.message);
  out.resize(size);
  return out;
}

std::vector<std::uint8_t> encode_jpeg(const DecodedImage& image, int quality) {
  return encode_jpeg(image, JpegEncoding{quality});
}

std::vector<std::uint8_t> encode_jpeg(const DecodedImage& image, const JpegEncoding& encoding) {
  const int quality = encoding.quality;
  check_image(image);
  MIRROR_CHECK(quality >= 1 && quality <= 100, InvalidArgument,
               "encode_jpeg: quality must be 1..100, got " + std::to_string(quality));
  tjhandle tj = tjInitCompress();
  MIRROR_CHECK(tj != nullptr, Error, "libjpeg-turbo: cannot create a compressor");
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  const int rc = tjCompress2(tj, image.pixels.data(), image.width, 0, image.height,
                             image.channels == 1 ? TJPF_GRAY : TJPF_RGB, &buffer, &size,
                             image.channels == 1        ? TJSAMP_GRAY
                             : encoding.subsample_chroma ? TJSAMP_420
                                                         : TJSAMP_444,
                             quality, encoding.progressive ? TJFLAG_PROGRESSIVE : 0);
  const std::string error = rc == 0 ? "" : tjGetErrorStr2(tj);
  std::vector<std::uint8_t> out;
  if (rc == 0) out.assign(buffer, buffer + size);
  tjFree(buffer);
  tjDestroy(tj);
  MIRROR_CHECK(rc == 0, Error, "libjpeg-turbo: " + error);
  return out;
}

}  // namespace mirror::data
