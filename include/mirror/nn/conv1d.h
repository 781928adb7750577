// defines: the 1-D layers over sequences [N, T, C] (Keras's channels_last): Conv1D, Pool1D
// (MaxPooling1D, AveragePooling1D) and GlobalPool1D (GlobalMaxPooling1D,
// GlobalAveragePooling1D). All are mask-aware: with sequence lengths in ctx.lengths (from the
// batch or a Masking layer, e.g. before an Embedding with mask_zero), steps past a sequence's
// length never win a max nor count in an average, outputs past the new length are zero, and
// ctx.lengths becomes the output lengths for the next layer. With Keras's masks (Note [Sequence
// masks] in layer.h) they read every step and end the lengths, as Keras's do, except
// GlobalAveragePooling1D, which averages the unmasked steps in Keras too.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mirror/nn/layer.h"
#include "mirror/nn/layers.h"
#include "mirror/ops.h"

namespace mirror::nn {

/// The output length of a sequence of `length` valid steps: the number of outputs the sequence
/// alone (unpadded) would have with this padding, at least 1 (lengths are in [1, T]). Exact for
/// valid and causal padding and for same padding at stride 1; same padding with a stride above
/// 1 aligns its windows to the padded batch length, as Keras does.
int window_output_length(const std::string& padding, int length, int k, int stride, int dilation);

/// 1-D convolution: y[n, t, o] = act(bias[o] + sum_{j, c} kernel[o, j, c] *
/// x[n, t * stride - pad_left + j * dilation, c]) with padding valid, same (TensorFlow's rule)
/// or causal (dilation * (k - 1) zeros before). Parameters: <name>/kernel [filters, k, C]
/// (Keras: [k, C, filters], see docs/checkpoint.md), <name>/bias [filters]; Glorot-uniform
/// kernel (fan_in k*C, fan_out k*filters, as Keras), zero bias. Runs as im2col1d + one gemm.
class Conv1D : public Layer {
 public:
  Conv1D(int filters, int kernel, int stride = 1, std::string padding = "valid", int dilation = 1,
         Activation act = Activation::kIdentity);
  std::string kind() const override { return "conv1d"; }
  /// input_shape = [T, C]; returns [T_out, filters].
  Shape build(const Shape& input_shape, DType dtype, Device device, InitRng& rng) override;
  Tensor forward(const Tensor& x, ForwardContext& ctx) override;
  Tensor backward(const Tensor& dy) override;
  std::vector<Parameter*> parameters() override { return {&kernel_param_, &bias_}; }
  nlohmann::json config() const override;

 private:
  int filters_, kernel_, stride_;
  std::string padding_;
  int dilation_;
  Activation act_;
  std::int64_t channels_ = 0;
  DType dtype_ = DType::kFloat32;
  Parameter kernel_param_, bias_;
  // Saved by forward for backward.
  ops::Window1D window_;
  std::int64_t steps_ = 0;
  Tensor cols_, y_;  // im2col1d(x) [N*T_out, k*C] and the activated output (before masking)
  std::vector<std::int32_t> out_lengths_;
};

/// Max or average pooling over windows of `pool` steps moved by `stride` (0: = pool, Keras's
/// default), padding valid or same. Input and output [N, T, C].
class Pool1D : public Layer {
 public:
  Pool1D(ops::Pool1D mode, int pool = 2, int stride = 0, std::string padding = "valid");
  std::string kind() const override {
    return mode_ == ops::Pool1D::kMax ? "max_pooling1d" : "average_pooling1d";
  }
  Shape build(const Shape& input_shape, DType dtype, Device device, InitRng& rng) override;
  Tensor forward(const Tensor& x, ForwardContext& ctx) override;
  Tensor backward(const Tensor& dy) override;
  nlohmann::json config() const override;

 private:
  ops::Pool1D mode_;
  int pool_, stride_;
  std::string padding_;
  std::int64_t channels_ = 0;
  ops::Window1D window_;
  Tensor x_;
  std::vector<std::int32_t> lengths_, out_lengths_;
};

/// Max or average over each sequence's valid steps: [N, T, C] -> [N, C]. Ends the time axis, so
/// it clears ctx.lengths.
class GlobalPool1D : public Layer {
 public:
  explicit GlobalPool1D(ops::Pool1D mode) : mode_(mode) {}
  std::string kind() const override {
    return mode_ == ops::Pool1D::kMax ? "global_max_pooling1d" : "global_average_pooling1d";
  }
  Shape build(const Shape& input_shape, DType dtype, Device device, InitRng& rng) override;
  Tensor forward(const Tensor& x, ForwardContext& ctx) override;
  Tensor backward(const Tensor& dy) override;
  nlohmann::json config() const override;

 private:
  ops::Pool1D mode_;
  std::int64_t channels_ = 0;
  ops::Window1D window_;
  Tensor x_;
  std::vector<std::int32_t> lengths_;
};

}  // namespace mirror::nn
