// PhotoRecipe: the flag syntax, the crop geometry (Note [Random resized crop]) and the one-pass
// antialiased resample into [C, H, W] floats.
#include "mirror/data/photo_transforms.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>
#include <utility>

#include "data/hash.h"
#include "mirror/error.h"

namespace mirror::data {
namespace {

constexpr int kAttempts = 10;  // torchvision's

/// A number in full, or false.
bool parse_number(std::string_view text, double& v) {
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  return !text.empty() && ec == std::errc() && end == text.data() + text.size() &&
         std::isfinite(v);
}

/// Comma-separated numbers; false when one is not a number.
bool parse_list(std::string_view text, std::vector<double>& out) {
  std::size_t at = 0;
  while (at <= text.size()) {
    const std::size_t comma = std::min(text.find(',', at), text.size());
    double v = 0;
    if (!parse_number(text.substr(at, comma - at), v)) return false;
    out.push_back(v);
    at = comma + 1;
  }
  return true;
}

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

/// U[0, 1) from the top 53 bits of one draw (std::uniform_real_distribution is
/// implementation-defined).
double uniform01(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

/// The taps of one axis (PIL's precompute_coeffs for the bilinear filter): output i reads
/// `count[i]` source pixels from `first[i]` with weights[i * max_taps ...], summing to 1.
struct Taps {
  std::vector<int> first, count;
  std::vector<float> weights;
  int max_taps = 0;
};

Taps make_taps(double start, double length, int in_size, int out_size, bool flip) {
  const double scale = length / out_size;
  const double filter_scale = std::max(scale, 1.0);  // widened when shrinking: antialiasing
  const double support = filter_scale;               // the triangle's support is 1
  Taps t;
  t.max_taps = static_cast<int>(std::ceil(support)) * 2 + 1;
  t.first.resize(static_cast<std::size_t>(out_size));
  t.count.resize(static_cast<std::size_t>(out_size));
  t.weights.assign(static_cast<std::size_t>(out_size) * t.max_taps, 0.0f);
  std::vector<double> w(static_cast<std::size_t>(t.max_taps));
  for (int o = 0; o < out_size; ++o) {
    const double center = start + (o + 0.5) * scale;
    const int lo = std::max(static_cast<int>(center - support + 0.5), 0);
    const int hi = std::min(static_cast<int>(center + support + 0.5), in_size);
    const int n = std::min(std::max(hi - lo, 1), t.max_taps);
    double total = 0;
    for (int k = 0; k < n; ++k) {
      const double d = std::fabs((lo + k - center + 0.5) / filter_scale);
      w[static_cast<std::size_t>(k)] = d < 1.0 ? 1.0 - d : 0.0;
      total += w[static_cast<std::size_t>(k)];
    }
    const int slot = flip ? out_size - 1 - o : o;  // the mirror image reads the taps backwards
    t.first[static_cast<std::size_t>(slot)] = std::min(lo, in_size - 1);
    t.count[static_cast<std::size_t>(slot)] = n;
    for (int k = 0; k < n; ++k) {
      t.weights[static_cast<std::size_t>(slot) * t.max_taps + k] =
          static_cast<float>(total > 0 ? w[static_cast<std::size_t>(k)] / total : k == 0);
    }
  }
  return t;
}

/// Note [Resample order]: per output row, the source rows it reads are first summed with their
/// vertical weights over the columns any output pixel reads (contiguous bytes: a loop the
/// compiler vectorises), then each output pixel sums its horizontal taps of that float row,
/// every channel at once (C independent sums, not one dependent chain per channel).
/// [lo, hi): the source pixels any output of `t` reads.
std::pair<int, int> reach(const Taps& t) {
  int lo = std::numeric_limits<int>::max(), hi = 0;
  for (std::size_t o = 0; o < t.first.size(); ++o) {
    lo = std::min(lo, t.first[o]);
    hi = std::max(hi, t.first[o] + t.count[o]);
  }
  return {lo, hi};
}

/// `pixels` is the window of the image that starts at (top, left) and is `w` columns wide; the
/// taps index the whole image.
template <int C>
void resample_rows_then_columns(const std::uint8_t* pixels, int top, int left, int w,
                                const Taps& cols, const Taps& rows, int out_h, int out_w,
                                const float* scale, const float* bias, float* dst) {
  const auto [c0, c1] = reach(cols);  // the source columns any output pixel reads
  const std::size_t span = static_cast<std::size_t>(c1 - c0) * C;
  thread_local std::vector<float> line;  // one row at a time: no allocation per image
  line.resize(span);
  float* acc = line.data();
  const std::size_t plane = static_cast<std::size_t>(out_h) * out_w;
  for (int y = 0; y < out_h; ++y) {
    const float* wy = rows.weights.data() + static_cast<std::size_t>(y) * rows.max_taps;
    const std::uint8_t* src =
        pixels +
        (static_cast<std::size_t>(rows.first[static_cast<std::size_t>(y)] - top) * w + (c0 - left)) *
            C;
    const std::size_t stride = static_cast<std::size_t>(w) * C;
    for (std::size_t i = 0; i < span; ++i) acc[i] = wy[0] * static_cast<float>(src[i]);
    for (int t = 1; t < rows.count[static_cast<std::size_t>(y)]; ++t) {
      const std::uint8_t* s = src + t * stride;
      const float wt = wy[t];
      for (std::size_t i = 0; i < span; ++i) acc[i] += wt * static_cast<float>(s[i]);
    }
    float* out = dst + static_cast<std::size_t>(y) * out_w;
    for (int x = 0; x < out_w; ++x) {
      const float* a = acc + static_cast<std::size_t>(cols.first[static_cast<std::size_t>(x)] - c0) * C;
      const float* wx = cols.weights.data() + static_cast<std::size_t>(x) * cols.max_taps;
      float v[C] = {};
      for (int t = 0; t < cols.count[static_cast<std::size_t>(x)]; ++t)
        for (int k = 0; k < C; ++k) v[k] += wx[t] * a[t * C + k];
      for (int k = 0; k < C; ++k) out[k * plane + x] = v[k] * scale[k] + bias[k];
    }
  }
}

}  // namespace

void parse_crop(std::string_view spec, PhotoRecipe& r) {
  auto bad = [&](const std::string& why) {
    return InvalidArgument("--crop '" + std::string(spec) + "': " + why +
                           " (expected none, random-resized or random-resized=MIN,MAX with "
                           "0 < MIN <= MAX <= 1, e.g. random-resized=0.08,1)");
  };
  r.random_resized_crop = false;
  r.scale_min = 0.08;
  r.scale_max = 1.0;
  if (spec == "none") return;
  constexpr std::string_view kName = "random-resized";
  if (!spec.starts_with(kName)) throw bad("unknown crop");
  r.random_resized_crop = true;
  if (spec.size() == kName.size()) return;
  if (spec[kName.size()] != '=') throw bad("unknown crop");
  std::vector<double> v;
  if (!parse_list(spec.substr(kName.size() + 1), v) || v.size() != 2)
    throw bad("the scale range must be two numbers MIN,MAX");
  if (!(v[0] > 0 && v[1] <= 1)) throw bad("the scales must be in (0, 1]");
  if (v[0] > v[1]) throw bad("scale_min " + number(v[0]) + " > scale_max " + number(v[1]));
  r.scale_min = v[0];
  r.scale_max = v[1];
}

void parse_normalize(std::string_view spec, PhotoRecipe& r) {
  r.mean.clear();
  r.std.clear();
  if (spec == "none") return;
  if (spec == "imagenet") {
    r.mean = {0.485f, 0.456f, 0.406f};
    r.std = {0.229f, 0.224f, 0.225f};
    return;
  }
  auto bad = [&](const std::string& why) {
    return InvalidArgument("--normalize '" + std::string(spec) + "': " + why +
                           " (expected none, imagenet, MEAN,STD for every channel, or the C "
                           "means then the C stds, e.g. 0.5,0.5,0.5,0.25,0.25,0.25)");
  };
  std::vector<double> v;
  if (!parse_list(spec, v)) throw bad("not a list of numbers");
  if (v.size() % 2 != 0) throw bad(std::to_string(v.size()) + " numbers: an odd count");
  const std::size_t c = v.size() / 2;
  for (std::size_t k = 0; k < c; ++k) {
    if (!(v[c + k] > 0)) throw bad("std " + number(v[c + k]) + " is not positive");
    r.mean.push_back(static_cast<float>(v[k]));
    r.std.push_back(static_cast<float>(v[c + k]));
  }
}

void check_normalize_channels(const PhotoRecipe& r, int channels) {
  const auto n = static_cast<int>(r.mean.size());
  MIRROR_CHECK(n == 0 || n == 1 || n == channels, InvalidArgument,
               "--normalize gives " + std::to_string(n) + " means and stds but the images have " +
                   std::to_string(channels) + " channel(s); give one pair or " +
                   std::to_string(channels) + " means then " + std::to_string(channels) +
                   " stds");
}

std::string describe(const PhotoRecipe& r) {
  std::string s;
  auto add = [&](const std::string& part) { s += (s.empty() ? "" : ", ") + part; };
  if (r.random_resized_crop)
    add("crop random-resized=" + number(r.scale_min) + "," + number(r.scale_max));
  if (r.flip) add("flip");
  if (!r.mean.empty()) {
    std::string list;
    for (float m : r.mean) list += (list.empty() ? "" : ",") + number(m);
    for (float d : r.std) list += "," + number(d);
    add("normalize " + list);
  }
  if (r.eval_resize > 0) add("eval resize " + std::to_string(r.eval_resize) + " + centre crop");
  return s.empty() ? "none" : s;
}

CropBox random_resized_crop(int height, int width, const PhotoRecipe& r, std::mt19937_64& rng) {
  const double area = static_cast<double>(height) * width;
  const double log_lo = std::log(r.ratio_min), log_hi = std::log(r.ratio_max);
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    const double target = area * (r.scale_min + (r.scale_max - r.scale_min) * uniform01(rng));
    const double aspect = std::exp(log_lo + (log_hi - log_lo) * uniform01(rng));
    const auto w = static_cast<int>(std::lround(std::sqrt(target * aspect)));
    const auto h = static_cast<int>(std::lround(std::sqrt(target / aspect)));
    if (w > 0 && w <= width && h > 0 && h <= height) {
      const auto top = detail::uniform_below(rng, static_cast<std::uint64_t>(height - h + 1));
      const auto left = detail::uniform_below(rng, static_cast<std::uint64_t>(width - w + 1));
      return {static_cast<double>(top), static_cast<double>(left), static_cast<double>(h),
              static_cast<double>(w)};
    }
  }
  // The fallback: the whole image, cut to the nearest allowed aspect.
  const double in_ratio = static_cast<double>(width) / height;
  int w = width, h = height;
  if (in_ratio < r.ratio_min)
    h = static_cast<int>(std::lround(w / r.ratio_min));
  else if (in_ratio > r.ratio_max)
    w = static_cast<int>(std::lround(h * r.ratio_max));
  return {static_cast<double>((height - h) / 2), static_cast<double>((width - w) / 2),
          static_cast<double>(h), static_cast<double>(w)};
}

CropBox eval_crop_box(int height, int width, int resize, int out_h, int out_w) {
  if (resize <= 0) return {0, 0, static_cast<double>(height), static_cast<double>(width)};
  // torchvision's Resize(int): the short side becomes `resize`, the long one int(resize * l / s).
  const bool tall = height > width;
  const int short_side = tall ? width : height, long_side = tall ? height : width;
  const int new_long = static_cast<int>(static_cast<double>(resize) * long_side / short_side);
  const int rh = tall ? new_long : resize, rw = tall ? resize : new_long;
  const double sy = static_cast<double>(height) / rh, sx = static_cast<double>(width) / rw;
  // CenterCrop's corner: round((side - crop) / 2) (negative: the crop is larger, padded).
  // Python rounds half to even; so does nearbyint in the default rounding mode.
  const double top = std::nearbyint((rh - out_h) / 2.0), left = std::nearbyint((rw - out_w) / 2.0);
  return {top * sy, left * sx, out_h * sy, out_w * sx};
}

void resample_to_chw(const std::uint8_t* pixels, int h, int w, int c, const CropBox& box,
                     int out_h, int out_w, bool flip, const float* scale, const float* bias,
                     float* dst) {
  resample_window_to_chw(pixels, PixelRegion{0, 0, h, w}, h, w, c, box, out_h, out_w, flip, scale,
                         bias, dst);
}

PixelRegion resample_source_region(int h, int w, const CropBox& box, int out_h, int out_w) {
  const auto [r0, r1] = reach(make_taps(box.top, box.height, h, out_h, false));
  const auto [c0, c1] = reach(make_taps(box.left, box.width, w, out_w, false));
  return {r0, c0, r1 - r0, c1 - c0};
}

void resample_window_to_chw(const std::uint8_t* pixels, const PixelRegion& window, int h, int w,
                            int c, const CropBox& box, int out_h, int out_w, bool flip,
                            const float* scale, const float* bias, float* dst) {
  MIRROR_CHECK(c == 1 || c == 3, InvalidArgument,
               "resample_to_chw reads 1 or 3 channels, got " + std::to_string(c));
  const Taps cols = make_taps(box.left, box.width, w, out_w, flip);
  const Taps rows = make_taps(box.top, box.height, h, out_h, false);
  const auto [r0, r1] = reach(rows);
  const auto [c0, c1] = reach(cols);
  MIRROR_CHECK(r0 >= window.top && r1 <= window.top + window.height && c0 >= window.left &&
                   c1 <= window.left + window.width,
               InvalidArgument,
               "resample: the decoded window (rows " + std::to_string(window.top) + "+" +
                   std::to_string(window.height) + ", columns " + std::to_string(window.left) +
                   "+" + std::to_string(window.width) + ") lacks pixels the crop reads (rows " +
                   std::to_string(r0) + ".." + std::to_string(r1) + ", columns " +
                   std::to_string(c0) + ".." + std::to_string(c1) + ")");
  if (c == 1)
    resample_rows_then_columns<1>(pixels, window.top, window.left, window.width, cols, rows,
                                  out_h, out_w, scale, bias, dst);
  else
    resample_rows_then_columns<3>(pixels, window.top, window.left, window.width, cols, rows,
                                  out_h, out_w, scale, bias, dst);
}

}  // namespace mirror::data
