// The float-target losses under mpiexec: R replicas across ranks (and in-process replicas on
// each rank) with per-replica batch b give the weights of one plain model trained on the global
// batch of R*b after K steps (relative error <= 1e-5), for MSE and BCE, with padding; the
// step's loss and metrics are the global ones on every rank.
#include <gtest/gtest.h>

#include "mirror/distributed/runtime.h"
#include "mirror/distributed/strategy.h"
#include "mpi/strategy_testing.h"
#include "mpi/target_testing.h"

namespace mirror::testing {
namespace {

using dist::LossKind;
using dist::MirroredStrategy;
using dist::Runtime;

void run_case(LossKind loss, int local, int padding) {
  SCOPED_TRACE(std::string(dist::loss_name(loss)) + ", " + std::to_string(local) +
               " local replicas, padding " + std::to_string(padding));
  Runtime& rt = Runtime::get();
  const int rank = rt.world_rank();
  dist::StrategyOptions options;
  options.divergence_check_every = 1;
  options.loss = loss;
  // SGD with momentum: unlike Adam it is not invariant to the gradient's scale, so an averaging
  // slip (local instead of global count) changes the weights.
  auto make_opt = []() -> std::unique_ptr<optim::Optimizer> {
    return std::make_unique<optim::SGD>(0.9);
  };
  MirroredStrategy s(
      rt, cpu_devices(0, local),
      [&](Device d) { return small_dense(d, 100 + 10 * rank + d.index); }, make_opt, options);
  ASSERT_EQ(s.world_replicas(), rt.world_size() * local);
  nn::Sequential reference = small_dense(Device::cpu(7), 100);
  auto reference_opt = make_opt();
  constexpr std::int64_t kPer = 3;
  const std::int64_t global = s.world_replicas() * kPer, real = global - padding;
  for (int step = 0; step < 4; ++step) {
    const data::Batch g = target_batch(loss, step, global, real);
    auto batches = local_batches(g, s, kPer);
    const dist::StepResult r = s.train_step(batches, 0.2);
    const auto want = reference_target_step(reference, *reference_opt, g, loss, 0.2);
    EXPECT_NEAR(r.loss, want.loss, 1e-5 * std::max(1.0, want.loss)) << "step " << step;
    EXPECT_EQ(r.count, real);
    EXPECT_EQ(r.target_values, real * kTargets);
    EXPECT_NEAR(r.squared_error_sum, want.squared_error_sum, 1e-5 * want.squared_error_sum);
    EXPECT_NEAR(r.abs_error_sum, want.abs_error_sum, 1e-5 * want.abs_error_sum);
    EXPECT_EQ(r.correct, want.correct);
    const auto fps = world_fingerprints(s);
    for (std::size_t i = 1; i < fps.size(); ++i) {
      ASSERT_EQ(fps[i], fps[0]) << "replica " << i << " differs after step " << step;
    }
  }
  for (int i = 0; i < s.local_replicas(); ++i) {
    EXPECT_LE(max_relative_difference(s.model(i), reference), 1e-5) << "local replica " << i;
  }
  nn::Sequential initial = small_dense(Device::cpu(7), 100);
  EXPECT_GT(max_relative_difference(s.model(0), initial), 1e-3);
}

TEST(LossEquivalence, MeanSquaredErrorAcrossRanks) {
  run_case(LossKind::kMeanSquaredError, 1, 0);
  run_case(LossKind::kMeanSquaredError, 2, 2);
}

TEST(LossEquivalence, BinaryCrossEntropyAcrossRanks) {
  run_case(LossKind::kBinaryCrossEntropy, 1, 1);
  run_case(LossKind::kBinaryCrossEntropy, 2, 0);
}

}  // namespace
}  // namespace mirror::testing
