// Mixed precision across ranks (Note [Loss scaling], mirror/precision.h): an fp16 overflow on
// one replica (the MIRROR_TEST_FP16_OVERFLOW hook) makes every replica of every rank skip the
// same step and halve the same loss scale; ranks that disagree on the precision policy stop at
// start with an error naming it. Runs at 2 and 3 ranks, with one and two replicas per rank.
#include <gtest/gtest.h>

#include <cstdlib>

#include "mirror/distributed/runtime.h"
#include "mirror/distributed/strategy.h"
#include "mpi/strategy_testing.h"

namespace mirror::testing {
namespace {

using dist::MirroredStrategy;
using dist::Runtime;
using dist::StrategyOptions;

StrategyOptions fp16_options() {
  StrategyOptions o;
  o.seed = 5;
  o.divergence_check_every = 1;  // every step: replicas must stay bitwise identical
  o.precision = Precision::kMixedFloat16;
  return o;
}

/// Sets an environment variable for the lifetime of the object.
struct ScopedEnv {
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() { unsetenv(name_); }
  const char* name_;
};

void overflow_on_last_replica_skips_everywhere(int local) {
  Runtime& rt = Runtime::get();
  const int world = rt.world_size() * local;
  // The last world replica (on the last rank) overflows at step 2; nobody else does.
  const ScopedEnv hook("MIRROR_TEST_FP16_OVERFLOW", std::to_string(world - 1) + ":2");
  MirroredStrategy s(
      rt, cpu_devices(0, local), [](Device d) { return small_cnn(d, 100); }, adam, fp16_options());
  const std::int64_t per = 3, global = per * s.world_replicas();
  std::vector<std::uint64_t> before;
  for (int k = 0; k < 4; ++k) {
    if (k == 2) before = world_fingerprints(s);
    auto batches = local_batches(global_batch(ModelKind::kCnn, k, global, global), s, per);
    const dist::StepResult r = s.train_step(batches, 0.01);
    // Every rank reports the same decision and the same scale.
    const auto skipped = rt.all_gather_value<int>(r.skipped ? 1 : 0);
    const auto scales = rt.all_gather_value<double>(s.loss_scale().scale);
    for (std::size_t i = 0; i < skipped.size(); ++i) {
      EXPECT_EQ(skipped[i], k == 2 ? 1 : 0) << "rank " << i << " step " << k;
      EXPECT_EQ(scales[i], k >= 2 ? 16384.0 : 32768.0) << "rank " << i << " step " << k;
    }
    EXPECT_EQ(r.loss_scale, k > 2 ? 16384.0 : 32768.0) << "step " << k;
    if (k == 2) {
      EXPECT_EQ(world_fingerprints(s), before);  // no replica moved
    }
  }
  const auto after = world_fingerprints(s);
  for (std::size_t i = 1; i < after.size(); ++i) EXPECT_EQ(after[i], after[0]) << "replica " << i;
  EXPECT_NE(after[0], before[0]);
  for (int i = 0; i < s.local_replicas(); ++i) EXPECT_EQ(s.optimizer(i).steps(), 3);
}

TEST(MixedPrecisionRanks, Fp16OverflowOnOneReplicaSkipsTheSameStepEverywhere) {
  overflow_on_last_replica_skips_everywhere(1);
}

TEST(MixedPrecisionRanks, Fp16OverflowSkipsEverywhereWithTwoReplicasPerRank) {
  overflow_on_last_replica_skips_everywhere(2);
}

TEST(MixedPrecisionRanks, DifferentPolicyOnOneRankFailsEveryRank) {
  Runtime& rt = Runtime::get();
  StrategyOptions o = fp16_options();
  if (rt.world_rank() == rt.world_size() - 1) o.precision = Precision::kFloat32;
  try {
    MirroredStrategy s(
        rt, {Device::cpu(0)}, [](Device d) { return small_cnn(d, 100); }, adam, o);
    ADD_FAILURE() << "expected CommError on rank " << rt.world_rank();
  } catch (const CommError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("rank " + std::to_string(rt.world_size() - 1)), std::string::npos) << what;
    EXPECT_NE(what.find("precision mixed_float16"), std::string::npos) << what;
    EXPECT_NE(what.find("precision float32"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace mirror::testing
