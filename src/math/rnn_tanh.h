// defines: cell_tanh, the tanh of the recurrent cells (math/gru_cell.h, math/lstm_cell.h).
//
// Note [Cell tanh]: the CPU GRU and LSTM spend most of their element-wise time in tanh (the GRU's
// new gate, the LSTM's g and tanh(c)), and glibc's tanhf goes through expm1f, about four times
// the cost of expf. In float, cell_tanh takes an odd Taylor polynomial below |x| = 1/8 (its
// truncation error is below 2e-9 relative, under float rounding) and sign(x) (1 - e) / (1 + e)
// with e = exp(-2|x|) above (never overflows; within a few ulp, since 1 - e >= 0.22 there).
// In double it is tanh itself, so the float64 gradient checks see the exact function.
#pragma once

#include "math/hd.h"

namespace mirror::math {

MIRROR_HD inline float cell_tanh(float x) {
  const float a = x < 0.0f ? -x : x;
  if (a < 0.125f) {
    const float x2 = x * x;
    return x * (1.0f + x2 * (-1.0f / 3.0f + x2 * (2.0f / 15.0f + x2 * (-17.0f / 315.0f))));
  }
  const float e = hd_exp(-2.0f * a);
  const float t = (1.0f - e) / (1.0f + e);
  return x < 0.0f ? -t : t;
}

MIRROR_HD inline double cell_tanh(double x) { return hd_tanh(x); }

}  // namespace mirror::math
