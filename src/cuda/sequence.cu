// Sequence layout kernels: per-sequence reversal within each length and strided column copies
// (the feature concat and slice of Bidirectional). Pure data movement, one thread per element.
#include "cuda/launch.cuh"
#include "cuda/sequence_kernels.h"

namespace mirror::cuda {
namespace {

__global__ void reverse_kernel(const float* x, float* y, const std::int32_t* lengths,
                               std::int64_t n, std::int64_t steps, std::int64_t width) {
  MIRROR_GRID_LOOP(k, n) {
    const std::int64_t j = k % width, t = (k / width) % steps, b = k / (width * steps);
    const std::int64_t len = lengths[b];
    const std::int64_t from = t < len ? len - 1 - t : t;
    y[k] = x[(b * steps + from) * width + j];
  }
}

__global__ void copy_columns_kernel(const float* src, std::int64_t src_stride, float* dst,
                                    std::int64_t dst_stride, std::int64_t n, std::int64_t width) {
  MIRROR_GRID_LOOP(k, n) {
    const std::int64_t r = k / width, c = k % width;
    dst[r * dst_stride + c] = src[r * src_stride + c];
  }
}

}  // namespace

void reverse_sequences(const float* x, float* y, const std::int32_t* lengths, std::int64_t batch,
                       std::int64_t steps, std::int64_t width, cudaStream_t s) {
  const std::int64_t n = batch * steps * width;
  MIRROR_LAUNCH(reverse_kernel, n, s, x, y, lengths, n, steps, width);
}

void copy_columns(const float* src, std::int64_t src_stride, float* dst, std::int64_t dst_stride,
                  std::int64_t rows, std::int64_t width, cudaStream_t s) {
  const std::int64_t n = rows * width;
  MIRROR_LAUNCH(copy_columns_kernel, n, s, src, src_stride, dst, dst_stride, n, width);
}

}  // namespace mirror::cuda
