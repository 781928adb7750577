// defines: ops::ImageAugment and ops::augment_forward / augment_backward, the kernels of Keras's
// augmentation layers (nn/random_augment.h). Like ops.h's functions: arguments checked once
// (src/ops/dispatch_augment.cpp), then the tensors' backend runs them.
#pragma once

#include <cstdint>

#include "mirror/tensor.h"

namespace mirror::ops {

/// Keras's augmentation layers on images x [N, C, H, W] (Note [Augmentation draws] and Note
/// [Keras's affine sampling], src/math/random_augment.h): each sample's transform is drawn from
/// `seed` (the layer's, of this step) and its global id in `sample_ids` (int64 [N], on x's
/// device); the output has x's shape (a crop's: [N, C, crop_height, crop_width]). Flip,
/// translation, zoom and rotation resample the image
/// (`fill`, `nearest` or bilinear), a crop takes a window; contrast and brightness change values
/// and clip them to [value_lo, value_hi].
struct ImageAugment {
  enum class Kind { kFlip, kTranslation, kZoom, kRotation, kContrast, kBrightness, kCrop };
  enum class Fill { kReflect, kWrap, kConstant, kNearest };
  Kind kind = Kind::kFlip;
  bool flip_horizontal = false, flip_vertical = false;
  double lower[2] = {0, 0}, upper[2] = {0, 0};  // [height, width] factors, or [0] alone
  bool same_zoom = false;                       // RandomZoom without width_factor
  Fill fill = Fill::kReflect;
  bool nearest = false;
  double fill_value = 0;
  double value_lo = 0, value_hi = 255;
  /// kCrop: the window's size (at most the image's), placed at a drawn whole-pixel offset.
  std::int64_t crop_height = 0, crop_width = 0;
};
Tensor augment_forward(const ImageAugment& a, const Tensor& x, std::uint64_t seed,
                       const Tensor& sample_ids);
/// The input gradient for dy (x: the forward's input, dy the output's shape; the same seed and
/// ids).
Tensor augment_backward(const ImageAugment& a, const Tensor& x, const Tensor& dy,
                        std::uint64_t seed, const Tensor& sample_ids);

}  // namespace mirror::ops
