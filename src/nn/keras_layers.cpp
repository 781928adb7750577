// SpatialDropout1D/2D, Conv2DTranspose and the element-wise merges Multiply, Subtract and Average
// (nn/keras_layers.h), built from ops (dropout, conv2d_*, multiply, axpy).
#include <algorithm>
#include <cmath>

#include "mirror/nn/init.h"
#include "mirror/nn/keras_layers.h"

namespace mirror::nn {

// ---------------------------------------------------------------- SpatialDropout

SpatialDropout::SpatialDropout(double rate, int rank) : rate_(rate), rank_(rank) {
  MIRROR_CHECK(rate >= 0 && rate < 1 && (rank == 2 || rank == 3), InvalidArgument,
               "SpatialDropout: rate must be in [0, 1), got " + std::to_string(rate));
}

Shape SpatialDropout::build(const Shape& input_shape, DType dtype, Device, InitRng&) {
  detail::require(*this, static_cast<int>(input_shape.size()) == rank_,
                  rank_ == 2 ? "expects sequences [T, F], got " + shape_str(input_shape)
                             : "expects images [C, H, W], got " + shape_str(input_shape));
  input_shape_ = input_shape;
  dtype_ = dtype;
  return input_shape;
}

Tensor SpatialDropout::spread(const Tensor& mask, const Shape& shape) const {
  // The channel is F (the last axis) of [N, T, F] and C (the first sample axis) of [N, C, H, W].
  const std::int64_t n = shape[0];
  const std::int64_t steps = rank_ == 2 ? shape[1] : 1;
  const std::int64_t channels = rank_ == 2 ? shape[2] : shape[1];
  const std::int64_t pixels = rank_ == 2 ? 1 : shape[2] * shape[3];
  Tensor out = Tensor::empty(shape, mask.dtype(), mask.device());
  ops::BlockCopy b;
  b.dims[0] = n;
  b.dims[1] = steps;
  b.dims[2] = channels;
  b.dims[3] = pixels;
  b.dst_strides[0] = steps * channels * pixels;
  b.dst_strides[1] = channels * pixels;
  b.dst_strides[2] = pixels;
  b.dst_strides[3] = 1;
  b.src_strides[0] = channels;
  b.src_strides[2] = 1;  // steps and pixels share their channel's decision
  ops::copy_block(out, mask, b);
  return out;
}

Tensor SpatialDropout::forward(const Tensor& x, ForwardContext& ctx) {
  detail::check_input(*this, x, input_shape_, dtype_);
  mask_ = Tensor();
  if (!ctx.training || rate_ == 0.0) return x;
  MIRROR_CHECK(ctx.sample_ids.defined(), InvalidArgument,
               name() + " (" + kind() + "): training needs ForwardContext::sample_ids");
  // Dropout's keep decisions for [N, C] ones are the channel mask (0 or 1 / (1 - rate)).
  const std::int64_t channels = rank_ == 2 ? input_shape_[1] : input_shape_[0];
  Tensor ones = Tensor::empty({x.dim(0), channels}, dtype_, x.device());
  ops::fill(ones, 1.0);
  Dropout seeds(rate_);
  seeds.set_name(name());
  Tensor unused;
  const Tensor per_channel = ops::dropout_forward(
      ones, static_cast<float>(rate_), seeds.layer_seed(ctx.seed), ctx.sample_ids, unused);
  mask_ = spread(per_channel, x.shape());
  return ops::multiply(x, mask_);
}

Tensor SpatialDropout::backward(const Tensor& dy) {
  if (!mask_.defined()) return dy;
  return ops::multiply(dy, mask_);
}

// ---------------------------------------------------------------- Conv2DTranspose

Conv2DTranspose::Conv2DTranspose(int filters, int kernel_h, int kernel_w, int stride,
                                 Padding padding, Activation act, bool use_bias)
    : filters_(filters),
      kernel_h_(kernel_h),
      kernel_w_(kernel_w),
      stride_(stride),
      padding_(padding),
      act_(act),
      use_bias_(use_bias) {
  MIRROR_CHECK(filters > 0 && kernel_h > 0 && kernel_w > 0 && stride > 0, InvalidArgument,
               "Conv2DTranspose: filters, kernel and stride must be positive");
}

Shape Conv2DTranspose::build(const Shape& input_shape, DType dtype, Device device, InitRng& rng) {
  detail::require(*this, input_shape.size() == 3,
                  "expects an image input [C, H, W], got " + shape_str(input_shape));
  input_shape_ = input_shape;
  dtype_ = dtype;
  const std::int64_t c = input_shape[0], h = input_shape[1], w = input_shape[2];
  // Keras's output sizes (deconv_output_length without output_padding).
  const bool same = padding_ == Padding::kSame;
  const std::int64_t oh = h * stride_ + (same ? 0 : std::max(kernel_h_ - stride_, 0));
  const std::int64_t ow = w * stride_ + (same ? 0 : std::max(kernel_w_ - stride_, 0));
  // The Conv2D whose adjoint this is reads the output and gives the input's size.
  geometry_ = same ? ops::Conv2DGeometry::same(static_cast<int>(oh), static_cast<int>(ow),
                                               kernel_h_, kernel_w_, stride_, stride_)
                   : ops::Conv2DGeometry::valid(stride_, stride_);
  detail::require(*this,
                  geometry_.out_h(static_cast<int>(oh), kernel_h_) == h &&
                      geometry_.out_w(static_cast<int>(ow), kernel_w_) == w,
                  "no convolution geometry maps " + std::to_string(oh) + "x" + std::to_string(ow) +
                      " back to the input " + shape_str(input_shape));
  const std::int64_t area = std::int64_t{kernel_h_} * kernel_w_;
  kernel_ =
      detail::make_parameter(*this, "kernel",
                             init::kernel(*this, "kernel", {c, filters_, kernel_h_, kernel_w_},
                                          filters_ * area, c * area, dtype, device, rng));
  if (use_bias_) {
    bias_ = detail::make_parameter(*this, "bias",
                                   init::bias(*this, "bias", {filters_}, dtype, device, rng));
  }
  output_shape_ = {filters_, oh, ow};
  return output_shape_;
}

std::vector<Parameter*> Conv2DTranspose::parameters() {
  if (use_bias_) return {&kernel_, &bias_};
  return {&kernel_};
}

Tensor Conv2DTranspose::forward(const Tensor& x, ForwardContext&) {
  detail::require(*this, kernel_.value.defined(), "used before build()");
  detail::check_input(*this, x, input_shape_, dtype_);
  x_ = x;
  Tensor y = ops::conv2d_backward_data(
      x, kernel_.value, {x.dim(0), output_shape_[0], output_shape_[1], output_shape_[2]},
      geometry_);
  if (use_bias_) ops::bias_add(y, bias_.value);
  y_ = act_ == Activation::kIdentity ? y : ops::activation_forward(act_, y);
  return y_;
}

Tensor Conv2DTranspose::backward(const Tensor& dy) {
  detail::require(*this, x_.defined(), "backward without forward");
  const Tensor g = act_ == Activation::kIdentity ? dy : ops::activation_backward(act_, y_, dy);
  if (use_bias_) ops::bias_grad(g, bias_.grad);
  // The adjoint's weight gradient is the Conv2D's, with the roles of input and output swapped.
  Tensor no_bias;
  ops::conv2d_backward_weights(g, x_, kernel_.grad, no_bias, geometry_);
  if (!input_grad_needed()) return {};
  return ops::conv2d_forward(g, kernel_.value, Tensor(), geometry_);
}

nlohmann::json Conv2DTranspose::config() const {
  return {{"filters", filters_},
          {"kernel_size", {kernel_h_, kernel_w_}},
          {"strides", stride_},
          {"padding", padding_name(padding_)},
          {"activation", activation_name(act_)},
          {"use_bias", use_bias_}};
}

// ---------------------------------------------------------------- Multiply, Subtract, Average

void detail::require_one_shape(const Layer& layer, const std::vector<Shape>& shapes,
                               const std::vector<std::string>& names) {
  for (std::size_t i = 1; i < shapes.size(); ++i) {
    require(layer, shapes[i] == shapes[0],
            "inputs must have one shape, but input '" + names[0] + "' is " + shape_str(shapes[0]) +
                " and input '" + names[i] + "' is " + shape_str(shapes[i]) + " (per sample)");
  }
}

Shape detail::broadcast_shape(const Layer& layer, const std::vector<Shape>& shapes,
                              const std::vector<std::string>& names) {
  Shape out = shapes[0];
  for (std::size_t i = 1; i < shapes.size(); ++i) {
    bool ok = shapes[i].size() == out.size();
    for (std::size_t d = 0; ok && d < out.size(); ++d) {
      const std::int64_t a = out[d], b = shapes[i][d];
      ok = a == b || a == 1 || b == 1;
      if (ok) out[d] = std::max(a, b);
    }
    std::string all;
    for (std::size_t k = 0; k < shapes.size() && !ok; ++k) {
      all += (k ? ", input '" : "input '") + names[k] + "' " + shape_str(shapes[k]);
    }
    require(layer, ok,
            "inputs must have one rank and, in each dimension, one size or 1 (broadcast), but " +
                all + " (per sample, NCHW for images)");
  }
  return out;
}

namespace {

/// Row-major strides of `shape`.
std::vector<std::int64_t> strides_of(const Shape& shape) {
  std::vector<std::int64_t> s(shape.size(), 1);
  for (std::size_t i = shape.size(); i-- > 1;) s[i - 1] = s[i] * shape[i];
  return s;
}

}  // namespace

Tensor detail::broadcast_to(const Tensor& x, const Shape& shape) {
  if (x.shape() == shape) return x;
  MIRROR_CHECK(
      static_cast<std::size_t>(x.rank()) == shape.size() && shape.size() <= 4, InvalidArgument,
      "broadcast_to: " + x.str() + " to " + shape_str(shape) + " (one rank, at most 4 dimensions)");
  const std::vector<std::int64_t> src = strides_of(x.shape()), dst = strides_of(shape);
  Tensor out = Tensor::empty(shape, x.dtype(), x.device());
  ops::BlockCopy b;
  const std::size_t skip = 4 - shape.size();  // leading dimensions of size 1
  for (std::size_t d = 0; d < shape.size(); ++d) {
    MIRROR_CHECK(x.dim(static_cast<int>(d)) == shape[d] || x.dim(static_cast<int>(d)) == 1,
                 InvalidArgument, "broadcast_to: " + x.str() + " to " + shape_str(shape));
    b.dims[skip + d] = shape[d];
    b.dst_strides[skip + d] = dst[d];
    b.src_strides[skip + d] = x.dim(static_cast<int>(d)) == shape[d] ? src[d] : 0;
  }
  ops::copy_block(out, x, b);
  return out;
}

Tensor detail::reduce_to(const Tensor& g, const Shape& shape) {
  if (g.shape() == shape) return g;
  MIRROR_CHECK(
      static_cast<std::size_t>(g.rank()) == shape.size() && shape.size() <= 4, InvalidArgument,
      "reduce_to: " + g.str() + " to " + shape_str(shape) + " (one rank, at most 4 dimensions)");
  // The kept dimensions, then the summed ones: [kept, summed] row-major, a copy unless the summed
  // dimensions are the last ones already.
  std::vector<std::size_t> kept, summed;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    const std::int64_t n = g.dim(static_cast<int>(d));
    MIRROR_CHECK(shape[d] == n || shape[d] == 1, InvalidArgument,
                 "reduce_to: " + g.str() + " to " + shape_str(shape));
    if (n == 1) continue;  // either list: it moves nothing
    (shape[d] == n ? kept : summed).push_back(d);
  }
  std::int64_t rows = 1, cols = 1;
  for (std::size_t d : kept) rows *= g.dim(static_cast<int>(d));
  for (std::size_t d : summed) cols *= g.dim(static_cast<int>(d));
  Tensor m = g;
  if (!kept.empty() && !summed.empty() && kept.back() > summed.front()) {
    std::vector<std::size_t> order = kept;
    order.insert(order.end(), summed.begin(), summed.end());
    Shape permuted;
    for (std::size_t d : order) permuted.push_back(g.dim(static_cast<int>(d)));
    const std::vector<std::int64_t> src = strides_of(g.shape()), dst = strides_of(permuted);
    m = Tensor::empty(permuted, g.dtype(), g.device());
    ops::BlockCopy b;
    const std::size_t skip = 4 - order.size();
    for (std::size_t i = 0; i < order.size(); ++i) {
      b.dims[skip + i] = permuted[i];
      b.dst_strides[skip + i] = dst[i];
      b.src_strides[skip + i] = src[order[i]];
    }
    ops::copy_block(m, g, b);
  }
  // Each row's sum: the mean of a 1 x cols window (summed in double on the CPU), times cols.
  ops::Pool2DGeometry whole;
  whole.k_h = whole.stride_h = 1;
  whole.k_w = whole.stride_w = static_cast<int>(cols);
  Tensor sums = ops::avgpool2d_forward(m.reshape({rows, 1, 1, cols}), whole);
  ops::scale(sums, static_cast<double>(cols));
  return sums.reshape(shape);
}

ElementwiseMerge::ElementwiseMerge(Op op) : op_(op) {}

std::string ElementwiseMerge::kind() const {
  switch (op_) {
    case Op::kMultiply:
      return "multiply";
    case Op::kSubtract:
      return "subtract";
    case Op::kAverage:
      return "average";
  }
  return "?";
}

Shape ElementwiseMerge::build_inputs(const std::vector<Shape>& shapes,
                                     const std::vector<std::string>& names, DType, Device) {
  detail::require(*this, op_ != Op::kSubtract || shapes.size() == 2,
                  "subtracts exactly two inputs, got " + std::to_string(shapes.size()));
  output_shape_ = detail::broadcast_shape(*this, shapes, names);
  shapes_ = shapes;
  count_ = shapes.size();
  return output_shape_;
}

Tensor ElementwiseMerge::forward_inputs(const std::vector<Tensor>& given, ForwardContext&) {
  detail::require(
      *this, given.size() == count_ && count_ >= 2,
      "expected " + std::to_string(count_) + " inputs, got " + std::to_string(given.size()));
  std::vector<Tensor> xs = given;
  Shape out = {given[0].dim(0)};
  out.insert(out.end(), output_shape_.begin(), output_shape_.end());
  for (Tensor& x : xs) x = detail::broadcast_to(x, out);
  if (op_ == Op::kMultiply) {
    xs_ = xs;
    Tensor y = ops::multiply(xs[0], xs[1]);
    for (std::size_t i = 2; i < xs.size(); ++i) y = ops::multiply(y, xs[i]);
    return y;
  }
  Tensor y = xs[0].clone();
  for (std::size_t i = 1; i < xs.size(); ++i)
    ops::axpy(op_ == Op::kSubtract ? -1.0 : 1.0, xs[i], y);
  if (op_ == Op::kAverage) ops::scale(y, 1.0 / static_cast<double>(xs.size()));
  return y;
}

std::vector<Tensor> ElementwiseMerge::backward_inputs(const Tensor& dy) {
  std::vector<Tensor> grads;
  if (op_ == Op::kAverage) {
    Tensor g = dy.clone();
    ops::scale(g, 1.0 / static_cast<double>(count_));
    grads.assign(count_, g);
  } else if (op_ == Op::kSubtract) {
    Tensor minus = dy.clone();
    ops::scale(minus, -1.0);
    grads = {dy, minus};
  } else {
    // d(prod)/d(x_i) = dy * the product of the other inputs.
    for (std::size_t i = 0; i < count_; ++i) {
      Tensor g = dy;
      for (std::size_t j = 0; j < count_; ++j) {
        if (j != i) g = ops::multiply(g, xs_[j]);
      }
      grads.push_back(g);
    }
  }
  // A broadcast input's gradient: summed over the axes it was repeated along.
  for (std::size_t i = 0; i < count_; ++i) {
    Shape in = {dy.dim(0)};
    in.insert(in.end(), shapes_[i].begin(), shapes_[i].end());
    grads[i] = detail::reduce_to(grads[i], in);
  }
  return grads;
}

}  // namespace mirror::nn
