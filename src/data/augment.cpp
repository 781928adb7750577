// ImageAugment: the flag syntax and the per-sample transform (Note [Augmentation draws]).
#include "mirror/data/augment.h"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <random>
#include <vector>

#include "data/hash.h"
#include "mirror/error.h"

namespace mirror::data {
namespace {

constexpr int kMaxCropPadding = 64;
// Keeps augmentation draws apart from the epoch orders, which hash the same seed and epoch.
constexpr std::uint64_t kAugmentSalt = 0x61756720696d6167ull;  // "aug imag"

std::string bad(std::string_view spec, const std::string& why) {
  return "--augment '" + std::string(spec) + "': " + why +
         " (expected none, or a comma-separated list of crop=P and flip, e.g. crop=4,flip)";
}

}  // namespace

ImageAugment parse_image_augment(std::string_view spec) {
  ImageAugment a;
  if (spec == "none") return a;
  MIRROR_CHECK(!spec.empty(), InvalidArgument, bad(spec, "empty"));
  bool seen_crop = false;
  std::size_t at = 0;
  while (at <= spec.size()) {
    const std::size_t comma = std::min(spec.find(',', at), spec.size());
    const std::string_view item = spec.substr(at, comma - at);
    if (item == "flip") {
      MIRROR_CHECK(!a.flip_horizontal, InvalidArgument, bad(spec, "'flip' given twice"));
      a.flip_horizontal = true;
    } else if (item.starts_with("crop=")) {
      MIRROR_CHECK(!seen_crop, InvalidArgument, bad(spec, "'crop' given twice"));
      seen_crop = true;
      const std::string_view digits = item.substr(5);
      int p = 0;
      const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), p);
      MIRROR_CHECK(!digits.empty() && ec == std::errc() && end == digits.data() + digits.size() &&
                       p >= 1 && p <= kMaxCropPadding,
                   InvalidArgument,
                   bad(spec, "crop padding must be an integer in [1, " +
                                 std::to_string(kMaxCropPadding) + "], got '" +
                                 std::string(digits) + "'"));
      a.crop_padding = p;
    } else {
      throw InvalidArgument(bad(spec, "unknown item '" + std::string(item) + "'"));
    }
    at = comma + 1;
  }
  return a;
}

std::string to_string(const ImageAugment& a) {
  std::string s;
  if (a.crop_padding > 0) s = "crop=" + std::to_string(a.crop_padding);
  if (a.flip_horizontal) s += s.empty() ? "flip" : ",flip";
  return s.empty() ? "none" : s;
}

std::mt19937_64 augment_rng(std::uint64_t seed, int epoch, std::int64_t sample) {
  return std::mt19937_64(detail::splitmix64(
      detail::splitmix64(seed ^ kAugmentSalt) ^
      detail::splitmix64(static_cast<std::uint64_t>(epoch) ^
                         detail::splitmix64(static_cast<std::uint64_t>(sample)))));
}

void augment_image(const ImageAugment& a, std::uint64_t seed, int epoch, std::int64_t sample,
                   const Shape& chw, float* pixels) {
  if (!a.enabled()) return;
  MIRROR_CHECK(chw.size() == 3 && chw[0] > 0 && chw[1] > a.crop_padding &&
                   chw[2] > a.crop_padding,
               InvalidArgument, "augment_image needs a [C, H, W] sample larger than the padding");
  std::mt19937_64 rng = augment_rng(seed, epoch, sample);
  const auto span = static_cast<std::uint64_t>(2 * a.crop_padding + 1);
  // Offsets of the crop window in the padded image, minus the padding: the source pixel of
  // output (y, x) is (y + dy, x + dx).
  const auto dy = static_cast<std::int64_t>(detail::uniform_below(rng, span)) - a.crop_padding;
  const auto dx = static_cast<std::int64_t>(detail::uniform_below(rng, span)) - a.crop_padding;
  const bool flip = a.flip_horizontal && (rng() >> 63) != 0;
  if (dy == 0 && dx == 0 && !flip) return;
  const std::int64_t C = chw[0], H = chw[1], W = chw[2];
  std::vector<float> src(pixels, pixels + C * H * W);
  for (std::int64_t c = 0; c < C; ++c) {
    const float* in = src.data() + c * H * W;
    float* out = pixels + c * H * W;
    for (std::int64_t y = 0; y < H; ++y) {
      const std::int64_t sy = y + dy;
      for (std::int64_t x = 0; x < W; ++x) {
        // The crop comes first, the flip mirrors the cropped image (torchvision's order).
        const std::int64_t sx = (flip ? W - 1 - x : x) + dx;
        out[y * W + x] = sy >= 0 && sy < H && sx >= 0 && sx < W ? in[sy * W + sx] : 0.0f;
      }
    }
  }
}

}  // namespace mirror::data
