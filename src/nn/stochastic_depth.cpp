// StochasticDepth (nn/stochastic_depth.h): Dropout's keep decisions, one per sample, spread over
// the sample by ops::copy_block, so every backend runs it.
#include "mirror/nn/stochastic_depth.h"

#include "mirror/nn/keras_layers.h"
#include "mirror/nn/layers.h"

namespace mirror::nn {

StochasticDepth::StochasticDepth(double rate) : rate_(rate) {
  MIRROR_CHECK(rate >= 0 && rate < 1, InvalidArgument,
               "StochasticDepth: drop_path_rate must be in [0, 1), got " + std::to_string(rate));
}

Shape StochasticDepth::build(const Shape& input_shape, DType dtype, Device, InitRng&) {
  detail::require(*this, !input_shape.empty(), "expects a sample with at least one axis");
  input_shape_ = input_shape;
  dtype_ = dtype;
  return input_shape;
}

Tensor StochasticDepth::forward(const Tensor& x, ForwardContext& ctx) {
  detail::check_input(*this, x, detail::any_steps(input_shape_), dtype_);
  mask_ = Tensor();
  if (!ctx.training || rate_ == 0.0) return x;
  detail::require(*this, ctx.sample_ids.defined(), "training needs ForwardContext::sample_ids");
  const std::int64_t n = x.dim(0), per = n == 0 ? 0 : x.numel() / n;
  Tensor ones = Tensor::empty({n, 1}, dtype_, x.device());
  ops::fill(ones, 1.0);
  Dropout seeds(rate_);
  seeds.set_name(name());
  Tensor unused;
  const Tensor per_sample = ops::dropout_forward(
      ones, static_cast<float>(rate_), seeds.layer_seed(ctx.seed), ctx.sample_ids, unused);
  Tensor mask = Tensor::empty({n, per}, dtype_, x.device());
  ops::BlockCopy b;  // [N, per] <- [N, 1]: every element of a sample shares its decision
  b.dims[2] = n;
  b.dims[3] = per;
  b.dst_strides[2] = per;
  b.dst_strides[3] = 1;
  b.src_strides[2] = 1;
  ops::copy_block(mask, per_sample, b);
  mask_ = mask.reshape(x.shape());
  return ops::multiply(x, mask_);
}

Tensor StochasticDepth::backward(const Tensor& dy) {
  if (!mask_.defined()) return dy;
  return ops::multiply(dy, mask_);
}

}  // namespace mirror::nn
