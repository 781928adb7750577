// defines: the non-recurrent layers: Dense, Conv2D, MaxPool2D, Flatten, ActivationLayer,
// Dropout, Embedding (the recurrent ones, GRU and Masking, are in nn/recurrent.h).
//
// Every layer checks its input against the shape it was built for (batch dimension aside) and
// throws InvalidArgument naming the layer, the expected and the received shape. Parameters are
// created by build() with their gradients (zeros, same shape/dtype/device); backward
// ACCUMULATES into Parameter::grad and always writes through it (it may be a bucket view).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mirror/nn/layer.h"
#include "mirror/ops.h"

namespace mirror::nn {

using Activation = ops::Activation;
enum class Padding { kSame, kValid };

const char* activation_name(Activation act);
Activation parse_activation(const std::string& name);
const char* padding_name(Padding padding);

/// y = act(x @ kernel + bias). Input [N, in], output [N, units]; or a sequence [N, T, in] ->
/// [N, T, units], applied to every step (Keras's last axis), lengths passed on (Note [Sequence
/// masks]: with Mirror's masks the output is zero past each sequence's length).
/// Layout: kernel is stored [in, units] like Keras (not PyTorch's [units, in]); bias [units].
/// Init: Glorot uniform kernel (fan_in = in, fan_out = units), zero bias.
class Dense : public Layer {
 public:
  explicit Dense(int units, Activation act = Activation::kIdentity);
  std::string kind() const override { return "dense"; }
  Shape build(const Shape& input_shape, DType dtype, Device device, InitRng& rng) override;
  Tensor forward(const Tensor& x, ForwardContext& ctx) override;
  Tensor backward(const Tensor& dy) override;
  std::vector<Parameter*> parameters() override { return {&kernel_, &bias_}; }
  nlohmann::json config() const override;

 private:
  int units_;
  Activation act_;
  std::int64_t in_ = 0;
  Shape inner_;  // the input shape check_input expects: [in] or [-1, in]
  DType dtype_ = DType::kFloat32;
  Parameter kernel_, bias_;
  Tensor x_, y_;  // saved by forward: input and (post-activation) output, as rows [N*T, in/units]
  std::vector<std::int32_t> lengths_;  // a sequence's lengths when the output was zeroed past them
};

/// y = act(conv(x, kernel) + bias). Input NCHW [N, C, H, W]; kernel OIHW [filters, C, kh, kw];
/// bias [filters]. kSame is TensorFlow's "same" (output ceil(H / stride); an odd total padding
/// puts the extra row/column at the bottom/right); kValid pads nothing.
/// Init: Glorot uniform with fan_in = C*kh*kw, fan_out = filters*kh*kw (Keras), zero bias.
class Conv2D : public Layer {
 public:
  /// use_bias false: no bias parameter (a convolution followed by BatchNormalization).
  /// groups > 1: a grouped convolution (Keras's Conv2D(groups)): kernel [filters, C / groups,
  /// kh, kw]; groups must divide filters here and C at build. Grouped convolutions read and
  /// write plain images (Note [Blocked images] covers groups 1 only).
  Conv2D(int filters, int kernel_h, int kernel_w, int stride = 1, Padding padding = Padding::kValid,
         Activation act = Activation::kIdentity, bool use_bias = true, int groups = 1);
  std::string kind() const override { return "conv2d"; }
  bool accepts_blocked_input() const override { return groups_ == 1; }
  bool relu_output() const override { return act_ == Activation::kRelu; }
  bool output_grad_is_conv_operand() const override {
    return groups_ == 1 && (act_ == Activation::kIdentity || relu_masked_by_reader());
  }
  Shape build(const Shape& input_shape, DType dtype, Device device, InitRng& rng) override;
  Tensor forward(const Tensor& x, ForwardContext& ctx) override;
  Tensor backward(const Tensor& dy) override;
  std::vector<Parameter*> parameters() override;
  nlohmann::json config() const override;

 private:
  int filters_, kernel_h_, kernel_w_, stride_;
  Padding padding_;
  Activation act_;
  bool use_bias_ = true;
  int groups_ = 1;
  Shape input_shape_;  // [C, H, W]
  DType dtype_ = DType::kFloat32;
  ops::Conv2DGeometry geometry_;
  Parameter kernel_, bias_;
  Tensor x_, y_;
};

/// Max pooling over pool x pool windows. Input NCHW. kSame pads like TensorFlow (padded
/// positions never win); ties send the gradient to the first maximum in window order.
class MaxPool2D : public Layer {
 public:
  /// stride 0 means stride = pool (the Keras default).
  explicit MaxPool2D(int pool = 2, int stride = 0, Padding padding = Padding::kValid);
  std::string kind() const override { return "max_pooling2d"; }
  bool accepts_blocked_input() const override { return true; }
  bool can_mask_input_relu() const override { return true; }
  bool can_return_conv_operand() const override { return true; }
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
  Tensor x_, y_;
};

/// [N, d1, d2, ...] -> [N, d1*d2*...] (a view; no copy).
class Flatten : public Layer {
 public:
  std::string kind() const override { return "flatten"; }
  Shape build(const Shape& input_shape, DType dtype, Device device, InitRng& rng) override;
  Tensor forward(const Tensor& x, ForwardContext& ctx) override;
  Tensor backward(const Tensor& dy) override;
  nlohmann::json config() const override { return nlohmann::json::object(); }

 private:
  Shape input_shape_;
  DType dtype_ = DType::kFloat32;
};

/// Element-wise activation, any input shape. The GELU (erf form; a layer only, not a Dense or
/// Conv2D activation) is made with ActivationLayer::gelu().
class ActivationLayer : public Layer {
 public:
  explicit ActivationLayer(Activation act);
  static std::unique_ptr<ActivationLayer> gelu();
  std::string kind() const override { return "activation"; }
  Shape build(const Shape& input_shape, DType dtype, Device device, InitRng& rng) override;
  Tensor forward(const Tensor& x, ForwardContext& ctx) override;
  Tensor backward(const Tensor& dy) override;
  nlohmann::json config() const override;
  /// Element-wise: a blocked image stays blocked, or is made plain first when the output may
  /// not be blocked (Note [Blocked images], mirror/ops.h).
  bool accepts_blocked_input() const override { return true; }
  bool is_relu() const override { return act_ == Activation::kRelu && !gelu_; }

 private:
  Activation act_;
  bool gelu_ = false;
  Shape input_shape_;
  DType dtype_ = DType::kFloat32;
  Tensor y_;  // the output; the input for the GELU (whose gradient needs it)
  std::int64_t converted_block_ = 0;  // forward made a blocked input plain: dx goes back to it
  std::vector<std::int32_t> lengths_;  // a sigmoid's sequence lengths (Note [Sequence masks])
};

/// Inverted dropout while training (identity otherwise). The mask is a pure function of
/// (ctx.seed mixed with a constant derived from this layer's name, ctx.sample_ids[n], element
/// index), so it does not depend on which replica holds a sample. Training needs
/// ctx.sample_ids (int64 [N]); its absence is an InvalidArgument.
///
/// `noise_shape` is Keras's (batch axis first, -1 for None; empty: none): the mask is drawn for
/// the input's shape with a 1 wherever noise_shape has one, element indices counted in that
/// smaller shape, and broadcast over those axes, so [None, 1, 1, 1] keeps or drops each sample
/// whole (EfficientNet's stochastic depth) and a noise_shape of the input's own dimensions is
/// plain dropout. `channels_last`: a rank-4 noise_shape counts an image's axes as Keras's
/// [N, H, W, C] (Note [Channels-last layouts], nn/keras_layers.h). Each dimension must be None,
/// 1 or the input's (its batch entry None: masks are per sample).
class Dropout : public Layer {
 public:
  explicit Dropout(double rate, std::vector<std::int64_t> noise_shape = {},
                   bool channels_last = false);
  std::string kind() const override { return "dropout"; }
  Shape build(const Shape& input_shape, DType dtype, Device device, InitRng& rng) override;
  Tensor forward(const Tensor& x, ForwardContext& ctx) override;
  Tensor backward(const Tensor& dy) override;
  nlohmann::json config() const override;
  /// The seed the dropout kernel gets for a step seed (exposed for tests).
  std::uint64_t layer_seed(std::uint64_t step_seed) const;

 private:
  /// The per-sample shape of the mask for an input of per-sample shape `s` (Mirror's order).
  Shape mask_shape(const Shape& s) const;

  double rate_;
  std::vector<std::int64_t> noise_shape_;
  bool channels_last_ = false;
  Shape input_shape_;
  DType dtype_ = DType::kFloat32;
  bool active_ = false;  // whether the last forward applied a mask
  Tensor mask_;
};

/// Token embedding: int32 ids [N, T] -> [N, T, dim]. Index 0 is padding: its row is zero at
/// init and receives no gradient (so no optimizer moves it). Init U(-0.05, 0.05) like Keras.
/// With padding_row false (Keras's embedding, Note [Sequence masks]) row 0 is a row like the
/// others once trained (it still starts at zero, so a seed gives the same initial weights).
/// T may differ from the T the layer was built for (sequences are padded per batch).
/// No input gradient (ids are not differentiable): backward returns an undefined Tensor.
class Embedding : public Layer {
 public:
  Embedding(std::int64_t vocab, int dim, bool padding_row = true);
  std::string kind() const override { return "embedding"; }
  Shape build(const Shape& input_shape, DType dtype, Device device, InitRng& rng) override;
  Tensor forward(const Tensor& x, ForwardContext& ctx) override;
  Tensor backward(const Tensor& dy) override;
  std::vector<Parameter*> parameters() override { return {&table_}; }
  nlohmann::json config() const override;

 private:
  std::int64_t vocab_;
  int dim_;
  bool padding_row_ = true;
  Parameter table_;
  Tensor ids_;
};

namespace detail {
/// Throws InvalidArgument "<layer>: expected input [N, d...] <dtype>, got <tensor>" unless x has
/// rank 1 + inner.size(), the inner dims equal `inner` (dims given as -1 match anything) and
/// the dtype matches.
void check_input(const Layer& layer, const Tensor& x, const Shape& inner, DType dtype);
/// check_input, or for an image layer given a blocked image (Note [Blocked images],
/// mirror/ops.h) the same check on its NCHW shape.
void check_image_input(const Layer& layer, const Tensor& x, const Shape& inner, DType dtype);
/// A sequence's shape [T, F] with any T ([-1, F]): token batches are padded to their own longest
/// sequence. Other shapes as they are.
Shape any_steps(const Shape& inner);
/// The windows of a pool x pool pooling layer over an image [C, H, W]: TensorFlow's "same"
/// padding is the convolution rule with the window as kernel. Throws InvalidArgument naming the
/// layer when the window is larger than the (padded) input.
ops::Pool2DGeometry pool_geometry(const Layer& layer, const Shape& input_shape, int pool,
                                  int stride, Padding padding);
/// A Parameter named "<layer>/<what>" holding `value`, with a zero gradient like it.
Parameter make_parameter(const Layer& layer, const std::string& what, Tensor value);
}  // namespace detail

}  // namespace mirror::nn
