// defines: Keras's parametric activations (ReLU with max_value / negative_slope / threshold,
// LeakyReLU, ELU) and the activations differentiated through their input (silu, hard_sigmoid,
// hard_silu, gelu in both forms) with their input gradients, per element, for the CPU loops and
// the CUDA kernels alike (Note [Shared math] in hd.h, Note [Parametric activations] in ops.h).
#pragma once

#include "math/activation.h"
#include "math/gelu.h"
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
constexpr int kEltwiseElu = static_cast<int>(ops::Eltwise::Kind::kElu);
constexpr int kEltwiseSilu = static_cast<int>(ops::Eltwise::Kind::kSilu);
constexpr int kEltwiseHardSigmoid = static_cast<int>(ops::Eltwise::Kind::kHardSigmoid);
constexpr int kEltwiseHardSilu = static_cast<int>(ops::Eltwise::Kind::kHardSilu);
constexpr int kEltwiseGelu = static_cast<int>(ops::Eltwise::Kind::kGelu);
constexpr int kEltwiseGeluTanh = static_cast<int>(ops::Eltwise::Kind::kGeluTanh);

/// Keras 3's hard_sigmoid, relu6(x + 3) / 6, computed in Keras's order (a clip, then a division).
template <class T>
MIRROR_HD inline T hard_sigmoid(T x) {
  return hd_min(hd_max(x + T(3), T(0)), T(6)) / T(6);
}

/// The slope of hard_sigmoid: 1/6 strictly inside (-3, 3), 0 outside (and at the corners).
template <class T>
MIRROR_HD inline bool hard_sigmoid_slopes(T x) {
  return x > T(-3) && x < T(3);
}

/// GELU's tanh approximation (Keras's approximate=True):
/// x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))) / 2, and its derivative.
template <class T>
MIRROR_HD inline T gelu_tanh_inner(T x) {
  return T(0.79788456080286535588) * (x + T(0.044715) * x * x * x);
}
template <class T>
MIRROR_HD inline T gelu_tanh(T x) {
  return T(0.5) * x * (T(1) + hd_tanh(gelu_tanh_inner(x)));
}
template <class T>
MIRROR_HD inline T gelu_tanh_slope(T x) {
  const T t = hd_tanh(gelu_tanh_inner(x));
  const T du = T(0.79788456080286535588) * (T(1) + T(3) * T(0.044715) * x * x);
  return T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * du;
}

/// Keras's ReLU.static_call: the thresholded (or plain) relu, clipped to [0, max_value] when a
/// max_value is given, minus negative_slope * relu(threshold - x).
template <class T>
MIRROR_HD inline T relu_part(const EltwiseArgs<T>& a, T x) {
  const T r = a.threshold != T(0) ? (x > a.threshold ? x : T(0)) : (x > T(0) ? x : T(0));
  return a.clip ? hd_min(hd_max(r, T(0)), a.max_value) : r;
}

template <class T>
MIRROR_HD inline T eltwise_forward(const EltwiseArgs<T>& a, T x) {
  switch (a.kind) {
    case kEltwiseLeaky:
      return x >= T(0) ? x : a.slope * x;
    case kEltwiseElu:
      return x > T(0) ? x : a.alpha * hd_expm1(x);
    case kEltwiseSilu:
      return x * sigmoid(x);
    case kEltwiseHardSigmoid:
      return hard_sigmoid(x);
    case kEltwiseHardSilu:
      return x * hard_sigmoid(x);
    case kEltwiseGelu:
      return Gelu::forward(x);
    case kEltwiseGeluTanh:
      return gelu_tanh(x);
    default:
      break;
  }
  const T below = a.threshold - x;  // relu
  return relu_part(a, x) - (a.slope != T(0) && below > T(0) ? a.slope * below : T(0));
}

template <class T>
MIRROR_HD inline T eltwise_backward(const EltwiseArgs<T>& a, T x, T dy) {
  switch (a.kind) {
    case kEltwiseLeaky:
      return x >= T(0) ? dy : a.slope * dy;
    case kEltwiseElu:
      return x > T(0) ? dy : a.alpha * hd_exp(x) * dy;
    case kEltwiseSilu: {  // s + x s (1 - s)
      const T s = sigmoid(x);
      return dy * (s * (T(1) + x * (T(1) - s)));
    }
    case kEltwiseHardSigmoid:
      return hard_sigmoid_slopes(x) ? dy / T(6) : T(0);
    case kEltwiseHardSilu:  // hard_sigmoid(x) + x hard_sigmoid'(x)
      return dy * (hard_sigmoid(x) + (hard_sigmoid_slopes(x) ? x / T(6) : T(0)));
    case kEltwiseGelu:
      return Gelu::backward(x, dy);
    case kEltwiseGeluTanh:
      return dy * gelu_tanh_slope(x);
    default:
      break;
  }
  // relu
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
