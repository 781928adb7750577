// defines: the launchers of the sequence kernels (sequence.cu) behind ops.h's
// reverse_sequences, concat_features, slice_features and the 1-D window ops (im2col1d,
// col2im1d, pool1d_*). Raw device pointers, the stream to enqueue on; the launch is checked,
// nothing synchronises.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "math/window1d.h"

namespace mirror::cuda {

/// y[b, t] = x[b, len_b - 1 - t] for t < len_b, else x[b, t] (rows of `width` floats).
void reverse_sequences(const float* x, float* y, const std::int32_t* lengths, std::int64_t batch,
                       std::int64_t steps, std::int64_t width, cudaStream_t s);
/// dst[r * dst_stride + c] = src[r * src_stride + c] for r < rows, c < width.
void copy_columns(const float* src, std::int64_t src_stride, float* dst, std::int64_t dst_stride,
                  std::int64_t rows, std::int64_t width, cudaStream_t s);

/// x [batch, steps, c] -> cols [batch, g.out, g.k * c] (math::window1d::tap; 0 in the padding).
void im2col1d(const float* x, float* cols, std::int64_t batch, std::int64_t steps, std::int64_t c,
              const math::window1d::Geometry& g, cudaStream_t s);
/// cols -> x, summing the taps that read each step in tap order.
void col2im1d(const float* cols, float* x, std::int64_t batch, std::int64_t steps, std::int64_t c,
              const math::window1d::Geometry& g, cudaStream_t s);
/// y [batch, g.out, c] = math::window1d::pool_value per element (lengths on the device).
void pool1d_forward(bool max, const float* x, float* y, const std::int32_t* lengths,
                    std::int64_t batch, std::int64_t steps, std::int64_t c,
                    const math::window1d::Geometry& g, cudaStream_t s);
/// dx [batch, steps, c] = math::window1d::pool_grad per element.
void pool1d_backward(bool max, const float* x, const float* dy, float* dx,
                     const std::int32_t* lengths, std::int64_t batch, std::int64_t steps,
                     std::int64_t c, const math::window1d::Geometry& g, cudaStream_t s);

}  // namespace mirror::cuda
