// Softmax cross-entropy per step or per pixel (Note [Dense labels], mirror/data/dataset.h): the
// counted positions become rows of the per-sample loss, so the CPU and CUDA kernels of
// softmax_cross_entropy (math/loss.h's row_softmax_xent) do the arithmetic; this file only
// moves the class axis last and builds the per-row weights.
#include <algorithm>
#include <string>
#include <vector>

#include "mirror/ops.h"

namespace mirror::ops {
namespace {

/// [N, K, P] -> [N, P, K] (to_last) or back, with copy_block (any backend).
Tensor swap_last_two(const Tensor& x, std::int64_t a, std::int64_t b) {
  const std::int64_t n = x.dim(0);
  Tensor y = Tensor::empty({n, b, a}, x.dtype(), x.device());
  const std::int64_t dims[4] = {1, n, b, a}, dst[4] = {0, a * b, a, 1}, src[4] = {0, a * b, 1, b};
  BlockCopy c;
  for (int i = 0; i < 4; ++i) {
    c.dims[i] = dims[i];
    c.dst_strides[i] = dst[i];
    c.src_strides[i] = src[i];
  }
  copy_block(y, x, c);
  return y;
}

}  // namespace

DenseLossResult dense_softmax_cross_entropy(const Tensor& logits, const Tensor& labels,
                                            const Tensor& weights,
                                            const std::vector<std::int32_t>& counted,
                                            double global_count) {
  const char* op = "dense_softmax_cross_entropy";
  const bool steps = logits.rank() == 3 && labels.rank() == 2 && labels.dim(1) == logits.dim(1);
  const bool pixels = logits.rank() == 4 && labels.rank() == 3 && labels.dim(1) == logits.dim(2) &&
                      labels.dim(2) == logits.dim(3);
  MIRROR_CHECK(
      (steps || pixels) && labels.dim(0) == logits.dim(0) && labels.dtype() == DType::kInt32,
      InvalidArgument,
      std::string(op) +
          ": expected logits [N, T, K] with int32 labels [N, T], or [N, K, "
          "H, W] with labels [N, H, W]; got logits " +
          shape_str(logits.shape()) + " and labels " + shape_str(labels.shape()) + " (" +
          labels.str() + ")");
  const std::int64_t n = logits.dim(0), k = steps ? logits.dim(2) : logits.dim(1);
  const std::int64_t p = labels.numel() / std::max<std::int64_t>(n, 1);
  MIRROR_CHECK(
      weights.rank() == 1 && weights.dim(0) == n && static_cast<std::int64_t>(counted.size()) == n,
      InvalidArgument,
      std::string(op) + ": weights " + weights.str() + " and " + std::to_string(counted.size()) +
          " counts for " + std::to_string(n) + " samples");
  // Row weights: the sample's weight for its counted positions, 0 past them.
  Tensor host_w = weights.to(Device::cpu());
  if (host_w.dtype() != DType::kFloat64) host_w = cast(host_w, DType::kFloat64);
  const std::vector<double> w = host_w.to_vector<double>();
  std::vector<double> rw(static_cast<std::size_t>(n * p), 0.0);
  DenseLossResult r;
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int32_t c = counted[static_cast<std::size_t>(i)];
    MIRROR_CHECK(c >= 0 && c <= p, InvalidArgument,
                 std::string(op) + ": sample " + std::to_string(i) + " counts " +
                     std::to_string(c) + " positions of " + std::to_string(p));
    for (std::int64_t j = 0; j < c; ++j)
      rw[static_cast<std::size_t>(i * p + j)] = w[static_cast<std::size_t>(i)];
    if (w[static_cast<std::size_t>(i)] > 0) r.counted += c;
  }
  Tensor row_weights = Tensor::from_vector<double>(rw, {n * p});
  if (logits.dtype() != DType::kFloat64) row_weights = cast(row_weights, logits.dtype());
  row_weights = row_weights.to(logits.device());
  const Tensor rows = (pixels ? swap_last_two(logits, k, p) : logits).reshape({n * p, k});
  const Tensor flat = labels.reshape({n * p});
  // A label at a position that does not count may be anything (padding): zeroed on the host so
  // the kernels' range check sees only the labels that count.
  std::vector<std::int32_t> l = flat.to(Device::cpu()).to_vector<std::int32_t>();
  for (std::size_t j = 0; j < l.size(); ++j) {
    if (rw[j] == 0.0) l[j] = 0;
    if (l[j] >= 0 && l[j] < k) continue;
    const auto i = static_cast<std::int64_t>(j) / p, at = static_cast<std::int64_t>(j) % p;
    throw InvalidArgument(std::string(op) + ": label " + std::to_string(l[j]) + " of sample " +
                          std::to_string(i) + " at " +
                          (steps ? "step " + std::to_string(at)
                                 : "pixel (" + std::to_string(at / labels.dim(2)) + ", " +
                                       std::to_string(at % labels.dim(2)) + ")") +
                          " is outside [0, " + std::to_string(k) + "); the model has " +
                          std::to_string(k) + " classes, check the data's labels");
  }
  const Tensor checked = Tensor::from_vector<std::int32_t>(l, {n * p}).to(logits.device());
  LossResult loss = softmax_cross_entropy(rows, checked, row_weights, global_count);
  r.loss = loss.loss;
  r.correct = correct_count(rows, checked, row_weights);
  r.dlogits = pixels ? swap_last_two(loss.dlogits.reshape({n, p, k}), p, k).reshape(logits.shape())
                     : loss.dlogits.reshape(logits.shape());
  return r;
}

}  // namespace mirror::ops
