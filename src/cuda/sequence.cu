// Sequence kernels: per-sequence reversal within each length and strided column copies (the
// feature concat and slice of Bidirectional), and the 1-D window ops, one thread per output
// element running math/window1d.h's rules (the CPU loops run the same ones).
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

__global__ void im2col1d_kernel(const float* x, float* cols, std::int64_t n, std::int64_t steps,
                                std::int64_t c, math::window1d::Geometry g) {
  MIRROR_GRID_LOOP(k, n) {  // k indexes cols [batch, out, taps, c]
    const std::int64_t ch = k % c, j = (k / c) % g.k, t = (k / (c * g.k)) % g.out;
    const std::int64_t b = k / (c * g.k * g.out);
    const int p = math::window1d::tap(g, static_cast<int>(t), static_cast<int>(j));
    cols[k] = (p < 0 || p >= steps) ? 0.0f : x[(b * steps + p) * c + ch];
  }
}

__global__ void col2im1d_kernel(const float* cols, float* x, std::int64_t n, std::int64_t steps,
                                std::int64_t c, math::window1d::Geometry g) {
  MIRROR_GRID_LOOP(k, n) {  // k indexes x [batch, steps, c]
    const std::int64_t ch = k % c, p = (k / c) % steps, b = k / (c * steps);
    float sum = 0.0f;
    for (int j = 0; j < g.k; ++j) {  // tap order: the CPU loop's order
      const int t = math::window1d::reader(g, static_cast<int>(p), j);
      if (t >= 0) sum += cols[((b * g.out + t) * g.k + j) * c + ch];
    }
    x[k] = sum;
  }
}

__global__ void pool1d_forward_kernel(bool max, const float* x, float* y,
                                      const std::int32_t* lengths, std::int64_t n,
                                      std::int64_t steps, std::int64_t c,
                                      math::window1d::Geometry g) {
  MIRROR_GRID_LOOP(k, n) {  // k indexes y [batch, out, c]
    const std::int64_t ch = k % c, t = (k / c) % g.out, b = k / (c * g.out);
    y[k] = math::window1d::pool_value(max, x + b * steps * c + ch, static_cast<long>(c), lengths[b],
                                      g, static_cast<int>(t));
  }
}

__global__ void pool1d_backward_kernel(bool max, const float* x, const float* dy, float* dx,
                                       const std::int32_t* lengths, std::int64_t n,
                                       std::int64_t steps, std::int64_t c,
                                       math::window1d::Geometry g) {
  MIRROR_GRID_LOOP(k, n) {  // k indexes dx [batch, steps, c]
    const std::int64_t ch = k % c, p = (k / c) % steps, b = k / (c * steps);
    dx[k] = math::window1d::pool_grad(max, x + b * steps * c + ch, dy + b * g.out * c + ch,
                                      static_cast<long>(c), lengths[b], g, static_cast<int>(p));
  }
}

}  // namespace

void im2col1d(const float* x, float* cols, std::int64_t batch, std::int64_t steps, std::int64_t c,
              const math::window1d::Geometry& g, cudaStream_t s) {
  const std::int64_t n = batch * g.out * g.k * c;
  MIRROR_LAUNCH(im2col1d_kernel, n, s, x, cols, n, steps, c, g);
}

void col2im1d(const float* cols, float* x, std::int64_t batch, std::int64_t steps, std::int64_t c,
              const math::window1d::Geometry& g, cudaStream_t s) {
  const std::int64_t n = batch * steps * c;
  MIRROR_LAUNCH(col2im1d_kernel, n, s, cols, x, n, steps, c, g);
}

void pool1d_forward(bool max, const float* x, float* y, const std::int32_t* lengths,
                    std::int64_t batch, std::int64_t steps, std::int64_t c,
                    const math::window1d::Geometry& g, cudaStream_t s) {
  const std::int64_t n = batch * g.out * c;
  MIRROR_LAUNCH(pool1d_forward_kernel, n, s, max, x, y, lengths, n, steps, c, g);
}

void pool1d_backward(bool max, const float* x, const float* dy, float* dx,
                     const std::int32_t* lengths, std::int64_t batch, std::int64_t steps,
                     std::int64_t c, const math::window1d::Geometry& g, cudaStream_t s) {
  const std::int64_t n = batch * steps * c;
  MIRROR_LAUNCH(pool1d_backward_kernel, n, s, max, x, dy, dx, lengths, n, steps, c, g);
}

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
