// defines: the launchers of the augmentation layers' kernels (augment.cu). Raw device pointers
// of n samples' [C, H, W] images, ids the samples' global ids; enqueued on `s`, launches
// checked, never synchronising.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "math/random_augment.h"

namespace mirror::cuda {

void augment_forward(const math::AugmentArgs& a, const float* x, float* y, const std::int64_t* ids,
                     std::int64_t n, cudaStream_t s);
/// dx must be zeroed (the geometric layers scatter into it).
void augment_backward(const math::AugmentArgs& a, const float* x, const float* dy, float* dx,
                      const std::int64_t* ids, std::int64_t n, cudaStream_t s);

}  // namespace mirror::cuda
