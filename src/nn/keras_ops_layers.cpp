// ParametricActivation, ActivatedLayer, Extremum (Maximum, Minimum), DepthwiseConv2D and
// SeparableConv2D (nn/keras_ops_layers.h).
#include "mirror/nn/keras_ops_layers.h"

#include "mirror/nn/init.h"
#include "mirror/nn/keras_layers.h"

namespace mirror::nn {

// ---------------------------------------------------------------- input activations

std::optional<ops::Eltwise> input_activation(const std::string& name) {
  using Kind = ops::Eltwise::Kind;
  ops::Eltwise f;
  if (name == "silu" || name == "swish") {
    f.kind = Kind::kSilu;
  } else if (name == "hard_sigmoid") {
    f.kind = Kind::kHardSigmoid;
  } else if (name == "hard_silu" || name == "hard_swish") {
    f.kind = Kind::kHardSilu;
  } else if (name == "gelu") {
    f.kind = Kind::kGelu;
  } else if (name == "gelu_tanh") {
    f.kind = Kind::kGeluTanh;
  } else if (name == "relu6") {
    f.max_value = 6;  // Kind::kRelu
  } else if (name == "elu") {
    f.kind = Kind::kElu;
  } else if (name == "leaky_relu") {
    f.kind = Kind::kLeakyRelu;
    f.negative_slope = 0.2;  // keras.activations.leaky_relu's default
  } else {
    return std::nullopt;
  }
  return f;
}

std::string input_activation_name(const ops::Eltwise& f) {
  switch (f.kind) {
    case ops::Eltwise::Kind::kRelu:
      return f.max_value == 6 && f.negative_slope == 0 && f.threshold == 0 ? "relu6" : "relu";
    case ops::Eltwise::Kind::kLeakyRelu:
      return "leaky_relu";
    case ops::Eltwise::Kind::kElu:
      return "elu";
    case ops::Eltwise::Kind::kSilu:
      return "silu";
    case ops::Eltwise::Kind::kHardSigmoid:
      return "hard_sigmoid";
    case ops::Eltwise::Kind::kHardSilu:
      return "hard_silu";
    case ops::Eltwise::Kind::kGelu:
      return "gelu";
    case ops::Eltwise::Kind::kGeluTanh:
      return "gelu_tanh";
  }
  return "?";
}

namespace {

/// Note [Sequence masks]: with Mirror's own masks a function that is not 0 at 0 keeps a
/// sequence's output zero past its length (the lengths to zero after, or none).
std::vector<std::int32_t> zeroed_lengths(const ops::Eltwise& f, const Tensor& x,
                                         const ForwardContext& ctx) {
  const bool nonzero_at_zero = f.kind == ops::Eltwise::Kind::kHardSigmoid;
  if (!nonzero_at_zero || x.rank() != 3 || ctx.lengths.empty() || ctx.keras_masks) return {};
  return ctx.lengths;
}

}  // namespace

// ---------------------------------------------------------------- ParametricActivation

ParametricActivation::ParametricActivation(ops::Eltwise f) : f_(f) {}

std::string ParametricActivation::kind() const {
  switch (f_.kind) {
    case ops::Eltwise::Kind::kRelu:
      return "relu";
    case ops::Eltwise::Kind::kLeakyRelu:
      return "leaky_relu";
    case ops::Eltwise::Kind::kElu:
      return "elu";
    default:
      return "activation";
  }
}

Shape ParametricActivation::build(const Shape& input_shape, DType dtype, Device, InitRng&) {
  input_shape_ = input_shape;
  dtype_ = dtype;
  return input_shape;
}

Tensor ParametricActivation::forward(const Tensor& x, ForwardContext& ctx) {
  detail::check_input(*this, x, detail::any_steps(input_shape_), dtype_);
  x_ = x;
  lengths_ = zeroed_lengths(f_, x, ctx);
  const Tensor y = ops::eltwise_forward(f_, x);
  return lengths_.empty() ? y : ops::zero_past_lengths(y, lengths_);
}

Tensor ParametricActivation::backward(const Tensor& dy) {
  detail::require(*this, x_.defined(), "backward without forward");
  return ops::eltwise_backward(f_, x_,
                               lengths_.empty() ? dy : ops::zero_past_lengths(dy, lengths_));
}

nlohmann::json ParametricActivation::config() const {
  switch (f_.kind) {
    case ops::Eltwise::Kind::kRelu:
      return {{"max_value", f_.max_value < 0 ? nlohmann::json() : nlohmann::json(f_.max_value)},
              {"negative_slope", f_.negative_slope},
              {"threshold", f_.threshold}};
    case ops::Eltwise::Kind::kLeakyRelu:
      return {{"negative_slope", f_.negative_slope}};
    case ops::Eltwise::Kind::kElu:
      return {{"alpha", f_.alpha}};
    default:
      return {{"activation", input_activation_name(f_)}};
  }
}

// ---------------------------------------------------------------- ActivatedLayer

ActivatedLayer::ActivatedLayer(std::unique_ptr<Layer> inner, ops::Eltwise f)
    : inner_(std::move(inner)), f_(f) {
  MIRROR_CHECK(inner_ != nullptr && dynamic_cast<MergeLayer*>(inner_.get()) == nullptr,
               InvalidArgument, "ActivatedLayer: wraps one single-input layer");
}

void ActivatedLayer::pass_flags() {
  inner_->set_name(name());
  inner_->set_input_grad_needed(input_grad_needed());
  inner_->set_blocked_output_allowed(blocked_output_allowed());
}

Shape ActivatedLayer::build(const Shape& input_shape, DType dtype, Device device, InitRng& rng) {
  pass_flags();
  return inner_->build(input_shape, dtype, device, rng);
}

Tensor ActivatedLayer::forward(const Tensor& x, ForwardContext& ctx) {
  pass_flags();
  z_ = inner_->forward(x, ctx);
  lengths_ = zeroed_lengths(f_, z_, ctx);
  const Tensor y = ops::eltwise_forward(f_, z_);
  return lengths_.empty() ? y : ops::zero_past_lengths(y, lengths_);
}

Tensor ActivatedLayer::backward(const Tensor& dy) {
  detail::require(*this, z_.defined(), "backward without forward");
  pass_flags();
  const Tensor g = lengths_.empty() ? dy : ops::zero_past_lengths(dy, lengths_);
  return inner_->backward(ops::eltwise_backward(f_, z_, g));
}

nlohmann::json ActivatedLayer::config() const {
  nlohmann::json c = inner_->config();
  c["activation"] = input_activation_name(f_);
  return c;
}

// ---------------------------------------------------------------- Maximum, Minimum

Shape Extremum::build_inputs(const std::vector<Shape>& shapes,
                             const std::vector<std::string>& names, DType, Device) {
  detail::require_one_shape(*this, shapes, names);
  count_ = shapes.size();
  return shapes[0];
}

Tensor Extremum::forward_inputs(const std::vector<Tensor>& xs, ForwardContext&) {
  detail::require(
      *this, xs.size() == count_ && count_ >= 2,
      "expected " + std::to_string(count_) + " inputs, got " + std::to_string(xs.size()));
  // Folded left to right, as Keras does: y = f(f(x0, x1), x2) ...
  masks_.assign(count_ - 1, Tensor());
  Tensor y = xs[0];
  for (std::size_t i = 1; i < count_; ++i) y = ops::extremum(y, xs[i], minimum_, masks_[i - 1]);
  return y;
}

std::vector<Tensor> Extremum::backward_inputs(const Tensor& dy) {
  // Unfold: at step i the running result kept mask, x_i took the rest.
  std::vector<Tensor> grads(count_);
  Tensor g = dy;
  for (std::size_t i = count_ - 1; i >= 1; --i) {
    const Tensor kept = ops::multiply(g, masks_[i - 1]);
    Tensor taken = g.clone();
    ops::axpy(-1.0, kept, taken);
    grads[i] = taken;
    g = kept;
  }
  grads[0] = g;
  return grads;
}

// ---------------------------------------------------------------- DepthwiseConv2D, SeparableConv2D

DepthwiseConv2D::DepthwiseConv2D(int kernel_h, int kernel_w, int stride, Padding padding,
                                 int depth_multiplier, Activation act, bool use_bias, int pointwise)
    : kernel_h_(kernel_h),
      kernel_w_(kernel_w),
      stride_(stride),
      padding_(padding),
      multiplier_(depth_multiplier),
      act_(act),
      use_bias_(use_bias),
      pointwise_(pointwise) {
  MIRROR_CHECK(kernel_h > 0 && kernel_w > 0 && stride > 0 && depth_multiplier > 0 && pointwise >= 0,
               InvalidArgument,
               "DepthwiseConv2D: kernel, stride and depth_multiplier must be positive");
}

Shape DepthwiseConv2D::build(const Shape& input_shape, DType dtype, Device device, InitRng& rng) {
  detail::require(*this, input_shape.size() == 3,
                  "expects an image input [C, H, W], got " + shape_str(input_shape));
  input_shape_ = input_shape;
  dtype_ = dtype;
  const std::int64_t c = input_shape[0], mid = c * multiplier_;
  const int h = static_cast<int>(input_shape[1]), w = static_cast<int>(input_shape[2]);
  depthwise_ = padding_ == Padding::kSame
                   ? ops::Conv2DGeometry::same(h, w, kernel_h_, kernel_w_, stride_, stride_)
                   : ops::Conv2DGeometry::valid(stride_, stride_);
  depthwise_.groups = static_cast<int>(c);
  const int oh = depthwise_.out_h(h, kernel_h_), ow = depthwise_.out_w(w, kernel_w_);
  detail::require(*this, oh > 0 && ow > 0,
                  "a " + std::to_string(kernel_h_) + "x" + std::to_string(kernel_w_) +
                      " window does not fit the input " + shape_str(input_shape) +
                      " with valid padding");
  const std::int64_t area = std::int64_t{kernel_h_} * kernel_w_;
  kernel_ = detail::make_parameter(*this, pointwise_ > 0 ? "depthwise_kernel" : "kernel",
                                   init::kernel(*this, "depthwise", {mid, 1, kernel_h_, kernel_w_},
                                                c * area, multiplier_ * area, dtype, device, rng));
  const std::int64_t out = pointwise_ > 0 ? pointwise_ : mid;
  if (pointwise_ > 0) {
    pointwise_kernel_ = detail::make_parameter(
        *this, "pointwise_kernel",
        init::kernel(*this, "pointwise", {out, mid, 1, 1}, mid, out, dtype, device, rng));
    one_by_one_ = ops::Conv2DGeometry::valid(1, 1);
  }
  if (use_bias_) {
    bias_ =
        detail::make_parameter(*this, "bias", init::bias(*this, "bias", {out}, dtype, device, rng));
  }
  return {out, oh, ow};
}

std::vector<Parameter*> DepthwiseConv2D::parameters() {
  std::vector<Parameter*> out = {&kernel_};
  if (pointwise_ > 0) out.push_back(&pointwise_kernel_);
  if (use_bias_) out.push_back(&bias_);
  return out;
}

Tensor DepthwiseConv2D::forward(const Tensor& x, ForwardContext&) {
  detail::require(*this, kernel_.value.defined(), "used before build()");
  detail::check_input(*this, x, input_shape_, dtype_);
  x_ = x;
  const Tensor& bias = use_bias_ ? bias_.value : Tensor();
  Tensor y;
  if (pointwise_ > 0) {
    mid_ = ops::conv2d_forward(x, kernel_.value, Tensor(), depthwise_);
    y = ops::conv2d_forward(mid_, pointwise_kernel_.value, bias, one_by_one_);
  } else {
    y = ops::conv2d_forward(x, kernel_.value, bias, depthwise_);
  }
  y_ = act_ == Activation::kIdentity ? y : ops::activation_forward(act_, y);
  return y_;
}

Tensor DepthwiseConv2D::backward(const Tensor& dy) {
  detail::require(*this, x_.defined(), "backward without forward");
  const Tensor g = act_ == Activation::kIdentity ? dy : ops::activation_backward(act_, y_, dy);
  Tensor no_bias;
  Tensor& dbias = use_bias_ ? bias_.grad : no_bias;
  Tensor dmid = g;
  if (pointwise_ > 0) {
    ops::conv2d_backward_weights(mid_, g, pointwise_kernel_.grad, dbias, one_by_one_);
    dmid = ops::conv2d_backward_data(g, pointwise_kernel_.value, mid_.shape(), one_by_one_);
    ops::conv2d_backward_weights(x_, dmid, kernel_.grad, no_bias, depthwise_);
  } else {
    ops::conv2d_backward_weights(x_, g, kernel_.grad, dbias, depthwise_);
  }
  if (!input_grad_needed()) return {};
  return ops::conv2d_backward_data(dmid, kernel_.value, x_.shape(), depthwise_);
}

nlohmann::json DepthwiseConv2D::config() const {
  nlohmann::json j = {{"kernel_size", {kernel_h_, kernel_w_}}, {"strides", stride_},
                      {"padding", padding_name(padding_)},     {"depth_multiplier", multiplier_},
                      {"activation", activation_name(act_)},   {"use_bias", use_bias_}};
  if (pointwise_ > 0) j["filters"] = pointwise_;
  return j;
}

}  // namespace mirror::nn
