// defines: the preprocessing layers Keras models carry inside them: Rescaling and Normalization
// (a constant affine map per channel) and Resizing and CenterCrop (interpolation of images), with
// Keras's semantics, in training and inference alike (docs/model-spec.md).
//
// The channel of a sample is its last axis in Keras, which is C of Mirror's NCHW images
// [C, H, W] and F of features [F] and sequences [T, F]; one value applies to every element.
// None of these layers has a parameter: their constants come from the spec.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "mirror/nn/layer.h"
#include "mirror/ops.h"

namespace mirror::nn {

/// y = x * scale + offset, per channel or with one value for all (Keras's Rescaling).
class Rescaling : public Layer {
 public:
  /// Each of size 1 (all channels) or the number of channels.
  Rescaling(std::vector<double> scale, std::vector<double> offset);
  std::string kind() const override { return "rescaling"; }
  Shape build(const Shape& input_shape, DType dtype, Device device, InitRng& rng) override;
  Tensor forward(const Tensor& x, ForwardContext& ctx) override;
  Tensor backward(const Tensor& dy) override;
  nlohmann::json config() const override;

 private:
  std::vector<double> scale_, offset_;
  Shape input_shape_;
  DType dtype_ = DType::kFloat32;
  std::int64_t batch_ = 0;
};

/// Keras's Normalization with its mean and variance stated: y = (x - mean) / max(sqrt(variance),
/// 1e-7), or with `invert` y = mean + x * max(sqrt(variance), 1e-7), per channel or with one value
/// for all.
class Normalization : public Layer {
 public:
  Normalization(std::vector<double> mean, std::vector<double> variance, bool invert);
  std::string kind() const override { return "normalization"; }
  Shape build(const Shape& input_shape, DType dtype, Device device, InitRng& rng) override;
  Tensor forward(const Tensor& x, ForwardContext& ctx) override;
  Tensor backward(const Tensor& dy) override;
  nlohmann::json config() const override;
  const std::vector<double>& mean() const { return mean_; }
  const std::vector<double>& variance() const { return variance_; }

 private:
  std::vector<double> mean_, variance_;
  bool invert_;
  Shape input_shape_;
  DType dtype_ = DType::kFloat32;
  std::int64_t batch_ = 0;
};

/// Images [N, C, H, W] -> [N, C, height, width] as Keras's Resizing (and CenterCrop of an image
/// smaller than its target) computes them: bilinear (half-pixel centres, edges clamped, no
/// antialiasing: TensorFlow's and JAX's resize) or nearest (floor((i + 0.5) * in / out)),
/// optionally from the largest centred crop of the target's aspect ratio. The interpolation is
/// separable, so it runs as two products with constant matrices, on any device, and its
/// gradient is the transposed products.
class Resizing : public Layer {
 public:
  enum class Interpolation { kBilinear, kNearest };
  Resizing(int height, int width, Interpolation interpolation, bool crop_to_aspect_ratio);
  std::string kind() const override { return "resizing"; }
  Shape build(const Shape& input_shape, DType dtype, Device device, InitRng& rng) override;
  Tensor forward(const Tensor& x, ForwardContext& ctx) override;
  Tensor backward(const Tensor& dy) override;
  nlohmann::json config() const override;
  /// The row interpolation matrix [height, H] and the column one [width, W] (after build).
  const Tensor& rows() const { return rows_; }
  const Tensor& columns() const { return columns_; }

 private:
  int height_, width_;
  Interpolation interpolation_;
  bool crop_;
  Shape input_shape_;
  DType dtype_ = DType::kFloat32;
  Tensor rows_, columns_;
  std::int64_t batch_ = 0;
};

/// Keras's CenterCrop: the centred height x width window of an image [N, C, H, W] (starting at
/// (H - height) / 2, (W - width) / 2, rounded down); an image smaller than the target in either
/// dimension is resized instead as Keras does (its largest centred crop of the target's aspect
/// ratio, bilinear).
class CenterCrop : public Layer {
 public:
  CenterCrop(int height, int width);
  std::string kind() const override { return "center_crop"; }
  Shape build(const Shape& input_shape, DType dtype, Device device, InitRng& rng) override;
  Tensor forward(const Tensor& x, ForwardContext& ctx) override;
  Tensor backward(const Tensor& dy) override;
  nlohmann::json config() const override;
  /// The window's offset (top, left) when the layer crops; -1 when it resizes.
  int top() const { return top_; }
  int left() const { return left_; }
  /// The resize it runs instead of cropping (null when it crops).
  Resizing* resize() const { return resize_.get(); }

 private:
  int height_, width_;
  int top_ = -1, left_ = -1, bottom_ = 0, right_ = 0;
  std::unique_ptr<Resizing> resize_;
  Shape input_shape_;
};

namespace detail {
/// The interpolation matrix [out, size] of one axis (Resizing's): row i holds the weights of the
/// input positions [start, start + window) for output i.
std::vector<double> resize_matrix(int size, int start, int window, int out, bool bilinear);
/// Keras's crop to the target's aspect ratio (smart_resize): {top, left, height, width}.
std::vector<int> aspect_crop(int height, int width, int target_height, int target_width);
}  // namespace detail

}  // namespace mirror::nn
