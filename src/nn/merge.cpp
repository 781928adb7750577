// Add, Concatenate (merge layers of the model graph), GlobalAveragePooling2D, AveragePooling2D
// and ZeroPadding2D.
#include <algorithm>

#include "mirror/nn/cnn_layers.h"
#include "mirror/nn/keras_layers.h"

namespace mirror::nn {
namespace {

[[noreturn]] void merge_mismatch(const Layer& layer, const std::string& rule,
                                 const std::vector<Shape>& shapes,
                                 const std::vector<std::string>& names, std::size_t i) {
  throw InvalidArgument(layer.name() + " (" + layer.kind() + "): " + rule + ", but input '" +
                        names[0] + "' is " + shape_str(shapes[0]) + " and input '" + names[i] +
                        "' is " + shape_str(shapes[i]) +
                        " (per sample); check the layers feeding it (strides, filters, padding)");
}

Shape with_batch(std::int64_t n, Shape s) {
  s.insert(s.begin(), n);
  return s;
}

void require_image(const Layer& layer, const Shape& s) {
  MIRROR_CHECK(s.size() == 3, InvalidArgument,
               layer.name() + " (" + layer.kind() + "): expects an image input [C, H, W], got " +
                   shape_str(s));
}

}  // namespace

// ---------------------------------------------------------------- Add

Shape Add::build_inputs(const std::vector<Shape>& shapes, const std::vector<std::string>& names,
                        DType, Device) {
  broadcast_.clear();
  output_shape_ = shapes[0];
  for (std::size_t i = 1; i < shapes.size(); ++i) {
    if (shapes[i] == shapes[0]) continue;
    bool ok = shapes[i].size() == shapes[0].size();
    for (std::size_t d = 0; ok && d < shapes[0].size(); ++d) {
      ok = shapes[i][d] == output_shape_[d] || shapes[i][d] == 1 || output_shape_[d] == 1;
      if (ok) output_shape_[d] = std::max(output_shape_[d], shapes[i][d]);
    }
    if (!ok) {
      merge_mismatch(*this, "inputs must have one shape (or sizes 1 to broadcast)", shapes, names,
                     i);
    }
    broadcast_ = shapes;
  }
  count_ = shapes.size();
  return output_shape_;
}

Tensor Add::forward_inputs(const std::vector<Tensor>& xs, ForwardContext&) {
  MIRROR_CHECK(xs.size() == count_ && count_ >= 2, InvalidArgument,
               name() + " (add): expected " + std::to_string(count_) + " inputs, got " +
                   std::to_string(xs.size()));
  input_blocks_.clear();
  output_block_ = 0;
  for (const Tensor& x : xs) {
    input_blocks_.push_back(ops::image_block(x));
    // Broadcasting sums plain tensors.
    if (blocked_output_allowed() && broadcast_.empty()) {
      output_block_ = std::max(output_block_, input_blocks_.back());
    }
  }
  std::vector<Tensor> in;
  for (const Tensor& x : xs) in.push_back(ops::blocked_image(x, output_block_));
  if (!broadcast_.empty()) {
    const Shape out = with_batch(xs[0].dim(0), output_shape_);
    for (Tensor& x : in) x = detail::broadcast_to(x, out);
  }
  Tensor y = ops::add_n(in, fuses_relu());
  relu_y_ = fuses_relu() ? y : Tensor();
  return y;
}

std::vector<Tensor> Add::backward_inputs(const Tensor& dy) {
  // d(sum)/d(each input) = identity: the sum's gradient (through the fused ReLU's mask) itself,
  // shared, not copied, in each input's layout.
  const Tensor g =
      relu_y_.defined() ? ops::activation_backward(ops::Activation::kRelu, relu_y_, dy) : dy;
  std::vector<Tensor> dxs;
  for (std::size_t i = 0; i < count_; ++i) {
    const std::int64_t block = i < input_blocks_.size() ? input_blocks_[i] : output_block_;
    // A broadcast input's gradient: summed over the axes it was repeated along.
    const Tensor gi =
        broadcast_.empty() ? g : detail::reduce_to(g, with_batch(g.dim(0), broadcast_[i]));
    dxs.push_back(block == output_block_ ? gi : ops::blocked_image(gi, block));
  }
  return dxs;
}

// ---------------------------------------------------------------- Concatenate

Shape Concatenate::build_inputs(const std::vector<Shape>& shapes,
                                const std::vector<std::string>& names, DType, Device) {
  Shape out = shapes[0];
  // The channel axis is C of [C, H, W] and F of [F] and of sequences [T, F]; a sequence's steps
  // are joined as rows [N*T, F] (T may change from batch to batch).
  MIRROR_CHECK(!out.empty() && out.size() <= 3, InvalidArgument,
               name() +
                   " (concatenate): joins images [C, H, W], features [F] or sequences [T, F] "
                   "along the channel axis, got input '" +
                   names[0] + "' " + shape_str(out));
  sequences_ = out.size() == 2;
  const std::size_t axis = sequences_ ? 1 : 0;
  channels_.clear();
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    bool ok = shapes[i].size() == out.size();
    for (std::size_t d = 0; ok && d < out.size(); ++d)
      ok = d == axis || shapes[i][d] == shapes[0][d];
    if (!ok) {
      merge_mismatch(*this, "inputs must agree in every dimension but the channel axis", shapes,
                     names, i);
    }
    channels_.push_back(shapes[i][axis]);
    if (i > 0) out[axis] += shapes[i][axis];
  }
  return out;
}

Tensor Concatenate::forward_inputs(const std::vector<Tensor>& xs, ForwardContext&) {
  MIRROR_CHECK(xs.size() == channels_.size(), InvalidArgument,
               name() + " (concatenate): expected " + std::to_string(channels_.size()) +
                   " inputs, got " + std::to_string(xs.size()));
  if (!sequences_) return ops::concat_channels(xs);
  std::vector<Tensor> rows;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    rows.push_back(xs[i].reshape({xs[i].dim(0) * xs[i].dim(1), channels_[i]}));
  }
  steps_ = {xs[0].dim(0), xs[0].dim(1)};
  const Tensor y = ops::concat_channels(rows);
  return y.reshape({steps_[0], steps_[1], y.dim(1)});
}

std::vector<Tensor> Concatenate::backward_inputs(const Tensor& dy) {
  if (!sequences_) return ops::split_channels(dy, channels_);
  std::vector<Tensor> parts =
      ops::split_channels(dy.reshape({steps_[0] * steps_[1], dy.dim(2)}), channels_);
  for (std::size_t i = 0; i < parts.size(); ++i) {
    parts[i] = parts[i].reshape({steps_[0], steps_[1], channels_[i]});
  }
  return parts;
}

// ---------------------------------------------------------------- GlobalAveragePooling2D

Shape GlobalAveragePooling2D::build(const Shape& input_shape, DType dtype, Device, InitRng&) {
  require_image(*this, input_shape);
  input_shape_ = input_shape;
  dtype_ = dtype;
  geometry_ = {};
  geometry_.k_h = geometry_.stride_h = static_cast<int>(input_shape[1]);
  geometry_.k_w = geometry_.stride_w = static_cast<int>(input_shape[2]);
  return {input_shape[0]};
}

Tensor GlobalAveragePooling2D::forward(const Tensor& x, ForwardContext&) {
  MIRROR_CHECK(!input_shape_.empty(), InvalidArgument,
               name() + " (global_average_pooling2d): not built");
  detail::check_input(*this, x, input_shape_, dtype_);
  batch_ = x.dim(0);
  return ops::avgpool2d_forward(x, geometry_).reshape({x.dim(0), input_shape_[0]});
}

Tensor GlobalAveragePooling2D::backward(const Tensor& dy) {
  check_shape(dy, {batch_, input_shape_[0]}, (name() + " backward dy").c_str());
  return ops::avgpool2d_backward(dy.reshape({batch_, input_shape_[0], 1, 1}),
                                 with_batch(batch_, input_shape_), geometry_);
}

// ---------------------------------------------------------------- AveragePooling2D

AveragePooling2D::AveragePooling2D(int pool, int stride, Padding padding)
    : pool_(pool), stride_(stride == 0 ? pool : stride), padding_(padding) {
  MIRROR_CHECK(pool > 0 && stride_ > 0, InvalidArgument,
               "AveragePooling2D: pool and stride must be positive, got pool " +
                   std::to_string(pool) + ", stride " + std::to_string(stride));
}

Shape AveragePooling2D::build(const Shape& input_shape, DType dtype, Device, InitRng&) {
  require_image(*this, input_shape);
  input_shape_ = input_shape;
  dtype_ = dtype;
  geometry_ = detail::pool_geometry(*this, input_shape, pool_, stride_, padding_);
  return {input_shape[0], geometry_.out_h(static_cast<int>(input_shape[1])),
          geometry_.out_w(static_cast<int>(input_shape[2]))};
}

Tensor AveragePooling2D::forward(const Tensor& x, ForwardContext&) {
  MIRROR_CHECK(!input_shape_.empty(), InvalidArgument, name() + " (average_pooling2d): not built");
  detail::check_input(*this, x, input_shape_, dtype_);
  x_shape_ = x.shape();
  return ops::avgpool2d_forward(x, geometry_);
}

Tensor AveragePooling2D::backward(const Tensor& dy) {
  MIRROR_CHECK(!x_shape_.empty(), InvalidArgument,
               name() + " (average_pooling2d): backward without forward");
  return ops::avgpool2d_backward(dy, x_shape_, geometry_);
}

nlohmann::json AveragePooling2D::config() const {
  return {{"pool_size", pool_}, {"strides", stride_}, {"padding", padding_name(padding_)}};
}

// ---------------------------------------------------------------- ZeroPadding2D

ZeroPadding2D::ZeroPadding2D(int top, int bottom, int left, int right)
    : top_(top), bottom_(bottom), left_(left), right_(right) {
  MIRROR_CHECK(top >= 0 && bottom >= 0 && left >= 0 && right >= 0, InvalidArgument,
               "ZeroPadding2D: padding must be non-negative");
}

Shape ZeroPadding2D::build(const Shape& input_shape, DType dtype, Device, InitRng&) {
  require_image(*this, input_shape);
  input_shape_ = input_shape;
  dtype_ = dtype;
  return {input_shape[0], input_shape[1] + top_ + bottom_, input_shape[2] + left_ + right_};
}

Tensor ZeroPadding2D::forward(const Tensor& x, ForwardContext&) {
  MIRROR_CHECK(!input_shape_.empty(), InvalidArgument, name() + " (zero_padding2d): not built");
  detail::check_input(*this, x, input_shape_, dtype_);
  return ops::zero_pad2d(x, top_, bottom_, left_, right_);
}

Tensor ZeroPadding2D::backward(const Tensor& dy) {
  if (!input_grad_needed()) return {};
  return ops::crop2d(dy, top_, bottom_, left_, right_);
}

nlohmann::json ZeroPadding2D::config() const {
  return {{"padding", {{top_, bottom_}, {left_, right_}}}};
}

}  // namespace mirror::nn
