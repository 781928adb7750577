// Reshape, Permute, RepeatVector, Cropping2D, UpSampling2D, GlobalMaxPooling2D and
// TimeDistributed (nn/keras_layers.h): data movement only, built on ops::copy_block and the
// pooling ops, so every backend runs them.
#include <numeric>

#include "mirror/nn/keras_layers.h"

namespace mirror::nn {

namespace detail {

void require(const Layer& layer, bool ok, const std::string& what) {
  MIRROR_CHECK(ok, InvalidArgument, layer.name() + " (" + layer.kind() + "): " + what);
}

Tensor permute_samples(const Tensor& x, const std::vector<int>& axes) {
  const std::size_t r = axes.size();
  MIRROR_CHECK(x.rank() == static_cast<int>(r) + 1 && r <= 3, InvalidArgument,
               "permute_samples: " + std::to_string(r) + " axes for " + x.str());
  Shape out = {x.dim(0)};
  for (int a : axes) out.push_back(x.dim(a + 1));
  Tensor y = Tensor::empty(out, x.dtype(), x.device());
  if (y.numel() == 0) return y;
  // Contiguous strides of x and y, batch axis first.
  std::vector<std::int64_t> in_strides(r + 1, 1), out_strides(r + 1, 1);
  for (std::size_t i = r; i-- > 0;) {
    in_strides[i] = in_strides[i + 1] * x.dim(static_cast<int>(i + 1));
    out_strides[i] = out_strides[i + 1] * out[i + 1];
  }
  // The r + 1 axes fill the last r + 1 of copy_block's four (the first ones stay 1 x 0).
  ops::BlockCopy b;
  for (std::size_t i = 0; i <= r; ++i) {
    const std::size_t p = 3 - r + i;
    b.dims[p] = out[i];
    b.dst_strides[p] = out_strides[i];
    b.src_strides[p] =
        i == 0 ? in_strides[0] : in_strides[static_cast<std::size_t>(axes[i - 1]) + 1];
  }
  ops::copy_block(y, x, b);
  return y;
}

}  // namespace detail

std::vector<int> keras_axes(std::size_t rank, bool channels_last) {
  if (rank == 3 && channels_last) return {1, 2, 0};
  std::vector<int> id(rank);
  std::iota(id.begin(), id.end(), 0);
  return id;
}

namespace {

Shape with_batch(std::int64_t n, const Shape& s) {
  Shape out = {n};
  out.insert(out.end(), s.begin(), s.end());
  return out;
}

std::vector<int> inverse(const std::vector<int>& p) {
  std::vector<int> inv(p.size());
  for (std::size_t i = 0; i < p.size(); ++i)
    inv[static_cast<std::size_t>(p[i])] = static_cast<int>(i);
  return inv;
}

bool is_identity(const std::vector<int>& p) {
  for (std::size_t i = 0; i < p.size(); ++i) {
    if (p[i] != static_cast<int>(i)) return false;
  }
  return true;
}

Tensor permuted(const Tensor& x, const std::vector<int>& axes) {
  return is_identity(axes) ? x : detail::permute_samples(x, axes);
}

}  // namespace

// ---------------------------------------------------------------- Reshape

Reshape::Reshape(Shape target, bool channels_last)
    : target_(std::move(target)), channels_last_(channels_last) {}

Shape Reshape::build(const Shape& input_shape, DType dtype, Device, InitRng&) {
  input_shape_ = input_shape;
  dtype_ = dtype;
  keras_out_ = target_;
  std::int64_t known = 1;
  int open = -1;
  for (std::size_t i = 0; i < keras_out_.size(); ++i) {
    if (keras_out_[i] == -1) {
      detail::require(*this, open < 0, "at most one target dimension may be -1");
      open = static_cast<int>(i);
    } else {
      detail::require(*this, keras_out_[i] > 0, "target dimensions must be positive or -1");
      known *= keras_out_[i];
    }
  }
  const std::int64_t n = shape_numel(input_shape);
  if (open >= 0 && known > 0 && n % known == 0)
    keras_out_[static_cast<std::size_t>(open)] = n / known;
  detail::require(*this, shape_numel(keras_out_) == n,
                  "cannot reshape " + shape_str(input_shape) + " (" + std::to_string(n) +
                      " values) to " + shape_str(target_));
  output_shape_ = keras_out_;
  if (keras_out_.size() == 3 && channels_last_) {
    output_shape_ = {keras_out_[2], keras_out_[0], keras_out_[1]};  // Keras HWC -> Mirror CHW
  }
  return output_shape_;
}

Tensor Reshape::forward(const Tensor& x, ForwardContext&) {
  detail::require(*this, !output_shape_.empty(), "not built");
  detail::check_input(*this, x, input_shape_, dtype_);
  batch_ = x.dim(0);
  const Tensor k = permuted(x, keras_axes(input_shape_.size(), channels_last_));
  const Tensor y = k.reshape(with_batch(batch_, keras_out_));
  return permuted(y, inverse(keras_axes(keras_out_.size(), channels_last_)));
}

Tensor Reshape::backward(const Tensor& dy) {
  if (!input_grad_needed()) return {};
  const Tensor k = permuted(dy, keras_axes(keras_out_.size(), channels_last_));
  Shape keras_in = input_shape_;
  const std::vector<int> in_axes = keras_axes(input_shape_.size(), channels_last_);
  for (std::size_t i = 0; i < in_axes.size(); ++i)
    keras_in[i] = input_shape_[static_cast<std::size_t>(in_axes[i])];
  return permuted(k.reshape(with_batch(batch_, keras_in)), inverse(in_axes));
}

nlohmann::json Reshape::config() const {
  return {{"target_shape", target_}, {"channels_last", channels_last_}};
}

// ---------------------------------------------------------------- Permute

Permute::Permute(std::vector<int> dims, bool channels_last)
    : dims_(std::move(dims)), channels_last_(channels_last) {}

Shape Permute::build(const Shape& input_shape, DType dtype, Device, InitRng&) {
  const std::size_t r = input_shape.size();
  std::vector<int> sorted = dims_;
  std::sort(sorted.begin(), sorted.end());
  bool ok = sorted.size() == r && r <= 3;
  for (std::size_t i = 0; ok && i < r; ++i) ok = sorted[i] == static_cast<int>(i) + 1;
  detail::require(*this, ok,
                  "dims must be a permutation of 1.." + std::to_string(r) + " for the input " +
                      shape_str(input_shape) + " (at most 3 axes)");
  input_shape_ = input_shape;
  dtype_ = dtype;
  // Keras's output axis i is its input axis dims[i] - 1 (Note [Channels-last layouts]).
  const std::vector<int> a = keras_axes(r, channels_last_);
  const std::vector<int> back = inverse(a);
  axes_.assign(r, 0);
  for (std::size_t j = 0; j < r; ++j) {
    axes_[j] = a[static_cast<std::size_t>(dims_[static_cast<std::size_t>(back[j])] - 1)];
  }
  inverse_ = inverse(axes_);
  output_shape_.clear();
  for (int ax : axes_) output_shape_.push_back(input_shape[static_cast<std::size_t>(ax)]);
  return output_shape_;
}

Tensor Permute::forward(const Tensor& x, ForwardContext&) {
  detail::require(*this, !output_shape_.empty(), "not built");
  detail::check_input(*this, x, input_shape_, dtype_);
  return permuted(x, axes_);
}

Tensor Permute::backward(const Tensor& dy) {
  if (!input_grad_needed()) return {};
  return permuted(dy, inverse_);
}

nlohmann::json Permute::config() const {
  return {{"dims", dims_}, {"channels_last", channels_last_}};
}

// ---------------------------------------------------------------- RepeatVector

RepeatVector::RepeatVector(int n) : n_(n) {
  MIRROR_CHECK(n > 0, InvalidArgument,
               "RepeatVector: n must be positive, got " + std::to_string(n));
}

Shape RepeatVector::build(const Shape& input_shape, DType dtype, Device, InitRng&) {
  detail::require(*this, input_shape.size() == 1,
                  "expects a flat input [features], got " + shape_str(input_shape));
  features_ = input_shape[0];
  dtype_ = dtype;
  return {n_, features_};
}

Tensor RepeatVector::forward(const Tensor& x, ForwardContext& ctx) {
  detail::check_input(*this, x, {features_}, dtype_);
  batch_ = x.dim(0);
  Tensor y = Tensor::empty({batch_, n_, features_}, dtype_, x.device());
  ops::BlockCopy b;
  b.dims[0] = batch_;
  b.dims[1] = n_;
  b.dims[2] = features_;
  b.dst_strides[0] = n_ * features_;
  b.dst_strides[1] = features_;
  b.dst_strides[2] = 1;
  b.src_strides[0] = features_;
  b.src_strides[2] = 1;  // src_strides[1] = 0: the same vector at every step
  ops::copy_block(y, x, b);
  ctx.lengths.clear();  // every sequence has all n steps
  return y;
}

Tensor RepeatVector::backward(const Tensor& dy) {
  if (!input_grad_needed()) return {};
  // The sum over steps as one product: ones[1, n] @ dy arranged [n, N * F].
  const Tensor steps = detail::permute_samples(dy.reshape({1, batch_, n_, features_}), {1, 0, 2})
                           .reshape({n_, batch_ * features_});
  Tensor ones = Tensor::empty({1, n_}, dtype_, dy.device());
  ops::fill(ones, 1.0);
  Tensor dx = Tensor::empty({1, batch_ * features_}, dtype_, dy.device());
  ops::gemm(false, false, 1.0, ones, steps, 0.0, dx);
  return dx.reshape({batch_, features_});
}

// ---------------------------------------------------------------- Cropping2D

Cropping2D::Cropping2D(int top, int bottom, int left, int right)
    : top_(top), bottom_(bottom), left_(left), right_(right) {
  MIRROR_CHECK(top >= 0 && bottom >= 0 && left >= 0 && right >= 0, InvalidArgument,
               "Cropping2D: cropping must be non-negative");
}

Shape Cropping2D::build(const Shape& input_shape, DType dtype, Device, InitRng&) {
  detail::require(*this, input_shape.size() == 3,
                  "expects an image input [C, H, W], got " + shape_str(input_shape));
  const std::int64_t h = input_shape[1] - top_ - bottom_, w = input_shape[2] - left_ - right_;
  detail::require(*this, h > 0 && w > 0,
                  "cropping " + std::to_string(top_) + "+" + std::to_string(bottom_) +
                      " rows and " + std::to_string(left_) + "+" + std::to_string(right_) +
                      " columns leaves nothing of " + shape_str(input_shape));
  input_shape_ = input_shape;
  dtype_ = dtype;
  return {input_shape[0], h, w};
}

Tensor Cropping2D::forward(const Tensor& x, ForwardContext&) {
  detail::check_input(*this, x, input_shape_, dtype_);
  return ops::crop2d(x, top_, bottom_, left_, right_);
}

Tensor Cropping2D::backward(const Tensor& dy) {
  if (!input_grad_needed()) return {};
  return ops::zero_pad2d(dy, top_, bottom_, left_, right_);
}

nlohmann::json Cropping2D::config() const {
  return {{"cropping", {{top_, bottom_}, {left_, right_}}}};
}

// ---------------------------------------------------------------- UpSampling2D

UpSampling2D::UpSampling2D(int size_h, int size_w) : sh_(size_h), sw_(size_w) {
  MIRROR_CHECK(size_h > 0 && size_w > 0, InvalidArgument, "UpSampling2D: size must be positive");
}

Shape UpSampling2D::build(const Shape& input_shape, DType dtype, Device, InitRng&) {
  detail::require(*this, input_shape.size() == 3,
                  "expects an image input [C, H, W], got " + shape_str(input_shape));
  input_shape_ = input_shape;
  dtype_ = dtype;
  return {input_shape[0], input_shape[1] * sh_, input_shape[2] * sw_};
}

namespace {

/// The block that moves the pixels (a, b) of every sh x sw cell of the big image to or from the
/// small one: `into_big` writes the big image.
ops::BlockCopy cell_block(std::int64_t planes, std::int64_t h, std::int64_t w, int sh, int sw,
                          int a, int b, bool into_big) {
  const std::int64_t wo = w * sw;
  ops::BlockCopy c;
  c.dims[0] = planes;
  c.dims[1] = h;
  c.dims[2] = w;
  const std::int64_t big[3] = {h * sh * wo, sh * wo, sw}, small[3] = {h * w, w, 1};
  for (int k = 0; k < 3; ++k) {
    c.dst_strides[k] = into_big ? big[k] : small[k];
    c.src_strides[k] = into_big ? small[k] : big[k];
  }
  (into_big ? c.dst_offset : c.src_offset) = a * wo + b;
  return c;
}

}  // namespace

Tensor UpSampling2D::forward(const Tensor& x, ForwardContext&) {
  detail::check_input(*this, x, input_shape_, dtype_);
  batch_ = x.dim(0);
  const std::int64_t planes = batch_ * input_shape_[0], h = input_shape_[1], w = input_shape_[2];
  Tensor y = Tensor::empty({batch_, input_shape_[0], h * sh_, w * sw_}, dtype_, x.device());
  for (int a = 0; a < sh_; ++a) {
    for (int b = 0; b < sw_; ++b)
      ops::copy_block(y, x, cell_block(planes, h, w, sh_, sw_, a, b, true));
  }
  return y;
}

Tensor UpSampling2D::backward(const Tensor& dy) {
  if (!input_grad_needed()) return {};
  const std::int64_t planes = batch_ * input_shape_[0], h = input_shape_[1], w = input_shape_[2];
  const Shape in = with_batch(batch_, input_shape_);
  Tensor dx = Tensor::zeros(in, dtype_, dy.device());
  Tensor part = Tensor::empty(in, dtype_, dy.device());
  for (int a = 0; a < sh_; ++a) {  // each input pixel: the sum of its sh x sw copies, in order
    for (int b = 0; b < sw_; ++b) {
      ops::copy_block(part, dy, cell_block(planes, h, w, sh_, sw_, a, b, false));
      ops::axpy(1.0, part, dx);
    }
  }
  return dx;
}

// ---------------------------------------------------------------- GlobalMaxPooling2D

Shape GlobalMaxPooling2D::build(const Shape& input_shape, DType dtype, Device, InitRng&) {
  detail::require(*this, input_shape.size() == 3,
                  "expects an image input [C, H, W], got " + shape_str(input_shape));
  input_shape_ = input_shape;
  dtype_ = dtype;
  geometry_ = {};
  geometry_.k_h = geometry_.stride_h = static_cast<int>(input_shape[1]);
  geometry_.k_w = geometry_.stride_w = static_cast<int>(input_shape[2]);
  return {input_shape[0]};
}

Tensor GlobalMaxPooling2D::forward(const Tensor& x, ForwardContext&) {
  detail::check_input(*this, x, input_shape_, dtype_);
  x_ = x;
  y_ = ops::maxpool2d_forward(x, geometry_);
  return y_.reshape({x.dim(0), input_shape_[0]});
}

Tensor GlobalMaxPooling2D::backward(const Tensor& dy) {
  detail::require(*this, x_.defined(), "backward without forward");
  if (!input_grad_needed()) return {};
  return ops::maxpool2d_backward(x_, y_, dy.reshape(y_.shape()), geometry_);
}

// ---------------------------------------------------------------- TimeDistributed

TimeDistributed::TimeDistributed(std::unique_ptr<Layer> inner) : inner_(std::move(inner)) {
  MIRROR_CHECK(inner_ != nullptr && dynamic_cast<MergeLayer*>(inner_.get()) == nullptr,
               InvalidArgument, "TimeDistributed wraps one single-input layer");
}

Shape TimeDistributed::build(const Shape& input_shape, DType dtype, Device device, InitRng& rng) {
  detail::require(*this, input_shape.size() >= 2,
                  "expects steps [T, ...], got " + shape_str(input_shape));
  input_shape_ = input_shape;
  inner_->set_name(name() + "/" + inner_->kind());
  const Shape step(input_shape.begin() + 1, input_shape.end());
  const Shape out = inner_->build(step, dtype, device, rng);
  output_shape_ = with_batch(input_shape[0], out);
  return output_shape_;
}

Tensor TimeDistributed::forward(const Tensor& x, ForwardContext& ctx) {
  detail::require(*this, !output_shape_.empty(), "not built");
  batch_ = x.dim(0);
  const std::int64_t t = x.rank() >= 2 ? x.dim(1) : 0;
  Shape merged = {batch_ * t};
  merged.insert(merged.end(), x.shape().begin() + 2, x.shape().end());
  // The inner layer sees N * T samples without a time axis: each step keeps its sample's id
  // (a Dropout inside drops the same features at every step of a sample) and weight.
  ForwardContext inner = ctx;
  inner.lengths.clear();
  auto spread = [&](const Tensor& per_sample) {
    if (!per_sample.defined()) return per_sample;
    Tensor out = Tensor::empty({batch_, t}, per_sample.dtype(), per_sample.device());
    ops::BlockCopy b;
    b.dims[0] = batch_;
    b.dims[1] = t;
    b.dst_strides[0] = t;
    b.dst_strides[1] = 1;
    b.src_strides[0] = 1;
    ops::copy_block(out, per_sample, b);
    return out.reshape({batch_ * t});
  };
  inner.sample_ids = spread(ctx.sample_ids);
  inner.sample_weights = spread(ctx.sample_weights);
  const Tensor y = inner_->forward(x.reshape(merged), inner);
  Shape out = {batch_, t};
  out.insert(out.end(), y.shape().begin() + 1, y.shape().end());
  return y.reshape(out);
}

Tensor TimeDistributed::backward(const Tensor& dy) {
  Shape merged = {dy.dim(0) * dy.dim(1)};
  merged.insert(merged.end(), dy.shape().begin() + 2, dy.shape().end());
  inner_->set_input_grad_needed(input_grad_needed());
  const Tensor dx = inner_->backward(dy.reshape(merged));
  if (!dx.defined()) return dx;
  Shape in = {dy.dim(0), dy.dim(1)};
  in.insert(in.end(), dx.shape().begin() + 1, dx.shape().end());
  return dx.reshape(in);
}

nlohmann::json TimeDistributed::config() const {
  return {{"layer", {{"kind", inner_->kind()}, {"config", inner_->config()}}}};
}

}  // namespace mirror::nn
