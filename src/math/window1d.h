// defines: the per-element rules of the 1-D window ops (im2col1d, col2im1d, pool1d_*), written
// once for the CPU loops and the CUDA kernels (Note [Shared math] in math/hd.h), so both
// backends take the same taps, break max ties the same way and add in the same order.
//
// Every rule is a gather for one output element: the backward passes loop over the taps that
// read one input step, in tap order, so no element is written twice (no atomics on the GPU) and
// the sums are deterministic.
#pragma once

#include "math/hd.h"

namespace mirror::math::window1d {

/// The geometry the kernels need (ops::Window1D without its helpers).
struct Geometry {
  int k, stride, dilation, pad_left;
  int out;  // output steps
};

/// The input step read by tap j of output step t (may lie in the padding).
MIRROR_HD inline int tap(const Geometry& g, int t, int j) {
  return t * g.stride - g.pad_left + j * g.dilation;
}

/// The output step whose tap j reads input step p, or -1.
MIRROR_HD inline int reader(const Geometry& g, int p, int j) {
  const int u = p + g.pad_left - j * g.dilation;
  if (u < 0 || u % g.stride != 0) return -1;
  const int t = u / g.stride;
  return t < g.out ? t : -1;
}

/// The first maximum among the counted steps (0 <= p < limit) of window t of a [steps, C] plane
/// read at channel stride `c_stride` (x points at channel c of step 0), or -1 when none counts.
template <class T>
MIRROR_HD inline int window_argmax(const T* x, long c_stride, int limit, const Geometry& g, int t) {
  int best = -1;
  for (int j = 0; j < g.k; ++j) {
    const int p = tap(g, t, j);
    if (p < 0 || p >= limit) continue;
    if (best < 0 || x[p * c_stride] > x[best * c_stride]) best = p;
  }
  return best;
}

/// Number of counted steps in window t.
MIRROR_HD inline int window_count(int limit, const Geometry& g, int t) {
  int count = 0;
  for (int j = 0; j < g.k; ++j) {
    const int p = tap(g, t, j);
    count += (p >= 0 && p < limit) ? 1 : 0;
  }
  return count;
}

/// Forward of max (`max`) or average pooling for window t: 0 when no step counts.
template <class T>
MIRROR_HD inline T pool_value(bool max, const T* x, long c_stride, int limit, const Geometry& g,
                              int t) {
  if (max) {
    const int best = window_argmax(x, c_stride, limit, g, t);
    return best < 0 ? T(0) : x[best * c_stride];
  }
  T sum = T(0);
  int count = 0;
  for (int j = 0; j < g.k; ++j) {
    const int p = tap(g, t, j);
    if (p < 0 || p >= limit) continue;
    sum += x[p * c_stride];
    ++count;
  }
  return count > 0 ? sum / T(count) : T(0);
}

/// Backward of pool_value for input step p: the sum over the windows that count p (tap order)
/// of dy (max: only where p is the window's argmax; average: dy / the window's count).
template <class T>
MIRROR_HD inline T pool_grad(bool max, const T* x, const T* dy, long c_stride, int limit,
                             const Geometry& g, int p) {
  if (p >= limit) return T(0);
  T sum = T(0);
  for (int j = 0; j < g.k; ++j) {
    const int t = reader(g, p, j);
    if (t < 0) continue;
    if (max) {
      if (window_argmax(x, c_stride, limit, g, t) == p) sum += dy[t * c_stride];
    } else {
      sum += dy[t * c_stride] / T(window_count(limit, g, t));
    }
  }
  return sum;
}

}  // namespace mirror::math::window1d
