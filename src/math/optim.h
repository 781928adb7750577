// defines: the per-element SGD and Adam/AdamW updates with PyTorch's semantics (torch.optim.SGD
// with dampening 0, torch.optim.Adam / AdamW, non-amsgrad), plus the host-side helper that
// folds the step-dependent bias corrections into per-call scalars.
#pragma once

#include <stdint.h>  // NOLINT

#include "math/hd.h"

namespace mirror::math {

/// One SGD step for one element. PyTorch: g += wd * p; buf = momentum * buf + g (the first
/// step's buf = g is the same thing with buf starting at zero); g = nesterov ? g + momentum *
/// buf : buf; p -= lr * g. With momentum == 0 `buf` is neither read nor written.
template <class T>
MIRROR_HD inline void sgd_step(T& p, T g, T* buf, T lr, T momentum, bool nesterov, T weight_decay) {
  if (weight_decay != T(0)) g += weight_decay * p;
  if (momentum != T(0)) {
    const T b = momentum * *buf + g;
    *buf = b;
    g = nesterov ? g + momentum * b : b;
  }
  p -= lr * g;
}

/// Scalars of one Adam call that do not depend on the element.
struct AdamScalars {
  double lr = 0, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0;
  bool decoupled = false;
  double step_size = 0;     // lr / (1 - beta1^step)
  double inv_sqrt_bc2 = 0;  // 1 / sqrt(1 - beta2^step)
  double decay_factor = 1;  // 1 - lr * weight_decay when decoupled (AdamW), else 1
};

/// Host-side: bias corrections at the 1-based `step`. (pow is evaluated once per call, not per
/// element, and in double, as PyTorch does for its Python-float scalars.)
inline AdamScalars adam_scalars(double lr, double beta1, double beta2, double eps,
                                double weight_decay, bool decoupled, int64_t step) {
  AdamScalars s;
  s.lr = lr;
  s.beta1 = beta1;
  s.beta2 = beta2;
  s.eps = eps;
  s.weight_decay = weight_decay;
  s.decoupled = decoupled;
  const double bc1 = 1.0 - pow(beta1, static_cast<double>(step));
  const double bc2 = 1.0 - pow(beta2, static_cast<double>(step));
  s.step_size = lr / bc1;
  s.inv_sqrt_bc2 = 1.0 / sqrt(bc2);
  s.decay_factor = decoupled ? 1.0 - lr * weight_decay : 1.0;
  return s;
}

/// One Adam/AdamW step for one element, in the element type T (float, double, or a CPU lane pack
/// such as cpu_update.cpp's F32x4, which brings its own operators and hd_sqrt: keep this to
/// +, -, *, /, hd_sqrt and T(double), Note [Vector Adam]):
///   Adam:  g += wd * p;            AdamW: p *= 1 - lr * wd
///   m = beta1 * m + (1 - beta1) * g;  v = beta2 * v + (1 - beta2) * g^2
///   p -= step_size * m / (sqrt(v) / sqrt(bc2) + eps)
template <class T>
MIRROR_HD inline void adam_step(T& p, T g, T& m, T& v, const AdamScalars& s) {
  if (s.decoupled) {
    p *= T(s.decay_factor);
  } else if (s.weight_decay != 0) {
    g += T(s.weight_decay) * p;
  }
  m = T(s.beta1) * m + T(1.0 - s.beta1) * g;
  v = T(s.beta2) * v + T(1.0 - s.beta2) * g * g;
  const T denom = hd_sqrt(v) * T(s.inv_sqrt_bc2) + T(s.eps);
  p -= T(s.step_size) * m / denom;
}

}  // namespace mirror::math
