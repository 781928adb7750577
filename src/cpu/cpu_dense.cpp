// Dense kernels: GEMM (float32 through oneDNN's dnnl_sgemm, or its bfloat16 matmul under
// MathMode::kBFloat16; float64 through reference loops that double as the test oracle), bias add
// and bias gradient.
#include <algorithm>
#include <cstdio>
#include <dnnl.hpp>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "cpu/cpu_dnnl.h"
#include "cpu/cpu_kernels.h"
#include "cpu/cpu_vector_clones.h"
#include "mirror/precision.h"

namespace mirror::cpu {
namespace {

/// C = beta * C with BLAS semantics: beta == 0 overwrites (NaN/garbage in C is not propagated).
template <class T>
void scale_c(T* c, std::int64_t n, double beta) {
  for (std::int64_t i = 0; i < n; ++i) c[i] = beta == 0 ? T(0) : static_cast<T>(beta * c[i]);
}

/// Reference row-major GEMM in double accumulation. Each output row is independent, so rows are
/// split across threads and the result does not depend on the thread count.
template <class T>
void gemm_reference(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, double alpha,
                    const T* a, std::int64_t lda, const T* b, std::int64_t ldb, double beta, T* c,
                    std::int64_t ldc) {
#pragma omp parallel for schedule(static) if (m * n * k > kParallelGrain)
  for (std::int64_t i = 0; i < m; ++i) {
    std::vector<double> acc(static_cast<std::size_t>(n), 0.0);
    for (std::int64_t p = 0; p < k; ++p) {
      const double av = ta ? a[p * lda + i] : a[i * lda + p];
      if (tb) {
        for (std::int64_t j = 0; j < n; ++j) acc[j] += av * b[j * ldb + p];
      } else {
        const T* brow = b + p * ldb;
        for (std::int64_t j = 0; j < n; ++j) acc[j] += av * brow[j];
      }
    }
    T* crow = c + i * ldc;
    for (std::int64_t j = 0; j < n; ++j) {
      const double prior = beta == 0 ? 0.0 : beta * crow[j];
      crow[j] = static_cast<T>(alpha * acc[j] + prior);
    }
  }
}

void sgemm_onednn(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
                  const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta,
                  float* c, std::int64_t ldc) {
  const dnnl_status_t st =
      dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  MIRROR_CHECK(st == dnnl_success, Error,
               "gemm: dnnl_sgemm failed with status " + std::to_string(static_cast<int>(st)) +
                   " for m=" + std::to_string(m) + " n=" + std::to_string(n) +
                   " k=" + std::to_string(k));
}

/// A cached bfloat16 matmul: the f32 -> bf16 reorders of both operands (same strides, so a
/// transposed operand stays a strided view) and the primitive, which accumulates in f32 and
/// writes C in f32 (alpha as an output scale, beta as a sum post-op).
struct Bf16Gemm {
  dnnl::matmul::primitive_desc pd;
  dnnl::matmul prim;
  DnnlBoundary a, b, c;
  DnnlBoundary a16, b16;  // operands already in bfloat16 (cached parameters): no reorder
};

/// Note [Cast once per step] (mirror/precision.h): the bfloat16 copies of the parameters named
/// as ConstantOperands, by address, valid for one math generation. The cast is oneDNN's reorder,
/// the one the primitives' own boundaries run, so a cached operand gives the same bits as a fresh
/// cast, in the CPU's widest vectors (a scalar loop in the library's baseline SSE2 cost the CNN's
/// dense kernel, 3.2M values, 1.0 ms per step; the reorder streams at the memory's speed).
class Bf16ParameterCache {
 public:
  /// The bfloat16 copy of `t` (contiguous float32), cast now unless this generation has it.
  Tensor get(const Tensor& t) {
    using dt = dnnl::memory::data_type;
    const std::uint64_t generation = math_generation();
    const std::int64_t n = t.numel();
    std::lock_guard<std::mutex> lock(mutex_);
    Entry& e = entries_[t.raw_data()];
    if (e.copy.defined() && e.generation == generation && e.numel == n) return e.copy;
    if (!e.copy.defined() || e.numel != n)
      e.copy = Tensor::empty({n}, DType::kBFloat16, t.device());
    static PrimitiveCache<std::shared_ptr<const DnnlBoundary>> casts;
    const auto cast = casts.get("cast," + std::to_string(n), [&] {
      const dnnl::memory::dims dims{n};
      return std::make_shared<const DnnlBoundary>(
          dnnl_input_boundary({dims, dt::f32, dnnl::memory::format_tag::a},
                              {dims, dt::bf16, dnnl::memory::format_tag::a}));
    });
    DnnlRun(t.device()).reorder(*cast, t, e.copy);
    e.generation = generation;
    e.numel = n;
    return e.copy;
  }

 private:
  struct Entry {
    std::uint64_t generation = 0;
    std::int64_t numel = 0;
    Tensor copy;
  };
  std::mutex mutex_;
  std::unordered_map<const void*, Entry> entries_;
};

Bf16ParameterCache& parameter_cache() {
  static Bf16ParameterCache cache;
  return cache;
}

dnnl::memory::desc matrix(std::int64_t rows, std::int64_t cols, bool transposed,
                          dnnl::memory::data_type type) {
  // Row-major [rows, cols], or the transpose of a row-major [cols, rows].
  return {
      {rows, cols}, type, transposed ? dnnl::memory::dims{1, rows} : dnnl::memory::dims{cols, 1}};
}

/// The cache key of a matmul: its sizes, transposes, and alpha and beta, which are baked into
/// the primitive and so keyed exactly (%a), not to 6 decimals.
std::string matmul_key(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k,
                       double alpha, double beta) {
  char scalars[64];
  std::snprintf(scalars, sizeof scalars, "%a,%a", alpha, beta);
  return std::to_string(m) + "," + std::to_string(n) + "," + std::to_string(k) +
         (ta ? ",T" : ",N") + (tb ? "T," : "N,") + scalars;
}

/// C = alpha * A B + beta * C as matmul attributes: an output scale and a sum post-op.
dnnl::primitive_attr matmul_attr(double alpha, double beta) {
  dnnl::primitive_attr attr = dnnl_user_scratchpad_attr();
  if (alpha != 1.0) attr.set_output_scales(0, {static_cast<float>(alpha)});
  if (beta != 0.0) {
    dnnl::post_ops ops;
    ops.append_sum(static_cast<float>(beta));
    attr.set_post_ops(ops);
  }
  return attr;
}

void gemm_bf16(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, double alpha,
               const Tensor& a, const Tensor& b, double beta, Tensor& c) {
  using dt = dnnl::memory::data_type;
  static PrimitiveCache<std::shared_ptr<const Bf16Gemm>> cache;
  auto e = cache.get(matmul_key(ta, tb, m, n, k, alpha, beta), [&] {
    const auto a32 = matrix(m, k, ta, dt::f32), b32 = matrix(k, n, tb, dt::f32);
    const auto a16 = matrix(m, k, ta, dt::bf16), b16 = matrix(k, n, tb, dt::bf16);
    const auto c32 = matrix(m, n, false, dt::f32);
    const dnnl::primitive_attr attr = matmul_attr(alpha, beta);
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a16, b16, c32), attr, dnnl_engine());
    return std::make_shared<const Bf16Gemm>(
        Bf16Gemm{pd, dnnl::matmul(pd), dnnl_input_boundary(a32, a16), dnnl_input_boundary(b32, b16),
                 dnnl_output_boundary(c32, c32), dnnl_input_boundary(a16, a16),
                 dnnl_input_boundary(b16, b16)});
  });
  DnnlRun run(c.device());
  // A cached copy has the operand's layout (same strides, 2-byte elements).
  if (ConstantOperands::contains(a.raw_data()))
    run.input(DNNL_ARG_SRC, e->a16, parameter_cache().get(a));
  else
    run.input(DNNL_ARG_SRC, e->a, a);
  if (ConstantOperands::contains(b.raw_data()))
    run.input(DNNL_ARG_WEIGHTS, e->b16, parameter_cache().get(b));
  else
    run.input(DNNL_ARG_WEIGHTS, e->b, b);
  run.output(DNNL_ARG_DST, e->c, c);
  run.execute(e->prim, e->pd.scratchpad_desc());
}

/// Note [Large float32 products]: for a product with a transposed right operand (a Dense
/// layer's input gradient, g W^T) of 2^24 multiply-adds or more, oneDNN's matmul primitive (its
/// brgemm kernels) beats dnnl_sgemm: on the CNN's dense layer, one core, 2.25-2.50 against
/// 2.64-2.88 ms standalone. The other two products stay with dnnl_sgemm: x^T g measured equal,
/// and x W, faster standalone, was slower in the step (2.8 against 2.1 ms; the matmul packs the
/// 12.8 MB kernel, cold by then). Small products (the recurrent layers' per-step ones) have no
/// primitive to look up.
constexpr std::int64_t kMatmulMinMacs = std::int64_t{1} << 24;

struct F32Gemm {
  dnnl::matmul::primitive_desc pd;
  dnnl::matmul prim;
  DnnlBoundary a, b, c;  // strided views of the operands: no reorders
};

void gemm_f32_matmul(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k,
                     double alpha, const Tensor& a, const Tensor& b, double beta, Tensor& c) {
  using dt = dnnl::memory::data_type;
  static PrimitiveCache<std::shared_ptr<const F32Gemm>> cache;
  auto e = cache.get(matmul_key(ta, tb, m, n, k, alpha, beta), [&] {
    const auto a32 = matrix(m, k, ta, dt::f32), b32 = matrix(k, n, tb, dt::f32);
    const auto c32 = matrix(m, n, false, dt::f32);
    const dnnl::primitive_attr attr = matmul_attr(alpha, beta);
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a32, b32, c32), attr, dnnl_engine());
    return std::make_shared<const F32Gemm>(F32Gemm{pd, dnnl::matmul(pd),
                                                   dnnl_input_boundary(a32, a32),
                                                   dnnl_input_boundary(b32, b32),
                                                   dnnl_output_boundary(c32, c32)});
  });
  DnnlRun run(c.device());
  run.input(DNNL_ARG_SRC, e->a, a);
  run.input(DNNL_ARG_WEIGHTS, e->b, b);
  run.output(DNNL_ARG_DST, e->c, c);
  run.execute(e->prim, e->pd.scratchpad_desc());
}

}  // namespace

void CpuKernels::gemm(bool ta, bool tb, double alpha, const Tensor& a, const Tensor& b, double beta,
                      Tensor& c) {
  const std::int64_t m = c.dim(0), n = c.dim(1), k = ta ? a.dim(0) : a.dim(1);
  if (m == 0 || n == 0) return;
  with_float(c, "gemm", [&](auto t) {
    using T = decltype(t);
    T* cp = c.data<T>();
    if (k == 0) {  // empty inner product: only the beta term remains
      scale_c(cp, m * n, beta);
      return;
    }
    const T* ap = a.data<T>();
    const T* bp = b.data<T>();
    if constexpr (std::is_same_v<T, float>) {
      // beta == 0 leaves C unread: dnnl_sgemm and the matmul (no sum post-op) only write it, so a
      // first gradient write (Note [First gradient write]) is one pass over C, not two
      // (OpsCpuTyped.GemmBetaZeroIgnoresGarbageInC checks shapes of every size class).
      const MathMode mode = math_mode();
      if (mode == MathMode::kBFloat16) {
        try {
          gemm_bf16(ta, tb, m, n, k, alpha, a, b, beta, c);
        } catch (const dnnl::error& e) {
          rethrow_dnnl(e, "gemm (bfloat16) " + a.str() + " x " + b.str());
        }
        return;
      }
      Tensor ha, hb;  // Note [CPU fp16 emulation]
      if (mode == MathMode::kFloat16) {
        ha = round_to_half(a);
        hb = round_to_half(b);
        ap = ha.data<float>();
        bp = hb.data<float>();
      }
      if (!ta && tb && m * n * k >= kMatmulMinMacs) {  // Note [Large float32 products]
        try {
          gemm_f32_matmul(ta, tb, m, n, k, alpha, ha.defined() ? ha : a, hb.defined() ? hb : b,
                          beta, c);
        } catch (const dnnl::error& e) {
          rethrow_dnnl(e, "gemm " + a.str() + " x " + b.str());
        }
        return;
      }
      sgemm_onednn(ta, tb, m, n, k, static_cast<float>(alpha), ap, a.dim(1), bp, b.dim(1),
                   static_cast<float>(beta), cp, n);
    } else {
      gemm_reference(ta, tb, m, n, k, alpha, ap, a.dim(1), bp, b.dim(1), beta, cp, n);
    }
  });
}

namespace {

// A dense layer's [N, C] output has one element per channel and row (inner 1): its loops run
// along the channels, where the vector lanes are, instead of one channel at a time.
template <class T>
MIRROR_VECTOR_BODY void add_row_bias(T* __restrict row, const T* __restrict bias,
                                     std::int64_t ch) {
  for (std::int64_t c = 0; c < ch; ++c) row[c] += bias[c];
}

/// acc[c] += rows[i][c] for every row i in order: each channel's sum in the order of the
/// channel-at-a-time loop, so the same bits.
template <class T>
MIRROR_VECTOR_BODY void sum_rows(const T* __restrict rows, double* __restrict acc, std::int64_t n,
                                 std::int64_t stride, std::int64_t width) {
  for (std::int64_t i = 0; i < n; ++i) {
    const T* row = rows + i * stride;
    for (std::int64_t c = 0; c < width; ++c) acc[c] += static_cast<double>(row[c]);
  }
}

}  // namespace

void CpuKernels::bias_add(Tensor& y, const Tensor& bias) {
  const std::int64_t n = y.dim(0), ch = y.dim(1), inner = n * ch > 0 ? y.numel() / (n * ch) : 0;
  with_float(y, "bias_add", [&](auto t) {
    using T = decltype(t);
    T* yp = y.data<T>();
    const T* bp = bias.data<T>();
    if (inner == 1) {
#pragma omp parallel for schedule(static) if (y.numel() > kParallelGrain)
      for (std::int64_t i = 0; i < n; ++i) MIRROR_VECTOR_CALL(add_row_bias(yp + i * ch, bp, ch));
      return;
    }
#pragma omp parallel for schedule(static) if (y.numel() > kParallelGrain)
    for (std::int64_t nc = 0; nc < n * ch; ++nc) {
      const T bv = bp[nc % ch];
      T* row = yp + nc * inner;
      for (std::int64_t i = 0; i < inner; ++i) row[i] += bv;
    }
  });
}

void CpuKernels::bias_grad(const Tensor& dy, Tensor& dbias) {
  const std::int64_t n = dy.dim(0), ch = dy.dim(1), inner = n * ch > 0 ? dy.numel() / (n * ch) : 0;
  with_float(dy, "bias_grad", [&](auto t) {
    using T = decltype(t);
    const T* dp = dy.data<T>();
    T* gp = dbias.data<T>();
    if (inner == 1) {
      // Threads take ranges of channels, each summed over the rows in order: deterministic.
      constexpr std::int64_t kSpan = 256;
#pragma omp parallel for schedule(static) if (dy.numel() > kParallelGrain)
      for (std::int64_t c0 = 0; c0 < ch; c0 += kSpan) {
        const std::int64_t width = std::min(kSpan, ch - c0);
        double acc[kSpan] = {};
        MIRROR_VECTOR_CALL(sum_rows(dp + c0, acc, n, ch, width));
        for (std::int64_t c = 0; c < width; ++c) gp[c0 + c] += static_cast<T>(acc[c]);
      }
      return;
    }
    // One channel per iteration, summed in a fixed order: deterministic for any thread count.
#pragma omp parallel for schedule(static) if (dy.numel() > kParallelGrain)
    for (std::int64_t c = 0; c < ch; ++c) {
      double s = 0;
      for (std::int64_t i = 0; i < n; ++i) {
        const T* row = dp + (i * ch + c) * inner;
        for (std::int64_t j = 0; j < inner; ++j) s += row[j];
      }
      gp[c] += static_cast<T>(s);
    }
  });
}

}  // namespace mirror::cpu
