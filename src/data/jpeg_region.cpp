// decode_jpeg_region: libjpeg's cropped decompression (jpeg_crop_scanline, jpeg_skip_scanlines),
// which TurboJPEG's API before version 3 does not offer.
#include "data/jpeg_region.h"

// jpeglib.h needs FILE and size_t declared first.
#include <cstddef>
#include <cstdio>

#include <jpeglib.h>

#include <algorithm>
#include <csetjmp>
#include <cstring>
#include <vector>

#include "mirror/error.h"

namespace mirror::data {
namespace {

/// libjpeg reports errors by calling error_exit, which must not return: it longjmps back into
/// the phase that was running. The phases hold no object with a destructor, and this state
/// lives outside them.
struct JpegErrors {
  jpeg_error_mgr mgr;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
  bool warned;
};

[[noreturn]] void on_error(j_common_ptr cinfo) {
  auto* e = reinterpret_cast<JpegErrors*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, e->message);
  std::longjmp(e->jump, 1);
}

/// A warning (level -1: "Premature end of JPEG file", corrupt data) fails the decode, as
/// TurboJPEG's does: the missing part would be grey.
void on_message(j_common_ptr cinfo, int level) {
  auto* e = reinterpret_cast<JpegErrors*>(cinfo->err);
  if (level < 0 && !e->warned) {
    (*cinfo->err->format_message)(cinfo, e->message);
    e->warned = true;
  }
}

/// The rows and columns kept (`top`, `height`, `left`, `width`) and the wider span of columns
/// decoded around them (`decoded_left`, `decoded_width`).
struct Window {
  JDIMENSION left, width, top, height;
  JDIMENSION decoded_left, decoded_width;
};

/// Reads the header, starts the scaled decompression and crops the columns to `want` (widened
/// by libjpeg to its blocks). False on error.
bool open_region(jpeg_decompress_struct* d, const std::uint8_t* data, std::size_t size,
                 int channels, int denominator, const PixelRegion* want, Window* out) {
  auto* e = reinterpret_cast<JpegErrors*>(d->err);
  if (setjmp(e->jump)) return false;
  jpeg_create_decompress(d);
  jpeg_mem_src(d, data, static_cast<unsigned long>(size));
  jpeg_read_header(d, TRUE);
  d->scale_num = 1;
  d->scale_denom = static_cast<unsigned>(denominator);
  d->out_color_space = channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_start_decompress(d);
  const auto clamp = [](int v, JDIMENSION hi) {
    return static_cast<JDIMENSION>(std::clamp<long>(v, 0, static_cast<long>(hi)));
  };
  out->top = clamp(want->top, d->output_height);
  out->height = clamp(want->top + want->height, d->output_height) - out->top;
  out->left = clamp(want->left, d->output_width);
  out->width = clamp(want->left + want->width, d->output_width) - out->left;
  if (out->width == 0 || out->height == 0) {  // nothing wanted: one pixel keeps the API simple
    out->width = out->height = 1;
    out->left = std::min(out->left, d->output_width - 1);
    out->top = std::min(out->top, d->output_height - 1);
  }
  // libjpeg starts the crop at a block boundary and ends it where asked, but its chroma
  // upsampling treats the crop's edges as the image's: a column next to an edge that is not the
  // image's would differ from the whole decode. One iMCU (the widest upsampling reach) more on
  // each side keeps the kept columns exact.
  const auto margin = static_cast<long>(d->max_h_samp_factor * d->min_DCT_scaled_size);
  out->decoded_left = clamp(static_cast<int>(out->left - margin), d->output_width);
  out->decoded_width =
      clamp(static_cast<int>(out->left + out->width + margin), d->output_width) - out->decoded_left;
  if (out->decoded_width < d->output_width)
    jpeg_crop_scanline(d, &out->decoded_left, &out->decoded_width);
  return true;
}

/// Skips to the window's rows, reads them into `dst`, then reads past the rest (only the
/// entropy decoding runs on skipped rows), so that a truncated or corrupt file fails here as in a whole
/// decode. False on error.
bool read_region(jpeg_decompress_struct* d, const Window* w, std::uint8_t* row_buffer,
                 std::uint8_t* dst) {
  auto* e = reinterpret_cast<JpegErrors*>(d->err);
  if (setjmp(e->jump)) return false;
  const std::size_t channels = static_cast<std::size_t>(d->output_components);
  const std::size_t kept = w->width * channels, skipped = (w->left - w->decoded_left) * channels;
  if (w->top > 0) jpeg_skip_scanlines(d, w->top);
  for (JDIMENSION r = 0; r < w->height; ++r) {
    JSAMPROW row = row_buffer;
    const bool read = jpeg_read_scanlines(d, &row, 1) == 1;
    std::memcpy(dst + r * kept, row_buffer + skipped, kept);
    if (!read) {  // the memory source never suspends
      std::snprintf(e->message, sizeof e->message, "row %u could not be read", d->output_scanline);
      return false;
    }
  }
  // Skipping to the very end would not read the data at all (libjpeg marks the image done), so
  // the last row is read.
  if (d->output_scanline + 1 < d->output_height)
    jpeg_skip_scanlines(d, d->output_height - 1 - d->output_scanline);
  if (d->output_scanline < d->output_height) {
    JSAMPROW row = row_buffer;
    jpeg_read_scanlines(d, &row, 1);
  }
  jpeg_finish_decompress(d);
  return true;
}

}  // namespace

DecodedRegion decode_jpeg_region(std::span<const std::uint8_t> bytes, const std::string& name,
                                 int channels, int denominator, const PixelRegion& region) {
  MIRROR_CHECK(channels == 1 || channels == 3, InvalidArgument,
               "decode_jpeg_region: 1 or 3 channels, got " + std::to_string(channels));
  MIRROR_CHECK(denominator == 1 || denominator == 2 || denominator == 4 || denominator == 8,
               InvalidArgument,
               "decode_jpeg_region: denominator " + std::to_string(denominator) +
                   " is not 1, 2, 4 or 8");
  JpegErrors errors{};
  jpeg_decompress_struct d{};  // zeroed: jpeg_destroy_decompress is safe before create
  d.err = jpeg_std_error(&errors.mgr);
  errors.mgr.error_exit = on_error;
  errors.mgr.emit_message = on_message;
  struct Destroy {
    jpeg_decompress_struct* d;
    ~Destroy() { jpeg_destroy_decompress(d); }
  } destroy{&d};
  auto fail = [&] {
    return DataError(name + ": corrupt or truncated JPEG (libjpeg-turbo, decode: " +
                     errors.message + ")");
  };
  Window w{};
  if (!open_region(&d, bytes.data(), bytes.size(), channels, denominator, &region, &w) ||
      errors.warned)
    throw fail();
  MIRROR_CHECK(d.output_components == channels, DataError,
               name + ": decodes to " + std::to_string(d.output_components) +
                   " channels where its header says " + std::to_string(channels));
  DecodedRegion out;
  out.full_height = static_cast<int>(d.output_height);
  // After the crop output_width is the window's; the full width is the scaled image's.
  out.full_width = static_cast<int>((d.image_width + static_cast<unsigned>(denominator) - 1) /
                                    static_cast<unsigned>(denominator));
  out.top = static_cast<int>(w.top);
  out.left = static_cast<int>(w.left);
  out.image.height = static_cast<int>(w.height);
  out.image.width = static_cast<int>(w.width);
  out.image.channels = channels;
  out.image.pixels.resize(static_cast<std::size_t>(w.width) * w.height * channels);
  std::vector<std::uint8_t> row(static_cast<std::size_t>(d.output_width) * channels);
  if (!read_region(&d, &w, row.data(), out.image.pixels.data()) || errors.warned) throw fail();
  return out;
}

}  // namespace mirror::data
