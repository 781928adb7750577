// defines: the Keras layers built on the ops of ops.h "Keras's layers" and on grouped
// convolutions: the parametric activations (ReLU with max_value / negative_slope / threshold,
// i.e. ReLU6; LeakyReLU; ELU) and the activations differentiated through their input (silu,
// hard_sigmoid, hard_silu, gelu), the layer that applies one of those after a Dense or a
// convolution (ActivatedLayer), the merges Maximum and Minimum, DepthwiseConv2D and
// SeparableConv2D.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mirror/nn/layer.h"
#include "mirror/nn/layers.h"
#include "mirror/ops.h"

namespace mirror::nn {

/// Note [Activations through the input]: the activations a spec names whose gradient needs the
/// input (silu/swish, hard_sigmoid, hard_silu/hard_swish, gelu, and relu6, elu, leaky_relu): the
/// function for canonical `name`, or std::nullopt for another name (linear, relu, tanh, sigmoid
/// are ops::Activation's). Keras's aliases swish and hard_swish are read too.
std::optional<ops::Eltwise> input_activation(const std::string& name);
/// The canonical name of an input activation (silu, hard_sigmoid, hard_silu, gelu, gelu_tanh;
/// relu, leaky_relu, elu for the parametric ones).
std::string input_activation_name(const ops::Eltwise& f);

/// Note [Parametric activations] (ops.h): any input shape; the gradient reads the input. Its
/// kind is relu, leaky_relu or elu for Keras's layers of those names, and activation for the
/// Activation layers of the other functions (silu, hard_sigmoid, hard_silu, gelu_tanh).
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
  std::vector<std::int32_t> lengths_;  // hard_sigmoid's sequence lengths (Note [Sequence masks])
};

/// Note [Activations through the input]
/// Dense, Conv2D and the other layers with an `activation` apply relu, tanh and sigmoid
/// themselves, differentiating through their output. The functions whose gradient needs the
/// input (input_activation) are applied by this wrapper instead: the wrapped layer computes its
/// linear part, the wrapper applies the function (ops::eltwise_forward) and keeps the
/// pre-activation for backward. It is the model's layer in the wrapped one's place: kind, name,
/// parameters and buffers are the wrapped layer's (so parameter names, checkpoints and Keras
/// weights read as for the layer alone), and its config is the wrapped layer's with the
/// activation. Blocked images pass through (the function is element-wise). With Mirror's own
/// masks a function that is not 0 at 0 (hard_sigmoid) keeps sequences zero past their lengths,
/// as the sigmoid activation does.
class ActivatedLayer : public Layer {
 public:
  ActivatedLayer(std::unique_ptr<Layer> inner, ops::Eltwise f);
  std::string kind() const override { return inner_->kind(); }
  Shape build(const Shape& input_shape, DType dtype, Device device, InitRng& rng) override;
  Tensor forward(const Tensor& x, ForwardContext& ctx) override;
  Tensor backward(const Tensor& dy) override;
  std::vector<Parameter*> parameters() override { return inner_->parameters(); }
  std::vector<Buffer*> buffers() override { return inner_->buffers(); }
  nlohmann::json config() const override;
  bool accepts_blocked_input() const override { return inner_->accepts_blocked_input(); }
  Layer& inner() { return *inner_; }
  const ops::Eltwise& function() const { return f_; }

 private:
  /// Hands the wrapper's flags and name to the wrapped layer.
  void pass_flags();

  std::unique_ptr<Layer> inner_;
  ops::Eltwise f_;
  Tensor z_;  // the pre-activation
  std::vector<std::int32_t> lengths_;
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
