// LayerScale and ChannelsLastImage (nn/image_channels.h): per-channel work on Keras's last axis,
// over ops::channel_sums / channel_affine (Note [Channel view] in ops.h) and
// detail::permute_samples, so every backend runs them.
#include "mirror/nn/image_channels.h"

#include "mirror/nn/cnn_layers.h"
#include "mirror/nn/init.h"
#include "mirror/nn/keras_layers.h"
#include "mirror/nn/layers.h"

namespace mirror::nn {

namespace {

/// The channel view of x: an image [N, C, H, W] is [N, C, H*W]; features and sequences
/// [..., C] are [rows, C, 1].
ops::ChannelView view_of(const Tensor& x, const Shape& sample) {
  const std::int64_t c = sample.size() == 3 ? sample[0] : sample.back();
  if (sample.size() == 3) return {.outer = x.dim(0), .channels = c, .inner = sample[1] * sample[2]};
  return {.outer = x.numel() / c, .channels = c, .inner = 1};
}

}  // namespace

// ---------------------------------------------------------------- LayerScale

LayerScale::LayerScale(double init_values, std::int64_t projection_dim)
    : init_values_(init_values), projection_dim_(projection_dim) {
  MIRROR_CHECK(
      projection_dim > 0, InvalidArgument,
      "LayerScale: projection_dim must be positive, got " + std::to_string(projection_dim));
}

Shape LayerScale::build(const Shape& input_shape, DType dtype, Device device, InitRng&) {
  detail::require(*this, !input_shape.empty() && input_shape.size() <= 3,
                  "expects features [F], sequences [T, F] or an image [C, H, W], got " +
                      shape_str(input_shape));
  const std::int64_t c = input_shape.size() == 3 ? input_shape[0] : input_shape.back();
  detail::require(*this, c == projection_dim_,
                  "projection_dim is " + std::to_string(projection_dim_) + " but the input " +
                      shape_str(input_shape) + " has " + std::to_string(c) +
                      " channels (an image's C, NCHW; else the last axis)");
  input_shape_ = input_shape;
  dtype_ = dtype;
  gamma_ = detail::make_parameter(
      *this, "gamma",
      init::to_tensor(std::vector<double>(static_cast<std::size_t>(c), init_values_), {c}, dtype,
                      device));
  return input_shape;
}

Tensor LayerScale::forward(const Tensor& x, ForwardContext&) {
  detail::require(*this, gamma_.value.defined(), "used before build");
  detail::check_input(*this, x, detail::any_steps(input_shape_), dtype_);
  x_ = x;
  return ops::channel_affine(x, {}, {.ka = detail::host_values(gamma_.value)},
                             view_of(x, input_shape_));
}

Tensor LayerScale::backward(const Tensor& dy) {
  detail::require(*this, x_.defined(), "backward without forward");
  check_shape(dy, x_.shape(), (name() + " backward dy").c_str());
  const ops::ChannelView v = view_of(dy, input_shape_);
  const std::vector<double> sums = ops::channel_sums(dy, x_, v);  // [sum dy, sum dy x]
  ops::axpy(1.0,
            detail::from_host({sums.begin() + v.channels, sums.end()}, gamma_.grad.dtype(),
                              gamma_.grad.device()),
            gamma_.grad);
  if (!input_grad_needed()) return {};
  return ops::channel_affine(dy, {}, {.ka = detail::host_values(gamma_.value)}, v);
}

nlohmann::json LayerScale::config() const {
  return {{"init_values", init_values_}, {"projection_dim", projection_dim_}};
}

// ---------------------------------------------------------------- ChannelsLastImage

ChannelsLastImage::ChannelsLastImage(std::unique_ptr<Layer> inner) : inner_(std::move(inner)) {
  MIRROR_CHECK(inner_ != nullptr && dynamic_cast<MergeLayer*>(inner_.get()) == nullptr,
               InvalidArgument, "ChannelsLastImage wraps one single-input layer");
}

Shape ChannelsLastImage::build(const Shape& input_shape, DType dtype, Device device, InitRng& rng) {
  detail::require(
      *this, input_shape.size() == 3,
      "applies to an image's channels: expects [C, H, W], got " + shape_str(input_shape));
  input_shape_ = input_shape;
  inner_->set_name(name());  // Note [Keras layers on image channels]
  const std::int64_t h = input_shape[1], w = input_shape[2];
  const Shape out = inner_->build({h * w, input_shape[0]}, dtype, device, rng);
  detail::require(
      *this, out.size() == 2 && out[0] == h * w,
      "the wrapped layer turns [H*W, C] into " + shape_str(out) + ", not one vector per pixel");
  output_shape_ = {out[1], h, w};
  return output_shape_;
}

Tensor ChannelsLastImage::forward(const Tensor& x, ForwardContext& ctx) {
  detail::require(*this, !output_shape_.empty(), "not built");
  detail::check_input(*this, x, input_shape_, x.dtype());
  const std::int64_t n = x.dim(0), hw = input_shape_[1] * input_shape_[2];
  ForwardContext inner = ctx;
  inner.lengths.clear();  // pixels are no sequence: nothing is padding
  const Tensor pixels = detail::permute_samples(x, {1, 2, 0}).reshape({n, hw, input_shape_[0]});
  const Tensor y = inner_->forward(pixels, inner);
  return detail::permute_samples(y.reshape({n, input_shape_[1], input_shape_[2], output_shape_[0]}),
                                 {2, 0, 1});
}

Tensor ChannelsLastImage::backward(const Tensor& dy) {
  detail::require(*this, !output_shape_.empty(), "not built");
  const std::int64_t n = dy.dim(0), hw = input_shape_[1] * input_shape_[2];
  inner_->set_input_grad_needed(input_grad_needed());
  const Tensor dx =
      inner_->backward(detail::permute_samples(dy, {1, 2, 0}).reshape({n, hw, output_shape_[0]}));
  if (!dx.defined()) return dx;
  return detail::permute_samples(dx.reshape({n, input_shape_[1], input_shape_[2], input_shape_[0]}),
                                 {2, 0, 1});
}

nlohmann::json ChannelsLastImage::config() const {
  nlohmann::json j = inner_->config();
  j["channels_last_image"] = true;
  return j;
}

}  // namespace mirror::nn
