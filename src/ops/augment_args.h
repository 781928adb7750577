// defines: augment_args, ops::ImageAugment (the public description) as the plain
// math::AugmentArgs the CPU loops and the CUDA kernels read. Internal to src/.
#pragma once

#include <cstdint>

#include "math/random_augment.h"
#include "mirror/ops.h"
#include "mirror/ops_augment.h"
#include "mirror/tensor.h"

namespace mirror::ops {

inline math::AugmentArgs augment_args(const ImageAugment& a, const Tensor& x, std::uint64_t seed) {
  math::AugmentArgs m;
  m.kind = static_cast<int>(a.kind);  // ImageAugment::Kind lists math::AugmentKind's order
  m.flip_horizontal = a.flip_horizontal;
  m.flip_vertical = a.flip_vertical;
  for (int i = 0; i < 2; ++i) {
    m.lower[i] = static_cast<float>(a.lower[i]);
    m.upper[i] = static_cast<float>(a.upper[i]);
  }
  m.same_zoom = a.same_zoom;
  m.fill = static_cast<int>(a.fill);  // ImageAugment::Fill lists math::AugmentFill's order
  m.nearest = a.nearest;
  m.fill_value = static_cast<float>(a.fill_value);
  m.value_lo = static_cast<float>(a.value_lo);
  m.value_hi = static_cast<float>(a.value_hi);
  m.seed = seed;
  m.channels = x.dim(1);
  m.height = x.dim(2);
  m.width = x.dim(3);
  const bool crop = a.kind == ImageAugment::Kind::kCrop;
  m.out_height = crop ? a.crop_height : m.height;
  m.out_width = crop ? a.crop_width : m.width;
  if (crop || a.kind == ImageAugment::Kind::kFlip) {  // whole pixels inside the image: one tap
    m.nearest = true;
    m.fill = math::kFillConstant;
  }
  return m;
}

}  // namespace mirror::ops
