// defines: cell_exp, cell_sigmoid and cell_tanh, the activations of the recurrent cells
// (math/gru_cell.h, math/lstm_cell.h).
//
// Note [Cell tanh]: the CPU GRU and LSTM spend most of their element-wise time in exp and tanh
// (three sigmoids and two tanh per LSTM unit and step), and glibc's expf and tanhf are calls
// the compiler cannot vectorise (tanhf goes through expm1f, about four times the cost of expf).
// In float the cells use functions written without calls or branches, so the CPU gate loops
// vectorise (Note [Vector gate loops], src/cpu/cpu_rnn.h):
//   cell_exp      Cody-Waite reduction x = n ln2 + r (round-to-nearest n by the 1.5 * 2^23
//                 trick), Cephes's expf polynomial for e^r, 2^n built in the exponent bits; the
//                 argument is clamped to [-87, 88] so 2^n stays a normal float (within 1 ulp of
//                 exp there; exp of a larger |x| saturates to about 1e-38 or 1.7e38, which
//                 leaves sigmoid and tanh exact to float precision)
//   cell_sigmoid  1 / (1 + e), e = exp(-|x|), mirrored for x < 0 (1 - sigmoid never cancels)
//   cell_tanh     an odd Taylor polynomial below |x| = 1/8 (truncation error below 2e-9
//                 relative, under float rounding), sign(x) (1 - e) / (1 + e) with e = exp(-2|x|)
//                 above (within a few ulp, since 1 - e >= 0.22 there)
// Both branches are computed and one is selected, so NaN propagates and infinities saturate.
// In double they are exp, the stable sigmoid and tanh themselves, so the float64 gradient
// checks see the exact functions.
#pragma once

#include <string.h>  // NOLINT: memcpy, the bit cast host and device compilers both accept

#include "math/activation.h"
#include "math/hd.h"

namespace mirror::math {

MIRROR_HD inline float cell_exp(float x) {
  x = x < -87.0f ? -87.0f : x;  // comparisons, not fminf: a NaN stays NaN
  x = x > 88.0f ? 88.0f : x;
  const float magic = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float t = x * 1.44269504088896341f + magic;
  int ti, mi;
  memcpy(&ti, &t, sizeof ti);
  memcpy(&mi, &magic, sizeof mi);
  const float nf = t - magic;                                      // n = round(x / ln2)
  const float r = (x - nf * 0.693359375f) - nf * -2.12194440e-4f;  // ln2 = hi + lo
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;                                          // e^r
  const unsigned bits = static_cast<unsigned>(ti - mi + 127) << 23;  // 2^n (garbage for NaN)
  float scale;
  memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}
MIRROR_HD inline double cell_exp(double x) { return hd_exp(x); }

MIRROR_HD inline float cell_sigmoid(float x) {
  const float e = cell_exp(x < 0.0f ? x : -x);  // exp(-|x|) <= 1
  const float s = 1.0f / (1.0f + e);
  return x < 0.0f ? e * s : s;
}
MIRROR_HD inline double cell_sigmoid(double x) { return sigmoid(x); }

MIRROR_HD inline float cell_tanh(float x) {
  const float a = x < 0.0f ? -x : x;
  const float x2 = x * x;
  const float small =
      x * (1.0f + x2 * (-1.0f / 3.0f + x2 * (2.0f / 15.0f + x2 * (-17.0f / 315.0f))));
  const float e = cell_exp(-2.0f * a);
  const float t = (1.0f - e) / (1.0f + e);
  const float large = x < 0.0f ? -t : t;
  return a < 0.125f ? small : large;
}
MIRROR_HD inline double cell_tanh(double x) { return hd_tanh(x); }

}  // namespace mirror::math
