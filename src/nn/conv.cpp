// Conv2D and MaxPool2D: NCHW layers over ops::conv2d_* / ops::maxpool2d_*.
#include "mirror/nn/init.h"
#include "mirror/nn/layers.h"

namespace mirror::nn {
namespace {

void require_image(const Layer& layer, const Shape& input_shape) {
  MIRROR_CHECK(input_shape.size() == 3, InvalidArgument,
               layer.name() + " (" + layer.kind() + "): expects an image input [C, H, W], got " +
                   shape_str(input_shape));
}

}  // namespace

// ---------------------------------------------------------------- Conv2D

Conv2D::Conv2D(int filters, int kernel_h, int kernel_w, int stride, Padding padding, Activation act,
               bool use_bias, int groups)
    : filters_(filters),
      kernel_h_(kernel_h),
      kernel_w_(kernel_w),
      stride_(stride),
      padding_(padding),
      act_(act),
      use_bias_(use_bias),
      groups_(groups) {
  MIRROR_CHECK(filters > 0 && kernel_h > 0 && kernel_w > 0 && stride > 0, InvalidArgument,
               "Conv2D: filters, kernel size and stride must be positive, got filters " +
                   std::to_string(filters) + ", kernel " + std::to_string(kernel_h) + "x" +
                   std::to_string(kernel_w) + ", stride " + std::to_string(stride));
  MIRROR_CHECK(groups >= 1 && filters % groups == 0, InvalidArgument,
               "Conv2D: groups must be positive and divide filters " + std::to_string(filters) +
                   ", got " + std::to_string(groups));
}

Shape Conv2D::build(const Shape& input_shape, DType dtype, Device device, InitRng& rng) {
  require_image(*this, input_shape);
  input_shape_ = input_shape;
  dtype_ = dtype;
  const auto c = input_shape[0];
  MIRROR_CHECK(c % groups_ == 0, InvalidArgument,
               name() + " (conv2d): groups " + std::to_string(groups_) +
                   " does not divide the input's " + std::to_string(c) + " channels " +
                   shape_str(input_shape));
  const int h = static_cast<int>(input_shape[1]), w = static_cast<int>(input_shape[2]);
  geometry_ = padding_ == Padding::kSame
                  ? ops::Conv2DGeometry::same(h, w, kernel_h_, kernel_w_, stride_, stride_)
                  : ops::Conv2DGeometry::valid(stride_, stride_);
  geometry_.groups = groups_;
  const int oh = geometry_.out_h(h, kernel_h_), ow = geometry_.out_w(w, kernel_w_);
  MIRROR_CHECK(oh > 0 && ow > 0, InvalidArgument,
               name() + " (conv2d): kernel " + std::to_string(kernel_h_) + "x" +
                   std::to_string(kernel_w_) + " does not fit input " + shape_str(input_shape) +
                   " with " + padding_name(padding_) + " padding");
  const std::int64_t area = static_cast<std::int64_t>(kernel_h_) * kernel_w_;
  const std::int64_t cg = c / groups_;  // input channels per group; Keras's fans (HWIO kernel)
  kernel_ =
      detail::make_parameter(*this, "kernel",
                             init::kernel(*this, "kernel", {filters_, cg, kernel_h_, kernel_w_},
                                          cg * area, filters_ * area, dtype, device, rng));
  if (use_bias_) {
    bias_ = detail::make_parameter(*this, "bias",
                                   init::bias(*this, "bias", {filters_}, dtype, device, rng));
  }
  return {filters_, oh, ow};
}

Tensor Conv2D::forward(const Tensor& x, ForwardContext&) {
  MIRROR_CHECK(kernel_.value.defined(), InvalidArgument, name() + " (conv2d): used before build");
  detail::check_image_input(*this, x, input_shape_, dtype_);
  Tensor y =
      ops::conv2d_forward(x, kernel_.value, bias_.value, geometry_, act_, blocked_output_allowed());
  x_ = x;
  y_ = y;
  return y;
}

Tensor Conv2D::backward(const Tensor& dy) {
  MIRROR_CHECK(x_.defined(), InvalidArgument, name() + " (conv2d): backward without forward");
  // dy is laid out like y, or it is y's image as a bfloat16 operand (Note [Gradients as
  // convolution operands], mirror/ops.h).
  MIRROR_CHECK(
      dy.dtype() == y_.dtype() ? dy.shape() == y_.shape()
                               : ops::image_shape(dy) == ops::image_shape(y_),
      InvalidArgument,
      name() + " (conv2d): backward dy " + dy.str() + " does not match the output " + y_.str());
  // The max pool reading this output applied the ReLU's mask already (relu_masked_by_reader).
  const bool masked = act_ == Activation::kIdentity || relu_masked_by_reader();
  // Note [Convolution operands] (mirror/ops.h): g is rounded once for both products.
  // A grouped convolution takes plain float images only (no blocked operand).
  const Tensor d = masked ? dy : ops::activation_backward(act_, y_, dy);
  const Tensor g = groups_ == 1 ? ops::conv2d_operand(d) : d;
  ops::conv2d_backward_weights(x_, g, kernel_.grad, bias_.grad, geometry_);
  if (!input_grad_needed()) return {};
  return ops::conv2d_backward_data(g, kernel_.value, ops::image_shape(x_), geometry_,
                                   ops::image_block(x_));
}

std::vector<Parameter*> Conv2D::parameters() {
  if (!use_bias_) return {&kernel_};
  return {&kernel_, &bias_};
}

nlohmann::json Conv2D::config() const {
  nlohmann::json j = {{"filters", filters_},
                      {"kernel_size", {kernel_h_, kernel_w_}},
                      {"strides", stride_},
                      {"padding", padding_name(padding_)},
                      {"activation", activation_name(act_)}};
  // Written only when false, so the fingerprint of existing models is unchanged.
  if (!use_bias_) j["use_bias"] = false;
  if (groups_ != 1) j["groups"] = groups_;
  return j;
}

// ---------------------------------------------------------------- MaxPool2D

MaxPool2D::MaxPool2D(int pool, int stride, Padding padding)
    : pool_(pool), stride_(stride == 0 ? pool : stride), padding_(padding) {
  MIRROR_CHECK(pool > 0 && stride_ > 0, InvalidArgument,
               "MaxPool2D: pool and stride must be positive, got pool " + std::to_string(pool) +
                   ", stride " + std::to_string(stride));
}

Shape MaxPool2D::build(const Shape& input_shape, DType dtype, Device, InitRng&) {
  require_image(*this, input_shape);
  input_shape_ = input_shape;
  dtype_ = dtype;
  geometry_ = detail::pool_geometry(*this, input_shape, pool_, stride_, padding_);
  return {input_shape[0], geometry_.out_h(static_cast<int>(input_shape[1])),
          geometry_.out_w(static_cast<int>(input_shape[2]))};
}

Tensor MaxPool2D::forward(const Tensor& x, ForwardContext&) {
  MIRROR_CHECK(!input_shape_.empty(), InvalidArgument, name() + " (max_pooling2d): not built");
  detail::check_image_input(*this, x, input_shape_, dtype_);
  x_ = x;
  y_ = ops::maxpool2d_forward(x, geometry_, blocked_output_allowed());
  return y_;
}

Tensor MaxPool2D::backward(const Tensor& dy) {
  MIRROR_CHECK(x_.defined(), InvalidArgument,
               name() + " (max_pooling2d): backward without forward");
  check_shape(dy, y_.shape(), (name() + " backward dy").c_str());
  return ops::maxpool2d_backward(x_, y_, dy, geometry_, masks_input_relu(),
                                 input_grad_as_conv_operand());
}

nlohmann::json MaxPool2D::config() const {
  return {{"pool_size", pool_}, {"strides", stride_}, {"padding", padding_name(padding_)}};
}

}  // namespace mirror::nn
