// The kernels of BatchNormalization's device path (Note [Device batch norm] in mirror/ops.h): the
// per-channel coefficient steps between channel_reduce.cu's channel_moments (the masked
// statistics) and channel_sums and norm.cu's channel_affine, and the padding's zeroing. Per-channel arithmetic from
// src/math/batchnorm.h (Note [Shared math]); reductions in double with a fixed tree
// (deterministic).
#include <cstdint>

#include "cuda/batchnorm_kernels.h"
#include "cuda/launch.cuh"
#include "math/batchnorm.h"

namespace mirror::cuda {
namespace {

__global__ void bn_normalize_coefficients_kernel(const double* stats, const float* gamma,
                                                 const float* beta, float* moving_mean,
                                                 float* moving_variance, double momentum,
                                                 double epsilon, double* saved, double* coef,
                                                 std::int64_t channels) {
  const double count = stats[2 * channels];
  MIRROR_GRID_LOOP(c, channels) {
    const math::BnMoments m = math::bn_moments(stats[c], stats[channels + c], count);
    const double invstd = math::bn_invstd(m.var, epsilon);
    saved[c] = m.mean;
    saved[channels + c] = invstd;
    coef[c] = (gamma != nullptr ? static_cast<double>(gamma[c]) : 1.0) * invstd;
    coef[channels + c] = m.mean;
    coef[2 * channels + c] = beta != nullptr ? static_cast<double>(beta[c]) : 0.0;
    if (count > 0) {
      moving_mean[c] = static_cast<float>(math::bn_moving(moving_mean[c], m.mean, momentum));
      moving_variance[c] = static_cast<float>(math::bn_moving(moving_variance[c], m.var, momentum));
    }
    if (c == 0) saved[2 * channels] = count;
  }
}

__global__ void bn_gradient_sums_kernel(const double* raw, const double* saved, float* gamma_grad,
                                        float* beta_grad, double* out, std::int64_t channels) {
  MIRROR_GRID_LOOP(c, channels) {
    const double sum_dy = raw[c];
    const double sum_dy_xhat = saved[channels + c] * (raw[channels + c] - saved[c] * raw[c]);
    out[c] = sum_dy;
    out[channels + c] = sum_dy_xhat;
    // As ops::axpy(1, g, grad) in float.
    if (gamma_grad != nullptr) gamma_grad[c] += static_cast<float>(sum_dy_xhat);
    if (beta_grad != nullptr) beta_grad[c] += static_cast<float>(sum_dy);
  }
}

__global__ void bn_input_gradient_coefficients_kernel(const double* saved, const float* gamma,
                                                      const double* sums, double* coef,
                                                      std::int64_t channels) {
  MIRROR_GRID_LOOP(c, channels) {
    const math::BnInputGrad d =
        math::bn_input_grad(gamma != nullptr ? static_cast<double>(gamma[c]) : 1.0,
                            saved[channels + c], sums[c], sums[channels + c], saved[2 * channels]);
    coef[c] = d.ka;                     // ka (on dy)
    coef[channels + c] = 0.0;           // ca
    coef[2 * channels + c] = d.k0;      // k0
    coef[3 * channels + c] = d.kb;      // kb (on x)
    coef[4 * channels + c] = saved[c];  // cb: the mean
  }
}

__global__ void bn_zero_padding_kernel(float* x, const float* weights, std::int64_t numel,
                                       std::int64_t per_sample) {
  MIRROR_GRID_LOOP(k, numel) {
    if (weights[k / per_sample] <= 0.0f) x[k] = 0.0f;
  }
}

}  // namespace

void bn_normalize_coefficients(const double* stats, const float* gamma, const float* beta,
                               float* moving_mean, float* moving_variance, double momentum,
                               double epsilon, double* saved, double* coef, std::int64_t channels,
                               cudaStream_t s) {
  MIRROR_LAUNCH(bn_normalize_coefficients_kernel, channels, s, stats, gamma, beta, moving_mean,
                moving_variance, momentum, epsilon, saved, coef, channels);
}

void bn_gradient_sums(const double* raw, const double* saved, float* gamma_grad, float* beta_grad,
                      double* out, std::int64_t channels, cudaStream_t s) {
  MIRROR_LAUNCH(bn_gradient_sums_kernel, channels, s, raw, saved, gamma_grad, beta_grad, out,
                channels);
}

void bn_input_gradient_coefficients(const double* saved, const float* gamma, const double* sums,
                                    double* coef, std::int64_t channels, cudaStream_t s) {
  MIRROR_LAUNCH(bn_input_gradient_coefficients_kernel, channels, s, saved, gamma, sums, coef,
                channels);
}

void bn_zero_padding(float* x, const float* weights, std::int64_t numel, std::int64_t samples,
                     cudaStream_t s) {
  MIRROR_LAUNCH(bn_zero_padding_kernel, numel, s, x, weights, numel, numel / samples);
}

}  // namespace mirror::cuda
