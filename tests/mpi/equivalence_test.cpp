// docs/architecture.md invariant 2 and 3 under mpiexec: R replicas with per-replica batch b give
// the weights of one replica with batch R*b after K Adam steps (relative error <= 1e-5), across
// ranks, across in-process replicas and both; with tiny, default and huge buckets; with an uneven
// last batch; for a CNN with dropout, a GRU and a stacked bidirectional GRU + LSTM over
// variable-length sequences; with gradient accumulation; for a residual CNN with synchronized
// BatchNormalization (whose moving statistics must match the reference too). Every replica's
// weights are bitwise equal after every step.
#include <gtest/gtest.h>

#include "mirror/distributed/runtime.h"
#include "mirror/distributed/strategy.h"
#include "mpi/strategy_testing.h"

namespace mirror::testing {
namespace {

using dist::BucketCaps;
using dist::MirroredStrategy;
using dist::Runtime;
using dist::StrategyOptions;

constexpr BucketCaps kTinyCaps{1, 1};
constexpr BucketCaps kDefaultCaps{};
constexpr BucketCaps kHugeCaps{std::size_t{1} << 40, std::size_t{1} << 40};
constexpr std::uint64_t kDropoutSeed = 42;
constexpr int kSteps = 4;

struct Case {
  ModelKind model = ModelKind::kCnn;
  int local = 1;  // in-process replicas per rank
  BucketCaps caps = kDefaultCaps;
  std::int64_t per = 3;  // per-replica batch
  int padding = 0;       // padding samples at the end of the global batch
  int accumulation = 1;
  // Adam is invariant to the scale of the gradient, so an averaging slip (sum vs mean) would
  // hide behind it; SGD with momentum exposes it. Both run every case.
  bool sgd = false;
};

void run_one(const Case& c) {
  Runtime& rt = Runtime::get();
  StrategyOptions options;
  options.buckets = c.caps;
  options.divergence_check_every = 1;
  options.accumulation_steps = c.accumulation;
  options.seed = kDropoutSeed;
  // Every replica initialises from its own seed: the broadcast from replica 0 must equalise.
  const int rank = rt.world_rank();
  const dist::OptimizerFactory make_opt = [&]() -> std::unique_ptr<optim::Optimizer> {
    if (c.sgd) return std::make_unique<optim::SGD>(0.9);
    return adam();
  };
  MirroredStrategy s(
      rt, cpu_devices(0, c.local),
      [&](Device d) { return small_model(c.model, d, 100 + 10 * rank + d.index); }, make_opt,
      options);
  ASSERT_EQ(s.world_replicas(), rt.world_size() * c.local);
  ASSERT_EQ(s.first_replica(), rank * c.local);
  nn::Sequential reference = small_model(c.model, Device::cpu(7), 100);
  auto reference_opt = make_opt();

  const double lr = c.sgd ? 0.1 : 0.01;
  const std::int64_t global = s.world_replicas() * c.per;
  const std::int64_t real = global - c.padding;
  for (int step = 0; step < kSteps; ++step) {
    const data::Batch g = global_batch(c.model, step, global, real);
    auto batches = local_batches(g, s, c.per);
    const dist::StepResult r = s.train_step(batches, lr);
    const double ref_loss = reference_step(reference, *reference_opt, g, lr, kDropoutSeed);
    EXPECT_EQ(r.count, real);
    EXPECT_FALSE(r.skipped);
    EXPECT_NEAR(r.loss, ref_loss, 1e-5 * std::max(1.0, std::fabs(ref_loss))) << "step " << step;
    EXPECT_NEAR(r.loss_sum, ref_loss * static_cast<double>(real), 1e-4 * real);
    const auto fps = world_fingerprints(s);
    ASSERT_EQ(static_cast<int>(fps.size()), s.world_replicas());
    for (std::size_t i = 1; i < fps.size(); ++i) {
      ASSERT_EQ(fps[i], fps[0]) << "replica " << i << " differs from replica 0 after step " << step;
    }
  }
  for (int i = 0; i < s.local_replicas(); ++i) {
    const double err = max_relative_difference(s.model(i), reference);
    EXPECT_LE(err, 1e-5) << "local replica " << i;
    EXPECT_LE(max_buffer_difference(s.model(i), reference), 1e-5) << "local replica " << i;
  }
  // The weights moved (the comparison is not trivially between initial weights).
  nn::Sequential initial = small_model(c.model, Device::cpu(7), 100);
  EXPECT_GT(max_relative_difference(s.model(0), initial), 1e-3);
  EXPECT_EQ(s.optimizer(0).steps(), kSteps);
}

void run_case(Case c) {
  {
    SCOPED_TRACE("adam");
    run_one(c);
  }
  c.sgd = true;
  SCOPED_TRACE("sgd momentum 0.9");
  run_one(c);
}

TEST(Equivalence, CnnAcrossRanksDefaultBuckets) { run_case({}); }

TEST(Equivalence, CnnAcrossRanksTinyBuckets) { run_case({.caps = kTinyCaps}); }

TEST(Equivalence, CnnTwoInProcessReplicasPerRankHugeBucket) {
  run_case({.local = 2, .caps = kHugeCaps});
}

TEST(Equivalence, CnnUnevenLastBatchTinyBuckets) {
  // Two padding samples: the last replica holds fewer real samples than the others.
  run_case({.local = 2, .caps = kTinyCaps, .padding = 2});
}

TEST(Equivalence, GruMixedLengthsAcrossRanks) { run_case({.model = ModelKind::kGru}); }

TEST(Equivalence, GruTwoInProcessReplicasTinyBucketsUneven) {
  run_case({.model = ModelKind::kGru, .local = 2, .caps = kTinyCaps, .padding = 1});
}

TEST(Equivalence, StackedBidirectionalMixedLengthsAcrossRanks) {
  run_case({.model = ModelKind::kStackedBidirectional});
}

TEST(Equivalence, StackedBidirectionalTwoInProcessReplicasTinyBucketsUneven) {
  run_case(
      {.model = ModelKind::kStackedBidirectional, .local = 2, .caps = kTinyCaps, .padding = 1});
}

TEST(Equivalence, SyncBatchNormResidualAcrossRanks) { run_case({.model = ModelKind::kResBn}); }

TEST(Equivalence, SyncBatchNormTwoInProcessReplicasPerRankUneven) {
  // The last replica holds one real sample and two padding ones: count-weighted statistics.
  run_case({.model = ModelKind::kResBn, .local = 2, .caps = kTinyCaps, .padding = 2});
}

TEST(Equivalence, GradientAccumulationMatchesOneBigBatch) {
  run_case({.local = 2, .per = 4, .padding = 1, .accumulation = 2});
}

}  // namespace
}  // namespace mirror::testing
