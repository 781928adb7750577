// defines: what the CPU GRU and LSTM share: argument checks of the kernels' own invariants
// (dtypes, reserve sizes, gradient tensors), the deterministic column sum of bias gradients, the
// time-major copies of x and dx, and the per-ISA clones of the gate loops.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "cpu/cpu_vector_clones.h"
#include "mirror/tensor.h"

namespace mirror::cpu::rnn {

// Checks build their messages only on failure (MIRROR_CHECK is lazy): no string work per call.
inline void require_dtype(const Tensor& t, DType dtype, const char* op, const char* what) {
  MIRROR_CHECK(!t.defined() || t.dtype() == dtype, InvalidArgument,
               std::string(op) + ": " + what + " must have the input's dtype " + dtype_name(dtype) +
                   ", got " + t.str());
}

/// x is float32/float64 and the four weights share its dtype.
inline void check_weights(const Tensor& x, const Tensor& w_ih, const Tensor& w_hh,
                          const Tensor& b_ih, const Tensor& b_hh, const char* op) {
  MIRROR_CHECK(x.dtype() == DType::kFloat32 || x.dtype() == DType::kFloat64, InvalidArgument,
               std::string(op) + ": expected float32 or float64 input, got " + x.str());
  require_dtype(w_ih, x.dtype(), op, "w_ih");
  require_dtype(w_hh, x.dtype(), op, "w_hh");
  require_dtype(b_ih, x.dtype(), op, "b_ih");
  require_dtype(b_hh, x.dtype(), op, "b_hh");
}

inline void require_shape(const Tensor& t, const Shape& want, const char* what) {
  if (t.defined() && t.shape() != want) check_shape(t, want, what);  // throws
}

/// A weight gradient must exist and match its weight (it is accumulated into).
inline void require_grad(const Tensor& grad, const Tensor& weight, const char* op,
                         const char* what) {
  MIRROR_CHECK(grad.defined(), InvalidArgument,
               std::string(what) + ": the gradient tensor is undefined; pass zeros of " +
                   weight.str() + " to accumulate into");
  require_shape(grad, weight.shape(), what);
  require_dtype(grad, weight.dtype(), op, what);
}

/// The four weight gradients of a GRU or an LSTM (ops::GruWeights, ops::LstmWeights), each
/// named "<op> dw.<tensor>" in errors.
template <class Weights>
void require_weight_grads(const Weights& dw, const Weights& w, const char* op) {
  const std::string o(op);
  require_grad(dw.w_ih, w.w_ih, op, (o + " dw.w_ih").c_str());
  require_grad(dw.w_hh, w.w_hh, op, (o + " dw.w_hh").c_str());
  require_grad(dw.b_ih, w.b_ih, op, (o + " dw.b_ih").c_str());
  require_grad(dw.b_hh, w.b_hh, op, (o + " dw.b_hh").c_str());
}

/// The reserve of a training forward: `numel` values of x's dtype.
inline void require_reserve(const Tensor& reserve, std::int64_t numel, DType dtype, const char* op,
                            const char* forward) {
  MIRROR_CHECK(reserve.defined() && reserve.numel() == numel && reserve.dtype() == dtype,
               InvalidArgument,
               std::string(op) + ": the forward result has no matching reserve (expected " +
                   std::to_string(numel) + " saved values, got " +
                   (reserve.defined() ? reserve.str() : std::string("none")) + "); run " + forward +
                   " with training=true on the same input before backward");
}

// Note [Vector gate loops]: the gate loops run per step over N rows of H units, and their float
// math (math/rnn_tanh.h) has no calls or branches, so the loop over units vectorises. The
// library is built for baseline x86-64 (SSE2), where the selects of that math do not vectorise;
// the gate-loop functions are therefore compiled three times (baseline, x86-64-v3 = AVX2 + FMA,
// x86-64-v4 = AVX-512) and each call runs the best one the CPU has, under the ISA cap of Note
// [One ISA knob] (cpu_isa.h). All three compute the same formulas; float results may differ in the last bits
// between CPU generations (FMA contraction), as oneDNN's own ISA dispatch already makes them.
// Replicas stay bitwise equal regardless: they apply the same all-reduced gradients.
// The files holding gate loops are compiled with -fno-trapping-math (src/CMakeLists.txt): with
// trapping math GCC if-converts the selects only with AVX-512 masks, and the AVX2 and SSE clones
// silently stayed scalar with branches (the LSTM op took 8 ms instead of 3.6 on AVX2). Measured
// on one core here (LSTM op, forward + backward, N=64 T=28 F=28 H=64): AVX-512 3.3-3.6 ms, AVX2
// 3.6 ms, baseline SSE2 5.1 ms; the previous loops (scalar, expf calls) 9-10 ms.
// The clones come from MIRROR_VECTOR_CALL (cpu_vector_clones.h), under ONEDNN_MAX_CPU_ISA.

// Parallelise the element-wise loops only when there is enough work to pay for the fork.
constexpr std::int64_t kParallelElements = 1 << 14;

/// Calls f(s0, s1) on blocks of [0, rows) that cover it: one block, or one per OpenMP thread
/// when `elements` (the work) is at least kParallelElements. The gate loops take a block, not a
/// row, so one call of a cloned function (Note [Vector gate loops]) does a thread's whole share.
template <class F>
void for_row_blocks(std::int64_t rows, std::int64_t elements, F&& f) {
  if (elements < kParallelElements || omp_get_max_threads() == 1) {
    f(std::int64_t{0}, rows);
    return;
  }
#pragma omp parallel
  {
    const std::int64_t threads = omp_get_num_threads(), me = omp_get_thread_num();
    const std::int64_t s0 = rows * me / threads, s1 = rows * (me + 1) / threads;
    if (s0 < s1) f(s0, s1);
  }
}

// Note [No null rows]: the gate loops never test a row pointer inside the vectorised loop (an
// absent dy reads a row of zeros; inference writes its gates to scratch). A masked vector load
// or store whose masked-off lanes point at an unmapped page (nullptr + j) is legal but takes a
// microcode assist costing hundreds of cycles per access: it was most of the GRU's backward
// loop on the AVX-512 clone.

/// dbias[c] += sum over rows of m[rows, C] (and the same sums into dbias2 when given),
/// accumulated in double in row order (deterministic). Row-major on purpose: a per-column loop
/// would stride through m, which costs more than the gates themselves for RNN-sized matrices.
template <class T>
MIRROR_VECTOR_BODY void column_sums(const T* m, std::int64_t rows, std::int64_t cols,
                                    double* acc) {
  for (std::int64_t r = 0; r < rows; ++r) {
#pragma omp simd
    for (std::int64_t c = 0; c < cols; ++c) acc[c] += static_cast<double>(m[r * cols + c]);
  }
}

template <class T>
void add_column_sums(const Tensor& m, Tensor& dbias, Tensor* dbias2 = nullptr) {
  const std::int64_t rows = m.dim(0), cols = m.dim(1);
  Tensor acc_t = Tensor::zeros({cols}, DType::kFloat64, m.device());
  double* acc = acc_t.data<double>();
  MIRROR_VECTOR_CALL(column_sums<T>(m.data<T>(), rows, cols, acc));
  for (Tensor* out_t : {&dbias, dbias2}) {
    if (out_t == nullptr) continue;
    T* out = out_t->data<T>();
    for (std::int64_t c = 0; c < cols; ++c) out[c] = static_cast<T>(out[c] + acc[c]);
  }
}

/// Note [Time-major products]: the kernels keep every per-step matrix time-major ([T, N, ...]
/// flattened to [T*N, ...]), so one step's rows are a contiguous [N, ...] block: the recurrent
/// product of a step accumulates straight into that step's input projection, and the gate loops
/// read and write whole blocks instead of N rows T apart. x and dx are batch-major [N, T, F]; the
/// kernels copy them across once (N*T*F values, small next to the products).
/// dst[b, a, :] = src[a, b, :] for src [A, B, F].
template <class T>
void swap_leading(const T* src, std::int64_t a, std::int64_t b, std::int64_t f, T* dst) {
  for (std::int64_t i = 0; i < a; ++i) {
    for (std::int64_t j = 0; j < b; ++j) {
      const T* from = src + (i * b + j) * f;
      std::copy(from, from + f, dst + (j * a + i) * f);
    }
  }
}

/// x [N, T, F] copied time-major as [T*N, F].
template <class T>
Tensor time_major(const Tensor& x) {
  const std::int64_t n = x.dim(0), t = x.dim(1), f = x.dim(2);
  Tensor out = Tensor::empty({t * n, f}, x.dtype(), x.device());
  swap_leading<T>(x.data<T>(), n, t, f, out.data<T>());
  return out;
}

}  // namespace mirror::cpu::rnn
