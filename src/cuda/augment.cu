// The CUDA kernels of Keras's augmentation layers: the arithmetic is src/math/random_augment.h's,
// the CPU's (cpu_augment.cpp). Forward: a thread per output element (a contrast plane's mean:
// a thread per plane). Backward: a thread per (sample, channel) plane walking it in the CPU's
// order, so the adjoint's scatter needs no atomics and sums deterministically.
#include "cuda/augment_kernels.h"
#include "cuda/launch.cuh"

namespace mirror::cuda {
namespace {

__global__ void affine_forward_kernel(math::AugmentArgs a, const float* x, float* y,
                                      const std::int64_t* ids, std::int64_t total) {
  const std::int64_t hw = a.height * a.width, out_hw = a.out_height * a.out_width;
  MIRROR_GRID_LOOP(i, total) {  // i: an output element
    const std::int64_t plane = i / out_hw, at = i % out_hw;
    float m[6];
    math::augment_affine(a, ids[plane / a.channels], m);
    y[i] = math::affine_pixel<float>(a, m, x + plane * hw, at / a.out_width, at % a.out_width);
  }
}

__global__ void affine_backward_kernel(math::AugmentArgs a, const float* dy, float* dx,
                                       const std::int64_t* ids, std::int64_t planes) {
  const std::int64_t hw = a.height * a.width, out_hw = a.out_height * a.out_width;
  MIRROR_GRID_LOOP(p, planes) {
    float m[6];
    math::augment_affine(a, ids[p / a.channels], m);
    math::affine_plane_backward<float>(a, m, dy + p * out_hw, dx + p * hw);
  }
}

__global__ void brightness_kernel(math::AugmentArgs a, const float* x, const float* dy, float* out,
                                  const std::int64_t* ids, std::int64_t total) {
  const std::int64_t chw = a.channels * a.height * a.width;
  MIRROR_GRID_LOOP(i, total) {
    const float v = x[i] + math::brightness_delta(a, ids[i / chw]);
    if (dy == nullptr) {
      out[i] = math::augment_clip(a, v);
    } else {
      out[i] = math::augment_inside(a, v) ? dy[i] : 0.0f;
    }
  }
}

__global__ void contrast_kernel(math::AugmentArgs a, const float* x, const float* dy, float* out,
                                const std::int64_t* ids, std::int64_t planes) {
  const std::int64_t hw = a.height * a.width;
  MIRROR_GRID_LOOP(p, planes) {
    const float f = math::contrast_factor(a, ids[p / a.channels]);
    if (dy == nullptr) {
      math::contrast_plane_forward<float>(a, f, x + p * hw, out + p * hw);
    } else {
      math::contrast_plane_backward<float>(a, f, x + p * hw, dy + p * hw, out + p * hw);
    }
  }
}

}  // namespace

void augment_forward(const math::AugmentArgs& a, const float* x, float* y, const std::int64_t* ids,
                     std::int64_t n, cudaStream_t s) {
  const std::int64_t planes = n * a.channels, total = planes * a.height * a.width;
  if (a.kind == math::kAugmentContrast) {
    MIRROR_LAUNCH(contrast_kernel, planes, s, a, x, nullptr, y, ids, planes);
  } else if (a.kind == math::kAugmentBrightness) {
    MIRROR_LAUNCH(brightness_kernel, total, s, a, x, nullptr, y, ids, total);
  } else {
    const std::int64_t outputs = planes * a.out_height * a.out_width;
    MIRROR_LAUNCH(affine_forward_kernel, outputs, s, a, x, y, ids, outputs);
  }
}

void augment_backward(const math::AugmentArgs& a, const float* x, const float* dy, float* dx,
                      const std::int64_t* ids, std::int64_t n, cudaStream_t s) {
  const std::int64_t planes = n * a.channels, total = planes * a.height * a.width;
  if (a.kind == math::kAugmentContrast) {
    MIRROR_LAUNCH(contrast_kernel, planes, s, a, x, dy, dx, ids, planes);
  } else if (a.kind == math::kAugmentBrightness) {
    MIRROR_LAUNCH(brightness_kernel, total, s, a, x, dy, dx, ids, total);
  } else {
    MIRROR_LAUNCH(affine_backward_kernel, planes, s, a, dy, dx, ids, planes);
  }
}

}  // namespace mirror::cuda
