// Rescaling, Normalization, Resizing and CenterCrop (include/mirror/nn/preprocessing.h): built on
// ops::channel_affine, ops::gemm, ops::copy_block and ops::crop2d, so every backend runs them.
#include "mirror/nn/preprocessing.h"

#include <algorithm>
#include <cmath>

#include "mirror/nn/init.h"
#include "mirror/nn/keras_layers.h"
#include "mirror/nn/layers.h"

namespace mirror::nn {

using nlohmann::json;

namespace {

/// The channel view of a batch x: NCHW images [N, C, H, W] have C at dimension 1, features and
/// sequences their last dimension; `channels` 1 means one value for every element.
ops::ChannelView channel_view(const Tensor& x, std::size_t channels) {
  const std::int64_t n = x.numel();
  if (channels == 1) return {1, 1, n};
  if (x.rank() == 4) return {x.dim(0), x.dim(1), x.dim(2) * x.dim(3)};
  const std::int64_t c = x.shape().back();
  return {n / c, c, 1};
}

/// The channel count of a sample shape (Keras's last axis: C of [C, H, W], F of [F] and [T, F]).
std::int64_t channels_of(const Shape& sample) {
  return sample.size() == 3 ? sample[0] : sample.back();
}

void check_channels(const Layer& l, const Shape& sample, std::size_t values, const char* what) {
  MIRROR_CHECK(!sample.empty() && sample.size() <= 3, InvalidArgument,
               l.name() + " (" + l.kind() + "): expects features [F], sequences [T, F] or " +
                   "images [C, H, W], got " + shape_str(sample));
  const std::int64_t c = channels_of(sample);
  MIRROR_CHECK(values == 1 || static_cast<std::int64_t>(values) == c, InvalidArgument,
               l.name() + " (" + l.kind() + "): " + std::to_string(values) + " " + what +
                   " values for " + std::to_string(c) + " channels (the input " +
                   shape_str(sample) + "); give one value or one per channel");
}

void check_forward_input(const Layer& l, const Tensor& x, const Shape& sample, DType dtype) {
  detail::check_input(l, x, detail::any_steps(sample), dtype);
}

json values(const std::vector<double>& v) { return json(v); }

/// [a, b, c] -> [b, a, c] (a copy).
Tensor swap_leading(const Tensor& t, std::int64_t a, std::int64_t b, std::int64_t c) {
  return detail::permute_samples(t.reshape({1, a, b, c}), {1, 0, 2}).reshape({b, a, c});
}

}  // namespace

// ---------------------------------------------------------------- Rescaling

Rescaling::Rescaling(std::vector<double> scale, std::vector<double> offset)
    : scale_(std::move(scale)), offset_(std::move(offset)) {
  MIRROR_CHECK(!scale_.empty() && !offset_.empty(), InvalidArgument,
               "Rescaling: scale and offset need at least one value each");
}

Shape Rescaling::build(const Shape& input_shape, DType dtype, Device, InitRng&) {
  check_channels(*this, input_shape, scale_.size(), "scale");
  check_channels(*this, input_shape, offset_.size(), "offset");
  input_shape_ = input_shape;
  dtype_ = dtype;
  return input_shape;
}

Tensor Rescaling::forward(const Tensor& x, ForwardContext&) {
  check_forward_input(*this, x, input_shape_, dtype_);
  batch_ = x.dim(0);
  const std::size_t c = std::max(scale_.size(), offset_.size());
  const auto widen = [&](const std::vector<double>& v) {
    return v.size() == c ? v : std::vector<double>(c, v[0]);
  };
  ops::ChannelAffine k;
  k.ka = widen(scale_);
  k.k0 = widen(offset_);
  return ops::channel_affine(x, Tensor(), k, channel_view(x, c));
}

Tensor Rescaling::backward(const Tensor& dy) {
  MIRROR_CHECK(batch_ > 0 && dy.defined() && dy.dim(0) == batch_, InvalidArgument,
               name() + " (rescaling): backward needs a preceding forward of the same batch");
  ops::ChannelAffine k;
  k.ka = scale_;
  return ops::channel_affine(dy, Tensor(), k, channel_view(dy, scale_.size()));
}

json Rescaling::config() const { return {{"scale", values(scale_)}, {"offset", values(offset_)}}; }

// ---------------------------------------------------------------- Normalization

namespace {

/// Keras's divisor max(sqrt(variance), epsilon), epsilon = 1e-7 (keras.backend.epsilon()).
std::vector<double> divisors(const std::vector<double>& variance) {
  std::vector<double> d;
  for (double v : variance) d.push_back(std::max(std::sqrt(v), 1e-7));
  return d;
}

}  // namespace

Normalization::Normalization(std::vector<double> mean, std::vector<double> variance, bool invert)
    : mean_(std::move(mean)), variance_(std::move(variance)), invert_(invert) {
  MIRROR_CHECK(!mean_.empty() && mean_.size() == variance_.size(), InvalidArgument,
               "Normalization: mean and variance need as many values, at least one, got " +
                   std::to_string(mean_.size()) + " and " + std::to_string(variance_.size()));
  for (double v : variance_) {
    MIRROR_CHECK(v >= 0 && std::isfinite(v), InvalidArgument,
                 "Normalization: a variance must be finite and >= 0, got " + std::to_string(v));
  }
}

Shape Normalization::build(const Shape& input_shape, DType dtype, Device, InitRng&) {
  check_channels(*this, input_shape, mean_.size(), "mean/variance");
  input_shape_ = input_shape;
  dtype_ = dtype;
  return input_shape;
}

Tensor Normalization::forward(const Tensor& x, ForwardContext&) {
  check_forward_input(*this, x, input_shape_, dtype_);
  batch_ = x.dim(0);
  ops::ChannelAffine k;
  const std::vector<double> d = divisors(variance_);
  if (invert_) {
    k.ka = d;
    k.k0 = mean_;
  } else {
    for (double v : d) k.ka.push_back(1.0 / v);
    k.ca = mean_;
  }
  return ops::channel_affine(x, Tensor(), k, channel_view(x, mean_.size()));
}

Tensor Normalization::backward(const Tensor& dy) {
  MIRROR_CHECK(batch_ > 0 && dy.defined() && dy.dim(0) == batch_, InvalidArgument,
               name() + " (normalization): backward needs a preceding forward of the same batch");
  ops::ChannelAffine k;
  const std::vector<double> d = divisors(variance_);
  if (invert_) {
    k.ka = d;
  } else {
    for (double v : d) k.ka.push_back(1.0 / v);
  }
  return ops::channel_affine(dy, Tensor(), k, channel_view(dy, mean_.size()));
}

json Normalization::config() const {
  return {{"mean", values(mean_)}, {"variance", values(variance_)}, {"invert", invert_}};
}

// ---------------------------------------------------------------- Resizing

namespace detail {

std::vector<double> resize_matrix(int size, int start, int window, int out, bool bilinear) {
  std::vector<double> m(static_cast<std::size_t>(out) * static_cast<std::size_t>(size), 0.0);
  const double scale = static_cast<double>(window) / out;
  for (int i = 0; i < out; ++i) {
    double* row = m.data() + static_cast<std::size_t>(i) * static_cast<std::size_t>(size);
    if (!bilinear) {
      const int j = std::min(static_cast<int>(std::floor((i + 0.5) * scale)), window - 1);
      row[start + j] = 1.0;
      continue;
    }
    // JAX's scale_and_translate with a triangle kernel (TensorFlow's half-pixel bilinear): the
    // weights of the input positions within 1 of the sample, normalised to sum 1 (so an edge
    // sample takes the edge pixel).
    const double sample = (i + 0.5) * scale - 0.5;
    double total = 0;
    for (int j = 0; j < window; ++j) total += std::max(0.0, 1.0 - std::fabs(sample - j));
    for (int j = 0; j < window; ++j) {
      const double w = std::max(0.0, 1.0 - std::fabs(sample - j));
      if (w > 0) row[start + j] = w / total;
    }
  }
  return m;
}

std::vector<int> aspect_crop(int height, int width, int target_height, int target_width) {
  int crop_height = static_cast<int>(static_cast<double>(width) * target_height / target_width);
  crop_height = std::max(std::min(height, crop_height), 1);
  int crop_width = static_cast<int>(static_cast<double>(height) * target_width / target_height);
  crop_width = std::max(std::min(width, crop_width), 1);
  return {(height - crop_height) / 2, (width - crop_width) / 2, crop_height, crop_width};
}

}  // namespace detail

Resizing::Resizing(int height, int width, Interpolation interpolation, bool crop_to_aspect_ratio)
    : height_(height), width_(width), interpolation_(interpolation), crop_(crop_to_aspect_ratio) {
  MIRROR_CHECK(height > 0 && width > 0 && height <= 65536 && width <= 65536, InvalidArgument,
               "Resizing: height and width must be in [1, 65536], got " + std::to_string(height) +
                   " and " + std::to_string(width));
}

Shape Resizing::build(const Shape& input_shape, DType dtype, Device device, InitRng&) {
  MIRROR_CHECK(input_shape.size() == 3, InvalidArgument,
               name() + " (" + kind() + "): expects an image [C, H, W] (NCHW), got " +
                   shape_str(input_shape));
  input_shape_ = input_shape;
  dtype_ = dtype;
  const int h = static_cast<int>(input_shape[1]), w = static_cast<int>(input_shape[2]);
  std::vector<int> box = {0, 0, h, w};
  if (crop_) box = detail::aspect_crop(h, w, height_, width_);
  const bool bilinear = interpolation_ == Interpolation::kBilinear;
  rows_ = init::to_tensor(detail::resize_matrix(h, box[0], box[2], height_, bilinear), {height_, h},
                          dtype, device);
  columns_ = init::to_tensor(detail::resize_matrix(w, box[1], box[3], width_, bilinear),
                             {width_, w}, dtype, device);
  return {input_shape[0], height_, width_};
}

Tensor Resizing::forward(const Tensor& x, ForwardContext&) {
  MIRROR_CHECK(rows_.defined(), InvalidArgument, name() + " (" + kind() + "): used before build()");
  detail::check_input(*this, x, input_shape_, dtype_);
  batch_ = x.dim(0);
  const std::int64_t nc = batch_ * input_shape_[0], h = input_shape_[1], w = input_shape_[2];
  // Columns: [N*C*H, W] x columns^T -> [N*C*H, width]; rows: with H leading, rows x [H, ...].
  Tensor a = Tensor::empty({nc * h, width_}, dtype_, x.device());
  ops::gemm(false, true, 1.0, x.reshape({nc * h, w}), columns_, 0.0, a);
  const Tensor at = swap_leading(a, nc, h, width_).reshape({h, nc * width_});
  Tensor yt = Tensor::empty({height_, nc * width_}, dtype_, x.device());
  ops::gemm(false, false, 1.0, rows_, at, 0.0, yt);
  return swap_leading(yt, height_, nc, width_).reshape({batch_, input_shape_[0], height_, width_});
}

Tensor Resizing::backward(const Tensor& dy) {
  MIRROR_CHECK(
      batch_ > 0 && dy.defined() && dy.numel() == batch_ * input_shape_[0] * height_ * width_,
      InvalidArgument,
      name() + " (" + kind() + "): backward needs a preceding forward of the same batch");
  const std::int64_t nc = batch_ * input_shape_[0], h = input_shape_[1], w = input_shape_[2];
  const Tensor dyt = swap_leading(dy, nc, height_, width_).reshape({height_, nc * width_});
  Tensor dat = Tensor::empty({h, nc * width_}, dtype_, dy.device());
  ops::gemm(true, false, 1.0, rows_, dyt, 0.0, dat);  // rows^T dY
  const Tensor da = swap_leading(dat, h, nc, width_).reshape({nc * h, width_});
  Tensor dx = Tensor::empty({nc * h, w}, dtype_, dy.device());
  ops::gemm(false, false, 1.0, da, columns_, 0.0, dx);
  return dx.reshape({batch_, input_shape_[0], h, w});
}

json Resizing::config() const {
  return {{"height", height_},
          {"width", width_},
          {"interpolation", interpolation_ == Interpolation::kBilinear ? "bilinear" : "nearest"},
          {"crop_to_aspect_ratio", crop_}};
}

// ---------------------------------------------------------------- CenterCrop

CenterCrop::CenterCrop(int height, int width) : height_(height), width_(width) {
  MIRROR_CHECK(height > 0 && width > 0 && height <= 65536 && width <= 65536, InvalidArgument,
               "CenterCrop: height and width must be in [1, 65536], got " + std::to_string(height) +
                   " and " + std::to_string(width));
}

Shape CenterCrop::build(const Shape& input_shape, DType dtype, Device device, InitRng& rng) {
  MIRROR_CHECK(
      input_shape.size() == 3, InvalidArgument,
      name() + " (center_crop): expects an image [C, H, W] (NCHW), got " + shape_str(input_shape));
  input_shape_ = input_shape;
  const int h = static_cast<int>(input_shape[1]), w = static_cast<int>(input_shape[2]);
  if (h >= height_ && w >= width_) {
    top_ = (h - height_) / 2;
    left_ = (w - width_) / 2;
    bottom_ = h - height_ - top_;
    right_ = w - width_ - left_;
    resize_.reset();
  } else {  // Keras: smart_resize, a crop of the target's aspect ratio resized bilinearly
    top_ = left_ = -1;
    resize_ = std::make_unique<Resizing>(height_, width_, Resizing::Interpolation::kBilinear, true);
    resize_->set_name(name());
    resize_->build(input_shape, dtype, device, rng);
  }
  return {input_shape[0], height_, width_};
}

Tensor CenterCrop::forward(const Tensor& x, ForwardContext& ctx) {
  MIRROR_CHECK(!input_shape_.empty(), InvalidArgument,
               name() + " (center_crop): used before build()");
  if (resize_) return resize_->forward(x, ctx);
  MIRROR_CHECK(x.defined() && x.rank() == 4 && x.dim(1) == input_shape_[0] &&
                   x.dim(2) == input_shape_[1] && x.dim(3) == input_shape_[2],
               InvalidArgument,
               name() + " (center_crop): expected input [N," + std::to_string(input_shape_[0]) +
                   "," + std::to_string(input_shape_[1]) + "," + std::to_string(input_shape_[2]) +
                   "], got " + (x.defined() ? x.str() : std::string("nothing")));
  return ops::crop2d(x, top_, bottom_, left_, right_);
}

Tensor CenterCrop::backward(const Tensor& dy) {
  if (resize_) return resize_->backward(dy);
  return ops::zero_pad2d(dy, top_, bottom_, left_, right_);
}

json CenterCrop::config() const { return {{"height", height_}, {"width", width_}}; }

}  // namespace mirror::nn
