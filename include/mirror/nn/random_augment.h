// defines: RandomAugment, Keras's augmentation layers inside a model (RandomFlip,
// RandomTranslation, RandomZoom, RandomRotation, RandomContrast, RandomBrightness) on images
// [C, H, W], and RandomCrop.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "mirror/nn/layer.h"
#include "mirror/ops.h"
#include "mirror/ops_augment.h"

namespace mirror::nn {

/// While training, transforms each sample's image by a transform drawn from the step seed, this
/// layer's name and the sample's global id (Note [Augmentation draws], src/math/random_augment.h:
/// the same on every rank count, and a resumed run repeats it); outside training (evaluate,
/// predict, ONNX export) it passes the input unchanged, as Keras does. The formulas are Keras
/// 3's (ops::ImageAugment). Backward is the transform's adjoint (the geometric layers are linear
/// in the input) or the colour layers' derivative, so a trainable layer before it trains.
class RandomAugment : public Layer {
 public:
  /// `kind`: random_flip, random_translation, random_zoom, random_rotation, random_contrast or
  /// random_brightness (its ops::ImageAugment::Kind must agree).
  RandomAugment(std::string kind, const ops::ImageAugment& augment);
  std::string kind() const override { return kind_; }
  Shape build(const Shape& input_shape, DType dtype, Device device, InitRng& rng) override;
  Tensor forward(const Tensor& x, ForwardContext& ctx) override;
  Tensor backward(const Tensor& dy) override;
  nlohmann::json config() const override;
  const ops::ImageAugment& augment() const { return augment_; }

 private:
  std::string kind_;
  ops::ImageAugment augment_;
  Shape input_shape_;
  DType dtype_ = DType::kFloat32;
  // What backward needs of the last training forward; x_ undefined: it was the identity.
  Tensor x_, ids_;
  std::uint64_t seed_ = 0;
};

/// Keras's RandomCrop(height, width) on images [C, H, W]. In training, an image larger than the
/// window in both dimensions gives the window at a whole-pixel offset drawn as Keras draws it
/// (top = int(uniform(0, H - height + 1)), left likewise), per sample from (step seed, layer,
/// sample id) where Keras draws one offset per batch. Otherwise, and outside training, Keras's
/// centred box of the window's aspect ratio resized to it (bilinear): Resizing with
/// crop_to_aspect_ratio, which is the box Keras computes. (Keras 3.15 returns the uncropped image
/// outside training, which contradicts the output shape it declares; Mirror's output is always
/// [C, height, width], and the ONNX export writes the resize.)
class RandomCrop : public Layer {
 public:
  RandomCrop(int height, int width);
  std::string kind() const override { return "random_crop"; }
  Shape build(const Shape& input_shape, DType dtype, Device device, InitRng& rng) override;
  Tensor forward(const Tensor& x, ForwardContext& ctx) override;
  Tensor backward(const Tensor& dy) override;
  nlohmann::json config() const override { return {{"height", height_}, {"width", width_}}; }
  /// The inference path (after build).
  const Layer* resize() const { return resize_.get(); }
  /// Whether training crops at random (the image exceeds the window in both dimensions).
  bool random() const { return random_; }

 private:
  int height_, width_;
  std::unique_ptr<Layer> resize_;
  bool random_ = false;
  Shape input_shape_;
  DType dtype_ = DType::kFloat32;
  Tensor x_, ids_;  // the last forward's, when it cropped at random
  std::uint64_t seed_ = 0;
  ops::ImageAugment crop() const;
};

/// The seed an augmentation layer draws with at a step: the step seed salted with the layer's
/// name (Dropout's salting, and a constant so that a dropout layer's stream is never one of
/// these).
std::uint64_t augment_layer_seed(const Layer& layer, std::uint64_t step_seed);

/// Whether `kind` is one of RandomAugment's (identity at inference, for exporters).
bool is_random_augment(const std::string& kind);

}  // namespace mirror::nn
