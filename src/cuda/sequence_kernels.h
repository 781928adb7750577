// defines: the launchers of the sequence layout kernels (sequence.cu) behind ops.h's
// reverse_sequences, concat_features and slice_features. Raw device pointers, the stream to
// enqueue on; the launch is checked, nothing synchronises.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace mirror::cuda {

/// y[b, t] = x[b, len_b - 1 - t] for t < len_b, else x[b, t] (rows of `width` floats).
void reverse_sequences(const float* x, float* y, const std::int32_t* lengths, std::int64_t batch,
                       std::int64_t steps, std::int64_t width, cudaStream_t s);
/// dst[r * dst_stride + c] = src[r * src_stride + c] for r < rows, c < width.
void copy_columns(const float* src, std::int64_t src_stride, float* dst, std::int64_t dst_stride,
                  std::int64_t rows, std::int64_t width, cudaStream_t s);

}  // namespace mirror::cuda
