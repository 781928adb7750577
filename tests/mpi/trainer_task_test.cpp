// The generic Trainer path across ranks (docs/architecture.md invariant 2 through Trainer): a
// custom Sequential and an in-memory Dataset, defined by the test, trained by Trainer(runtime,
// config, task) on every rank (one replica each) end with the weights of one replica training on
// the same global batches alone (relative error <= 1e-5), with an uneven, padded last batch.
#include <gtest/gtest.h>

#include "mirror/data/loader.h"
#include "mirror/distributed/runtime.h"
#include "mirror/distributed/strategy.h"
#include "mirror/optim/optimizer.h"
#include "mpi/strategy_testing.h"
#include "train_task_testing.h"

namespace mirror::testing {
namespace {

using testing_util::blob_task;
using testing_util::quiet_cpu_config;

/// What one rank alone does for `config`: one replica, the loader's global batches in order,
/// the configured optimizer at a constant learning rate.
nn::Sequential train_alone(const train::TrainConfig& config, const train::Task& task) {
  optim::OptimizerOptions opt;
  dist::StrategyOptions options;
  options.seed = config.seed;
  dist::MirroredStrategy s(
      {Device::cpu()}, task.model, [&] { return optim::make_optimizer(config.optimizer, opt); },
      options);
  data::LoaderOptions lo;
  lo.global_batch = config.batch_size;
  lo.seed = config.seed;
  lo.last_batch = data::LastBatch::kPad;
  data::Loader loader(task.train, {0, 1}, lo);
  for (int epoch = 0; epoch < config.epochs; ++epoch) {
    loader.start(epoch);
    std::vector<data::Batch> batches(1);
    while (auto b = loader.next()) {
      batches[0] = std::move(*b);
      s.train_step(batches, config.lr);
    }
  }
  return std::move(s.model(0));
}

TEST(TrainerTaskAcrossRanks, MatchesOneReplicaWithTheSameGlobalBatch) {
  dist::Runtime& rt = dist::Runtime::get();
  const train::TrainConfig config = quiet_cpu_config("cpu");        // one replica per rank
  const train::Task task = blob_task(true, 8, /*train_size=*/100);  // last batch: 4 real of 12
  train::Trainer trainer(rt, config, task);
  const train::FitSummary summary = trainer.fit();
  ASSERT_EQ(summary.world_replicas, rt.world_size());
  EXPECT_EQ(summary.steps, 18);  // 9 steps x 2 epochs

  nn::Sequential alone = train_alone(config, task);
  nn::Sequential initial = task.model(Device::cpu());
  EXPECT_GT(max_relative_difference(alone, initial), 1e-3) << "the weights moved";
  EXPECT_LE(max_relative_difference(trainer.model(), alone), 1e-5);
}

}  // namespace
}  // namespace mirror::testing
