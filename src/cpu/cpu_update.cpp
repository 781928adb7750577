// Optimizer updates (SGD, Adam/AdamW) and dtype casts: flat loops over src/math/optim.h and
// src/math/convert.h, the same per-element code the CUDA kernels run.
#include <algorithm>
#include <string>
#include <type_traits>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "cpu/cpu_kernels.h"
#include "cpu/cpu_vector_clones.h"
#include "math/convert.h"
#include "math/optim.h"

namespace mirror::cpu {
namespace {

/// One run of a cast in the CPU's widest vectors: the conversions are integer bit operations,
/// exact widenings or one correctly rounded narrowing, the same bits in every clone (in the
/// library's baseline SSE2 float32 -> bfloat16 ran at a third of the memory's speed; the strategy
/// casts every bucket both ways under --compression).
template <class From, class To, class Convert>
MIRROR_VECTOR_BODY void convert_run(const From* __restrict src, To* __restrict dst,
                                    std::int64_t n, Convert convert) {
  for (std::int64_t i = 0; i < n; ++i) dst[i] = convert(src[i]);
}

/// out = convert(a) element by element (out already has a's shape and the target dtype).
template <class From, class To, class Convert>
void convert_into(const Tensor& a, Tensor& out, Convert convert) {
  const From* src = a.data<From>();
  To* dst = out.data<To>();
  const std::int64_t n = a.numel(), runs = (n + kParallelGrain - 1) / kParallelGrain;
  // Runs, not elements, are split between threads: the clones' loop is outside OpenMP's body.
#pragma omp parallel for schedule(static) if (runs > 1)
  for (std::int64_t r = 0; r < runs; ++r) {
    const std::int64_t begin = r * kParallelGrain;
    MIRROR_VECTOR_CALL(
        convert_run(src + begin, dst + begin, std::min(kParallelGrain, n - begin), convert));
  }
}

#if defined(__SSE2__)
// Note [Vector Adam]: GCC will not vectorise a loop that calls sqrtf unless -fno-math-errno
// (sqrtf may set errno), so the float32 Adam loop was scalar: a sqrtss and a divss per element,
// compute-bound at ~3 ns/element. F32x4 is four floats that math::adam_step accepts as its
// element type T: the same template runs, operation for operation, on four lanes (SSE2 is part
// of x86-64). Every lane operation is the IEEE single-precision one the scalar code performs
// (add, mul, div, sqrt are all correctly rounded), in the same order, so the result is bitwise
// the scalar loop's; tests/optim_fused_test.cpp checks that.
struct F32x4 {
  __m128 v;
  F32x4() = default;
  explicit F32x4(__m128 x) : v(x) {}
  explicit F32x4(double d) : v(_mm_set1_ps(static_cast<float>(d))) {}
  explicit F32x4(float f) : v(_mm_set1_ps(f)) {}
  static F32x4 load(const float* p) { return F32x4(_mm_loadu_ps(p)); }
  void store(float* p) const { _mm_storeu_ps(p, v); }
  F32x4& operator+=(F32x4 o) { return *this = F32x4(_mm_add_ps(v, o.v)); }
  F32x4& operator-=(F32x4 o) { return *this = F32x4(_mm_sub_ps(v, o.v)); }
  F32x4& operator*=(F32x4 o) { return *this = F32x4(_mm_mul_ps(v, o.v)); }
};
inline F32x4 operator+(F32x4 a, F32x4 b) { return F32x4(_mm_add_ps(a.v, b.v)); }
inline F32x4 operator-(F32x4 a, F32x4 b) { return F32x4(_mm_sub_ps(a.v, b.v)); }
inline F32x4 operator*(F32x4 a, F32x4 b) { return F32x4(_mm_mul_ps(a.v, b.v)); }
inline F32x4 operator/(F32x4 a, F32x4 b) { return F32x4(_mm_div_ps(a.v, b.v)); }
inline F32x4 hd_sqrt(F32x4 a) { return F32x4(_mm_sqrt_ps(a.v)); }  // found by ADL in math::

/// Elements [begin, end) of a float32 Adam update, four at a time; returns where it stopped.
std::int64_t adam_f32x4(float* p, const float* g, float* m, float* v, std::int64_t begin,
                        std::int64_t end, const math::AdamScalars& s) {
  std::int64_t i = begin;
  for (; i + 4 <= end; i += 4) {
    F32x4 pp = F32x4::load(p + i), mm = F32x4::load(m + i), vv = F32x4::load(v + i);
    math::adam_step(pp, F32x4::load(g + i), mm, vv, s);
    pp.store(p + i);
    mm.store(m + i);
    vv.store(v + i);
  }
  return i;
}
#endif

/// Adam over n elements: the vector path for float32 where there is one, the scalar tail (and
/// every other type) through the same math::adam_step.
template <class T>
void adam_loop(T* p, const T* g, T* m, T* v, std::int64_t n, const math::AdamScalars& s) {
  constexpr std::int64_t kChunk = 1 << 14;  // elements per OpenMP task, a multiple of 4
  const std::int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (n > kParallelGrain)
  for (std::int64_t c = 0; c < chunks; ++c) {
    std::int64_t i = c * kChunk;
    const std::int64_t end = i + kChunk < n ? i + kChunk : n;
#if defined(__SSE2__)
    if constexpr (std::is_same_v<T, float>) i = adam_f32x4(p, g, m, v, i, end, s);
#endif
    for (; i < end; ++i) math::adam_step(p[i], g[i], m[i], v[i], s);
  }
}

}  // namespace

Tensor CpuKernels::cast(const Tensor& a, DType to) {
  if (a.dtype() == to) return a.clone();
  Tensor out = Tensor::empty(a.shape(), to, a.device());
  cast_into(a, out);
  return out;
}

void CpuKernels::cast_into(const Tensor& a, Tensor& out) {
  const DType from = a.dtype(), to = out.dtype();
  using F32 = float;
  if (from == to) return out.copy_from(a);
  if (from == DType::kFloat32 && to == DType::kFloat16)
    return convert_into<F32, Half>(a, out, [](F32 v) { return Half{math::float_to_half_bits(v)}; });
  if (from == DType::kFloat16 && to == DType::kFloat32)
    return convert_into<Half, F32>(a, out, [](Half h) { return math::half_bits_to_float(h.bits); });
  if (from == DType::kFloat32 && to == DType::kBFloat16)
    return convert_into<F32, BFloat16>(
        a, out, [](F32 v) { return BFloat16{math::float_to_bfloat16_bits(v)}; });
  if (from == DType::kBFloat16 && to == DType::kFloat32)
    return convert_into<BFloat16, F32>(
        a, out, [](BFloat16 b) { return math::bfloat16_bits_to_float(b.bits); });
  if (from == DType::kFloat32 && to == DType::kFloat64)
    return convert_into<F32, double>(a, out, [](F32 v) { return static_cast<double>(v); });
  if (from == DType::kFloat64 && to == DType::kFloat32)
    return convert_into<double, F32>(a, out, [](double v) { return static_cast<F32>(v); });
  throw InvalidArgument(std::string("cast: ") + a.str() + " to " + dtype_name(to) +
                        " is not supported; supported are float32 <-> float16, bfloat16, " +
                        "float64 (cast through float32 for other pairs)");
}

void CpuKernels::sgd_update(Tensor& param, const Tensor& grad, Tensor& momentum_buf, double lr,
                            double momentum, bool nesterov, double weight_decay) {
  require_dtype(grad, param.dtype(), "sgd_update", "grad");
  if (momentum != 0) {
    require_dtype(momentum_buf, param.dtype(), "sgd_update", "momentum buffer");
    MIRROR_CHECK(momentum_buf.numel() == param.numel(), InvalidArgument,
                 "sgd_update: momentum buffer " + momentum_buf.str() + " for param " + param.str());
  }
  with_float(param, "sgd_update", [&](auto t) {
    using T = decltype(t);
    T* p = param.data<T>();
    const T* g = grad.data<T>();
    T* buf = momentum != 0 ? momentum_buf.data<T>() : nullptr;
    const T tlr = static_cast<T>(lr), tm = static_cast<T>(momentum);
    const T twd = static_cast<T>(weight_decay);
    const std::int64_t n = param.numel();
#pragma omp parallel for schedule(static) if (n > kParallelGrain)
    for (std::int64_t i = 0; i < n; ++i) {
      math::sgd_step(p[i], g[i], buf ? buf + i : nullptr, tlr, tm, nesterov, twd);
    }
  });
}

void CpuKernels::adam_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, double lr,
                             double beta1, double beta2, double eps, double weight_decay,
                             bool decoupled, std::int64_t step) {
  require_dtype(grad, param.dtype(), "adam_update", "grad");
  require_dtype(m, param.dtype(), "adam_update", "first moment m");
  require_dtype(v, param.dtype(), "adam_update", "second moment v");
  const math::AdamScalars s =
      math::adam_scalars(lr, beta1, beta2, eps, weight_decay, decoupled, step);
  with_float(param, "adam_update", [&](auto t) {
    using T = decltype(t);
    T* p = param.data<T>();
    const T* g = grad.data<T>();
    T* mp = m.data<T>();
    T* vp = v.data<T>();
    adam_loop(p, g, mp, vp, param.numel(), s);
  });
}

}  // namespace mirror::cpu
