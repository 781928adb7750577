// defines: decode_jpeg_region, a JPEG's region decoded through libjpeg-turbo's libjpeg API
// (Note [Region decode], mirror/data/image_decode.h).
#pragma once

#include <span>
#include <string>

#include "mirror/data/image_decode.h"

namespace mirror::data {

/// At least `region` (clamped to the image) of the JPEG at 1/`denominator` scale (1, 2, 4, 8),
/// `channels` as its header says (1 or 3): exactly the region, each pixel as the whole decode
/// gives it. DataError naming `name`, worded as the whole decode's, for a corrupt or truncated
/// file, a warning included.
DecodedRegion decode_jpeg_region(std::span<const std::uint8_t> bytes, const std::string& name,
                                 int channels, int denominator, const PixelRegion& region);

}  // namespace mirror::data
