// defines: the layers Keras users combine with GRUs and CNNs: shape layers (Reshape, Permute,
// RepeatVector, Cropping2D, UpSampling2D, TimeDistributed), GlobalMaxPooling2D, SpatialDropout1D
// and 2D, Conv2DTranspose, and the element-wise merges Multiply, Subtract, Average. They are
// built from the backend-neutral ops (copy_block, conv2d_*, gemm, ...), so they run on every
// backend. Attention layers are in nn/attention.h, the parametric activations, Maximum/Minimum
// and the depthwise convolutions in nn/keras_ops_layers.h.
//
// Note [Channels-last layouts]
// Mirror keeps images as [C, H, W] where Keras (channels_last) has [H, W, C]. Layers whose result
// depends on the axis order (Reshape, Permute) take `channels_last`: then they compute Keras's
// function, reading a rank-3 input as Keras's [H, W, C] and writing a rank-3 output back as
// Mirror's [C, H, W]; Mirror's own specs (channels_first) reshape and permute Mirror's layout.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mirror/nn/layer.h"
#include "mirror/nn/layers.h"
#include "mirror/ops.h"

namespace mirror::nn {

/// The axes of one sample as Keras sees them: `mirror` rank-3 [C, H, W] is Keras's [H, W, C].
/// perm[i] = the Mirror axis holding Keras's axis i (identity below rank 3 or channels first).
std::vector<int> keras_axes(std::size_t rank, bool channels_last);

/// [N, d...] -> [N, target...] (Keras's Reshape; one target dimension may be -1).
class Reshape : public Layer {
 public:
  Reshape(Shape target, bool channels_last);
  std::string kind() const override { return "reshape"; }
  bool channels_last() const { return channels_last_; }
  /// The output in Keras's order (-1 resolved), after build.
  const Shape& keras_output() const { return keras_out_; }
  Shape build(const Shape& input_shape, DType dtype, Device device, InitRng& rng) override;
  Tensor forward(const Tensor& x, ForwardContext& ctx) override;
  Tensor backward(const Tensor& dy) override;
  nlohmann::json config() const override;

 private:
  Shape target_;  // as the spec states it (Keras's order when channels_last)
  bool channels_last_;
  Shape input_shape_, keras_out_, output_shape_;
  DType dtype_ = DType::kFloat32;
  std::int64_t batch_ = 0;
};

/// Keras's Permute: dims are the 1-based input axes each output axis takes (batch excluded).
class Permute : public Layer {
 public:
  Permute(std::vector<int> dims, bool channels_last);
  std::string kind() const override { return "permute"; }
  /// Output sample axis i is input sample axis axes()[i] (Mirror's layouts), after build.
  const std::vector<int>& axes() const { return axes_; }
  Shape build(const Shape& input_shape, DType dtype, Device device, InitRng& rng) override;
  Tensor forward(const Tensor& x, ForwardContext& ctx) override;
  Tensor backward(const Tensor& dy) override;
  nlohmann::json config() const override;

 private:
  std::vector<int> dims_;
  bool channels_last_;
  std::vector<int> axes_, inverse_;  // over Mirror's sample axes: forward and backward
  Shape input_shape_, output_shape_;
  DType dtype_ = DType::kFloat32;
};

/// [N, F] -> [N, n, F]: the vector repeated n times (a sequence of full length: the batch's
/// lengths end here, as Keras's RepeatVector drops the mask).
class RepeatVector : public Layer {
 public:
  explicit RepeatVector(int n);
  std::string kind() const override { return "repeat_vector"; }
  Shape build(const Shape& input_shape, DType dtype, Device device, InitRng& rng) override;
  Tensor forward(const Tensor& x, ForwardContext& ctx) override;
  Tensor backward(const Tensor& dy) override;
  nlohmann::json config() const override { return {{"n", n_}}; }

 private:
  int n_;
  std::int64_t features_ = 0, batch_ = 0;
  DType dtype_ = DType::kFloat32;
};

/// Removes rows/columns from NCHW images: (top, bottom, left, right); ZeroPadding2D's inverse.
class Cropping2D : public Layer {
 public:
  Cropping2D(int top, int bottom, int left, int right);
  std::string kind() const override { return "cropping2d"; }
  Shape build(const Shape& input_shape, DType dtype, Device device, InitRng& rng) override;
  Tensor forward(const Tensor& x, ForwardContext& ctx) override;
  Tensor backward(const Tensor& dy) override;
  nlohmann::json config() const override;

 private:
  int top_, bottom_, left_, right_;
  Shape input_shape_;
  DType dtype_ = DType::kFloat32;
};

/// Nearest-neighbour upsampling of NCHW images: each pixel repeated size_h x size_w times.
class UpSampling2D : public Layer {
 public:
  UpSampling2D(int size_h, int size_w);
  std::string kind() const override { return "up_sampling2d"; }
  Shape build(const Shape& input_shape, DType dtype, Device device, InitRng& rng) override;
  Tensor forward(const Tensor& x, ForwardContext& ctx) override;
  Tensor backward(const Tensor& dy) override;
  nlohmann::json config() const override { return {{"size", {sh_, sw_}}}; }

 private:
  int sh_, sw_;
  Shape input_shape_;
  DType dtype_ = DType::kFloat32;
  std::int64_t batch_ = 0;
};

/// [N, C, H, W] -> [N, C]: the maximum of each channel's plane (ties: the first in row order).
class GlobalMaxPooling2D : public Layer {
 public:
  std::string kind() const override { return "global_max_pooling2d"; }
  Shape build(const Shape& input_shape, DType dtype, Device device, InitRng& rng) override;
  Tensor forward(const Tensor& x, ForwardContext& ctx) override;
  Tensor backward(const Tensor& dy) override;
  nlohmann::json config() const override { return nlohmann::json::object(); }

 private:
  Shape input_shape_;
  DType dtype_ = DType::kFloat32;
  ops::Pool2DGeometry geometry_;
  Tensor x_, y_;
};

/// Dropout of whole channels while training: a feature of [T, F] sequences (SpatialDropout1D) or
/// a channel of [C, H, W] images (SpatialDropout2D) is kept or dropped for every step / pixel
/// together, scaled by 1 / (1 - rate). The keep decision of channel c of sample n is Dropout's
/// (a pure function of the step seed, this layer's name, the sample's id and c), so it does not
/// depend on the replica.
class SpatialDropout : public Layer {
 public:
  SpatialDropout(double rate, int rank);  // rank 2: SpatialDropout1D, 3: SpatialDropout2D
  std::string kind() const override {
    return rank_ == 2 ? "spatial_dropout1d" : "spatial_dropout2d";
  }
  Shape build(const Shape& input_shape, DType dtype, Device device, InitRng& rng) override;
  Tensor forward(const Tensor& x, ForwardContext& ctx) override;
  Tensor backward(const Tensor& dy) override;
  nlohmann::json config() const override { return {{"rate", rate_}}; }

 private:
  /// The [N, C] channel mask spread over x's shape.
  Tensor spread(const Tensor& mask, const Shape& shape) const;

  double rate_;
  int rank_;
  Shape input_shape_;
  DType dtype_ = DType::kFloat32;
  Tensor mask_;  // x's shape; undefined when the last forward dropped nothing
};

/// Applies one layer to every step of [N, T, ...]: the batch and time axes are merged, so the
/// inner layer sees N * T samples of shape [...]. Its parameters are "<name>/<inner kind>/...",
/// e.g. "time_distributed_1/dense/kernel". The lengths pass unchanged.
class TimeDistributed : public Layer {
 public:
  explicit TimeDistributed(std::unique_ptr<Layer> inner);
  std::string kind() const override { return "time_distributed"; }
  Shape build(const Shape& input_shape, DType dtype, Device device, InitRng& rng) override;
  Tensor forward(const Tensor& x, ForwardContext& ctx) override;
  Tensor backward(const Tensor& dy) override;
  std::vector<Parameter*> parameters() override { return inner_->parameters(); }
  std::vector<Buffer*> buffers() override { return inner_->buffers(); }
  nlohmann::json config() const override;
  Layer& inner() { return *inner_; }

 private:
  std::unique_ptr<Layer> inner_;
  Shape input_shape_, output_shape_;
  std::int64_t batch_ = 0;
};

/// Keras's Conv2DTranspose: the adjoint of a Conv2D (its backward-data), so that a Conv2D of the
/// output with the same kernel, strides and padding gives the input's size. Input NCHW
/// [N, C, H, W]; kernel [C, filters, kh, kw] (PyTorch's ConvTranspose2d layout; Keras's is
/// [kh, kw, filters, C]); output [N, filters, H', W'] with H' = H * stride ("same") or
/// H * stride + max(kh - stride, 0) ("valid"), Keras's sizes. Init: Glorot uniform with Keras's
/// fans (fan_in = filters * kh * kw, fan_out = C * kh * kw), zero bias.
class Conv2DTranspose : public Layer {
 public:
  Conv2DTranspose(int filters, int kernel_h, int kernel_w, int stride, Padding padding,
                  Activation act, bool use_bias);
  std::string kind() const override { return "conv2d_transpose"; }
  /// The Conv2D from the output to the input whose adjoint this is, after build.
  const ops::Conv2DGeometry& geometry() const { return geometry_; }
  Shape build(const Shape& input_shape, DType dtype, Device device, InitRng& rng) override;
  Tensor forward(const Tensor& x, ForwardContext& ctx) override;
  Tensor backward(const Tensor& dy) override;
  std::vector<Parameter*> parameters() override;
  nlohmann::json config() const override;

 private:
  int filters_, kernel_h_, kernel_w_, stride_;
  Padding padding_;
  Activation act_;
  bool use_bias_;
  Shape input_shape_, output_shape_;
  DType dtype_ = DType::kFloat32;
  ops::Conv2DGeometry geometry_;  // of the Conv2D from the output to the input
  Parameter kernel_, bias_;
  Tensor x_, y_;
};

/// Element-wise merges: Multiply (product), Subtract (exactly two: a - b), Average (mean). The
/// inputs have one rank and, in each dimension, one size or 1: an input of size 1 there is
/// broadcast (Keras's rule, e.g. a squeeze-and-excitation gate [C, 1, 1] times the image
/// [C, H, W]), and its gradient is summed over the axes it was broadcast along.
class ElementwiseMerge : public MergeLayer {
 public:
  enum class Op { kMultiply, kSubtract, kAverage };
  explicit ElementwiseMerge(Op op);
  std::string kind() const override;
  Shape build_inputs(const std::vector<Shape>& input_shapes, const std::vector<std::string>& names,
                     DType dtype, Device device) override;
  Tensor forward_inputs(const std::vector<Tensor>& xs, ForwardContext& ctx) override;
  std::vector<Tensor> backward_inputs(const Tensor& dy) override;
  nlohmann::json config() const override { return nlohmann::json::object(); }

 private:
  Op op_;
  std::size_t count_ = 0;
  std::vector<Shape> shapes_;  // each input's shape per sample
  Shape output_shape_;
  std::vector<Tensor> xs_;  // Multiply's inputs (broadcast to the output's shape), for its gradient
};

namespace detail {
/// x [N, s...] with its sample axes permuted: out sample axis i is x's axis axes[i] (a copy;
/// at most 3 sample axes).
Tensor permute_samples(const Tensor& x, const std::vector<int>& axes);
/// The throwing check "<name> (<kind>): <what>" of the layers here.
void require(const Layer& layer, bool ok, const std::string& what);
/// An element-wise merge's inputs: one shape, named in the error otherwise.
void require_one_shape(const Layer& layer, const std::vector<Shape>& shapes,
                       const std::vector<std::string>& names);
/// The shape the inputs broadcast to: one rank, and in each dimension one size or 1 (then the
/// largest); an InvalidArgument naming the inputs and their shapes otherwise.
Shape broadcast_shape(const Layer& layer, const std::vector<Shape>& shapes,
                      const std::vector<std::string>& names);
/// x (at most 4-D) repeated along its dimensions of size 1 to `shape` (same rank; a copy, or x
/// itself when it has that shape already).
Tensor broadcast_to(const Tensor& x, const Shape& shape);
/// broadcast_to's adjoint: g summed over the dimensions where `shape` has 1 and g does not.
Tensor reduce_to(const Tensor& g, const Shape& shape);
}  // namespace detail

}  // namespace mirror::nn
