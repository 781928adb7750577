// defines: the launchers of BatchNormalization's device-path kernels (batchnorm.cu, Note [Device
// batch norm] in mirror/ops.h). Raw device pointers, enqueued on `s`, launches checked, never
// synchronising. Per-channel arithmetic: src/math/batchnorm.h.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "mirror/ops.h"

namespace mirror::cuda {

/// From `stats`: saved = mean, invstd per channel, then the count; coef = channel_affine's ka
/// (gamma invstd), ca (mean), k0 (beta); when the count is > 0 the moving statistics move
/// towards the batch's. gamma/beta null: 1 and 0.
void bn_normalize_coefficients(const double* stats, const float* gamma, const float* beta,
                               float* moving_mean, float* moving_variance, double momentum,
                               double epsilon, double* saved, double* coef, std::int64_t channels,
                               cudaStream_t s);
/// out = sum dy, sum dy * xhat from raw = channel_sums(dy, x) and saved; adds them to the
/// gradients (null: skipped).
void bn_gradient_sums(const double* raw, const double* saved, float* gamma_grad, float* beta_grad,
                      double* out, std::int64_t channels, cudaStream_t s);
/// channel_affine's coefficients (ka, ca, k0, kb, cb) of the input gradient.
void bn_input_gradient_coefficients(const double* saved, const float* gamma, const double* sums,
                                    double* coef, std::int64_t channels, cudaStream_t s);
/// x[k] = 0 for the elements of padding samples (weight <= 0).
void bn_zero_padding(float* x, const float* weights, std::int64_t numel, std::int64_t samples,
                     cudaStream_t s);

}  // namespace mirror::cuda
