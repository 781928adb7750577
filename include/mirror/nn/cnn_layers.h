// defines: the layers of residual and branching CNNs: BatchNormalization (with cross-replica
// synchronisation), LayerNormalization, the merges Add and Concatenate, GlobalAveragePooling2D,
// AveragePooling2D and ZeroPadding2D. Layouts are Mirror's (NCHW images, [N, F] features,
// [N, T, F] sequences); "the channel axis" is Keras's axis -1 of the same data.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mirror/nn/layer.h"
#include "mirror/nn/layers.h"
#include "mirror/ops.h"

namespace mirror::nn {

/// Note [BatchNormalization]
/// Keras semantics: per channel (dimension 1 of [N, C, H, W] and [N, F]; F of [N, T, F]),
///   training:  y = gamma (x - mean_B) / sqrt(var_B + epsilon) + beta with the batch's mean and
///              biased variance, and moving = momentum * moving + (1 - momentum) * batch;
///   inference: the same with the moving statistics.
/// Parameters gamma ("<name>/gamma", ones) and beta ("<name>/beta", zeros) when scale/center;
/// buffers "<name>/moving_mean" (zeros) and "<name>/moving_variance" (ones).
/// Synchronized (Keras 3's `synchronized=True`, PyTorch's SyncBatchNorm): the batch statistics
/// are those of the GLOBAL batch of every replica: the per-channel sum, sum of squares and count
/// are summed over replicas (ForwardContext::replica_sum) before normalising, and in backward
/// the two per-channel gradient sums likewise, so R replicas with batch b compute exactly what
/// one replica with batch R*b computes (docs/architecture.md invariant 2). Unsynchronized, each
/// replica normalises its own shard; the strategy averages the moving statistics across replicas
/// at the end of every step so they never drift.
/// Training on a GPU (synchronized or not), the layer runs Note [Device batch norm]
/// (mirror/ops.h): statistics, their replica sum and the normalisation stay on the device.
class BatchNormalization : public Layer {
 public:
  BatchNormalization(double momentum = 0.99, double epsilon = 1e-3, bool center = true,
                     bool scale = true, bool synchronized = false);
  std::string kind() const override { return "batch_normalization"; }
  Shape build(const Shape& input_shape, DType dtype, Device device, InitRng& rng) override;
  Tensor forward(const Tensor& x, ForwardContext& ctx) override;
  Tensor backward(const Tensor& dy) override;
  std::vector<Parameter*> parameters() override;
  std::vector<Buffer*> buffers() override { return {&moving_mean_, &moving_variance_}; }
  nlohmann::json config() const override;
  bool synchronized() const { return synchronized_; }
  void set_synchronized(bool on) { synchronized_ = on; }
  /// Whether the last forward ran Note [Device batch norm]'s device path.
  bool ran_on_device() const { return device_path_; }
  /// Note [Blocked images] (mirror/ops.h): an image's statistics and normalisation run on the
  /// blocked layout as they are (ChannelView::block) when the output may be blocked; otherwise
  /// on the plain image.
  bool accepts_blocked_input() const override { return true; }
  bool can_fuse_relu() const override { return true; }
  bool can_return_conv_operand() const override { return true; }

 private:
  ops::ChannelView view(const Tensor& x) const;
  /// forward after the layout check: the statistics and the normalisation (with the ReLU when
  /// fused and on the host path).
  Tensor normalize(const Tensor& x, ForwardContext& ctx);

  double momentum_, epsilon_;
  bool center_, scale_, synchronized_;
  Shape input_shape_;
  DType dtype_ = DType::kFloat32;
  Parameter gamma_, beta_;
  Buffer moving_mean_, moving_variance_;
  // Saved by forward for backward.
  Tensor x_;
  bool batch_stats_ = false;           // training mode: statistics depend on x
  std::vector<double> mean_, invstd_;  // per channel, of the statistics used
  double count_ = 0;                   // elements per channel in the (global) batch
  std::vector<double> mask_;           // per sample: 1 real, 0 padding; empty: all real
  ReplicaSum* replica_sum_ = nullptr;  // set when synchronized and training with replicas
  // Note [Device batch norm]: the step ran on the device; these replace the host values above.
  bool device_path_ = false;
  Tensor saved_;    // float64 [2C + 1]: mean, invstd, count
  Tensor weights_;  // the batch's sample weights on x's device (undefined: all real)
  std::int64_t device_block_ = 0;  // the device path ran on plain_image(x) of this block
  std::int64_t converted_block_ = 0;  // forward made a blocked input plain: dx goes back to it
  // Note [BatchNorm and ReLU]: the forward map whose output > 0 is the fused ReLU's mask; on
  // the device path, the ReLU's output instead (the ReLU ran as its own op there).
  ops::ReluMask relu_mask_;
  Tensor relu_y_;
  Tensor backward_in_layout(const Tensor& dy);  // dx in the layout forward computed in
  Tensor forward_on_device(const Tensor& x, ForwardContext& ctx, const ops::ChannelView& v);
  Tensor backward_on_device(const Tensor& dy);
};

/// Tests: run BatchNormalization's training device path (Note [Device batch norm]) on every
/// device, the CPU included, instead of on GPUs only. Returns the previous setting.
bool force_device_batchnorm(bool on);

/// Keras LayerNormalization over the last axis (features of [N, F] or [N, T, F]): per row,
/// y = gamma (x - mean) / sqrt(var + epsilon) + beta; gamma ones, beta zeros; epsilon 1e-3.
class LayerNormalization : public Layer {
 public:
  explicit LayerNormalization(double epsilon = 1e-3, bool center = true, bool scale = true);
  std::string kind() const override { return "layer_normalization"; }
  Shape build(const Shape& input_shape, DType dtype, Device device, InitRng& rng) override;
  Tensor forward(const Tensor& x, ForwardContext& ctx) override;
  Tensor backward(const Tensor& dy) override;
  std::vector<Parameter*> parameters() override;
  nlohmann::json config() const override;

 private:
  double epsilon_;
  bool center_, scale_;
  Shape input_shape_;
  DType dtype_ = DType::kFloat32;
  std::int64_t features_ = 0;
  Parameter gamma_, beta_;
  Tensor xhat_;
  std::vector<double> rstd_;
};

/// Element-wise sum of two or more inputs of one shape, or of one rank with sizes that are equal
/// or 1 in each dimension (an input of size 1 there is broadcast, as Keras's Add does, and its
/// gradient summed over that axis). Another mismatch is an InvalidArgument at build naming both
/// inputs and both shapes.
class Add : public MergeLayer {
 public:
  std::string kind() const override { return "add"; }
  Shape build_inputs(const std::vector<Shape>& input_shapes, const std::vector<std::string>& names,
                     DType dtype, Device device) override;
  Tensor forward_inputs(const std::vector<Tensor>& xs, ForwardContext& ctx) override;
  std::vector<Tensor> backward_inputs(const Tensor& dy) override;
  nlohmann::json config() const override { return nlohmann::json::object(); }
  /// Note [Blocked images] (mirror/ops.h): the sum is blocked when any input is and the output
  /// may be; inputs in the other layout are converted, and so are their gradients.
  bool accepts_blocked_input() const override { return true; }
  /// Note [BatchNorm and ReLU] (mirror/ops.h): the residual block's ReLU after the sum.
  bool can_fuse_relu() const override { return true; }

 private:
  std::size_t count_ = 0;
  std::vector<Shape> broadcast_;  // each input's shape when some input is broadcast, else empty
  Shape output_shape_;
  Tensor relu_y_;  // the sum after the fused ReLU: its mask for backward
  std::vector<std::int64_t> input_blocks_;  // each input's layout (image_block) in forward
  std::int64_t output_block_ = 0;
};

/// Concatenation along the channel axis (dimension 1: channels of NCHW, features of [N, F]);
/// the other dimensions must agree (InvalidArgument naming both inputs and shapes otherwise).
/// Sequences [N, T, F] are not supported (their channel axis is the last).
class Concatenate : public MergeLayer {
 public:
  std::string kind() const override { return "concatenate"; }
  Shape build_inputs(const std::vector<Shape>& input_shapes, const std::vector<std::string>& names,
                     DType dtype, Device device) override;
  Tensor forward_inputs(const std::vector<Tensor>& xs, ForwardContext& ctx) override;
  std::vector<Tensor> backward_inputs(const Tensor& dy) override;
  nlohmann::json config() const override { return nlohmann::json::object(); }

 private:
  std::vector<std::int64_t> channels_;
  bool sequences_ = false;           // [N, T, F] inputs, joined along F
  std::vector<std::int64_t> steps_;  // their N and T in the last forward
};

/// [N, C, H, W] -> [N, C]: the mean over each channel's plane.
class GlobalAveragePooling2D : public Layer {
 public:
  std::string kind() const override { return "global_average_pooling2d"; }
  Shape build(const Shape& input_shape, DType dtype, Device device, InitRng& rng) override;
  Tensor forward(const Tensor& x, ForwardContext& ctx) override;
  Tensor backward(const Tensor& dy) override;
  nlohmann::json config() const override { return nlohmann::json::object(); }

 private:
  Shape input_shape_;
  DType dtype_ = DType::kFloat32;
  ops::Pool2DGeometry geometry_;
  std::int64_t batch_ = 0;
};

/// Average pooling over pool x pool windows (stride 0 = pool); "same" padding leaves padded
/// positions out of each window's count (TensorFlow).
class AveragePooling2D : public Layer {
 public:
  explicit AveragePooling2D(int pool = 2, int stride = 0, Padding padding = Padding::kValid);
  std::string kind() const override { return "average_pooling2d"; }
  Shape build(const Shape& input_shape, DType dtype, Device device, InitRng& rng) override;
  Tensor forward(const Tensor& x, ForwardContext& ctx) override;
  Tensor backward(const Tensor& dy) override;
  nlohmann::json config() const override;

 private:
  int pool_, stride_;
  Padding padding_;
  Shape input_shape_;
  DType dtype_ = DType::kFloat32;
  ops::Pool2DGeometry geometry_;
  Shape x_shape_;
};

/// Adds zero rows/columns around NCHW images: (top, bottom, left, right).
class ZeroPadding2D : public Layer {
 public:
  ZeroPadding2D(int top, int bottom, int left, int right);
  std::string kind() const override { return "zero_padding2d"; }
  Shape build(const Shape& input_shape, DType dtype, Device device, InitRng& rng) override;
  Tensor forward(const Tensor& x, ForwardContext& ctx) override;
  Tensor backward(const Tensor& dy) override;
  nlohmann::json config() const override;

 private:
  int top_, bottom_, left_, right_;
  Shape input_shape_;
  DType dtype_ = DType::kFloat32;
};

namespace detail {
/// The float32/float64 tensor's values on the host, as doubles.
std::vector<double> host_values(const Tensor& t);
/// A tensor of `dtype` on `device` holding `values` (shape [values.size()]).
Tensor from_host(const std::vector<double>& values, DType dtype, Device device);
}  // namespace detail

}  // namespace mirror::nn
