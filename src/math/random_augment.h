// defines: the per-sample draws and per-pixel arithmetic of Keras's augmentation layers
// (RandomFlip, RandomTranslation, RandomZoom, RandomRotation, RandomCrop's training crop,
// RandomContrast, RandomBrightness): AugmentArgs, augment_affine (a sample's transform),
// affine_taps (the input pixels an output pixel reads, with their weights), and the colour factors.
// Called by the CPU loops (src/cpu/cpu_augment.cpp) and the CUDA kernels (src/cuda/augment.cu)
// alike.
//
// Note [Augmentation draws]: a sample's transform is a pure function of the layer's seed (the
// step seed salted with the layer's name, as Dropout's) and the sample's global id, drawn with
// Dropout's counter-based hash (math/dropout.h); so every rank count, batch slot and backend
// sees the same transform for a sample, and a resumed run repeats it. Keras draws its own
// numbers: the transforms are Keras's in distribution and formula, not in value.
//
// Note [Keras's affine sampling]: Keras 3's affine_transform (the JAX backend) maps output pixel
// (x, y) to input coordinates x' = a0 x + a1 y + a2, y' = b0 x + b1 y + b2 and reads them with
// scipy's map_coordinates: "bilinear" takes floor(x') and floor(x') + 1 with weights 1 - t and t
// (per axis, summed row-major), "nearest" rounds half away from zero; a tap outside the image
// reads fill_value ("constant") or the pixel the fill mode maps it to ("reflect": d c b a | a b c
// d | d c b a, "wrap", "nearest": the edge). The map is linear in the input, so the backward is
// its adjoint: each output's gradient goes back to the taps it read, with the same weights.
#pragma once

#include <stdint.h>  // NOLINT: fixed-width types usable in device code

#include "math/dropout.h"
#include "math/hd.h"

namespace mirror::math {

enum AugmentKind : int {
  kAugmentFlip = 0,
  kAugmentTranslation = 1,
  kAugmentZoom = 2,
  kAugmentRotation = 3,
  kAugmentContrast = 4,
  kAugmentBrightness = 5,
  kAugmentCrop = 6,
};
enum AugmentFill : int { kFillReflect = 0, kFillWrap = 1, kFillConstant = 2, kFillNearest = 3 };

/// Everything a kernel needs, by value (plain data, the same on host and device).
struct AugmentArgs {
  int kind = kAugmentFlip;
  bool flip_horizontal = false, flip_vertical = false;
  /// Factor ranges as Keras stores them after its checks: translation and zoom [height, width]
  /// (zoom: same_zoom when width_factor is None), rotation and the colour layers in [0].
  float lower[2] = {0, 0}, upper[2] = {0, 0};
  bool same_zoom = false;
  int fill = kFillReflect;
  bool nearest = false;  // interpolation "nearest" (else "bilinear")
  float fill_value = 0;
  float value_lo = 0, value_hi = 255;           // value_range of the colour layers
  uint64_t seed = 0;                            // the layer's seed of this step
  int64_t channels = 0, height = 0, width = 0;  // the input image
  int64_t out_height = 0, out_width = 0;        // the output: the input's but for a crop
};

/// Whether the kind resamples the image (flip, translation, zoom, rotation, crop).
MIRROR_HD inline bool augment_is_affine(const AugmentArgs& a) {
  return a.kind <= kAugmentRotation || a.kind == kAugmentCrop;
}

/// The i-th uniform draw in [0, 1) of a sample (24 random bits, exact in float).
MIRROR_HD inline float augment_uniform(uint64_t sample_key, int64_t i) {
  return dropout_uniform_from(sample_key, i);
}

MIRROR_HD inline float augment_between(uint64_t key, int64_t i, float lo, float hi) {
  return lo + (hi - lo) * augment_uniform(key, i);
}

/// The sample's affine map m = [a0, a1, a2, b0, b1, b2] (Keras's transform layout, without the
/// projective c0, c1) for the geometric layers. The formulas are Keras 3's (random_flip.py,
/// random_translation.py, random_zoom.py, random_rotation.py and _compute_affine_matrix).
MIRROR_HD inline void augment_affine(const AugmentArgs& a, int64_t sample_id, float m[6]) {
  const uint64_t key = dropout_sample_key(a.seed, sample_id);
  const float h = static_cast<float>(a.height), w = static_cast<float>(a.width);
  m[0] = 1;
  m[1] = 0;
  m[2] = 0;
  m[3] = 0;
  m[4] = 1;
  m[5] = 0;
  if (a.kind == kAugmentFlip) {
    if (augment_uniform(key, 0) <= 0.5f) {  // Keras: flips = uniform <= 0.5, one for both axes
      if (a.flip_horizontal) {
        m[0] = -1;
        m[2] = w - 1;
      }
      if (a.flip_vertical) {
        m[4] = -1;
        m[5] = h - 1;
      }
    }
  } else if (a.kind == kAugmentTranslation) {
    const float dy = augment_between(key, 0, a.lower[0], a.upper[0]) * h;
    const float dx = augment_between(key, 1, a.lower[1], a.upper[1]) * w;
    m[2] = -dx;
    m[5] = -dy;
  } else if (a.kind == kAugmentZoom) {
    const float zy = augment_between(key, 0, 1 + a.lower[0], 1 + a.upper[0]);
    const float zx = a.same_zoom ? zy : augment_between(key, 1, 1 + a.lower[1], 1 + a.upper[1]);
    m[0] = zx;
    m[2] = (w - 1) / 2 * (1 - zx);
    m[4] = zy;
    m[5] = (h - 1) / 2 * (1 - zy);
  } else if (a.kind == kAugmentCrop) {
    // Keras's RandomCrop: h_start = int(uniform(0, H - height + 1)), w_start likewise; the
    // output window starts there (whole pixels: exact under either interpolation).
    const int64_t rows = a.height - a.out_height, cols = a.width - a.out_width;
    int64_t top = static_cast<int64_t>(augment_between(key, 0, 0.0f, static_cast<float>(rows + 1)));
    int64_t left =
        static_cast<int64_t>(augment_between(key, 1, 0.0f, static_cast<float>(cols + 1)));
    top = top > rows ? rows : top;  // u < 1, but (rows + 1) u may round up to rows + 1
    left = left > cols ? cols : left;
    m[2] = static_cast<float>(left);
    m[5] = static_cast<float>(top);
  } else if (a.kind == kAugmentRotation) {
    const float degrees = augment_between(key, 0, a.lower[0] * 360.0f, a.upper[0] * 360.0f);
    const float rad = degrees * static_cast<float>(3.14159265358979323846 / 180.0);
    const float c = cosf(rad), s = sinf(rad);
    const float cx = 0.5f * (w - 1), cy = 0.5f * (h - 1);
    m[0] = c;
    m[1] = -s;
    m[2] = cx - cx * m[0] - cy * m[1];
    m[3] = s;
    m[4] = c;
    m[5] = cy - cx * m[3] - cy * m[4];
  }
}

/// scipy/JAX's index fixers (Note [Keras's affine sampling]); i is any integer.
MIRROR_HD inline int64_t augment_floor_mod(int64_t i, int64_t n) {
  const int64_t r = i % n;
  return r < 0 ? r + n : r;
}
MIRROR_HD inline int64_t augment_fix_index(int fill, int64_t i, int64_t size) {
  if (fill == kFillNearest) return i < 0 ? 0 : (i >= size ? size - 1 : i);
  if (fill == kFillWrap) return augment_floor_mod(i, size);
  if (fill == kFillReflect) {    // floor((mirror(2 i + 1, 2 size + 1) - 1) / 2)
    const int64_t s = 2 * size;  // mirror's half wavelength: (2 size + 1) - 1
    const int64_t m = augment_floor_mod(2 * i + 1 + s, 2 * s) - s;
    const int64_t t = (m < 0 ? -m : m) - 1;
    return t < 0 ? (t - 1) / 2 : t / 2;  // floor division by 2
  }
  return i;  // constant: the caller checks the range
}

/// floor(v) and round-half-away-from-zero(v) as integers by conversion, not floorf/roundf: on
/// x86-64 without SSE4.1 those are library calls, per tap.
MIRROR_HD inline int64_t augment_floor(float v) {
  const int64_t i = static_cast<int64_t>(v);  // toward zero
  return static_cast<float>(i) > v ? i - 1 : i;
}
MIRROR_HD inline int64_t augment_round(float v) {
  const float a = v < 0 ? -v : v;
  const int64_t f = static_cast<int64_t>(a);          // floor of |v|
  const bool up = a - static_cast<float>(f) >= 0.5f;  // exact: |v| minus its integer part
  return v < 0 ? -(f + (up ? 1 : 0)) : f + (up ? 1 : 0);
}

/// Up to four taps of one output pixel: index into the H x W plane (-1: fill_value) and weight.
template <class T>
struct AugmentTaps {
  int64_t index[4];
  T weight[4];
  int count;
};

MIRROR_HD inline int64_t augment_tap_index(const AugmentArgs& a, int64_t y, int64_t x) {
  const bool inside = y >= 0 && y < a.height && x >= 0 && x < a.width;
  if (inside) return y * a.width + x;  // most taps: no fill mode to apply
  if (a.fill == kFillConstant) return -1;
  return augment_fix_index(a.fill, y, a.height) * a.width + augment_fix_index(a.fill, x, a.width);
}

/// The taps output pixel (row oy, column ox) reads under map m.
template <class T>
MIRROR_HD inline AugmentTaps<T> affine_taps(const AugmentArgs& a, const float m[6], int64_t oy,
                                            int64_t ox) {
  const float x = static_cast<float>(ox), y = static_cast<float>(oy);
  const float xs = m[0] * x + m[1] * y + m[2];
  const float ys = m[3] * x + m[4] * y + m[5];
  AugmentTaps<T> t{};
  if (a.nearest) {
    t.index[0] = augment_tap_index(a, augment_round(ys), augment_round(xs));
    t.weight[0] = T(1);
    t.count = 1;
    return t;
  }
  const int64_t y0 = augment_floor(ys), x0 = augment_floor(xs);
  const T wy1 = T(ys - static_cast<float>(y0)), wx1 = T(xs - static_cast<float>(x0));
  const T wy0 = T(1) - wy1, wx0 = T(1) - wx1;
  t.index[0] = augment_tap_index(a, y0, x0);
  t.weight[0] = wy0 * wx0;
  t.index[1] = augment_tap_index(a, y0, x0 + 1);
  t.weight[1] = wy0 * wx1;
  t.index[2] = augment_tap_index(a, y0 + 1, x0);
  t.weight[2] = wy1 * wx0;
  t.index[3] = augment_tap_index(a, y0 + 1, x0 + 1);
  t.weight[3] = wy1 * wx1;
  t.count = 4;
  return t;
}

/// One output pixel of a geometric layer from its plane (forward).
template <class T>
MIRROR_HD inline T affine_pixel(const AugmentArgs& a, const float m[6], const T* plane, int64_t oy,
                                int64_t ox) {
  const AugmentTaps<T> t = affine_taps<T>(a, m, oy, ox);
  T sum = T(0);
  for (int k = 0; k < t.count; ++k) {
    sum += t.weight[k] * (t.index[k] < 0 ? T(a.fill_value) : plane[t.index[k]]);
  }
  return sum;
}

/// RandomBrightness's delta of a sample: uniform(factor) * (value_range's width).
MIRROR_HD inline float brightness_delta(const AugmentArgs& a, int64_t sample_id) {
  const uint64_t key = dropout_sample_key(a.seed, sample_id);
  return augment_between(key, 0, a.lower[0], a.upper[0]) * (a.value_hi - a.value_lo);
}

/// RandomContrast's factor of a sample: uniform in [1 - factor[0], 1 + factor[1]] (Keras 3's).
MIRROR_HD inline float contrast_factor(const AugmentArgs& a, int64_t sample_id) {
  const uint64_t key = dropout_sample_key(a.seed, sample_id);
  return augment_between(key, 0, 1 - a.lower[0], 1 + a.upper[0]);
}

/// Keras's clip to value_range, and whether a value passed it (the gradient's mask).
template <class T>
MIRROR_HD inline T augment_clip(const AugmentArgs& a, T v) {
  return v < T(a.value_lo) ? T(a.value_lo) : (v > T(a.value_hi) ? T(a.value_hi) : v);
}
template <class T>
MIRROR_HD inline bool augment_inside(const AugmentArgs& a, T v) {
  return v >= T(a.value_lo) && v <= T(a.value_hi);
}

// ---------------------------------------------------------------- whole planes
// One (sample, channel) plane of H x W, the unit the CPU loops parallelise over and one CUDA
// thread takes in the backward passes and the contrast (a plane's sums in a fixed order, so the
// result is deterministic and the same on both sides).

/// The adjoint of the sampling: dx (zeroed by the caller; H x W) += each output's dy (out_height
/// x out_width) at its taps.
template <class T>
MIRROR_HD inline void affine_plane_backward(const AugmentArgs& a, const float m[6], const T* dy,
                                            T* dx) {
  for (int64_t oy = 0; oy < a.out_height; ++oy) {
    for (int64_t ox = 0; ox < a.out_width; ++ox) {
      const T g = dy[oy * a.out_width + ox];
      const AugmentTaps<T> t = affine_taps<T>(a, m, oy, ox);
      for (int k = 0; k < t.count; ++k) {
        if (t.index[k] >= 0) dx[t.index[k]] += t.weight[k] * g;
      }
    }
  }
}

/// RandomContrast on a plane: y = clip((x - mean) f + mean), mean over the plane (Keras 3's
/// per-image, per-channel mean).
template <class T>
MIRROR_HD inline void contrast_plane_forward(const AugmentArgs& a, float f, const T* x, T* y) {
  const int64_t n = a.height * a.width;
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]);
  const T mean = static_cast<T>(sum / static_cast<double>(n));
  for (int64_t i = 0; i < n; ++i) y[i] = augment_clip(a, (x[i] - mean) * T(f) + mean);
}

/// Its gradient: with m_i whether output i passed the clip,
/// dx_i = f m_i dy_i + (1 - f) / (H W) sum_j m_j dy_j (the mean depends on every input).
template <class T>
MIRROR_HD inline void contrast_plane_backward(const AugmentArgs& a, float f, const T* x,
                                              const T* dy, T* dx) {
  const int64_t n = a.height * a.width;
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]);
  const T mean = static_cast<T>(sum / static_cast<double>(n));
  double passed = 0;
  for (int64_t i = 0; i < n; ++i) {
    const bool in = augment_inside(a, (x[i] - mean) * T(f) + mean);
    dx[i] = in ? T(f) * dy[i] : T(0);
    passed += in ? static_cast<double>(dy[i]) : 0.0;
  }
  const T shared = static_cast<T>((1.0 - static_cast<double>(f)) * passed / static_cast<double>(n));
  for (int64_t i = 0; i < n; ++i) dx[i] += shared;
}

}  // namespace mirror::math
