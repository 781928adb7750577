// defines: the per-row pieces of the losses and their metrics: log-sum-exp, the weighted
// negative log-likelihood and its gradient for one row of logits, the first-max argmax, and the
// float-target losses (binary cross-entropy with logits, mean squared error) of one row.
//
// Rows are short (the number of classes), so one thread per row is the natural mapping on both
// backends. Acc is the accumulation type (double by default: the loss is summed in double, see
// ops.h; a GPU kernel may pick float for float32 logits).
#pragma once

#include <stdint.h>  // NOLINT

#include "math/activation.h"
#include "math/hd.h"

namespace mirror::math {

/// log(sum_j exp(x_j)), shifted by the row maximum so no exp() overflows.
template <class Acc, class T>
MIRROR_HD inline Acc row_logsumexp(const T* x, int64_t c) {
  Acc mx = static_cast<Acc>(x[0]);
  for (int64_t j = 1; j < c; ++j) mx = hd_max(mx, static_cast<Acc>(x[j]));
  Acc sum = 0;
  for (int64_t j = 0; j < c; ++j) sum += hd_exp(static_cast<Acc>(x[j]) - mx);
  return mx + hd_log(sum);
}

/// One row of softmax cross-entropy: returns w * nll (nll = logsumexp(x) - x[label]) and, when
/// `dx` is not null, writes dx_j = w * (softmax_j - [j == label]) * inv_count.
/// A row with w == 0 returns 0 and writes zeros (padded samples contribute nothing).
template <class Acc, class T>
MIRROR_HD inline Acc row_softmax_xent(const T* x, int64_t c, int32_t label, Acc w, Acc inv_count,
                                      T* dx) {
  if (w == Acc(0)) {
    if (dx) {
      for (int64_t j = 0; j < c; ++j) dx[j] = T(0);
    }
    return Acc(0);
  }
  const Acc lse = row_logsumexp<Acc>(x, c);
  if (dx) {
    const Acc scale = w * inv_count;
    for (int64_t j = 0; j < c; ++j) {
      const Acc p = hd_exp(static_cast<Acc>(x[j]) - lse);
      dx[j] = static_cast<T>(scale * (j == label ? p - Acc(1) : p));
    }
  }
  return w * (lse - static_cast<Acc>(x[label]));
}

/// Index of the first maximum (ties go to the lowest index; NaN never wins over a number
/// seen before it).
template <class T>
MIRROR_HD inline int64_t row_argmax(const T* x, int64_t c) {
  int64_t best = 0;
  for (int64_t j = 1; j < c; ++j) {
    if (x[j] > x[best]) best = j;
  }
  return best;
}

/// The losses of float targets, one value per output element (Keras semantics: a sample's loss
/// is the mean over its elements).
enum class TargetLoss { kBinaryCrossEntropy, kMeanSquaredError };

/// Binary cross-entropy of logit x against target t in [0, 1], in the form that never takes the
/// exp of a positive number: max(x, 0) - x t + log1p(exp(-|x|)). Finite for any finite x.
template <class Acc>
MIRROR_HD inline Acc bce_with_logits(Acc x, Acc t) {
  const Acc ax = x < Acc(0) ? -x : x;
  return hd_max(x, Acc(0)) - x * t + hd_log1p(hd_exp(-ax));
}

/// What one row of a float-target loss adds to the step: the weighted loss and the UNWEIGHTED
/// metric sums over the row's elements (zero for a padded row).
template <class Acc>
struct TargetRowSums {
  Acc loss = 0;           // w * mean over the row's elements of the element loss
  Acc squared_error = 0;  // sum of (p - t)^2, p = x (MSE) or sigmoid(x) (BCE)
  Acc abs_error = 0;      // sum of |p - t|
  int64_t correct = 0;    // BCE: elements with (x > 0) == (t > 0.5); MSE: 0
};

/// One row (k elements) of BCE or MSE with weight w: returns the sums above and, when `dx` is
/// not null, writes dx_j = w * dloss/dx_j / k * inv_count (BCE: sigmoid(x) - t, MSE: 2 (x - t)).
/// A row with w == 0 returns zeros and writes zeros (padded samples contribute nothing); the
/// metrics count rows with w > 0 only, as correct_count does.
template <class Acc, class T>
MIRROR_HD inline TargetRowSums<Acc> row_target_loss(TargetLoss kind, const T* x, const T* t,
                                                    int64_t k, Acc w, Acc inv_count, T* dx) {
  TargetRowSums<Acc> r;
  if (w == Acc(0)) {
    if (dx) {
      for (int64_t j = 0; j < k; ++j) dx[j] = T(0);
    }
    return r;
  }
  const bool bce = kind == TargetLoss::kBinaryCrossEntropy;
  const Acc scale = w * inv_count / static_cast<Acc>(k);
  Acc sum = 0;
  for (int64_t j = 0; j < k; ++j) {
    const Acc xj = static_cast<Acc>(x[j]), tj = static_cast<Acc>(t[j]);
    const Acc p = bce ? sigmoid(xj) : xj;
    const Acc e = p - tj;
    sum += bce ? bce_with_logits(xj, tj) : e * e;
    if (dx) dx[j] = static_cast<T>(scale * (bce ? e : Acc(2) * e));
    if (w > Acc(0)) {
      r.squared_error += e * e;
      r.abs_error += e < Acc(0) ? -e : e;
      if (bce && (xj > Acc(0)) == (tj > Acc(0.5))) ++r.correct;
    }
  }
  r.loss = w * sum / static_cast<Acc>(k);
  return r;
}

}  // namespace mirror::math
