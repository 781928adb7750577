// The CPU LSTM (float32 and float64): matrix products through ops::gemm (oneDNN for float32), the
// element-wise gates from math/lstm_cell.h. Structured like cpu_gru.cpp: the input projection of
// all steps is one gemm, each step one recurrent gemm (accumulated into the step's block of the
// projection, Note [Time-major products] in cpu_rnn.h) plus one fused, vectorised gate loop.
//
// Note [LSTM reserve layout]: forward in training mode returns one 1-D `reserve` tensor holding
//   states [T+1, N, H]   slot s = hidden state before step s (slot 0 = h0 = 0); steps past a
//                        sequence's length carry the state, so slot T = h_last
//   cells  [T+1, N, H]   the same for the cell state (slot T = c_last)
//   gates  [T, N, 4H]    the activated i, f, g, o of each step (zeros past the length)
// Time-major states make every step's h_prev a contiguous [N, H] matrix for the per-step gemm,
// and slots 1..T-1 together are the [(T-1)*N, H] left factor of dW_hh's single gemm.
#include "cpu/cpu_lstm.h"

#include <algorithm>
#include <string>

#include "cpu/cpu_rnn.h"
#include "math/lstm_cell.h"

namespace mirror::cpu {
namespace {

using std::int64_t;

struct Dims {
  int64_t n, t, f, h;
  int64_t slot() const { return n * h; }
  int64_t states_numel() const { return (t + 1) * slot(); }
  int64_t gates_offset() const { return 2 * states_numel(); }
  int64_t reserve_numel() const { return gates_offset() + t * n * 4 * h; }
};

Dims dims_of(const Tensor& x, const ops::LstmWeights& w) {
  return {x.dim(0), x.dim(1), x.dim(2), w.w_hh.dim(1)};
}

// ---------------------------------------------------------------- forward

/// Pointers of one forward step (all [N, ...] blocks of this step).
template <class T>
struct StepIo {
  const T* pre;   // [N, 4H] x W_ih^T + h_prev W_hh^T (Note [Time-major products])
  const T* bias;  // b_ih + b_hh [4H]
  const std::int32_t* len;
  const T* h_prev;
  const T* c_prev;
  T* h_next;
  T* c_next;
  T* gates;  // [N, 4H]: the saved gates, or scratch in inference (never null: Note [No null rows])
  T* y;      // [N, T, H] (the whole output)
};

/// Rows [s0, s1) of one step's gates: writes both new states, y[:, step] and the activated
/// gates i, f, g, o. Note [Vector gate loops]: the loop over units vectorises (cloned per ISA).
template <class T>
MIRROR_VECTOR_BODY void forward_rows(const Dims& d, int64_t step, int64_t s0, int64_t s1,
                                     const StepIo<T>& io) {
  const int64_t H = d.h;
  for (int64_t s = s0; s < s1; ++s) {
    T* yrow = io.y + (s * d.t + step) * H;
    const T* hp = io.h_prev + s * H;
    const T* cp = io.c_prev + s * H;
    T* hn = io.h_next + s * H;
    T* cn = io.c_next + s * H;
    T* g = io.gates + s * 4 * H;
    if (step >= io.len[s]) {  // past the length: carry both states, emit zeros
      std::copy(hp, hp + H, hn);
      std::copy(cp, cp + H, cn);
      std::fill(yrow, yrow + H, T(0));
      std::fill(g, g + 4 * H, T(0));
      continue;
    }
    const T* pre = io.pre + s * 4 * H;
    const T* b = io.bias;
#pragma omp simd
    for (int64_t j = 0; j < H; ++j) {
      const auto c = math::lstm::cell_forward<T>(pre[j] + b[j], pre[H + j] + b[H + j],
                                                 pre[2 * H + j] + b[2 * H + j],
                                                 pre[3 * H + j] + b[3 * H + j], cp[j]);
      hn[j] = c.h;
      cn[j] = c.c;
      yrow[j] = c.h;
      g[j] = c.i;
      g[H + j] = c.f;
      g[2 * H + j] = c.g;
      g[3 * H + j] = c.o;
    }
  }
}

template <class T>
ops::LstmForwardResult forward_impl(const Tensor& x, const std::vector<std::int32_t>& lengths,
                                    const ops::LstmWeights& w, bool training) {
  const Dims d = dims_of(x, w);
  const DType dt = x.dtype();
  const Device dev = x.device();
  ops::LstmForwardResult out;
  if (d.n == 0 || d.t == 0 || d.h == 0) {
    out.y = Tensor::zeros({d.n, d.t, d.h}, dt, dev);
    out.h_last = Tensor::zeros({d.n, d.h}, dt, dev);
    out.c_last = Tensor::zeros({d.n, d.h}, dt, dev);
    if (training) out.reserve = Tensor::zeros({d.reserve_numel()}, dt, dev);
    return out;
  }
  out.y = Tensor::empty({d.n, d.t, d.h}, dt, dev);  // every element is written below
  out.h_last = Tensor::empty({d.n, d.h}, dt, dev);
  out.c_last = Tensor::empty({d.n, d.h}, dt, dev);

  // Training saves every state and the gates (Note [LSTM reserve layout]); inference keeps two
  // slots per state, used in turn.
  const int64_t slots = training ? d.t + 1 : 2;
  Tensor saved = Tensor::empty({training ? d.reserve_numel() : 2 * slots * d.slot()}, dt, dev);
  auto slot = [&](int which, int64_t step) -> Tensor {  // which: 0 = h, 1 = c
    return saved.view((which * slots + (training ? step : step % 2)) * d.slot(), {d.n, d.h});
  };
  std::fill_n(slot(0, 0).template data<T>(), d.slot(), T(0));
  std::fill_n(slot(1, 0).template data<T>(), d.slot(), T(0));

  // Time-major pre-activations (Note [Time-major products]): the input projection of every
  // step in one gemm; each step's recurrent product is then added into its own block.
  Tensor pre = Tensor::empty({d.t * d.n, 4 * d.h}, dt, dev);
  Tensor bias = w.b_ih.clone();
  ops::axpy(1.0, w.b_hh, bias);
  if (d.f > 0) {
    ops::gemm(false, true, 1.0, rnn::time_major<T>(x), w.w_ih, 0.0, pre);
  } else {
    std::fill_n(pre.data<T>(), pre.numel(), T(0));
  }

  // Inference writes every step's gates into one scratch block (Note [No null rows]).
  Tensor scratch = training ? Tensor() : Tensor::empty({d.n * 4 * d.h}, dt, dev);
  T* gates = training ? saved.data<T>() + d.gates_offset() : scratch.data<T>();
  for (int64_t step = 0; step < d.t; ++step) {
    Tensor h_prev = slot(0, step);
    Tensor pre_step = pre.view(step * d.n * 4 * d.h, {d.n, 4 * d.h});
    // h0 = 0: the first step has no recurrent product.
    if (step > 0) ops::gemm(false, true, 1.0, h_prev, w.w_hh, 1.0, pre_step);
    const StepIo<T> io{pre_step.data<T>(),
                       bias.data<T>(),
                       lengths.data(),
                       h_prev.data<T>(),
                       slot(1, step).template data<T>(),
                       slot(0, step + 1).template data<T>(),
                       slot(1, step + 1).template data<T>(),
                       gates + (training ? step * d.n * 4 * d.h : 0),
                       out.y.data<T>()};
    rnn::for_row_blocks(d.n, d.n * d.h,
                        [&](int64_t s0, int64_t s1) {
                          MIRROR_VECTOR_CALL(forward_rows<T>(d, step, s0, s1, io));
                        });
  }
  out.h_last.copy_from(slot(0, d.t));
  out.c_last.copy_from(slot(1, d.t));
  if (training) out.reserve = saved;
  return out;
}

// ---------------------------------------------------------------- backward

/// Pointers of one backward step.
template <class T>
struct BackIo {
  const T* dy;  // [N, T, H], or nullptr: then `zeros` [H] stands for every row
  const T* zeros;
  const std::int32_t* len;
  const T* gates;   // [N, 4H] of this step
  const T* c_prev;  // [N, H] cell before the step
  const T* c_next;  // [N, H] cell after the step
  const T* dh_cur;  // d(loss)/d(h after the step), excluding this step's dy
  const T* dc_cur;  // d(loss)/d(c after the step)
  T* dh_next;       // direct part of d(loss)/d(h before the step) (the U^T product is added later)
  T* dc_next;       // d(loss)/d(c before the step)
  T* dg;            // [N, 4H] this step's pre-activation grads (time-major buffer)
};

/// Rows [s0, s1) of one step of BPTT. Note [Vector gate loops].
template <class T>
MIRROR_VECTOR_BODY void backward_rows(const Dims& d, int64_t step, int64_t s0, int64_t s1,
                                      const BackIo<T>& io) {
  const int64_t H = d.h;
  for (int64_t s = s0; s < s1; ++s) {
    const T* dh_c = io.dh_cur + s * H;
    const T* dc_c = io.dc_cur + s * H;
    T* dh_n = io.dh_next + s * H;
    T* dc_n = io.dc_next + s * H;
    T* dg = io.dg + s * 4 * H;
    if (step >= io.len[s]) {  // carried states: the gradients pass through, nothing is learned
      std::copy(dh_c, dh_c + H, dh_n);
      std::copy(dc_c, dc_c + H, dc_n);
      std::fill(dg, dg + 4 * H, T(0));
      continue;
    }
    const T* dyr = io.dy ? io.dy + (s * d.t + step) * H : io.zeros;
    const T* g = io.gates + s * 4 * H;
    const T* cp = io.c_prev + s * H;
    const T* cn = io.c_next + s * H;
#pragma omp simd
    for (int64_t j = 0; j < H; ++j) {
      const auto c = math::lstm::cell_backward<T>(dh_c[j] + dyr[j], dc_c[j], g[j], g[H + j],
                                                  g[2 * H + j], g[3 * H + j], cn[j], cp[j]);
      dg[j] = c.d_ai;
      dg[H + j] = c.d_af;
      dg[2 * H + j] = c.d_ag;
      dg[3 * H + j] = c.d_ao;
      dc_n[j] = c.dc_prev;
      dh_n[j] = T(0);  // h reaches the step only through U h: the gemm below adds it
    }
  }
}

void check_backward_args(const Tensor& x, const ops::LstmWeights& w,
                         const ops::LstmForwardResult& fwd, const Tensor& dy, const Tensor& dh_last,
                         const ops::LstmWeights& dw) {
  const char* op = "lstm_backward";
  rnn::check_weights(x, w.w_ih, w.w_hh, w.b_ih, w.b_hh, op);
  const Dims d = dims_of(x, w);
  rnn::require_reserve(fwd.reserve, d.reserve_numel(), x.dtype(), op, "lstm_forward");
  rnn::require_shape(dy, {d.n, d.t, d.h}, "lstm_backward dy");
  rnn::require_shape(dh_last, {d.n, d.h}, "lstm_backward dh_last");
  rnn::require_dtype(dy, x.dtype(), op, "dy");
  rnn::require_dtype(dh_last, x.dtype(), op, "dh_last");
  rnn::require_weight_grads(dw, w, op);
}

template <class T>
Tensor backward_impl(const Tensor& x, const std::vector<std::int32_t>& lengths,
                     const ops::LstmWeights& w, const ops::LstmForwardResult& fwd, const Tensor& dy,
                     const Tensor& dh_last, ops::LstmWeights& dw, bool need_dx) {
  const Dims d = dims_of(x, w);
  const DType dt = x.dtype();
  const Device dev = x.device();
  if (d.n == 0 || d.t == 0 || d.h == 0) {
    return need_dx ? Tensor::zeros({d.n, d.t, d.f}, dt, dev) : Tensor();
  }

  const T* states = fwd.reserve.data<T>();
  const T* cells = states + d.states_numel();
  const T* gates = states + d.gates_offset();
  // The pre-activation gradients, time-major (Note [Time-major products]): the same values feed
  // dW_ih, dW_hh, both biases and dx.
  Tensor dg = Tensor::empty({d.t * d.n, 4 * d.h}, dt, dev);
  Tensor grads = Tensor::empty({4 * d.slot()}, dt, dev);  // ping-pong dh and dc
  auto dh_slot = [&](int64_t step) -> Tensor {
    return grads.view((step % 2) * d.slot(), {d.n, d.h});
  };
  auto dc_slot = [&](int64_t step) -> Tensor {
    return grads.view((2 + step % 2) * d.slot(), {d.n, d.h});
  };

  Tensor dh_t = dh_slot(d.t);
  if (dh_last.defined()) {
    dh_t.copy_from(dh_last);
  } else {
    std::fill_n(dh_t.data<T>(), d.slot(), T(0));
  }
  std::fill_n(dc_slot(d.t).template data<T>(), d.slot(), T(0));  // c_last feeds nothing
  const Tensor zeros = Tensor::zeros({d.h}, dt, dev);            // the dy row when dy is undefined
  for (int64_t step = d.t - 1; step >= 0; --step) {
    Tensor dh_next = dh_slot(step);
    Tensor dg_step = dg.view(step * d.n * 4 * d.h, {d.n, 4 * d.h});
    const BackIo<T> io{dy.defined() ? dy.data<T>() : nullptr,
                       zeros.data<T>(),
                       lengths.data(),
                       gates + step * d.n * 4 * d.h,
                       cells + step * d.slot(),
                       cells + (step + 1) * d.slot(),
                       dh_slot(step + 1).template data<T>(),
                       dc_slot(step + 1).template data<T>(),
                       dh_next.data<T>(),
                       dc_slot(step).template data<T>(),
                       dg_step.data<T>()};
    rnn::for_row_blocks(d.n, d.n * d.h,
                        [&](int64_t s0, int64_t s1) {
                          MIRROR_VECTOR_CALL(backward_rows<T>(d, step, s0, s1, io));
                        });
    // The states before step 0 are the constant zeros: their gradients are not needed.
    if (step > 0) ops::gemm(false, false, 1.0, dg_step, w.w_hh, 1.0, dh_next);
  }

  // dW_hh: the states before steps 1..T-1 (slot 0, before step 0, is zero and adds nothing).
  if (d.t > 1) {
    const int64_t rows = (d.t - 1) * d.n;
    ops::gemm(true, false, 1.0, dg.view(d.n * 4 * d.h, {rows, 4 * d.h}),
              fwd.reserve.view(d.slot(), {rows, d.h}), 1.0, dw.w_hh);
  }
  // Both biases enter every gate pre-activation the same way: one gradient for both.
  rnn::add_column_sums<T>(dg, dw.b_ih, &dw.b_hh);
  if (d.f > 0) {
    ops::gemm(true, false, 1.0, dg, rnn::time_major<T>(x), 1.0, dw.w_ih);
  }
  if (!need_dx) return Tensor();
  Tensor dx = Tensor::empty({d.n, d.t, d.f}, dt, dev);  // fully written from dx_t
  if (d.f > 0) {
    Tensor dx_t = Tensor::empty({d.t * d.n, d.f}, dt, dev);
    ops::gemm(false, false, 1.0, dg, w.w_ih, 0.0, dx_t);
    rnn::swap_leading<T>(dx_t.data<T>(), d.t, d.n, d.f, dx.data<T>());
  }
  return dx;
}

}  // namespace

ops::LstmForwardResult lstm_forward(const Tensor& x, const std::vector<std::int32_t>& lengths,
                                    const ops::LstmWeights& w, bool training) {
  rnn::check_weights(x, w.w_ih, w.w_hh, w.b_ih, w.b_hh, "lstm_forward");
  if (x.dtype() == DType::kFloat64) return forward_impl<double>(x, lengths, w, training);
  return forward_impl<float>(x, lengths, w, training);
}

Tensor lstm_backward(const Tensor& x, const std::vector<std::int32_t>& lengths,
                     const ops::LstmWeights& w, const ops::LstmForwardResult& fwd, const Tensor& dy,
                     const Tensor& dh_last, ops::LstmWeights& dw, bool need_dx) {
  check_backward_args(x, w, fwd, dy, dh_last, dw);
  if (x.dtype() == DType::kFloat64) {
    return backward_impl<double>(x, lengths, w, fwd, dy, dh_last, dw, need_dx);
  }
  return backward_impl<float>(x, lengths, w, fwd, dy, dh_last, dw, need_dx);
}

}  // namespace mirror::cpu
