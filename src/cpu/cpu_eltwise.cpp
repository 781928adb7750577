// Element-wise kernels: activations, dropout, BLAS-1 helpers, reductions, casts and the
// optimizer updates. Each is a flat loop over src/math functions (Note [Shared math]); loops
// fork OpenMP threads only past kParallelGrain elements.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "cpu/cpu_kernels.h"
#include "cpu/cpu_vector_clones.h"
#include "math/activation.h"
#include "math/convert.h"
#include "math/dropout.h"
#include "math/optim.h"
#include "ops/with_activation.h"

namespace mirror::cpu {
namespace {

template <class Act, class T>
void activation_loop(const T* x, T* y, std::int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > kParallelGrain)
  for (std::int64_t i = 0; i < n; ++i) y[i] = Act::forward(x[i]);
}

template <class Act, class T>
void activation_grad_loop(const T* y, const T* dy, T* dx, std::int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > kParallelGrain)
  for (std::int64_t i = 0; i < n; ++i) dx[i] = Act::backward(y[i], dy[i]);
}

/// y = p + q (p may be y), through the ReLU's forward with kRelu (ops::add_n).
template <bool kRelu, class T>
void sum_loop(const T* p, const T* q, T* y, std::int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > kParallelGrain)
  for (std::int64_t i = 0; i < n; ++i) {
    const T s = p[i] + q[i];
    y[i] = kRelu ? math::Relu::forward(s) : s;
  }
}

/// Partial sums over fixed 4096-element blocks, added in block order: the result is the same
/// for every thread count (docs/architecture.md invariant 4), and double accumulation keeps it
/// accurate.
template <class T>
double blocked_sum_squares(const T* a, std::int64_t n) {
  constexpr std::int64_t kBlock = 4096;
  const std::int64_t blocks = (n + kBlock - 1) / kBlock;
  std::vector<double> partial(static_cast<std::size_t>(blocks), 0.0);
#pragma omp parallel for schedule(static) if (n > kParallelGrain)
  for (std::int64_t b = 0; b < blocks; ++b) {
    double s = 0;
    const std::int64_t end = (b + 1) * kBlock < n ? (b + 1) * kBlock : n;
    for (std::int64_t i = b * kBlock; i < end; ++i) s += static_cast<double>(a[i]) * a[i];
    partial[b] = s;
  }
  double total = 0;
  for (double p : partial) total += p;
  return total;
}

}  // namespace

Tensor CpuKernels::activation_forward(ops::Activation act, const Tensor& x) {
  return with_float(x, "activation_forward", [&](auto t) -> Tensor {
    using T = decltype(t);
    Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
    ops::with_activation(
        act, [&](auto a) { activation_loop<decltype(a)>(x.data<T>(), y.data<T>(), x.numel()); });
    return y;
  });
}

Tensor CpuKernels::activation_backward(ops::Activation act, const Tensor& y, const Tensor& dy) {
  return with_float(y, "activation_backward", [&](auto t) -> Tensor {
    using T = decltype(t);
    Tensor dx = Tensor::empty(y.shape(), y.dtype(), y.device());
    ops::with_activation(act, [&](auto a) {
      activation_grad_loop<decltype(a)>(y.data<T>(), dy.data<T>(), dx.data<T>(), y.numel());
    });
    return dx;
  });
}

namespace {
/// One sample's mask and output: math::dropout_scale's decision from the sample's key, in the
/// CPU's widest vectors (MIRROR_VECTOR_CALL; integer hashing gives the same bits in every
/// clone). The mask for 1024 elements took 0.44 ms hashed from the seed per element.
template <class T>
MIRROR_VECTOR_BODY void dropout_row(std::uint64_t key, const T* x, T* mask, T* y,
                                    std::int64_t count, float rate) {
  const T keep = T(1) / (T(1) - T(rate));
  for (std::int64_t j = 0; j < count; ++j) {
    mask[j] = math::dropout_uniform_from(key, j) >= rate ? keep : T(0);
    y[j] = x[j] * mask[j];
  }
}
}  // namespace

Tensor CpuKernels::dropout_forward(const Tensor& x, float rate, std::uint64_t seed,
                                   const Tensor& sample_ids, Tensor& mask) {
  return with_float(x, "dropout_forward", [&](auto t) -> Tensor {
    using T = decltype(t);
    // The mask is reused when the caller passes one of the right shape (steady state), and
    // replaced otherwise (first step, or a smaller last batch).
    if (!mask.defined() || mask.shape() != x.shape() || mask.dtype() != x.dtype() ||
        mask.device() != x.device()) {
      mask = Tensor::empty(x.shape(), x.dtype(), x.device());
    }
    Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
    const std::int64_t n = x.dim(0), per = n ? x.numel() / n : 0;
    const std::int64_t* ids = sample_ids.data<std::int64_t>();
    const T* xp = x.data<T>();
    T* mp = mask.data<T>();
    T* yp = y.data<T>();
#pragma omp parallel for schedule(static) if (x.numel() > kParallelGrain)
    for (std::int64_t s = 0; s < n; ++s) {
      MIRROR_VECTOR_CALL(dropout_row(math::dropout_sample_key(seed, ids[s]), xp + s * per,
                                     mp + s * per, yp + s * per, per, rate));
    }
    return y;
  });
}

Tensor CpuKernels::dropout_backward(const Tensor& dy, const Tensor& mask) {
  return with_float(dy, "dropout_backward", [&](auto t) -> Tensor {
    using T = decltype(t);
    Tensor dx = Tensor::empty(dy.shape(), dy.dtype(), dy.device());
    const T* g = dy.data<T>();
    const T* m = mask.data<T>();
    T* out = dx.data<T>();
    const std::int64_t n = dy.numel();
#pragma omp parallel for simd schedule(static) if (n > kParallelGrain)
    for (std::int64_t i = 0; i < n; ++i) out[i] = g[i] * m[i];
    return dx;
  });
}

void CpuKernels::axpy(double alpha, const Tensor& b, Tensor& a) {
  with_float(a, "axpy", [&](auto t) {
    using T = decltype(t);
    T* ap = a.data<T>();
    const T* bp = b.data<T>();
    const T al = static_cast<T>(alpha);
    const std::int64_t n = a.numel();
#pragma omp parallel for simd schedule(static) if (n > kParallelGrain)
    for (std::int64_t i = 0; i < n; ++i) ap[i] += al * bp[i];
  });
}

Tensor CpuKernels::add_n(const std::vector<Tensor>& xs, bool relu) {
  return with_float(xs[0], "add_n", [&](auto t) {
    using T = decltype(t);
    Tensor y = Tensor::empty(xs[0].shape(), xs[0].dtype(), xs[0].device());
    T* yp = y.data<T>();
    const std::int64_t n = y.numel();
    // Left to right, each pass y = p + q; the ReLU's forward with the last input.
    for (std::size_t k = 1; k < xs.size(); ++k) {
      const T* p = k == 1 ? xs[0].data<T>() : yp;
      if (relu && k + 1 == xs.size()) {
        sum_loop<true>(p, xs[k].data<T>(), yp, n);
      } else {
        sum_loop<false>(p, xs[k].data<T>(), yp, n);
      }
    }
    return y;
  });
}

void CpuKernels::scale(Tensor& a, double alpha) {
  with_float(a, "scale", [&](auto t) {
    using T = decltype(t);
    T* ap = a.data<T>();
    const T al = static_cast<T>(alpha);
    const std::int64_t n = a.numel();
#pragma omp parallel for simd schedule(static) if (n > kParallelGrain)
    for (std::int64_t i = 0; i < n; ++i) ap[i] *= al;
  });
}

void CpuKernels::fill(Tensor& a, double value) {
  auto fill_as = [&](auto t) {
    using T = decltype(t);
    T* ap = a.data<T>();
    const T v = static_cast<T>(value);
    for (std::int64_t i = 0; i < a.numel(); ++i) ap[i] = v;
  };
  switch (a.dtype()) {
    case DType::kInt32:
      return fill_as(std::int32_t{});
    case DType::kInt64:
      return fill_as(std::int64_t{});
    case DType::kUInt8:
      return fill_as(std::uint8_t{});
    case DType::kFloat16: {
      Half h{math::float_to_half_bits(static_cast<float>(value))};
      for (Half& e : a.span<Half>()) e = h;
      return;
    }
    case DType::kBFloat16: {
      BFloat16 b{math::float_to_bfloat16_bits(static_cast<float>(value))};
      for (BFloat16& e : a.span<BFloat16>()) e = b;
      return;
    }
    default:
      with_float(a, "fill", fill_as);
  }
}

double CpuKernels::sum_squares(const Tensor& a) {
  return with_float(a, "sum_squares",
                    [&](auto t) { return blocked_sum_squares(a.data<decltype(t)>(), a.numel()); });
}

bool CpuKernels::all_finite(const Tensor& a) {
  auto bits_finite = [&](auto t, std::uint16_t exp_mask) {
    for (const auto& e : a.span<decltype(t)>()) {
      if ((e.bits & exp_mask) == exp_mask) return false;
    }
    return true;
  };
  switch (a.dtype()) {
    case DType::kFloat16:
      return bits_finite(Half{}, 0x7C00u);
    case DType::kBFloat16:
      return bits_finite(BFloat16{}, 0x7F80u);
    case DType::kInt32:
    case DType::kInt64:
    case DType::kUInt8:
      return true;
    default:
      break;
  }
  return with_float(a, "all_finite", [&](auto t) {
    using T = decltype(t);
    const T* p = a.data<T>();
    const std::int64_t n = a.numel();
    int bad = 0;  // a reduction instead of an early exit: the common case scans everything
#pragma omp parallel for simd reduction(| : bad) schedule(static) if (n > kParallelGrain)
    for (std::int64_t i = 0; i < n; ++i) bad |= !std::isfinite(p[i]);
    return bad == 0;
  });
}

}  // namespace mirror::cpu
