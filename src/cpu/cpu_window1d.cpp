// CpuKernels: the 1-D window ops (im2col1d, col2im1d, pool1d_*) and zero_past_lengths: loops
// over the per-element rules of math/window1d.h (the CUDA kernels run the same rules), float32
// and float64.
#include <algorithm>
#include <cstdint>

#include "cpu/cpu_kernels.h"
#include "math/window1d.h"

namespace mirror::cpu {
namespace {

using math::window1d::Geometry;

Geometry geometry(const ops::Window1D& g, std::int64_t steps) {
  return {g.k, g.stride, g.dilation, g.pad_left, g.out(static_cast<int>(steps))};
}

template <class T>
void im2col_loop(const T* x, T* cols, std::int64_t n, std::int64_t steps, std::int64_t c,
                 const Geometry& g) {
#pragma omp parallel for schedule(static) if (n * g.out * g.k * c > kParallelGrain)
  for (std::int64_t s = 0; s < n; ++s) {
    for (int t = 0; t < g.out; ++t) {
      for (int j = 0; j < g.k; ++j) {
        const int p = math::window1d::tap(g, t, j);
        T* out = cols + ((s * g.out + t) * g.k + j) * c;
        if (p < 0 || p >= steps) {
          std::fill_n(out, c, T(0));
        } else {
          std::copy_n(x + (s * steps + p) * c, c, out);
        }
      }
    }
  }
}

template <class T>
void col2im_loop(const T* cols, T* x, std::int64_t n, std::int64_t steps, std::int64_t c,
                 const Geometry& g) {
#pragma omp parallel for schedule(static) if (n * steps * c > kParallelGrain)
  for (std::int64_t s = 0; s < n; ++s) {
    for (std::int64_t p = 0; p < steps; ++p) {
      T* out = x + (s * steps + p) * c;
      std::fill_n(out, c, T(0));
      for (int j = 0; j < g.k; ++j) {  // tap order: the CUDA kernel's order
        const int t = math::window1d::reader(g, static_cast<int>(p), j);
        if (t < 0) continue;
        const T* in = cols + ((s * g.out + t) * g.k + j) * c;
        for (std::int64_t ch = 0; ch < c; ++ch) out[ch] += in[ch];
      }
    }
  }
}

template <class T>
void pool_loop(bool max, const T* x, T* y, const std::vector<std::int32_t>& lengths,
               std::int64_t steps, std::int64_t c, const Geometry& g) {
  const auto n = static_cast<std::int64_t>(lengths.size());
#pragma omp parallel for schedule(static) if (n * g.out * c * g.k > kParallelGrain)
  for (std::int64_t s = 0; s < n; ++s) {
    const int limit = lengths[static_cast<std::size_t>(s)];
    for (int t = 0; t < g.out; ++t) {
      for (std::int64_t ch = 0; ch < c; ++ch) {
        y[(s * g.out + t) * c + ch] =
            math::window1d::pool_value(max, x + s * steps * c + ch, c, limit, g, t);
      }
    }
  }
}

template <class T>
void pool_grad_loop(bool max, const T* x, const T* dy, T* dx,
                    const std::vector<std::int32_t>& lengths, std::int64_t steps, std::int64_t c,
                    const Geometry& g) {
  const auto n = static_cast<std::int64_t>(lengths.size());
#pragma omp parallel for schedule(static) if (n * steps * c * g.k > kParallelGrain)
  for (std::int64_t s = 0; s < n; ++s) {
    const int limit = lengths[static_cast<std::size_t>(s)];
    for (std::int64_t p = 0; p < steps; ++p) {
      for (std::int64_t ch = 0; ch < c; ++ch) {
        dx[(s * steps + p) * c + ch] = math::window1d::pool_grad(
            max, x + s * steps * c + ch, dy + s * g.out * c + ch, c, limit, g, static_cast<int>(p));
      }
    }
  }
}

}  // namespace

Tensor CpuKernels::im2col1d(const Tensor& x, const ops::Window1D& g) {
  const std::int64_t n = x.dim(0), steps = x.dim(1), c = x.dim(2);
  const Geometry geo = geometry(g, steps);
  Tensor cols = Tensor::empty({n, geo.out, g.k * c}, x.dtype(), x.device());
  if (x.dtype() == DType::kFloat64) {
    im2col_loop(x.data<double>(), cols.data<double>(), n, steps, c, geo);
  } else {
    im2col_loop(x.data<float>(), cols.data<float>(), n, steps, c, geo);
  }
  return cols;
}

Tensor CpuKernels::col2im1d(const Tensor& cols, const ops::Window1D& g, std::int64_t steps) {
  const std::int64_t n = cols.dim(0), c = cols.dim(2) / g.k;
  const Geometry geo = geometry(g, steps);
  Tensor x = Tensor::empty({n, steps, c}, cols.dtype(), cols.device());
  if (cols.dtype() == DType::kFloat64) {
    col2im_loop(cols.data<double>(), x.data<double>(), n, steps, c, geo);
  } else {
    col2im_loop(cols.data<float>(), x.data<float>(), n, steps, c, geo);
  }
  return x;
}

Tensor CpuKernels::pool1d_forward(ops::Pool1D mode, const Tensor& x,
                                  const std::vector<std::int32_t>& lengths,
                                  const ops::Window1D& g) {
  const std::int64_t steps = x.dim(1), c = x.dim(2);
  const Geometry geo = geometry(g, steps);
  Tensor y = Tensor::empty({x.dim(0), geo.out, c}, x.dtype(), x.device());
  const bool max = mode == ops::Pool1D::kMax;
  if (x.dtype() == DType::kFloat64) {
    pool_loop(max, x.data<double>(), y.data<double>(), lengths, steps, c, geo);
  } else {
    pool_loop(max, x.data<float>(), y.data<float>(), lengths, steps, c, geo);
  }
  return y;
}

Tensor CpuKernels::pool1d_backward(ops::Pool1D mode, const Tensor& x, const Tensor& dy,
                                   const std::vector<std::int32_t>& lengths,
                                   const ops::Window1D& g) {
  const std::int64_t steps = x.dim(1), c = x.dim(2);
  const Geometry geo = geometry(g, steps);
  Tensor dx = Tensor::empty(x.shape(), x.dtype(), x.device());
  const bool max = mode == ops::Pool1D::kMax;
  if (x.dtype() == DType::kFloat64) {
    pool_grad_loop(max, x.data<double>(), dy.data<double>(), dx.data<double>(), lengths, steps, c,
                   geo);
  } else {
    pool_grad_loop(max, x.data<float>(), dy.data<float>(), dx.data<float>(), lengths, steps, c,
                   geo);
  }
  return dx;
}

Tensor CpuKernels::zero_past_lengths(const Tensor& x, const std::vector<std::int32_t>& lengths) {
  Tensor y = x.clone();
  if (x.numel() == 0) return y;
  const std::int64_t steps = x.dim(1), row = x.numel() / (x.dim(0) * steps);
  const std::size_t bytes = static_cast<std::size_t>(row) * dtype_size(x.dtype());
  auto* p = static_cast<unsigned char*>(y.raw_data());
  for (std::size_t s = 0; s < lengths.size(); ++s) {
    const std::int64_t len = lengths[s];
    const std::int64_t first = static_cast<std::int64_t>(s) * steps + len;
    std::fill_n(p + first * static_cast<std::int64_t>(bytes), (steps - len) * bytes, 0);
  }
  return y;
}

}  // namespace mirror::cpu
