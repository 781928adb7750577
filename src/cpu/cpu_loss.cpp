// Embedding lookup and its gradient, softmax cross-entropy and the correct-prediction count,
// and the float-target losses (BCE with logits, MSE) with their metric sums.
// Indices and labels are validated in a serial pass before any parallel work, so a bad value
// throws a clear InvalidArgument instead of reading out of bounds.
#include <string>
#include <vector>

#include "cpu/cpu_kernels.h"
#include "math/loss.h"

namespace mirror::cpu {
namespace {

void check_ids(const Tensor& ids, std::int64_t vocab, const char* op) {
  const std::int32_t* p = ids.data<std::int32_t>();
  const std::int64_t t = ids.dim(1);
  for (std::int64_t i = 0; i < ids.numel(); ++i) {
    if (p[i] >= 0 && p[i] < vocab) continue;
    throw InvalidArgument(std::string(op) + ": token id " + std::to_string(p[i]) + " at [sample " +
                          std::to_string(i / t) + ", step " + std::to_string(i % t) +
                          "] is outside the vocabulary [0, " + std::to_string(vocab) +
                          "); check the tokenizer and the table size");
  }
}

void check_labels(const Tensor& labels, std::int64_t classes, const char* op) {
  const std::int32_t* p = labels.data<std::int32_t>();
  for (std::int64_t i = 0; i < labels.numel(); ++i) {
    if (p[i] >= 0 && p[i] < classes) continue;
    throw InvalidArgument(std::string(op) + ": label " + std::to_string(p[i]) + " of sample " +
                          std::to_string(i) + " is outside [0, " + std::to_string(classes) +
                          "); the model has " + std::to_string(classes) +
                          " classes, check the data's labels");
  }
}

}  // namespace

Tensor CpuKernels::embedding_forward(const Tensor& ids, const Tensor& table) {
  const std::int64_t vocab = table.dim(0), dim = table.dim(1);
  check_ids(ids, vocab, "embedding_forward");
  return with_float(table, "embedding_forward", [&](auto t) -> Tensor {
    using T = decltype(t);
    Tensor y = Tensor::empty({ids.dim(0), ids.dim(1), dim}, table.dtype(), table.device());
    const std::int32_t* ip = ids.data<std::int32_t>();
    const T* tp = table.data<T>();
    T* yp = y.data<T>();
#pragma omp parallel for schedule(static) if (y.numel() > kParallelGrain)
    for (std::int64_t i = 0; i < ids.numel(); ++i) {
      const T* row = tp + static_cast<std::int64_t>(ip[i]) * dim;
      for (std::int64_t d = 0; d < dim; ++d) yp[i * dim + d] = row[d];
    }
    return y;
  });
}

void CpuKernels::embedding_backward(const Tensor& ids, const Tensor& dy, Tensor& dtable) {
  require_dtype(ids, DType::kInt32, "embedding_backward", "ids");
  require_dtype(dy, dtable.dtype(), "embedding_backward", "dy");
  const std::int64_t vocab = dtable.dim(0), dim = dtable.dim(1);
  check_ids(ids, vocab, "embedding_backward");
  with_float(dtable, "embedding_backward", [&](auto t) {
    using T = decltype(t);
    const std::int32_t* ip = ids.data<std::int32_t>();
    const T* gp = dy.data<T>();
    T* tp = dtable.data<T>();
    // Positions sharing an id add into the same row, so the scatter runs in position order:
    // deterministic, and cheap next to the GRU it feeds.
    for (std::int64_t i = 0; i < ids.numel(); ++i) {
      if (ip[i] == 0) continue;  // padding: its row never learns
      T* row = tp + static_cast<std::int64_t>(ip[i]) * dim;
      const T* g = gp + i * dim;
      for (std::int64_t d = 0; d < dim; ++d) row[d] += g[d];
    }
  });
}

ops::LossResult CpuKernels::softmax_cross_entropy(const Tensor& logits, const Tensor& labels,
                                                  const Tensor& weights, double global_count) {
  const std::int64_t n = logits.dim(0), c = logits.dim(1);
  check_labels(labels, c, "softmax_cross_entropy");
  return with_float(logits, "softmax_cross_entropy", [&](auto t) -> ops::LossResult {
    using T = decltype(t);
    ops::LossResult r;
    r.dlogits = Tensor::empty(logits.shape(), logits.dtype(), logits.device());
    const T* xp = logits.data<T>();
    const std::int32_t* lp = labels.data<std::int32_t>();
    const T* wp = weights.data<T>();
    T* dp = r.dlogits.data<T>();
    const double inv_count = 1.0 / global_count;
    double total = 0;  // rows in order: the loss is bitwise reproducible
    for (std::int64_t i = 0; i < n; ++i) {
      total += math::row_softmax_xent<double>(xp + i * c, c, lp[i], static_cast<double>(wp[i]),
                                              inv_count, dp + i * c);
    }
    r.loss = total / global_count;
    return r;
  });
}

std::int64_t CpuKernels::correct_count(const Tensor& logits, const Tensor& labels,
                                       const Tensor& weights) {
  require_dtype(labels, DType::kInt32, "correct_count", "labels");
  require_dtype(weights, logits.dtype(), "correct_count", "weights");
  MIRROR_CHECK(weights.rank() == 1 && weights.dim(0) == logits.dim(0), InvalidArgument,
               "correct_count: weights " + weights.str() + " for logits " + logits.str());
  const std::int64_t n = logits.dim(0), c = logits.dim(1);
  check_labels(labels, c, "correct_count");
  return with_float(logits, "correct_count", [&](auto t) -> std::int64_t {
    using T = decltype(t);
    const T* xp = logits.data<T>();
    const std::int32_t* lp = labels.data<std::int32_t>();
    const T* wp = weights.data<T>();
    std::int64_t correct = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      if (wp[i] > T(0) && math::row_argmax(xp + i * c, c) == lp[i]) ++correct;
    }
    return correct;
  });
}

ops::TargetLossResult CpuKernels::target_loss(ops::TargetLoss kind, const Tensor& logits,
                                              const Tensor& targets, const Tensor& weights,
                                              double global_count) {
  const std::int64_t n = logits.dim(0), k = logits.dim(1);
  const auto math_kind = kind == ops::TargetLoss::kBinaryCrossEntropy
                             ? math::TargetLoss::kBinaryCrossEntropy
                             : math::TargetLoss::kMeanSquaredError;
  return with_float(logits, "target_loss", [&](auto t) -> ops::TargetLossResult {
    using T = decltype(t);
    ops::TargetLossResult r;
    r.dlogits = Tensor::empty(logits.shape(), logits.dtype(), logits.device());
    const T* xp = logits.data<T>();
    const T* tp = targets.data<T>();
    const T* wp = weights.data<T>();
    T* dp = r.dlogits.data<T>();
    const double inv_count = 1.0 / global_count;
    double total = 0;  // rows in order: the loss is bitwise reproducible
    for (std::int64_t i = 0; i < n; ++i) {
      const auto row = math::row_target_loss<double>(
          math_kind, xp + i * k, tp + i * k, k, static_cast<double>(wp[i]), inv_count, dp + i * k);
      total += row.loss;
      r.squared_error_sum += row.squared_error;
      r.abs_error_sum += row.abs_error;
      r.correct += row.correct;
      if (wp[i] > T(0)) r.target_values += k;
    }
    r.loss = total / global_count;
    return r;
  });
}

}  // namespace mirror::cpu
