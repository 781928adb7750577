// The kernels behind BatchNormalization / LayerNormalization (per-channel affine maps; the sums
// are in channel_reduce.cu),
// average pooling, strided block copies (concatenate, split, pad, crop) and GELU. Per-element
// math comes from src/math (Note [Shared math]).
#include <cstdint>

#include "cuda/launch.cuh"
#include "cuda/norm_kernels.h"
#include "math/gelu.h"

namespace mirror::cuda {
namespace {

__global__ void channel_affine_kernel(const float* a, const float* b, const double* coef, float* y,
                                      std::int64_t n, std::int64_t channels, std::int64_t inner) {
  MIRROR_GRID_LOOP(k, n) {
    const std::int64_t c = (k / inner) % channels;
    const double* ka = coef;
    const double* ca = coef + channels;
    const double* k0 = coef + 2 * channels;
    // The CPU loop's order: (ka (a - ca) + kb (b - cb)) + k0.
    float v = static_cast<float>(ka[c]) * (a[k] - static_cast<float>(ca[c]));
    if (b != nullptr) {
      const double* kb = coef + 3 * channels;
      const double* cb = coef + 4 * channels;
      v += static_cast<float>(kb[c]) * (b[k] - static_cast<float>(cb[c]));
    }
    y[k] = v + static_cast<float>(k0[c]);
  }
}

struct AvgArgs {
  int h, w, oh, ow, kh, kw, sh, sw, top, left;
};

__device__ int window_count(const AvgArgs& a, int oh, int ow) {
  int h0 = oh * a.sh - a.top, w0 = ow * a.sw - a.left;
  int h1 = h0 + a.kh < a.h ? h0 + a.kh : a.h, w1 = w0 + a.kw < a.w ? w0 + a.kw : a.w;
  h0 = h0 < 0 ? 0 : h0;
  w0 = w0 < 0 ? 0 : w0;
  return (h1 - h0) * (w1 - w0);
}

__global__ void avgpool_forward_kernel(const float* x, float* y, std::int64_t n, AvgArgs a) {
  MIRROR_GRID_LOOP(k, n) {
    const std::int64_t p = k / (static_cast<std::int64_t>(a.oh) * a.ow);
    const int oh = static_cast<int>((k / a.ow) % a.oh), ow = static_cast<int>(k % a.ow);
    const float* plane = x + p * a.h * a.w;
    const int h0 = oh * a.sh - a.top, w0 = ow * a.sw - a.left;
    double s = 0;
    for (int i = h0 < 0 ? 0 : h0; i < h0 + a.kh && i < a.h; ++i) {
      for (int j = w0 < 0 ? 0 : w0; j < w0 + a.kw && j < a.w; ++j) s += plane[i * a.w + j];
    }
    y[k] = static_cast<float>(s / window_count(a, oh, ow));
  }
}

__global__ void avgpool_backward_kernel(const float* dy, float* dx, std::int64_t n, AvgArgs a) {
  MIRROR_GRID_LOOP(k, n) {
    const std::int64_t p = k / (static_cast<std::int64_t>(a.h) * a.w);
    const int i = static_cast<int>((k / a.w) % a.h), j = static_cast<int>(k % a.w);
    const float* grad = dy + p * a.oh * a.ow;
    const int lo_h = i + a.top - a.kh + 1, lo_w = j + a.left - a.kw + 1;
    const int oh0 = lo_h <= 0 ? 0 : (lo_h + a.sh - 1) / a.sh;
    const int ow0 = lo_w <= 0 ? 0 : (lo_w + a.sw - 1) / a.sw;
    int oh1 = (i + a.top) / a.sh, ow1 = (j + a.left) / a.sw;
    if (oh1 > a.oh - 1) oh1 = a.oh - 1;
    if (ow1 > a.ow - 1) ow1 = a.ow - 1;
    float acc = 0.0f;
    for (int oh = oh0; oh <= oh1; ++oh) {
      for (int ow = ow0; ow <= ow1; ++ow) acc += grad[oh * a.ow + ow] / window_count(a, oh, ow);
    }
    dx[k] = acc;
  }
}

template <class T>
__global__ void copy_block_kernel(T* dst, const T* src, std::int64_t n, ops::BlockCopy b) {
  MIRROR_GRID_LOOP(k, n) {
    std::int64_t rest = k, d = b.dst_offset, s = b.src_offset;
    for (int dim = 3; dim >= 0; --dim) {
      const std::int64_t idx = rest % b.dims[dim];
      rest /= b.dims[dim];
      d += idx * b.dst_strides[dim];
      s += idx * b.src_strides[dim];
    }
    dst[d] = src[s];
  }
}

__global__ void gelu_forward_kernel(const float* x, float* y, std::int64_t n) {
  MIRROR_GRID_LOOP(i, n) y[i] = math::Gelu::forward(x[i]);
}

__global__ void gelu_backward_kernel(const float* x, const float* dy, float* dx, std::int64_t n) {
  MIRROR_GRID_LOOP(i, n) dx[i] = math::Gelu::backward(x[i], dy[i]);
}

AvgArgs avg_args(int h, int w, int oh, int ow, const ops::Pool2DGeometry& g) {
  return {h, w, oh, ow, g.k_h, g.k_w, g.stride_h, g.stride_w, g.pad_top, g.pad_left};
}

}  // namespace

void channel_affine(const float* a, const float* b, const double* coef, float* y,
                    const ops::ChannelView& v, cudaStream_t s) {
  const std::int64_t n = v.numel();
  MIRROR_LAUNCH(channel_affine_kernel, n, s, a, b, coef, y, n, v.channels, v.inner);
}

void avgpool_forward(const float* x, float* y, std::int64_t planes, int h, int w, int oh, int ow,
                     const ops::Pool2DGeometry& g, cudaStream_t s) {
  const std::int64_t n = planes * oh * ow;
  MIRROR_LAUNCH(avgpool_forward_kernel, n, s, x, y, n, avg_args(h, w, oh, ow, g));
}

void avgpool_backward(const float* dy, float* dx, std::int64_t planes, int h, int w, int oh, int ow,
                      const ops::Pool2DGeometry& g, cudaStream_t s) {
  const std::int64_t n = planes * h * w;
  MIRROR_LAUNCH(avgpool_backward_kernel, n, s, dy, dx, n, avg_args(h, w, oh, ow, g));
}

void copy_block(void* dst, const void* src, std::size_t element_size, const ops::BlockCopy& b,
                cudaStream_t s) {
  const std::int64_t n = b.dims[0] * b.dims[1] * b.dims[2] * b.dims[3];
  switch (element_size) {
    case 1:
      MIRROR_LAUNCH(copy_block_kernel<std::uint8_t>, n, s, static_cast<std::uint8_t*>(dst),
                    static_cast<const std::uint8_t*>(src), n, b);
      break;
    case 2:
      MIRROR_LAUNCH(copy_block_kernel<std::uint16_t>, n, s, static_cast<std::uint16_t*>(dst),
                    static_cast<const std::uint16_t*>(src), n, b);
      break;
    case 4:
      MIRROR_LAUNCH(copy_block_kernel<std::uint32_t>, n, s, static_cast<std::uint32_t*>(dst),
                    static_cast<const std::uint32_t*>(src), n, b);
      break;
    default:
      MIRROR_LAUNCH(copy_block_kernel<std::uint64_t>, n, s, static_cast<std::uint64_t*>(dst),
                    static_cast<const std::uint64_t*>(src), n, b);
      break;
  }
}

void gelu_forward(const float* x, float* y, std::int64_t n, cudaStream_t s) {
  MIRROR_LAUNCH(gelu_forward_kernel, n, s, x, y, n);
}

void gelu_backward(const float* x, const float* dy, float* dx, std::int64_t n, cudaStream_t s) {
  MIRROR_LAUNCH(gelu_backward_kernel, n, s, x, dy, dx, n);
}

}  // namespace mirror::cuda
