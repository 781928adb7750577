// The CPU GRU (float32 and float64): matrix products through ops::gemm (oneDNN for float32), the
// element-wise gates from math/gru_cell.h in loops that vectorise (Note [Vector gate loops]).
//
// Note [GRU reserve layout]: forward in training mode returns one 1-D `reserve` tensor holding
//   states [T+1, N, H]   slot s = state before step s (slot 0 = h0 = 0, slot T = last state);
//                        steps past a sequence's length carry the state, so slot T = h_last
//   gates  [T, N, 4, H]  r, z, n and hn = U_n h + b_hn of each step (zeros past the length)
// Time-major states make every step's h_prev a contiguous [N, H] matrix for the per-step gemm,
// and slots 1..T-1 together are the [(T-1)*N, H] left factor of dW_hh's single gemm (slot 0 is
// zero). The input projections and all gradients of pre-activations are time-major as well
// (Note [Time-major products], cpu_rnn.h).
#include "cpu/cpu_gru.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "cpu/cpu_rnn.h"
#include "math/gru_cell.h"

namespace mirror::cpu {
namespace {

using std::int64_t;

struct Dims {
  int64_t n, t, f, h;
  int64_t states_numel() const { return (t + 1) * n * h; }
  int64_t reserve_numel() const { return states_numel() + t * n * 4 * h; }
};

Dims dims_of(const Tensor& x, const ops::GruWeights& w) {
  return {x.dim(0), x.dim(1), x.dim(2), w.w_hh.dim(1)};
}

using rnn::add_column_sums;
using rnn::require_dtype;
using rnn::require_shape;

void check_weights(const Tensor& x, const ops::GruWeights& w, const char* op) {
  rnn::check_weights(x, w.w_ih, w.w_hh, w.b_ih, w.b_hh, op);
}

// ---------------------------------------------------------------- forward

/// Pointers of one forward step (all [N, ...] blocks of this step).
template <class T>
struct StepIo {
  const T* gx;  // [N, 3H] this step's X W_ih^T (Note [Time-major products])
  const T* gh;  // [N, 3H] h_prev W_hh^T
  const T* b_ih;
  const T* b_hh;
  const std::int32_t* len;
  const T* h_prev;
  T* h_next;
  T* gates;  // [N, 4H]: the saved gates, or scratch in inference (never null: Note [No null rows])
  T* y;      // [N, T, H] (the whole output)
};

/// Rows [s0, s1) of one step's gates: writes the new state, y[:, step] and the gates r, z, n and
/// hn = U_n h + b_hn. Note [Vector gate loops]: the loop over units vectorises (cloned per ISA).
template <class T>
MIRROR_VECTOR_BODY void forward_rows(const Dims& d, int64_t step, int64_t s0, int64_t s1,
                                     const StepIo<T>& io) {
  const int64_t H = d.h;
  for (int64_t s = s0; s < s1; ++s) {
    T* yrow = io.y + (s * d.t + step) * H;
    const T* hp = io.h_prev + s * H;
    T* hn_row = io.h_next + s * H;
    T* g = io.gates + s * 4 * H;
    if (step >= io.len[s]) {  // past the length: carry the state, emit zeros
      std::copy(hp, hp + H, hn_row);
      std::fill(yrow, yrow + H, T(0));
      std::fill(g, g + 4 * H, T(0));
      continue;
    }
    const T* xr = io.gx + s * 3 * H;
    const T* hr = io.gh + s * 3 * H;
    const T* b_ih = io.b_ih;
    const T* b_hh = io.b_hh;
#pragma omp simd
    for (int64_t j = 0; j < H; ++j) {
      const T hn = hr[2 * H + j] + b_hh[2 * H + j];
      const auto c = math::gru::cell_forward<T>(xr[j] + b_ih[j], xr[H + j] + b_ih[H + j],
                                                xr[2 * H + j] + b_ih[2 * H + j], hr[j] + b_hh[j],
                                                hr[H + j] + b_hh[H + j], hn, hp[j]);
      hn_row[j] = c.h;
      yrow[j] = c.h;
      g[j] = c.r;
      g[H + j] = c.z;
      g[2 * H + j] = c.n;
      g[3 * H + j] = hn;
    }
  }
}

template <class T>
ops::GruForwardResult forward_impl(const Tensor& x, const std::vector<std::int32_t>& lengths,
                                   const ops::GruWeights& w, bool training) {
  const Dims d = dims_of(x, w);
  const DType dt = x.dtype();
  const Device dev = x.device();
  ops::GruForwardResult out;
  if (d.n == 0 || d.t == 0 || d.h == 0) {
    out.y = Tensor::zeros({d.n, d.t, d.h}, dt, dev);
    out.h_last = Tensor::zeros({d.n, d.h}, dt, dev);
    if (training) out.reserve = Tensor::zeros({d.reserve_numel()}, dt, dev);
    return out;
  }
  out.y = Tensor::empty({d.n, d.t, d.h}, dt, dev);  // every element is written below
  out.h_last = Tensor::empty({d.n, d.h}, dt, dev);

  // Training saves every state and the gates (Note [GRU reserve layout]); inference keeps only
  // two state slots, used in turn.
  Tensor saved = Tensor::empty({training ? d.reserve_numel() : 2 * d.n * d.h}, dt, dev);
  auto state = [&](int64_t step) -> Tensor {
    return saved.view((training ? step : step % 2) * d.n * d.h, {d.n, d.h});
  };
  Tensor h0 = state(0);
  std::fill_n(h0.data<T>(), h0.numel(), T(0));

  Tensor gx = Tensor::empty({d.t * d.n, 3 * d.h}, dt, dev);  // time-major
  Tensor gh = Tensor::empty({d.n, 3 * d.h}, dt, dev);
  if (d.f > 0) {
    ops::gemm(false, true, 1.0, rnn::time_major<T>(x), w.w_ih, 0.0, gx);
  } else {
    std::fill_n(gx.data<T>(), gx.numel(), T(0));
  }

  // Inference writes every step's gates into one scratch block (Note [No null rows]).
  Tensor scratch = training ? Tensor() : Tensor::empty({d.n * 4 * d.h}, dt, dev);
  T* gates = training ? saved.data<T>() + d.states_numel() : scratch.data<T>();
  for (int64_t step = 0; step < d.t; ++step) {
    Tensor h_prev = state(step), h_next = state(step + 1);
    if (step == 0) {
      std::fill_n(gh.data<T>(), gh.numel(), T(0));  // h0 = 0
    } else {
      ops::gemm(false, true, 1.0, h_prev, w.w_hh, 0.0, gh);
    }
    const StepIo<T> io{gx.data<T>() + step * d.n * 3 * d.h,
                       gh.data<T>(),
                       w.b_ih.data<T>(),
                       w.b_hh.data<T>(),
                       lengths.data(),
                       h_prev.data<T>(),
                       h_next.data<T>(),
                       gates + (training ? step * d.n * 4 * d.h : 0),
                       out.y.data<T>()};
    rnn::for_row_blocks(d.n, d.n * d.h,
                        [&](int64_t s0, int64_t s1) {
                          MIRROR_VECTOR_CALL(forward_rows<T>(d, step, s0, s1, io));
                        });
  }
  out.h_last.copy_from(state(d.t));
  if (training) out.reserve = saved;
  return out;
}

// ---------------------------------------------------------------- backward

/// Pointers of one backward step.
template <class T>
struct BackIo {
  const T* dy;  // [N, T, H], or nullptr: then `zeros` [H] stands for every row
  const T* zeros;
  const T* gates;   // [N, 4H] of this step
  const T* h_prev;  // [N, H] the state before the step
  const std::int32_t* len;
  const T* dh_cur;  // d(loss)/d(state after the step), excluding this step's dy
  T* dh_next;       // direct part of d(loss)/d(state before the step) (U^T product added later)
  T* dgx;           // [N, 3H] this step's grads of W_ih x + b_ih
  T* dgh;           // [N, 3H] this step's grads of U h + b_hh
};

/// Rows [s0, s1) of one step of BPTT. Note [Vector gate loops].
template <class T>
MIRROR_VECTOR_BODY void backward_rows(const Dims& d, int64_t step, int64_t s0, int64_t s1,
                                      const BackIo<T>& io) {
  const int64_t H = d.h;
  for (int64_t s = s0; s < s1; ++s) {
    const T* dc = io.dh_cur + s * H;
    T* dn_row = io.dh_next + s * H;
    T* gxr = io.dgx + s * 3 * H;
    T* ghr = io.dgh + s * 3 * H;
    if (step >= io.len[s]) {  // carried state: the gradient passes through, nothing is learned
      std::copy(dc, dc + H, dn_row);
      std::fill(gxr, gxr + 3 * H, T(0));
      std::fill(ghr, ghr + 3 * H, T(0));
      continue;
    }
    const T* dyr = io.dy ? io.dy + (s * d.t + step) * H : io.zeros;
    const T* g = io.gates + s * 4 * H;
    const T* hp = io.h_prev + s * H;
#pragma omp simd
    for (int64_t j = 0; j < H; ++j) {
      const auto c = math::gru::cell_backward<T>(dc[j] + dyr[j], g[j], g[H + j], g[2 * H + j],
                                                 g[3 * H + j], hp[j]);
      gxr[j] = c.d_xr;
      gxr[H + j] = c.d_xz;
      gxr[2 * H + j] = c.d_xn;
      ghr[j] = c.d_xr;
      ghr[H + j] = c.d_xz;
      ghr[2 * H + j] = c.d_hn;
      dn_row[j] = c.dh_prev;
    }
  }
}

void check_backward_args(const Tensor& x, const ops::GruWeights& w,
                         const ops::GruForwardResult& fwd, const Tensor& dy, const Tensor& dh_last,
                         const ops::GruWeights& dw) {
  const char* op = "gru_backward";
  check_weights(x, w, op);
  const Dims d = dims_of(x, w);
  rnn::require_reserve(fwd.reserve, d.reserve_numel(), x.dtype(), op, "gru_forward");
  require_shape(dy, {d.n, d.t, d.h}, "gru_backward dy");
  require_shape(dh_last, {d.n, d.h}, "gru_backward dh_last");
  require_dtype(dy, x.dtype(), op, "dy");
  require_dtype(dh_last, x.dtype(), op, "dh_last");
  rnn::require_weight_grads(dw, w, op);
}

template <class T>
Tensor backward_impl(const Tensor& x, const std::vector<std::int32_t>& lengths,
                     const ops::GruWeights& w, const ops::GruForwardResult& fwd, const Tensor& dy,
                     const Tensor& dh_last, ops::GruWeights& dw, bool need_dx) {
  const Dims d = dims_of(x, w);
  const DType dt = x.dtype();
  const Device dev = x.device();
  if (d.n == 0 || d.t == 0 || d.h == 0) {
    return need_dx ? Tensor::zeros({d.n, d.t, d.f}, dt, dev) : Tensor();
  }

  const T* states = fwd.reserve.data<T>();
  const T* gates = states + d.states_numel();
  // Time-major pre-activation gradients (Note [Time-major products]): of W_ih x + b_ih and of
  // U h + b_hh (they differ in the n block, where r scales U_n h).
  Tensor dgx = Tensor::empty({d.t * d.n, 3 * d.h}, dt, dev);
  Tensor dgh = Tensor::empty({d.t * d.n, 3 * d.h}, dt, dev);
  Tensor dh = Tensor::empty({2 * d.n * d.h}, dt, dev);  // ping-pong state gradient
  auto dh_slot = [&](int64_t step) -> Tensor {
    return dh.view((step % 2) * d.n * d.h, {d.n, d.h});
  };

  Tensor dh_t = dh_slot(d.t);  // gradient of the state after the last step
  if (dh_last.defined()) {
    dh_t.copy_from(dh_last);
  } else {
    std::fill_n(dh_t.data<T>(), dh_t.numel(), T(0));
  }
  const Tensor zeros = Tensor::zeros({d.h}, dt, dev);  // the dy row when dy is undefined
  for (int64_t step = d.t - 1; step >= 0; --step) {
    Tensor cur = dh_slot(step + 1), next = dh_slot(step);
    Tensor dgh_step = dgh.view(step * d.n * 3 * d.h, {d.n, 3 * d.h});
    const BackIo<T> io{dy.defined() ? dy.data<T>() : nullptr,
                       zeros.data<T>(),
                       gates + step * d.n * 4 * d.h,
                       states + step * d.n * d.h,
                       lengths.data(),
                       cur.data<T>(),
                       next.data<T>(),
                       dgx.data<T>() + step * d.n * 3 * d.h,
                       dgh_step.data<T>()};
    rnn::for_row_blocks(d.n, d.n * d.h,
                        [&](int64_t s0, int64_t s1) {
                          MIRROR_VECTOR_CALL(backward_rows<T>(d, step, s0, s1, io));
                        });
    // The state before step 0 is the constant h0: its gradient is not needed.
    if (step > 0) ops::gemm(false, false, 1.0, dgh_step, w.w_hh, 1.0, next);
  }

  // dW_hh: the states before steps 1..T-1 (slot 0, before step 0, is zero and adds nothing).
  if (d.t > 1) {
    const int64_t rows = (d.t - 1) * d.n;
    ops::gemm(true, false, 1.0, dgh.view(d.n * 3 * d.h, {rows, 3 * d.h}),
              fwd.reserve.view(d.n * d.h, {rows, d.h}), 1.0, dw.w_hh);
  }
  add_column_sums<T>(dgx, dw.b_ih);
  add_column_sums<T>(dgh, dw.b_hh);
  if (d.f > 0) {
    ops::gemm(true, false, 1.0, dgx, rnn::time_major<T>(x), 1.0, dw.w_ih);
  }
  if (!need_dx) return Tensor();
  Tensor dx = Tensor::empty({d.n, d.t, d.f}, dt, dev);  // fully written from dx_t
  if (d.f > 0) {
    Tensor dx_t = Tensor::empty({d.t * d.n, d.f}, dt, dev);
    ops::gemm(false, false, 1.0, dgx, w.w_ih, 0.0, dx_t);
    rnn::swap_leading<T>(dx_t.data<T>(), d.t, d.n, d.f, dx.data<T>());
  }
  return dx;
}

}  // namespace

ops::GruForwardResult gru_forward(const Tensor& x, const std::vector<std::int32_t>& lengths,
                                  const ops::GruWeights& w, bool training) {
  check_weights(x, w, "gru_forward");
  if (x.dtype() == DType::kFloat64) return forward_impl<double>(x, lengths, w, training);
  return forward_impl<float>(x, lengths, w, training);
}

Tensor gru_backward(const Tensor& x, const std::vector<std::int32_t>& lengths,
                    const ops::GruWeights& w, const ops::GruForwardResult& fwd, const Tensor& dy,
                    const Tensor& dh_last, ops::GruWeights& dw, bool need_dx) {
  check_backward_args(x, w, fwd, dy, dh_last, dw);
  if (x.dtype() == DType::kFloat64) {
    return backward_impl<double>(x, lengths, w, fwd, dy, dh_last, dw, need_dx);
  }
  return backward_impl<float>(x, lengths, w, fwd, dy, dh_last, dw, need_dx);
}

}  // namespace mirror::cpu
