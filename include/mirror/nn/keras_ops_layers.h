// defines: the Keras layers built on the ops of ops.h "Keras's layers" and on grouped
// convolutions: the parametric activations (ReLU with max_value / negative_slope / threshold,
// i.e. ReLU6; LeakyReLU; ELU), the merges Maximum and Minimum, DepthwiseConv2D and
// SeparableConv2D.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mirror/nn/layer.h"
#include "mirror/nn/layers.h"
#include "mirror/ops.h"

namespace mirror::nn {

/// Note [Parametric activations] (ops.h): any input shape; the gradient reads the input.
class ParametricActivation : public Layer {
 public:
  explicit ParametricActivation(ops::Eltwise f);
  std::string kind() const override;
  Shape build(const Shape& input_shape, DType dtype, Device device, InitRng& rng) override;
  Tensor forward(const Tensor& x, ForwardContext& ctx) override;
  Tensor backward(const Tensor& dy) override;
  nlohmann::json config() const override;
  const ops::Eltwise& function() const { return f_; }

 private:
  ops::Eltwise f_;
  Shape input_shape_;
  DType dtype_ = DType::kFloat32;
  Tensor x_;
};

/// Element-wise maximum (or minimum) of two or more inputs of one shape; the gradient goes to the
/// input that was taken (ties: the first).
class Extremum : public MergeLayer {
 public:
  explicit Extremum(bool minimum) : minimum_(minimum) {}
  std::string kind() const override { return minimum_ ? "minimum" : "maximum"; }
  Shape build_inputs(const std::vector<Shape>& input_shapes, const std::vector<std::string>& names,
                     DType dtype, Device device) override;
  Tensor forward_inputs(const std::vector<Tensor>& xs, ForwardContext& ctx) override;
  std::vector<Tensor> backward_inputs(const Tensor& dy) override;
  nlohmann::json config() const override { return nlohmann::json::object(); }

 private:
  bool minimum_;
  std::size_t count_ = 0;
  std::vector<Tensor> masks_;  // per fold step: 1 where the running result was kept
};

/// Keras's DepthwiseConv2D: each input channel convolved with its own depth_multiplier kernels
/// (a grouped convolution, groups = C). Kernel [C * m, 1, kh, kw], output channel c * m + j
/// (Keras's order); bias [C * m]. Init: Glorot uniform with Keras's fans for its kernel
/// [kh, kw, C, m] (fan_in = C kh kw, fan_out = m kh kw), zero bias.
///
/// With `pointwise` filters > 0 it is Keras's SeparableConv2D: the depthwise convolution (no
/// bias) followed by a 1x1 convolution to `pointwise` filters with the bias; parameters
/// depthwise_kernel, pointwise_kernel [filters, C * m, 1, 1], bias.
class DepthwiseConv2D : public Layer {
 public:
  DepthwiseConv2D(int kernel_h, int kernel_w, int stride, Padding padding, int depth_multiplier,
                  Activation act, bool use_bias, int pointwise = 0);
  std::string kind() const override {
    return pointwise_ > 0 ? "separable_conv2d" : "depthwise_conv2d";
  }
  Shape build(const Shape& input_shape, DType dtype, Device device, InitRng& rng) override;
  Tensor forward(const Tensor& x, ForwardContext& ctx) override;
  Tensor backward(const Tensor& dy) override;
  std::vector<Parameter*> parameters() override;
  nlohmann::json config() const override;

 private:
  int kernel_h_, kernel_w_, stride_;
  Padding padding_;
  int multiplier_;
  Activation act_;
  bool use_bias_;
  int pointwise_;
  Shape input_shape_;
  DType dtype_ = DType::kFloat32;
  ops::Conv2DGeometry depthwise_, one_by_one_;
  Parameter kernel_, pointwise_kernel_, bias_;
  Tensor x_, mid_, y_;  // mid_: the depthwise output of a separable convolution
};

}  // namespace mirror::nn
