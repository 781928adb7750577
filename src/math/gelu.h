// defines: Gelu, the exact (erf) GELU: forward(x) = x * Phi(x) and backward(x, dy) =
// dy * (Phi(x) + x * phi(x)), shared by the CPU loops and the CUDA kernel (Note [Shared math]).
#pragma once

#include "math/hd.h"

namespace mirror::math {

MIRROR_HD inline float hd_erfc(float x) { return erfcf(x); }
MIRROR_HD inline double hd_erfc(double x) { return erfc(x); }

// Phi(x) = (1 + erf(x / sqrt 2)) / 2 loses every digit in the left tail: at x = -4 the sum is
// 1 - 0.99994, and in float32 it is off by about 1e-3 relative, differently for each erf
// implementation (the CPU's and CUDA's disagreed). erfc(-x / sqrt 2) / 2 is the same function
// with no cancellation, accurate to a few ulp on both sides.
template <class T>
MIRROR_HD inline T normal_cdf(T x) {
  return T(0.5) * hd_erfc(x * T(-0.70710678118654752440));
}

struct Gelu {
  template <class T>
  MIRROR_HD static T forward(T x) {
    return x * normal_cdf(x);
  }
  /// d/dx x Phi(x) = Phi(x) + x phi(x), phi(x) = exp(-x^2 / 2) / sqrt(2 pi).
  template <class T>
  MIRROR_HD static T backward(T x, T dy) {
    const T cdf = normal_cdf(x);
    const T pdf = hd_exp(T(-0.5) * x * x) * T(0.39894228040143267794);
    return dy * (cdf + x * pdf);
  }
};

}  // namespace mirror::math
