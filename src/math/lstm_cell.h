// defines: the LSTM cell's element-wise math (forward gates and their backward), written once for
// the CPU loops and any CUDA kernel, so the CPU tests check the arithmetic a device would run.
//
// Semantics are docs/architecture.md invariant 5 (PyTorch nn.LSTM, cuDNN CUDNN_LSTM), per hidden
// unit, gate order i, f, g, o:
//   i  = sigmoid(xi + hi)            xi = (W_i x + b_ii),  hi = (U_i h + b_hi)
//   f  = sigmoid(xf + hf)            ... likewise for f, g, o
//   g  = tanh(xg + hg)
//   o  = sigmoid(xo + ho)
//   c' = f * c + i * g
//   h' = o * tanh(c')
// The caller does the matrix products and adds the biases: these functions see one unit's four
// pre-activations a_* = x* + h*.
#pragma once

#include "math/activation.h"
#include "math/hd.h"
#include "math/rnn_tanh.h"

namespace mirror::math::lstm {

/// What one unit's forward step produces; i, f, g, o and c are what backward needs.
template <class T>
struct CellForward {
  T i, f, g, o, c, h;
};

/// One unit's forward step from the pre-activations (biases included) and the previous cell.
template <class T>
MIRROR_HD inline CellForward<T> cell_forward(T ai, T af, T ag, T ao, T c_prev) {
  CellForward<T> out;
  out.i = cell_sigmoid(ai);  // Note [Cell tanh]
  out.f = cell_sigmoid(af);
  out.g = cell_tanh(ag);
  out.o = cell_sigmoid(ao);
  out.c = out.f * c_prev + out.i * out.g;
  out.h = out.o * cell_tanh(out.c);
  return out;
}

/// Gradients of one unit's step w.r.t. its four pre-activations (which are also the gradients
/// of both biases) and the direct path to the previous cell. The previous state h reaches the
/// step only through U h, so its gradient is the caller's matrix product of the d_a*.
template <class T>
struct CellBackward {
  T d_ai, d_af, d_ag, d_ao, dc_prev;
};

/// Backward of cell_forward given dh (gradient of h'), dc (gradient of c' from later steps), the
/// saved activated gates, the new cell c and the previous cell.
template <class T>
MIRROR_HD inline CellBackward<T> cell_backward(T dh, T dc, T i, T f, T g, T o, T c, T c_prev) {
  CellBackward<T> out;
  const T tc = cell_tanh(c);
  const T dc_total = dc + dh * o * (T(1) - tc * tc);
  out.d_ao = dh * tc * o * (T(1) - o);
  out.d_ai = dc_total * g * i * (T(1) - i);
  out.d_af = dc_total * c_prev * f * (T(1) - f);
  out.d_ag = dc_total * i * (T(1) - g * g);
  out.dc_prev = dc_total * f;
  return out;
}

}  // namespace mirror::math::lstm
