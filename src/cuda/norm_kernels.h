// defines: the launchers of the normalisation, average-pooling, block-copy and GELU kernels
// (norm.cu). Raw device pointers, enqueued on `s`, launches checked, never synchronising.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "mirror/ops.h"

namespace mirror::cuda {

/// y = ka[c] (a - ca[c]) + kb[c] (b - cb[c]) + k0[c]; `coef` holds ka, ca, k0, kb, cb (C each;
/// kb and cb only when `b` is not null).
void channel_affine(const float* a, const float* b, const double* coef, float* y,
                    const ops::ChannelView& v, cudaStream_t s);
/// Average pooling over [planes, h, w] -> [planes, oh, ow], padding excluded from the count;
/// backward gathers per input element (no atomics).
void avgpool_forward(const float* x, float* y, std::int64_t planes, int h, int w, int oh, int ow,
                     const ops::Pool2DGeometry& g, cudaStream_t s);
void avgpool_backward(const float* dy, float* dx, std::int64_t planes, int h, int w, int oh, int ow,
                      const ops::Pool2DGeometry& g, cudaStream_t s);
/// ops::copy_block on elements of `element_size` bytes (1, 2, 4 or 8).
void copy_block(void* dst, const void* src, std::size_t element_size, const ops::BlockCopy& b,
                cudaStream_t s);
void gelu_forward(const float* x, float* y, std::int64_t n, cudaStream_t s);
void gelu_backward(const float* x, const float* dy, float* dx, std::int64_t n, cudaStream_t s);

}  // namespace mirror::cuda
