// The CPU kernels of Keras's layers (ops.h "Keras's layers"): parametric activations and
// Maximum/Minimum as flat loops over src/math (Note [Shared math]), and the masked softmax of the
// attention layers, one row per (matrix, query), in double like the loss's softmax.
#include <cmath>
#include <vector>

#include "cpu/cpu_kernels.h"
#include "math/keras_activations.h"

namespace mirror::cpu {
namespace {

/// Whether score (query i, key j) of matrix b is masked (Keras's attention masks).
bool masked(const ops::AttentionMask& m, std::int64_t b, std::int64_t i, std::int64_t j) {
  if (m.causal && j > i) return true;
  if (m.lengths.empty()) return false;
  const std::int32_t len = m.lengths[static_cast<std::size_t>(b / m.heads)];
  return j >= len || (m.mask_queries && i >= len);
}

/// Keras's large negative for masked scores (Softmax's _large_negative_number for float32).
constexpr double kMaskedScore = -1e9;

}  // namespace

Tensor CpuKernels::eltwise_forward(const ops::Eltwise& f, const Tensor& x) {
  return with_float(x, "eltwise_forward", [&](auto t) -> Tensor {
    using T = decltype(t);
    Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
    const math::EltwiseArgs<T> a = math::eltwise_args<T>(f);
    const T* xp = x.data<T>();
    T* yp = y.data<T>();
    const std::int64_t n = x.numel();
#pragma omp parallel for schedule(static) if (n > kParallelGrain)
    for (std::int64_t i = 0; i < n; ++i) yp[i] = math::eltwise_forward(a, xp[i]);
    return y;
  });
}

Tensor CpuKernels::eltwise_backward(const ops::Eltwise& f, const Tensor& x, const Tensor& dy) {
  return with_float(x, "eltwise_backward", [&](auto t) -> Tensor {
    using T = decltype(t);
    Tensor dx = Tensor::empty(x.shape(), x.dtype(), x.device());
    const math::EltwiseArgs<T> a = math::eltwise_args<T>(f);
    const T* xp = x.data<T>();
    const T* g = dy.data<T>();
    T* out = dx.data<T>();
    const std::int64_t n = x.numel();
#pragma omp parallel for schedule(static) if (n > kParallelGrain)
    for (std::int64_t i = 0; i < n; ++i) out[i] = math::eltwise_backward(a, xp[i], g[i]);
    return dx;
  });
}

Tensor CpuKernels::extremum(const Tensor& a, const Tensor& b, bool minimum, Tensor& mask) {
  return with_float(a, "extremum", [&](auto t) -> Tensor {
    using T = decltype(t);
    Tensor y = Tensor::empty(a.shape(), a.dtype(), a.device());
    mask = Tensor::empty(a.shape(), a.dtype(), a.device());
    const T* ap = a.data<T>();
    const T* bp = b.data<T>();
    T* yp = y.data<T>();
    T* mp = mask.data<T>();
    const std::int64_t n = a.numel();
#pragma omp parallel for schedule(static) if (n > kParallelGrain)
    for (std::int64_t i = 0; i < n; ++i) {
      const bool take_a = math::takes_a(ap[i], bp[i], minimum);
      yp[i] = take_a ? ap[i] : bp[i];
      mp[i] = take_a ? T(1) : T(0);
    }
    return y;
  });
}

Tensor CpuKernels::attention_softmax(const Tensor& scores, const ops::AttentionMask& m) {
  return with_float(scores, "attention_softmax", [&](auto t) -> Tensor {
    using T = decltype(t);
    Tensor p = Tensor::empty(scores.shape(), scores.dtype(), scores.device());
    const std::int64_t mats = scores.dim(0), tq = scores.dim(1), tk = scores.dim(2);
    const T* s = scores.data<T>();
    T* out = p.data<T>();
#pragma omp parallel for schedule(static) if (scores.numel() > kParallelGrain)
    for (std::int64_t r = 0; r < mats * tq; ++r) {
      const std::int64_t b = r / tq, i = r % tq;
      const T* row = s + r * tk;
      T* prow = out + r * tk;
      double top = -INFINITY;
      for (std::int64_t j = 0; j < tk; ++j) {
        const double v = masked(m, b, i, j) ? kMaskedScore : static_cast<double>(row[j]);
        top = v > top ? v : top;
      }
      double sum = 0;
      for (std::int64_t j = 0; j < tk; ++j) {
        const double v = masked(m, b, i, j) ? kMaskedScore : static_cast<double>(row[j]);
        const double e = std::exp(v - top);
        prow[j] = static_cast<T>(e);
        sum += e;
      }
      for (std::int64_t j = 0; j < tk; ++j) prow[j] = static_cast<T>(prow[j] / sum);
    }
    return p;
  });
}

Tensor CpuKernels::attention_softmax_backward(const Tensor& probs, const Tensor& dprobs,
                                              const ops::AttentionMask& m) {
  return with_float(probs, "attention_softmax_backward", [&](auto t) -> Tensor {
    using T = decltype(t);
    Tensor ds = Tensor::empty(probs.shape(), probs.dtype(), probs.device());
    const std::int64_t mats = probs.dim(0), tq = probs.dim(1), tk = probs.dim(2);
    const T* p = probs.data<T>();
    const T* dp = dprobs.data<T>();
    T* out = ds.data<T>();
#pragma omp parallel for schedule(static) if (probs.numel() > kParallelGrain)
    for (std::int64_t r = 0; r < mats * tq; ++r) {
      const std::int64_t b = r / tq, i = r % tq, at = r * tk;
      double dot = 0;
      for (std::int64_t j = 0; j < tk; ++j) dot += static_cast<double>(dp[at + j]) * p[at + j];
      for (std::int64_t j = 0; j < tk; ++j) {
        // A masked score is a constant (-1e9, replaced): no gradient reaches the input.
        out[at + j] = masked(m, b, i, j) ? T(0) : static_cast<T>(p[at + j] * (dp[at + j] - dot));
      }
    }
    return ds;
  });
}

}  // namespace mirror::cpu
