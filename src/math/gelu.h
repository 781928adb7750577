// defines: Gelu, the exact (erf) GELU: forward(x) = x * Phi(x) and backward(x, dy) =
// dy * (Phi(x) + x * phi(x)), shared by the CPU loops and the CUDA kernel (Note [Shared math]).
#pragma once

#include "math/hd.h"

namespace mirror::math {

MIRROR_HD inline float hd_erf(float x) { return erff(x); }
MIRROR_HD inline double hd_erf(double x) { return erf(x); }

struct Gelu {
  template <class T>
  MIRROR_HD static T forward(T x) {
    return T(0.5) * x * (T(1) + hd_erf(x * T(0.70710678118654752440)));
  }
  /// d/dx x Phi(x) = Phi(x) + x phi(x), phi(x) = exp(-x^2 / 2) / sqrt(2 pi).
  template <class T>
  MIRROR_HD static T backward(T x, T dy) {
    const T cdf = T(0.5) * (T(1) + hd_erf(x * T(0.70710678118654752440)));
    const T pdf = hd_exp(T(-0.5) * x * x) * T(0.39894228040143267794);
    return dy * (cdf + x * pdf);
  }
};

}  // namespace mirror::math
