// MirroredStrategy failure paths across ranks (docs/architecture.md invariant 6): a rank that
// builds a different model makes every rank throw CommError naming the rank and the tensor; NaN
// gradients on one rank skip the step on every rank (or stop every rank); diverged weights are
// detected on every rank; the out-of-memory split on one rank gives the weights of the unsplit run.
#include <gtest/gtest.h>

#include <limits>

#include "mirror/distributed/runtime.h"
#include "mirror/distributed/strategy.h"
#include "mirror/memory.h"
#include "mpi/strategy_testing.h"

namespace mirror::testing {
namespace {

using dist::MirroredStrategy;
using dist::Runtime;
using dist::StepResult;
using dist::StrategyOptions;

StrategyOptions test_options() {
  StrategyOptions o;
  o.seed = 3;
  o.divergence_check_every = 1;
  return o;
}

dist::ModelFactory cnn_factory() {
  return [](Device d) { return small_cnn(d, 100); };
}

data::Batch with_nan(data::Batch b) {
  auto values = b.inputs.to(Device::cpu()).to_vector<float>();
  values[5] = std::numeric_limits<float>::quiet_NaN();
  b.inputs = Tensor::from_vector(values, b.inputs.shape()).to(b.inputs.device());
  return b;
}

TEST(StrategyFailure, DifferentModelOnOneRankFailsEveryRank) {
  Runtime& rt = Runtime::get();
  // Rank 1 builds a wider first dense layer; every rank must get the same named error.
  auto factory = [&](Device d) { return small_cnn(d, 100, rt.world_rank() == 1 ? 17 : 16); };
  try {
    MirroredStrategy s(rt, {Device::cpu(0)}, factory, adam, test_options());
    ADD_FAILURE() << "expected CommError on rank " << rt.world_rank();
  } catch (const CommError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("rank 1"), std::string::npos) << what;
    EXPECT_NE(what.find("dense_1/kernel"), std::string::npos) << what;
    EXPECT_NE(what.find("[64,17]"), std::string::npos) << what;
  }
  // Nothing is left half-done: a correct strategy still works afterwards.
  MirroredStrategy ok(rt, {Device::cpu(0)}, cnn_factory(), adam, test_options());
  EXPECT_EQ(ok.world_replicas(), rt.world_size());
}

TEST(StrategyFailure, DifferentBucketCapsOnOneRankFailEveryRank) {
  Runtime& rt = Runtime::get();
  StrategyOptions o = test_options();
  if (rt.world_rank() == rt.world_size() - 1) o.buckets = {1, 1};
  try {
    MirroredStrategy s(rt, {Device::cpu(0)}, cnn_factory(), adam, o);
    ADD_FAILURE() << "expected CommError on rank " << rt.world_rank();
  } catch (const CommError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("rank " + std::to_string(rt.world_size() - 1)), std::string::npos) << what;
    EXPECT_NE(what.find("bucket 0"), std::string::npos) << what;
  }
}

TEST(StrategyFailure, NanOnOneRankSkipsTheStepEverywhere) {
  Runtime& rt = Runtime::get();
  MirroredStrategy s(rt, cpu_devices(0, 2), cnn_factory(), adam, test_options());
  const std::int64_t per = 3, global = per * s.world_replicas();
  auto step = [&](int k, bool poison) {
    auto batches = local_batches(global_batch(ModelKind::kCnn, k, global, global), s, per);
    if (poison && rt.world_rank() == 1) batches[1] = with_nan(batches[1]);
    return s.train_step(batches, 0.01);
  };
  EXPECT_FALSE(step(0, false).skipped);
  const auto before = world_fingerprints(s);
  const StepResult skipped = step(1, true);
  EXPECT_TRUE(skipped.skipped);
  const auto after = world_fingerprints(s);
  EXPECT_EQ(after, before);  // weights unchanged on every replica of every rank
  for (std::size_t i = 1; i < after.size(); ++i) EXPECT_EQ(after[i], after[0]);
  EXPECT_EQ(s.optimizer(0).steps(), 1);
  EXPECT_FALSE(step(2, false).skipped);
  EXPECT_EQ(s.optimizer(1).steps(), 2);
  const auto later = world_fingerprints(s);
  EXPECT_NE(later[0], before[0]);
  for (std::size_t i = 1; i < later.size(); ++i) EXPECT_EQ(later[i], later[0]);
}

TEST(StrategyFailure, NanWithStopPolicyStopsEveryRank) {
  Runtime& rt = Runtime::get();
  StrategyOptions o = test_options();
  o.non_finite = dist::NonFinitePolicy::kStop;
  MirroredStrategy s(rt, {Device::cpu(0)}, cnn_factory(), adam, o);
  auto batches = local_batches(
      global_batch(ModelKind::kCnn, 0, 2 * s.world_replicas(), 2 * s.world_replicas()), s, 2);
  if (rt.world_rank() == rt.world_size() - 1) batches[0] = with_nan(batches[0]);
  EXPECT_THROW(s.train_step(batches, 0.01), Error);
}

TEST(StrategyFailure, DivergedRankIsNamedOnEveryRank) {
  Runtime& rt = Runtime::get();
  MirroredStrategy s(rt, {Device::cpu(0)}, cnn_factory(), adam, test_options());
  EXPECT_NO_THROW(s.check_replicas_identical());
  if (rt.world_rank() == 1) {
    nn::Parameter* p = s.model(0).parameters()[2];
    auto v = p->value.to_vector<float>();
    v[1] *= 1.5f;
    p->value.copy_from(Tensor::from_vector(v, p->value.shape()));
  }
  try {
    s.check_replicas_identical();
    ADD_FAILURE() << "expected CommError on rank " << rt.world_rank();
  } catch (const CommError& e) {
    EXPECT_NE(std::string(e.what()).find("replica 1 (rank 1)"), std::string::npos) << e.what();
  }
}

TEST(StrategyFailure, OutOfMemorySplitGivesTheUnsplitWeights) {
  Runtime& rt = Runtime::get();
  const std::int64_t per = 48;
  auto run = [&](Device device, bool split) {
    StrategyOptions o = test_options();
    o.split_on_oom = split;
    auto s =
        std::make_unique<MirroredStrategy>(rt, std::vector<Device>{device}, cnn_factory(), adam, o);
    std::vector<StepResult> results;
    const std::int64_t global = per * s->world_replicas();
    for (int k = 0; k < 3; ++k) {
      auto batches = local_batches(global_batch(ModelKind::kCnn, k, global, global - 5), *s, per);
      results.push_back(s->train_step(batches, 0.01));
    }
    return std::make_pair(std::move(s), results);
  };
  auto [full, full_results] = run(Device::cpu(5), false);
  // Only rank 0 is short of memory: its limit is 3/4 of the unsplit peak.
  const std::size_t peak = allocator_for(Device::cpu(5)).stats().peak_in_use;
  if (rt.world_rank() == 0) {
    set_memory_policy(Device::cpu(6), MemoryPolicy::parse("limit=" + std::to_string(peak * 3 / 4)));
  }
  auto [split, split_results] = run(Device::cpu(6), true);
  EXPECT_EQ(split_results[0].micro_batches, rt.world_rank() == 0 ? 2 : 1);
  for (int k = 0; k < 3; ++k) {
    EXPECT_NEAR(split_results[k].loss, full_results[k].loss, 1e-5);
    EXPECT_EQ(split_results[k].count, full_results[k].count);
  }
  EXPECT_LE(max_relative_difference(split->model(0), full->model(0)), 1e-5);
  const auto fps = world_fingerprints(*split);
  for (std::size_t i = 1; i < fps.size(); ++i) EXPECT_EQ(fps[i], fps[0]);
}

}  // namespace
}  // namespace mirror::testing
