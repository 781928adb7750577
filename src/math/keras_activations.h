// defines: Keras's parametric activations (ReLU with max_value / negative_slope / threshold,
// LeakyReLU, ELU) and their input gradients, per element, for the CPU loops and the CUDA kernels
// alike (Note [Shared math] in hd.h, Note [Parametric activations] in ops.h).
#pragma once

#include "math/hd.h"
#include "mirror/ops.h"

namespace mirror::math {

MIRROR_HD inline float hd_expm1(float x) { return expm1f(x); }
MIRROR_HD inline double hd_expm1(double x) { return expm1(x); }

/// The parameters in the element type (the kernels take them by value).
template <class T>
struct EltwiseArgs {
  int kind;  // ops::Eltwise::Kind
  T slope, threshold, alpha, max_value;
  bool clip;
};

template <class T>
inline EltwiseArgs<T> eltwise_args(const ops::Eltwise& f) {
  return {static_cast<int>(f.kind), static_cast<T>(f.negative_slope), static_cast<T>(f.threshold),
          static_cast<T>(f.alpha),  static_cast<T>(f.max_value),      f.max_value >= 0};
}

constexpr int kEltwiseRelu = static_cast<int>(ops::Eltwise::Kind::kRelu);
constexpr int kEltwiseLeaky = static_cast<int>(ops::Eltwise::Kind::kLeakyRelu);

/// Keras's ReLU.static_call: the thresholded (or plain) relu, clipped to [0, max_value] when a
/// max_value is given, minus negative_slope * relu(threshold - x).
template <class T>
MIRROR_HD inline T relu_part(const EltwiseArgs<T>& a, T x) {
  const T r = a.threshold != T(0) ? (x > a.threshold ? x : T(0)) : (x > T(0) ? x : T(0));
  return a.clip ? hd_min(hd_max(r, T(0)), a.max_value) : r;
}

template <class T>
MIRROR_HD inline T eltwise_forward(const EltwiseArgs<T>& a, T x) {
  if (a.kind == kEltwiseLeaky) return x >= T(0) ? x : a.slope * x;
  if (a.kind != kEltwiseRelu) return x > T(0) ? x : a.alpha * hd_expm1(x);  // elu
  const T below = a.threshold - x;
  return relu_part(a, x) - (a.slope != T(0) && below > T(0) ? a.slope * below : T(0));
}

template <class T>
MIRROR_HD inline T eltwise_backward(const EltwiseArgs<T>& a, T x, T dy) {
  if (a.kind == kEltwiseLeaky) return x >= T(0) ? dy : a.slope * dy;
  if (a.kind != kEltwiseRelu) return x > T(0) ? dy : a.alpha * hd_exp(x) * dy;  // elu
  const bool on = a.threshold != T(0) ? x > a.threshold : x > T(0);
  T g = on ? T(1) : T(0);
  if (a.clip) {
    const T r = on ? x : T(0);  // before the clip
    g = r > T(0) && r < a.max_value ? g : T(0);
  }
  if (a.slope != T(0) && x < a.threshold) g += a.slope;
  return g * dy;
}

/// Maximum (or minimum): the value and whether a was taken (ties: a).
template <class T>
MIRROR_HD inline bool takes_a(T a, T b, bool minimum) {
  return minimum ? !(b < a) : !(a < b);
}

}  // namespace mirror::math
