// BatchNormalization's device path on the CPU (Note [Device batch norm], mirror/ops.h): the same
// steps as the layer's host path (nn/norm.cpp) through this backend's channel_sums and
// channel_affine, with the per-channel arithmetic of src/math/batchnorm.h, so the two paths give
// the same bits here and the CUDA kernels compute what these loops compute.
#include <vector>

#include "cpu/cpu_kernels.h"
#include "math/batchnorm.h"

namespace mirror::cpu {
namespace {

std::vector<double> host_doubles(const Tensor& t) {
  if (!t.defined()) return {};
  if (t.dtype() == DType::kFloat64) return t.to_vector<double>();
  const auto f = t.to_vector<float>();
  return {f.begin(), f.end()};
}

Tensor device_doubles(const std::vector<double>& values, Device device) {
  return Tensor::from_vector(values, {static_cast<std::int64_t>(values.size())}).to(device);
}

Tensor like(const std::vector<double>& values, const Tensor& t) {
  const auto n = static_cast<std::int64_t>(values.size());
  if (t.dtype() == DType::kFloat64) return Tensor::from_vector(values, {n}).to(t.device());
  return Tensor::from_vector(std::vector<float>(values.begin(), values.end()), {n}).to(t.device());
}

/// Per sample 1 (real) or 0 (padding); empty when every sample is real (as the host path).
std::vector<double> sample_mask(const Tensor& weights) {
  std::vector<double> mask = host_doubles(weights);
  bool padded = false;
  for (double& m : mask) {
    m = m > 0 ? 1.0 : 0.0;
    padded = padded || m == 0.0;
  }
  if (!padded) mask.clear();
  return mask;
}

std::vector<double> zeros(std::size_t n) { return std::vector<double>(n, 0.0); }

}  // namespace

Tensor CpuKernels::batchnorm_statistics(const Tensor& x, const Tensor& weights,
                                        const ops::ChannelView& v) {
  const std::vector<double> mask = sample_mask(weights);
  const std::int64_t n = x.dim(0);
  Tensor xr = x;
  if (!mask.empty()) {
    const ops::ChannelView samples{1, n, x.numel() / n};
    xr = channel_affine(x, {}, {mask, zeros(mask.size()), {}, {}, zeros(mask.size())}, samples);
  }
  std::vector<double> s = channel_sums(xr, xr, v);
  double real = static_cast<double>(n);
  if (!mask.empty()) {
    real = 0;
    for (double m : mask) real += m;
  }
  s.push_back(real * static_cast<double>(v.numel() / (n * v.channels)));
  return device_doubles(s, x.device());
}

ops::BatchNormNormalized CpuKernels::batchnorm_normalize(const Tensor& x, const Tensor& stats,
                                                         const Tensor& gamma, const Tensor& beta,
                                                         Tensor& moving_mean,
                                                         Tensor& moving_variance, double momentum,
                                                         double epsilon,
                                                         const ops::ChannelView& v) {
  const auto c = static_cast<std::size_t>(v.channels);
  const std::vector<double> s = host_doubles(stats);
  const double count = s[2 * c];
  std::vector<double> mm = host_doubles(moving_mean), mv = host_doubles(moving_variance);
  const std::vector<double> g = gamma.defined() ? host_doubles(gamma) : std::vector<double>(c, 1.0);
  const std::vector<double> b = beta.defined() ? host_doubles(beta) : zeros(c);
  std::vector<double> saved(2 * c + 1), ka(c);
  for (std::size_t k = 0; k < c; ++k) {
    const math::BnMoments m = math::bn_moments(s[k], s[c + k], count);
    saved[k] = m.mean;
    saved[c + k] = math::bn_invstd(m.var, epsilon);
    ka[k] = g[k] * saved[c + k];
    mm[k] = math::bn_moving(mm[k], m.mean, momentum);
    mv[k] = math::bn_moving(mv[k], m.var, momentum);
  }
  saved[2 * c] = count;
  if (count > 0) {  // an all-padding shard leaves the moving statistics as they are
    moving_mean.copy_from(like(mm, moving_mean));
    moving_variance.copy_from(like(mv, moving_variance));
  }
  const std::vector<double> mean(saved.begin(), saved.begin() + static_cast<std::ptrdiff_t>(c));
  ops::BatchNormNormalized out;
  out.y = channel_affine(x, {}, {ka, mean, {}, {}, b}, v).reshape(x.shape());
  out.saved = device_doubles(saved, x.device());
  return out;
}

Tensor CpuKernels::batchnorm_gradient_sums(const Tensor& dy, const Tensor& x, const Tensor& saved,
                                           Tensor& gamma_grad, Tensor& beta_grad,
                                           const ops::ChannelView& v) {
  const auto c = static_cast<std::size_t>(v.channels);
  const std::vector<double> sv = host_doubles(saved);
  const std::vector<double> s = channel_sums(dy, x, v);
  std::vector<double> sum_dy(s.begin(), s.begin() + static_cast<std::ptrdiff_t>(c)), sum_dy_xhat(c);
  for (std::size_t k = 0; k < c; ++k) sum_dy_xhat[k] = sv[c + k] * (s[c + k] - sv[k] * s[k]);
  if (gamma_grad.defined()) axpy(1.0, like(sum_dy_xhat, gamma_grad), gamma_grad);
  if (beta_grad.defined()) axpy(1.0, like(sum_dy, beta_grad), beta_grad);
  std::vector<double> both = sum_dy;
  both.insert(both.end(), sum_dy_xhat.begin(), sum_dy_xhat.end());
  return device_doubles(both, x.device());
}

Tensor CpuKernels::batchnorm_input_gradient(const Tensor& dy, const Tensor& x, const Tensor& saved,
                                            const Tensor& gamma, const Tensor& sums,
                                            const Tensor& weights, const ops::ChannelView& v) {
  const auto c = static_cast<std::size_t>(v.channels);
  const std::vector<double> sv = host_doubles(saved), s = host_doubles(sums);
  const std::vector<double> g = gamma.defined() ? host_doubles(gamma) : std::vector<double>(c, 1.0);
  std::vector<double> ka(c), kb(c), k0(c);
  for (std::size_t k = 0; k < c; ++k) {
    const math::BnInputGrad d = math::bn_input_grad(g[k], sv[c + k], s[k], s[c + k], sv[2 * c]);
    ka[k] = d.ka;
    kb[k] = d.kb;
    k0[k] = d.k0;
  }
  const std::vector<double> mean(sv.begin(), sv.begin() + static_cast<std::ptrdiff_t>(c));
  Tensor dx = channel_affine(dy, x, {ka, zeros(c), kb, mean, k0}, v).reshape(dy.shape());
  const std::vector<double> mask = sample_mask(weights);
  if (mask.empty()) return dx;
  const std::int64_t n = x.dim(0);
  return channel_affine(dx, {}, {mask, zeros(mask.size()), {}, {}, zeros(mask.size())},
                        {1, n, x.numel() / n})
      .reshape(dy.shape());
}

}  // namespace mirror::cpu
