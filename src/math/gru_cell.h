// defines: the GRU cell's element-wise math (forward gates and their backward), written once for
// the CPU loops and the CUDA kernels so the CPU tests check the arithmetic the GPU runs.
//
// Semantics are docs/architecture.md invariant 5 (PyTorch GRU, Keras reset_after=True), per hidden
// unit:
//   r  = sigmoid(xr + hr)            xr = (W_r x + b_ir),  hr = (U_r h + b_hr)
//   z  = sigmoid(xz + hz)            xz = (W_z x + b_iz),  hz = (U_z h + b_hz)
//   n  = tanh(xn + r * hn)           xn = (W_n x + b_in),  hn = (U_n h + b_hn)
//   h' = (1 - z) * n + z * h
// The caller does the matrix products (and adds the biases); these functions see one unit.
#pragma once

#include "math/activation.h"
#include "math/hd.h"
#include "math/rnn_tanh.h"

namespace mirror::math::gru {

/// What one unit's forward step produces; r, z, n and hn are what backward needs.
template <class T>
struct CellForward {
  T r, z, n, h;
};

/// One unit's forward step: xr/xz/xn include b_i*, hr/hz/hn include b_h*; h_prev is the state.
template <class T>
MIRROR_HD inline CellForward<T> cell_forward(T xr, T xz, T xn, T hr, T hz, T hn, T h_prev) {
  CellForward<T> out;
  out.r = cell_sigmoid(xr + hr);  // Note [Cell tanh]
  out.z = cell_sigmoid(xz + hz);
  out.n = cell_tanh(xn + out.r * hn);
  out.h = (T(1) - out.z) * out.n + out.z * h_prev;
  return out;
}

/// Gradients of one unit's step w.r.t. its pre-activations and its previous state.
///   d_xr, d_xz, d_xn: w.r.t. W_* x + b_i* (d_xr, d_xz are also the grads of hr, hz);
///   d_hn: w.r.t. U_n h + b_hn;  dh_prev: the direct path h' <- z * h (the U^T products of the
///   recurrent grads are added by the caller's matrix product).
template <class T>
struct CellBackward {
  T d_xr, d_xz, d_xn, d_hn, dh_prev;
};

/// Backward of cell_forward given the gradient dh of the new state and the saved r, z, n, hn
/// and previous state.
template <class T>
MIRROR_HD inline CellBackward<T> cell_backward(T dh, T r, T z, T n, T hn, T h_prev) {
  CellBackward<T> g;
  const T dn = dh * (T(1) - z);
  const T dz = dh * (h_prev - n);
  g.dh_prev = dh * z;
  g.d_xn = dn * (T(1) - n * n);  // tanh' = 1 - n^2
  g.d_hn = g.d_xn * r;           // n = tanh(xn + r * hn)
  const T dr = g.d_xn * hn;
  g.d_xr = dr * r * (T(1) - r);  // sigmoid' = s (1 - s)
  g.d_xz = dz * z * (T(1) - z);
  return g;
}

}  // namespace mirror::math::gru
