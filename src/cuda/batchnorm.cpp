// CudaKernels' BatchNormalization device path (Note [Device batch norm] in mirror/ops.h): every
// step is enqueued on the compute stream, nothing is read back, so a replica's host thread never
// waits inside a BN layer. Kernels: batchnorm.cu, channel_reduce.cu's channel_moments and
// channel_sums and norm.cu's channel_affine.
#include "cuda/batchnorm_kernels.h"
#include "cuda/channel_reduce.h"
#include "cuda/cuda_kernels.h"
#include "cuda/norm_kernels.h"

namespace mirror::cuda {
namespace {

const float* optional_f32(const Tensor& t, const char* op) {
  return t.defined() ? f32(t, op) : nullptr;
}

Tensor doubles(std::int64_t n, Device device) {
  return Tensor::empty({n}, DType::kFloat64, device);
}

}  // namespace

Tensor CudaKernels::batchnorm_statistics(const Tensor& x, const Tensor& weights,
                                         const ops::ChannelView& v) {
  OpScope op(x);
  const char* name = "batchnorm_statistics";
  Tensor stats = doubles(2 * v.channels + 1, x.device());
  const ChannelSplit split = channel_split(v);
  Tensor partial = doubles(split.partials(v.channels), x.device());
  channel_moments(f32(x, name), optional_f32(weights, name), x.dim(0), partial.data<double>(),
                  stats.data<double>(), v, split, op.stream());
  return stats;
}

ops::BatchNormNormalized CudaKernels::batchnorm_normalize(const Tensor& x, const Tensor& stats,
                                                          const Tensor& gamma, const Tensor& beta,
                                                          Tensor& moving_mean,
                                                          Tensor& moving_variance, double momentum,
                                                          double epsilon,
                                                          const ops::ChannelView& v) {
  OpScope op(x);
  const char* name = "batchnorm_normalize";
  ops::BatchNormNormalized out;
  out.saved = doubles(2 * v.channels + 1, x.device());
  Tensor coef = doubles(3 * v.channels, x.device());
  bn_normalize_coefficients(stats.data<double>(), optional_f32(gamma, name),
                            optional_f32(beta, name), f32(moving_mean, name),
                            f32(moving_variance, name), momentum, epsilon, out.saved.data<double>(),
                            coef.data<double>(), v.channels, op.stream());
  out.y = Tensor::empty(x.shape(), x.dtype(), x.device());
  cuda::channel_affine(f32(x, name), nullptr, coef.data<double>(), f32(out.y, name), v,
                       op.stream());
  return out;
}

Tensor CudaKernels::batchnorm_gradient_sums(const Tensor& dy, const Tensor& x, const Tensor& saved,
                                            Tensor& gamma_grad, Tensor& beta_grad,
                                            const ops::ChannelView& v) {
  OpScope op(x);
  const char* name = "batchnorm_gradient_sums";
  Tensor raw = doubles(2 * v.channels, x.device());
  const ChannelSplit split = channel_split(v);
  Tensor partial = doubles(split.partials(v.channels), x.device());
  cuda::channel_sums(f32(dy, name), f32(x, name), partial.data<double>(), raw.data<double>(), v,
                     split, op.stream());
  Tensor sums = doubles(2 * v.channels, x.device());
  bn_gradient_sums(raw.data<double>(), saved.data<double>(),
                   gamma_grad.defined() ? f32(gamma_grad, name) : nullptr,
                   beta_grad.defined() ? f32(beta_grad, name) : nullptr, sums.data<double>(),
                   v.channels, op.stream());
  return sums;
}

Tensor CudaKernels::batchnorm_input_gradient(const Tensor& dy, const Tensor& x, const Tensor& saved,
                                             const Tensor& gamma, const Tensor& sums,
                                             const Tensor& weights, const ops::ChannelView& v) {
  OpScope op(x);
  const char* name = "batchnorm_input_gradient";
  Tensor coef = doubles(5 * v.channels, x.device());
  bn_input_gradient_coefficients(saved.data<double>(), optional_f32(gamma, name),
                                 sums.data<double>(), coef.data<double>(), v.channels, op.stream());
  Tensor dx = Tensor::empty(dy.shape(), dy.dtype(), dy.device());
  cuda::channel_affine(f32(dy, name), f32(x, name), coef.data<double>(), f32(dx, name), v,
                       op.stream());
  if (weights.defined()) {
    bn_zero_padding(f32(dx, name), f32(weights, name), dx.numel(), x.dim(0), op.stream());
  }
  return dx;
}

}  // namespace mirror::cuda
