// defines: helpers shared by the float-target loss tests of MirroredStrategy (in-process and
// under mpiexec): a small Dense model, seeded global batches of float targets with optional
// padding, and the no-communication reference step on the global batch.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "mirror/data/batch.h"
#include "mirror/distributed/strategy.h"
#include "mirror/nn/layers.h"
#include "mirror/nn/sequential.h"
#include "mirror/ops.h"
#include "mirror/optim/optimizer.h"
#include "mpi/strategy_testing.h"

namespace mirror::testing {

inline constexpr int kFeatures = 6;  // input [6]
inline constexpr int kTargets = 3;   // output and target width

/// Dense(8, tanh) -> Dense(outputs) over float inputs [6].
inline nn::Sequential small_dense(Device device, std::uint64_t seed, int outputs = kTargets) {
  nn::Sequential m;
  m.emplace<nn::Dense>(8, ops::Activation::kTanh);
  m.emplace<nn::Dense>(outputs);
  m.build({kFeatures}, seed, DType::kFloat32, device);
  return m;
}

/// The global batch of `step`: `size` samples, the first `real` real (weight 1), the rest
/// padding (weight 0, zero inputs and targets). Targets [size, width] (or [size] when `width`
/// is 0): 0/1 with some fractional probabilities for BCE, values in [-2, 2] for MSE.
inline data::Batch target_batch(dist::LossKind loss, std::int64_t step, std::int64_t size,
                                std::int64_t real, int width = kTargets) {
  std::mt19937_64 rng(7919 * static_cast<std::uint64_t>(step) + 3);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const int per = width == 0 ? 1 : width;
  std::vector<float> x, y;
  std::vector<float> weights;
  std::vector<std::int64_t> ids;
  for (std::int64_t i = 0; i < size; ++i) {
    const bool is_real = i < real;
    for (int j = 0; j < kFeatures; ++j) x.push_back(is_real ? u(rng) : 0.0f);
    for (int j = 0; j < per; ++j) {
      float t = 0;
      if (is_real && loss == dist::LossKind::kBinaryCrossEntropy) {
        t = j == 1 ? 0.5f * (u(rng) + 1) : (u(rng) > 0 ? 1.0f : 0.0f);
      } else if (is_real) {
        t = 2 * u(rng);
      }
      y.push_back(t);
    }
    weights.push_back(is_real ? 1.0f : 0.0f);
    ids.push_back(is_real ? step * size + i : -1 - (i - real));
  }
  data::Batch b;
  b.inputs = Tensor::from_vector(x, {size, kFeatures});
  b.labels = width == 0 ? Tensor::from_vector(y, {size}) : Tensor::from_vector(y, {size, width});
  b.weights = Tensor::from_vector(weights, {size});
  b.sample_ids = Tensor::from_vector(ids, {size});
  b.global_count = real;
  b.step = step;
  return b;
}

inline ops::TargetLoss op_kind(dist::LossKind loss) {
  return loss == dist::LossKind::kBinaryCrossEntropy ? ops::TargetLoss::kBinaryCrossEntropy
                                                     : ops::TargetLoss::kMeanSquaredError;
}

/// One plain step of `model` on the whole global batch (no communication, no strategy): the
/// oracle. Returns the loss and metrics of the batch before the update.
inline ops::TargetLossResult reference_target_step(nn::Sequential& model, optim::Optimizer& opt,
                                                   const data::Batch& g, dist::LossKind loss,
                                                   double lr) {
  for (nn::Parameter* p : model.parameters()) ops::fill(p->grad, 0.0);
  const data::Batch b = shard(g, 0, g.size(), model.device());
  nn::ForwardContext ctx;
  ctx.training = true;
  const Tensor logits = model.forward(b.inputs, ctx);
  ops::TargetLossResult r =
      ops::target_loss(op_kind(loss), logits, b.labels.reshape(logits.shape()), b.weights,
                       static_cast<double>(g.global_count));
  model.backward(r.dlogits);
  opt.step(model.parameters(), lr);
  return r;
}

}  // namespace mirror::testing
