// defines: what the CPU GRU and LSTM share: argument checks of the kernels' own invariants
// (dtypes, reserve sizes, gradient tensors) and the deterministic column sum of bias gradients.
#pragma once

#include <cstdint>
#include <string>

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

// Parallelise the element-wise loops only when there is enough work to pay for the fork.
constexpr std::int64_t kParallelElements = 1 << 14;

/// dbias[c] += sum over rows of m[rows, C], accumulated in double in row order (deterministic).
/// Row-major on purpose: a per-column loop would stride through m, which costs more than the
/// gates themselves for RNN-sized matrices.
template <class T>
void add_column_sums(const Tensor& m, Tensor& dbias) {
  const std::int64_t rows = m.dim(0), cols = m.dim(1);
  Tensor acc_t = Tensor::zeros({cols}, DType::kFloat64, m.device());
  double* acc = acc_t.data<double>();
  const T* p = m.data<T>();
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < cols; ++c) acc[c] += static_cast<double>(p[r * cols + c]);
  }
  T* out = dbias.data<T>();
  for (std::int64_t c = 0; c < cols; ++c) out[c] = static_cast<T>(out[c] + acc[c]);
}

}  // namespace mirror::cpu::rnn
