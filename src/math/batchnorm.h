// defines: the per-channel arithmetic of BatchNormalization's device path (Note [Device batch
// norm], mirror/ops.h): statistics to mean and inverse deviation, the moving-average update, and
// the coefficients of the normalisation and of its input gradient, written once for the CPU
// twin (src/cpu/cpu_batchnorm.cpp) and the CUDA kernels (src/cuda/batchnorm.cu). They are the
// formulas of the layer's host path (src/nn/norm.cpp), in the same order.
#pragma once

#include "math/hd.h"

namespace mirror::math {

/// Mean and biased variance of a channel from its sum, sum of squares and element count; a
/// channel without elements (an all-padding shard) gets mean 0, variance 1.
struct BnMoments {
  double mean = 0, var = 1;
};
MIRROR_HD inline BnMoments bn_moments(double sum, double sum_squares, double count) {
  BnMoments m;
  if (count > 0) {
    m.mean = sum / count;
    m.var = hd_max(sum_squares / count - m.mean * m.mean, 0.0);
  }
  return m;
}

MIRROR_HD inline double bn_invstd(double var, double epsilon) {
  return 1.0 / hd_sqrt(var + epsilon);
}

/// moving = momentum * moving + (1 - momentum) * batch (Keras).
MIRROR_HD inline double bn_moving(double moving, double batch, double momentum) {
  return momentum * moving + (1 - momentum) * batch;
}

/// The input gradient's channel_affine coefficients, dx = ka dy + kb (x - mean) + k0, from the
/// gradient sums (of dy and dy * xhat) over the `count` elements of the (global) batch.
struct BnInputGrad {
  double ka = 0, kb = 0, k0 = 0;
};
MIRROR_HD inline BnInputGrad bn_input_grad(double gamma, double invstd, double sum_dy,
                                           double sum_dy_xhat, double count) {
  const double m = count > 0 ? count : 1.0;
  const double g = gamma * invstd;
  return {g, -g * invstd * sum_dy_xhat / m, -g * sum_dy / m};
}

}  // namespace mirror::math
