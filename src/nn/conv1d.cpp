// Conv1D, Pool1D and GlobalPool1D: built from ops only (im2col1d + gemm, pool1d_*,
// zero_past_lengths), so they run on every backend. Lengths: see include/mirror/nn/conv1d.h.
#include "mirror/nn/conv1d.h"

#include <algorithm>
#include <string>

#include "mirror/nn/init.h"

namespace mirror::nn {

int window_output_length(const std::string& padding, int length, int k, int stride, int dilation) {
  const ops::Window1D alone = ops::Window1D::make(padding, length, k, stride, dilation);
  return std::max(1, alone.out(length));
}

namespace {

void check_padding(const std::string& padding, bool causal_ok, const std::string& who) {
  MIRROR_CHECK(padding == "valid" || padding == "same" || (causal_ok && padding == "causal"),
               InvalidArgument,
               who + ": padding must be valid" +
                   std::string(causal_ok ? ", same or causal" : " or same") + ", got '" + padding +
                   "'");
}

/// [T, C] at build: the layers read sequences.
void check_sequences(const Layer& l, const Shape& input_shape) {
  MIRROR_CHECK(input_shape.size() == 2 && input_shape[1] > 0, InvalidArgument,
               l.name() + " (" + l.kind() +
                   "): expects sequences [T, C] (e.g. after an Embedding), got " +
                   shape_str(input_shape));
}

/// The window for x's steps, with a message naming the layer when it does not fit.
ops::Window1D window_for(const Layer& l, const std::string& padding, std::int64_t steps, int k,
                         int stride, int dilation) {
  const ops::Window1D g =
      ops::Window1D::make(padding, static_cast<int>(steps), k, stride, dilation);
  MIRROR_CHECK(steps > 0 && g.out(static_cast<int>(steps)) >= 1, InvalidArgument,
               l.name() + " (" + l.kind() + "): a window of " + std::to_string(g.span()) +
                   " steps does not fit " + std::to_string(steps) + " steps with " + padding +
                   " padding; use shorter windows or same padding");
  return g;
}

/// The batch's lengths, or all T when it has none.
std::vector<std::int32_t> lengths_or_full(const ForwardContext& ctx, const Tensor& x) {
  if (!ctx.lengths.empty()) return ctx.lengths;
  return std::vector<std::int32_t>(static_cast<std::size_t>(x.dim(0)),
                                   static_cast<std::int32_t>(x.dim(1)));
}

/// Output lengths for the batch's lengths (empty when the batch has none).
std::vector<std::int32_t> output_lengths(const std::vector<std::int32_t>& lengths,
                                         const std::string& padding, int k, int stride,
                                         int dilation) {
  std::vector<std::int32_t> out;
  out.reserve(lengths.size());
  for (std::int32_t len : lengths) {
    out.push_back(window_output_length(padding, len, k, stride, dilation));
  }
  return out;
}

void check_dy(const Layer& l, const Tensor& dy, const Shape& want) {
  MIRROR_CHECK(dy.defined() && dy.shape() == want, InvalidArgument,
               l.name() + " (" + l.kind() + ") backward: expected dy " + shape_str(want) +
                   ", got " + (dy.defined() ? dy.str() : std::string("an undefined tensor")));
}

}  // namespace

// ---------------------------------------------------------------- Conv1D

Conv1D::Conv1D(int filters, int kernel, int stride, std::string padding, int dilation,
               Activation act)
    : filters_(filters),
      kernel_(kernel),
      stride_(stride),
      padding_(std::move(padding)),
      dilation_(dilation),
      act_(act) {
  MIRROR_CHECK(filters > 0 && kernel > 0 && stride > 0 && dilation > 0, InvalidArgument,
               "Conv1D: filters, kernel, stride and dilation must be positive, got " +
                   std::to_string(filters) + ", " + std::to_string(kernel) + ", " +
                   std::to_string(stride) + ", " + std::to_string(dilation));
  check_padding(padding_, true, "Conv1D");
  MIRROR_CHECK(stride == 1 || dilation == 1, InvalidArgument,
               "Conv1D: strides > 1 with dilation_rate > 1 is not supported (Keras rejects it "
               "too); got stride " +
                   std::to_string(stride) + ", dilation " + std::to_string(dilation));
}

Shape Conv1D::build(const Shape& input_shape, DType dtype, Device device, InitRng& rng) {
  check_sequences(*this, input_shape);
  channels_ = input_shape[1];
  dtype_ = dtype;
  const ops::Window1D g = window_for(*this, padding_, input_shape[0], kernel_, stride_, dilation_);
  const std::int64_t k = kernel_, c = channels_;
  kernel_param_ = detail::make_parameter(
      *this, "kernel",
      init::kernel(*this, "kernel", {filters_, k, c}, k * c, k * filters_, dtype, device, rng));
  bias_ = detail::make_parameter(*this, "bias",
                                 init::bias(*this, "bias", {filters_}, dtype, device, rng));
  return {g.out(static_cast<int>(input_shape[0])), filters_};
}

Tensor Conv1D::forward(const Tensor& x, ForwardContext& ctx) {
  MIRROR_CHECK(kernel_param_.value.defined(), InvalidArgument,
               name() + " (conv1d): used before build(); add it to a Sequential and build it");
  detail::check_input(*this, x, {-1, channels_}, dtype_);
  const std::int64_t n = x.dim(0);
  steps_ = x.dim(1);
  window_ = window_for(*this, padding_, steps_, kernel_, stride_, dilation_);
  const std::int64_t t_out = window_.out(static_cast<int>(steps_)), kc = kernel_ * channels_;
  cols_ = ops::im2col1d(x, window_).reshape({n * t_out, kc});
  Tensor y = Tensor::empty({n * t_out, filters_}, dtype_, x.device());
  ops::gemm(false, true, 1.0, cols_, kernel_param_.value.reshape({filters_, kc}), 0.0, y);
  ops::bias_add(y, bias_.value);
  if (act_ != Activation::kIdentity) y = ops::activation_forward(act_, y);
  y_ = y.reshape({n, t_out, filters_});
  // Note [Sequence masks]: Keras's Conv1D reads every step and ends the mask.
  if (ctx.keras_masks) ctx.lengths.clear();
  out_lengths_ = output_lengths(ctx.lengths, padding_, kernel_, stride_, dilation_);
  if (!ctx.training) cols_ = Tensor();
  if (out_lengths_.empty()) return y_;
  ctx.lengths = out_lengths_;
  return ops::zero_past_lengths(y_, out_lengths_);
}

Tensor Conv1D::backward(const Tensor& dy) {
  MIRROR_CHECK(cols_.defined(), InvalidArgument,
               name() + " (conv1d): backward needs a preceding forward with ctx.training = true");
  check_dy(*this, dy, y_.shape());
  // The outputs past each length were set to 0: no gradient flows through them.
  const Tensor masked = out_lengths_.empty() ? dy : ops::zero_past_lengths(dy, out_lengths_);
  const Tensor g =
      act_ == Activation::kIdentity ? masked : ops::activation_backward(act_, y_, masked);
  const std::int64_t rows = cols_.dim(0), kc = cols_.dim(1);
  const Tensor g2 = g.reshape({rows, filters_});
  ops::bias_grad(g2, bias_.grad);
  Tensor dw = kernel_param_.grad.reshape({filters_, kc});
  ops::gemm(true, false, 1.0, g2, cols_, 1.0, dw);
  Tensor dx;
  if (input_grad_needed()) {
    Tensor dcols = Tensor::empty({rows, kc}, dtype_, dy.device());
    ops::gemm(false, false, 1.0, g2, kernel_param_.value.reshape({filters_, kc}), 0.0, dcols);
    dx = ops::col2im1d(dcols.reshape({dy.dim(0), dy.dim(1), kc}), window_, steps_);
  }
  cols_ = Tensor();
  return dx;
}

nlohmann::json Conv1D::config() const {
  return {{"filters", filters_},        {"kernel_size", kernel_},
          {"strides", stride_},         {"padding", padding_},
          {"dilation_rate", dilation_}, {"activation", activation_name(act_)}};
}

// ---------------------------------------------------------------- Pool1D

Pool1D::Pool1D(ops::Pool1D mode, int pool, int stride, std::string padding)
    : mode_(mode), pool_(pool), stride_(stride == 0 ? pool : stride), padding_(std::move(padding)) {
  MIRROR_CHECK(pool > 0 && stride_ > 0, InvalidArgument,
               "Pool1D: pool and stride must be positive, got " + std::to_string(pool) + ", " +
                   std::to_string(stride));
  check_padding(padding_, false, "Pool1D");
}

Shape Pool1D::build(const Shape& input_shape, DType, Device, InitRng&) {
  check_sequences(*this, input_shape);
  channels_ = input_shape[1];
  const ops::Window1D g = window_for(*this, padding_, input_shape[0], pool_, stride_, 1);
  return {g.out(static_cast<int>(input_shape[0])), channels_};
}

Tensor Pool1D::forward(const Tensor& x, ForwardContext& ctx) {
  MIRROR_CHECK(channels_ > 0, InvalidArgument, name() + " (" + kind() + "): used before build()");
  MIRROR_CHECK(x.defined() && x.rank() == 3 && x.dim(2) == channels_, InvalidArgument,
               name() + " (" + kind() + "): expected input [N, T, " + std::to_string(channels_) +
                   "], got " + (x.defined() ? x.str() : std::string("nothing")));
  window_ = window_for(*this, padding_, x.dim(1), pool_, stride_, 1);
  // Note [Sequence masks]: Keras's 1-D pools read every step and end the mask.
  if (ctx.keras_masks) ctx.lengths.clear();
  lengths_ = lengths_or_full(ctx, x);
  const Tensor y = ops::pool1d_forward(mode_, x, lengths_, window_);
  x_ = ctx.training ? x : Tensor();
  out_lengths_ = output_lengths(ctx.lengths, padding_, pool_, stride_, 1);
  if (out_lengths_.empty()) return y;
  ctx.lengths = out_lengths_;
  return ops::zero_past_lengths(y, out_lengths_);
}

Tensor Pool1D::backward(const Tensor& dy) {
  MIRROR_CHECK(x_.defined(), InvalidArgument,
               name() + " (" + kind() + "): backward needs a preceding training forward");
  check_dy(*this, dy, {x_.dim(0), window_.out(static_cast<int>(x_.dim(1))), channels_});
  const Tensor masked = out_lengths_.empty() ? dy : ops::zero_past_lengths(dy, out_lengths_);
  Tensor dx = ops::pool1d_backward(mode_, x_, masked, lengths_, window_);
  x_ = Tensor();
  return dx;
}

nlohmann::json Pool1D::config() const {
  return {{"pool_size", pool_}, {"strides", stride_}, {"padding", padding_}};
}

// ---------------------------------------------------------------- GlobalPool1D

Shape GlobalPool1D::build(const Shape& input_shape, DType, Device, InitRng&) {
  check_sequences(*this, input_shape);
  channels_ = input_shape[1];
  return {channels_};
}

Tensor GlobalPool1D::forward(const Tensor& x, ForwardContext& ctx) {
  MIRROR_CHECK(channels_ > 0, InvalidArgument, name() + " (" + kind() + "): used before build()");
  MIRROR_CHECK(
      x.defined() && x.rank() == 3 && x.dim(2) == channels_ && x.dim(1) > 0, InvalidArgument,
      name() + " (" + kind() + "): expected input [N, T >= 1, " + std::to_string(channels_) +
          "], got " + (x.defined() ? x.str() : std::string("nothing")));
  const int t = static_cast<int>(x.dim(1));
  window_ = ops::Window1D{t, t, 1, 0, 0};  // one window over all steps
  // Note [Sequence masks]: Keras's GlobalAveragePooling1D averages the unmasked steps, as Mirror
  // does; its GlobalMaxPooling1D ignores the mask.
  if (ctx.keras_masks && mode_ == ops::Pool1D::kMax) ctx.lengths.clear();
  lengths_ = lengths_or_full(ctx, x);
  const Tensor y = ops::pool1d_forward(mode_, x, lengths_, window_);
  x_ = ctx.training ? x : Tensor();
  ctx.lengths.clear();  // no time axis any more
  return y.reshape({x.dim(0), channels_});
}

Tensor GlobalPool1D::backward(const Tensor& dy) {
  MIRROR_CHECK(x_.defined(), InvalidArgument,
               name() + " (" + kind() + "): backward needs a preceding training forward");
  check_dy(*this, dy, {x_.dim(0), channels_});
  Tensor dx =
      ops::pool1d_backward(mode_, x_, dy.reshape({x_.dim(0), 1, channels_}), lengths_, window_);
  x_ = Tensor();
  return dx;
}

nlohmann::json GlobalPool1D::config() const { return {{"keepdims", false}}; }

}  // namespace mirror::nn
