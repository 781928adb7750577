// CpuKernels: the LSTM entry points (implemented in cpu_lstm.cpp) and the sequence layout ops
// the Bidirectional layer is built from (reverse within each length, feature concat and slice,
// element-wise product). Plain copy loops, float32 and float64.
#include <algorithm>
#include <cstdint>

#include "cpu/cpu_kernels.h"
#include "cpu/cpu_lstm.h"

namespace mirror::cpu {
namespace {

template <class T>
void reverse_loop(const T* x, T* y, const std::vector<std::int32_t>& lengths, std::int64_t t,
                  std::int64_t f) {
  const auto n = static_cast<std::int64_t>(lengths.size());
  for (std::int64_t s = 0; s < n; ++s) {
    const std::int64_t len = lengths[static_cast<std::size_t>(s)];
    for (std::int64_t step = 0; step < t; ++step) {
      const std::int64_t from = step < len ? len - 1 - step : step;
      std::copy_n(x + (s * t + from) * f, f, y + (s * t + step) * f);
    }
  }
}

/// Copies `rows` rows of `width` elements from src (row stride src_stride) to dst (dst_stride).
template <class T>
void copy_rows(const T* src, std::int64_t src_stride, T* dst, std::int64_t dst_stride,
               std::int64_t rows, std::int64_t width) {
  for (std::int64_t r = 0; r < rows; ++r)
    std::copy_n(src + r * src_stride, width, dst + r * dst_stride);
}

template <class T>
void multiply_loop(const T* a, const T* b, T* out, std::int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > kParallelGrain)
  for (std::int64_t i = 0; i < n; ++i) out[i] = a[i] * b[i];
}

Shape with_last(Shape s, std::int64_t last) {
  s.back() = last;
  return s;
}

/// The product of all dimensions but the last.
std::int64_t rows_of(const Tensor& t) {
  std::int64_t rows = 1;
  for (int i = 0; i + 1 < t.rank(); ++i) rows *= t.dim(i);
  return rows;
}

}  // namespace

ops::LstmForwardResult CpuKernels::lstm_forward(const Tensor& x,
                                                const std::vector<std::int32_t>& lengths,
                                                const ops::LstmWeights& w, bool training) {
  return cpu::lstm_forward(x, lengths, w, training);
}

Tensor CpuKernels::lstm_backward(const Tensor& x, const std::vector<std::int32_t>& lengths,
                                 const ops::LstmWeights& w, const ops::LstmForwardResult& fwd,
                                 const Tensor& dy, const Tensor& dh_last, ops::LstmWeights& dw,
                                 bool need_dx) {
  return cpu::lstm_backward(x, lengths, w, fwd, dy, dh_last, dw, need_dx);
}

Tensor CpuKernels::reverse_sequences(const Tensor& x, const std::vector<std::int32_t>& lengths) {
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (x.dtype() == DType::kFloat64) {
    reverse_loop(x.data<double>(), y.data<double>(), lengths, x.dim(1), x.dim(2));
  } else {
    reverse_loop(x.data<float>(), y.data<float>(), lengths, x.dim(1), x.dim(2));
  }
  return y;
}

Tensor CpuKernels::concat_features(const Tensor& a, const Tensor& b) {
  const std::int64_t wa = a.dim(a.rank() - 1), wb = b.dim(b.rank() - 1);
  const std::int64_t rows = rows_of(a);
  Tensor y = Tensor::empty(with_last(a.shape(), wa + wb), a.dtype(), a.device());
  if (a.dtype() == DType::kFloat64) {
    copy_rows(a.data<double>(), wa, y.data<double>(), wa + wb, rows, wa);
    copy_rows(b.data<double>(), wb, y.data<double>() + wa, wa + wb, rows, wb);
  } else {
    copy_rows(a.data<float>(), wa, y.data<float>(), wa + wb, rows, wa);
    copy_rows(b.data<float>(), wb, y.data<float>() + wa, wa + wb, rows, wb);
  }
  return y;
}

Tensor CpuKernels::slice_features(const Tensor& y, std::int64_t begin, std::int64_t count) {
  const std::int64_t w = y.dim(y.rank() - 1);
  const std::int64_t rows = rows_of(y);
  Tensor out = Tensor::empty(with_last(y.shape(), count), y.dtype(), y.device());
  if (y.dtype() == DType::kFloat64) {
    copy_rows(y.data<double>() + begin, w, out.data<double>(), count, rows, count);
  } else {
    copy_rows(y.data<float>() + begin, w, out.data<float>(), count, rows, count);
  }
  return out;
}

Tensor CpuKernels::multiply(const Tensor& a, const Tensor& b) {
  Tensor out = Tensor::empty(a.shape(), a.dtype(), a.device());
  if (a.dtype() == DType::kFloat64) {
    multiply_loop(a.data<double>(), b.data<double>(), out.data<double>(), a.numel());
  } else {
    multiply_loop(a.data<float>(), b.data<float>(), out.data<float>(), a.numel());
  }
  return out;
}

}  // namespace mirror::cpu
