// defines: LayerScale and ChannelsLastImage, the pieces of Keras's ConvNeXt that act on an
// image's channels (Keras's last axis, Mirror's NCHW axis 1).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mirror/nn/layer.h"

namespace mirror::nn {

/// keras.applications' LayerScale (ConvNeXt): y = x * gamma, gamma [projection_dim] a trained
/// per-channel scale initialised to init_values. The channel is an image's C ([C, H, W], NCHW)
/// or the last axis of features [F] and sequences [T, F]; it must have projection_dim values.
class LayerScale : public Layer {
 public:
  LayerScale(double init_values, std::int64_t projection_dim);
  std::string kind() const override { return "layer_scale"; }
  Shape build(const Shape& input_shape, DType dtype, Device device, InitRng& rng) override;
  Tensor forward(const Tensor& x, ForwardContext& ctx) override;
  Tensor backward(const Tensor& dy) override;
  std::vector<Parameter*> parameters() override { return {&gamma_}; }
  nlohmann::json config() const override;

 private:
  double init_values_;
  std::int64_t projection_dim_;
  Shape input_shape_;
  DType dtype_ = DType::kFloat32;
  Parameter gamma_;
  Tensor x_;
};

/// Note [Keras layers on image channels]: Keras applies Dense and LayerNormalization(axis -1) to
/// the last axis of their input, which for a channels_last image [H, W, C] is C: a Dense is a 1x1
/// convolution over the channels, a LayerNormalization normalises each pixel's channels. Mirror's
/// images are NCHW, so this adaptor runs the wrapped layer (built for sequences [H * W, C]) on the
/// image read as [N, H * W, C] and gives its output back as [N, C', H, W]. The wrapped layer
/// keeps this layer's name, so its parameters are named as the plain layer's ("dense_3/kernel")
/// and its Keras weights are the plain layer's.
class ChannelsLastImage : public Layer {
 public:
  explicit ChannelsLastImage(std::unique_ptr<Layer> inner);
  std::string kind() const override { return inner_->kind(); }
  Shape build(const Shape& input_shape, DType dtype, Device device, InitRng& rng) override;
  Tensor forward(const Tensor& x, ForwardContext& ctx) override;
  Tensor backward(const Tensor& dy) override;
  std::vector<Parameter*> parameters() override { return inner_->parameters(); }
  std::vector<Buffer*> buffers() override { return inner_->buffers(); }
  nlohmann::json config() const override;

 private:
  std::unique_ptr<Layer> inner_;
  Shape input_shape_, output_shape_;
};

}  // namespace mirror::nn
