// MirroredStrategy inside one process (no MPI): one replica (no communication, bitwise equal to
// plain training), in-process replicas equal to one big batch, overlap, compression, gradient
// accumulation, non-finite skip/stop, divergence detection, the out-of-memory split under a
// `limit` policy, evaluation, and argument errors.
#include <gtest/gtest.h>

#include "mirror/distributed/strategy.h"
#include "mirror/memory.h"
#include "mpi/strategy_testing.h"

namespace mirror::testing {
namespace {

using dist::MirroredStrategy;
using dist::StepResult;
using dist::StrategyOptions;

constexpr std::uint64_t kSeed = 42;

dist::ModelFactory factory(ModelKind kind) {
  // Each device initialises differently; replica 0 (the first device) is built from seed 100.
  return [kind](Device d) {
    return small_model(kind, d, 100 + 7 * static_cast<std::uint64_t>(d.index));
  };
}

std::vector<data::Batch> batches_for(MirroredStrategy& s, const data::Batch& g, std::int64_t per) {
  return local_batches(g, s, per);
}

struct TrainRun {
  double max_error = 0;         // against the one-replica reference
  double max_buffer_error = 0;  // of the non-trained buffers (BatchNorm moving statistics)
  std::vector<StepResult> results;
};

/// Trains `s` for `steps` and a reference model (built from seed 100 like replica 0) on the
/// whole global batch; checks that every local replica is bitwise equal after every step.
TrainRun train_against_reference(MirroredStrategy& s, ModelKind kind, int steps, std::int64_t per,
                                 int padding, double lr, bool sgd, double loss_tolerance = 1e-5) {
  const Device ref_device = Device::cpu(9);
  nn::Sequential reference = small_model(kind, ref_device, 100);
  std::unique_ptr<optim::Optimizer> opt =
      sgd ? std::unique_ptr<optim::Optimizer>(std::make_unique<optim::SGD>(0.9)) : adam();
  TrainRun run;
  const std::int64_t global = per * s.world_replicas();
  for (int step = 0; step < steps; ++step) {
    const data::Batch g = global_batch(kind, step, global, global - padding);
    auto batches = batches_for(s, g, per);
    run.results.push_back(s.train_step(batches, lr));
    const double ref_loss = reference_step(reference, *opt, g, lr, kSeed);
    EXPECT_NEAR(run.results.back().loss, ref_loss,
                loss_tolerance * std::max(1.0, std::fabs(ref_loss)));
    EXPECT_EQ(run.results.back().count, global - padding);
    for (int i = 1; i < s.local_replicas(); ++i) {
      EXPECT_EQ(s.weights_fingerprint(i), s.weights_fingerprint(0)) << "step " << step;
    }
  }
  run.max_error = max_relative_difference(s.model(0), reference);
  run.max_buffer_error = max_buffer_difference(s.model(0), reference);
  return run;
}

StrategyOptions options_with(dist::BucketCaps caps = {}) {
  StrategyOptions o;
  o.buckets = caps;
  o.seed = kSeed;
  o.divergence_check_every = 1;
  return o;
}

dist::OptimizerFactory optimizer(bool sgd) {
  return [sgd]() -> std::unique_ptr<optim::Optimizer> {
    if (sgd) return std::make_unique<optim::SGD>(0.9);
    return adam();
  };
}

TEST(StrategyInproc, SingleReplicaIsPlainTrainingBitForBit) {
  MirroredStrategy s({Device::cpu(0)}, factory(ModelKind::kCnn), adam, options_with());
  EXPECT_EQ(s.world_replicas(), 1);
  const TrainRun run = train_against_reference(s, ModelKind::kCnn, 3, 6, 1, 0.01, false);
  EXPECT_EQ(run.max_error, 0.0);
  for (const auto& r : run.results) EXPECT_EQ(r.buckets, 0);  // no communication at all
}

TEST(StrategyInproc, InProcessReplicasMatchOneBigBatch) {
  for (bool sgd : {false, true}) {
    for (ModelKind kind : {ModelKind::kCnn, ModelKind::kGru}) {
      SCOPED_TRACE(std::string(sgd ? "sgd" : "adam") + (kind == ModelKind::kCnn ? " cnn" : " gru"));
      MirroredStrategy s(cpu_devices(0, 3), factory(kind), optimizer(sgd), options_with({1, 1}));
      ASSERT_EQ(s.world_replicas(), 3);
      const TrainRun run = train_against_reference(s, kind, 4, 3, 2, sgd ? 0.1 : 0.01, sgd);
      EXPECT_LE(run.max_error, 1e-5);
      // Tiny buckets: one per tensor, and every one launched while backward was running.
      EXPECT_EQ(run.results[0].buckets, static_cast<int>(s.plan().buckets.size()));
      EXPECT_EQ(run.results[0].overlapped_buckets, run.results[0].buckets);
    }
  }
}

TEST(StrategyInproc, SyncBatchNormReplicasMatchOneBigBatch) {
  // cpu:2 and cpu:3 in-process replicas, the last one short of real samples.
  for (int replicas : {2, 3}) {
    SCOPED_TRACE(std::to_string(replicas) + " replicas");
    MirroredStrategy s(cpu_devices(0, replicas), factory(ModelKind::kResBn), adam,
                       options_with({1, 1}));
    const TrainRun run = train_against_reference(s, ModelKind::kResBn, 4, 3, 2, 0.01, false);
    EXPECT_LE(run.max_error, 1e-5);
    // The moving statistics are those of the global batch, and they moved from 0 and 1.
    EXPECT_LE(run.max_buffer_error, 1e-5);
    nn::Sequential initial = small_model(ModelKind::kResBn, Device::cpu(9), 100);
    EXPECT_GT(max_buffer_difference(s.model(0), initial), 1e-3);
  }
}

TEST(StrategyInproc, UnsyncedBatchNormStatisticsAreAveragedEveryStep) {
  // Note [Buffers across replicas]: each replica's moving statistics follow its own shard, and
  // every step ends with every replica holding their average -- so a checkpoint written after
  // any step saves what every replica holds, and writing it changes nothing that follows.
  StrategyOptions o = options_with();
  o.divergence_check_every = 0;
  for (int replicas : {2, 3}) {
    SCOPED_TRACE(std::to_string(replicas) + " replicas");
    MirroredStrategy s(
        cpu_devices(0, replicas), [](Device d) { return small_resnet(d, 100, false); }, adam, o);
    for (int step = 0; step < 3; ++step) {
      const data::Batch g = global_batch(ModelKind::kResBn, step, 3 * replicas, 3 * replicas);
      // What each replica's own moving statistics become this step: the forward of its shard on
      // a copy of its current state.
      std::vector<std::vector<float>> own;
      for (int i = 0; i < replicas; ++i) {
        nn::Sequential copy = small_resnet(Device::cpu(9), 100, false);
        const auto from = s.model(0).buffers();
        const auto to = copy.buffers();
        for (std::size_t k = 0; k < to.size(); ++k) to[k]->value.copy_from(from[k]->value);
        const auto weights = s.model(0).parameters();
        const auto into = copy.parameters();
        for (std::size_t k = 0; k < into.size(); ++k) into[k]->value.copy_from(weights[k]->value);
        const data::Batch b = shard(g, 3 * i, 3 * (i + 1), Device::cpu(9));
        nn::ForwardContext ctx;
        ctx.training = true;
        ctx.sample_weights = b.weights;
        copy.forward(b.inputs, ctx);
        own.push_back(copy.buffers()[0]->value.to_vector<float>());
      }
      ASSERT_NE(own[0], own[1]);  // the shards differ, so do their statistics
      auto batches = batches_for(s, g, 3);
      s.train_step(batches, 0.01);
      const auto avg = s.model(0).buffers()[0]->value.to_vector<float>();
      for (std::size_t k = 0; k < avg.size(); ++k) {
        double mean = 0;
        for (const auto& v : own) mean += v[k] / replicas;
        EXPECT_NEAR(avg[k], mean, 1e-6) << "channel " << k;
      }
      for (int i = 1; i < replicas; ++i) {
        EXPECT_EQ(s.weights_fingerprint(i), s.weights_fingerprint(0)) << "step " << step;
      }
    }
    s.check_replicas_identical();  // covers the buffers: nothing to average first
  }
}

TEST(StrategyInproc, WithoutOverlapEveryBucketWaitsForBackward) {
  StrategyOptions o = options_with({1, 1});
  o.overlap = false;
  MirroredStrategy s(cpu_devices(0, 2), factory(ModelKind::kCnn), adam, o);
  const TrainRun run = train_against_reference(s, ModelKind::kCnn, 2, 3, 0, 0.01, false);
  EXPECT_LE(run.max_error, 1e-5);
  EXPECT_EQ(run.results[0].overlapped_buckets, 0);
  EXPECT_GT(run.results[0].buckets, 1);
}

TEST(StrategyInproc, GradientAccumulationMatchesOneBigBatch) {
  StrategyOptions o = options_with();
  o.accumulation_steps = 3;
  MirroredStrategy s(cpu_devices(0, 2), factory(ModelKind::kGru), optimizer(true), o);
  const TrainRun run = train_against_reference(s, ModelKind::kGru, 3, 7, 3, 0.1, true);
  EXPECT_LE(run.max_error, 1e-5);
  EXPECT_EQ(run.results[0].micro_batches, 3);
}

TEST(StrategyInproc, CompressedAllReduceKeepsReplicasIdentical) {
  for (auto c : {dist::Compression::kFloat16, dist::Compression::kBFloat16}) {
    SCOPED_TRACE(dist::compression_name(c));
    StrategyOptions o = options_with();
    o.compression = c;
    MirroredStrategy s(cpu_devices(0, 2), factory(ModelKind::kCnn), optimizer(true), o);
    const TrainRun run = train_against_reference(s, ModelKind::kCnn, 3, 4, 0, 0.1, true, 1e-3);
    // The 16-bit payload rounds the gradients: close to, but not exactly, the float32 result.
    EXPECT_GT(run.max_error, 0.0);
    EXPECT_LE(run.max_error, c == dist::Compression::kFloat16 ? 2e-3 : 2e-2);
  }
  EXPECT_EQ(dist::parse_compression("bf16"), dist::Compression::kBFloat16);
  EXPECT_THROW(dist::parse_compression("int8"), InvalidArgument);
}

data::Batch with_nan(data::Batch b) {
  auto values = b.inputs.to(Device::cpu()).to_vector<float>();
  values[3] = std::numeric_limits<float>::quiet_NaN();
  Tensor t = Tensor::from_vector(values, b.inputs.shape()).to(b.inputs.device());
  b.inputs = t;
  return b;
}

TEST(StrategyInproc, NonFiniteGradientsSkipTheStepEverywhere) {
  MirroredStrategy s(cpu_devices(0, 2), factory(ModelKind::kCnn), adam, options_with());
  auto batches = batches_for(s, global_batch(ModelKind::kCnn, 0, 8, 8), 4);
  EXPECT_FALSE(s.train_step(batches, 0.01).skipped);
  const std::uint64_t before = s.weights_fingerprint(0);
  batches = batches_for(s, global_batch(ModelKind::kCnn, 1, 8, 8), 4);
  batches[1] = with_nan(batches[1]);  // only replica 1 sees the NaN
  ::testing::internal::CaptureStderr();
  const StepResult skipped = s.train_step(batches, 0.01);
  EXPECT_NE(::testing::internal::GetCapturedStderr().find("non-finite gradients"),
            std::string::npos);
  EXPECT_TRUE(skipped.skipped);
  EXPECT_EQ(s.weights_fingerprint(0), before);
  EXPECT_EQ(s.weights_fingerprint(1), before);
  EXPECT_EQ(s.optimizer(0).steps(), 1);
  EXPECT_EQ(s.optimizer(1).steps(), 1);
  batches = batches_for(s, global_batch(ModelKind::kCnn, 2, 8, 8), 4);
  EXPECT_FALSE(s.train_step(batches, 0.01).skipped);
  EXPECT_NE(s.weights_fingerprint(0), before);
  EXPECT_EQ(s.weights_fingerprint(1), s.weights_fingerprint(0));
}

TEST(StrategyInproc, NonFiniteGradientsStopWhenAsked) {
  StrategyOptions o = options_with();
  o.non_finite = dist::NonFinitePolicy::kStop;
  MirroredStrategy s(cpu_devices(0, 2), factory(ModelKind::kCnn), adam, o);
  auto batches = batches_for(s, global_batch(ModelKind::kCnn, 0, 8, 8), 4);
  batches[0] = with_nan(batches[0]);
  const std::uint64_t before = s.weights_fingerprint(0);
  try {
    s.train_step(batches, 0.01);
    ADD_FAILURE() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("non-finite"), std::string::npos) << e.what();
  }
  EXPECT_EQ(s.weights_fingerprint(0), before);
}

TEST(StrategyInproc, DivergedReplicasAreDetected) {
  MirroredStrategy s(cpu_devices(0, 3), factory(ModelKind::kCnn), adam, options_with());
  EXPECT_NO_THROW(s.check_replicas_identical());
  // Perturb one weight of replica 2: the next step's check names it.
  nn::Parameter* p = s.model(2).parameters()[0];
  auto v = p->value.to_vector<float>();
  v[0] += 1e-3f;
  p->value.copy_from(Tensor::from_vector(v, p->value.shape()));
  auto batches = batches_for(s, global_batch(ModelKind::kCnn, 0, 6, 6), 2);
  try {
    s.train_step(batches, 0.01);
    ADD_FAILURE() << "expected CommError";
  } catch (const CommError& e) {
    EXPECT_NE(std::string(e.what()).find("replica 2 (rank 0)"), std::string::npos) << e.what();
  }
}

TEST(StrategyInproc, OutOfMemorySplitsTheBatchAndGivesTheSameWeights) {
  const std::int64_t per = 64;
  auto run = [&](std::vector<Device> devices, bool split, int steps) {
    StrategyOptions o = options_with();
    o.split_on_oom = split;
    // Same seed on every device: the split and unsplit runs start from the same weights.
    auto s = std::make_unique<MirroredStrategy>(
        devices, [](Device d) { return small_model(ModelKind::kCnn, d, 100); }, adam, o);
    std::vector<StepResult> results;
    for (int step = 0; step < steps; ++step) {
      auto batches =
          batches_for(*s, global_batch(ModelKind::kCnn, step, 2 * per, 2 * per - 3), per);
      results.push_back(s->train_step(batches, 0.01));
    }
    return std::make_pair(std::move(s), results);
  };
  // Unlimited devices first; their peak calibrates a limit that the full batch cannot meet.
  auto [full, full_results] = run({Device::cpu(5), Device::cpu(6)}, false, 3);
  const std::size_t peak = allocator_for(Device::cpu(5)).stats().peak_in_use;
  const std::size_t limit = peak * 3 / 4;
  for (int d : {3, 4}) {
    set_memory_policy(Device::cpu(d), MemoryPolicy::parse("limit=" + std::to_string(limit)));
  }
  ::testing::internal::CaptureStderr();
  auto [split, split_results] = run({Device::cpu(3), Device::cpu(4)}, true, 3);
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("[mirror] out of memory at batch 64 on cpu:3; continuing with micro-batches "
                     "of 32"),
            std::string::npos)
      << log;
  EXPECT_EQ(split_results[0].micro_batches, 2);
  EXPECT_EQ(split_results[2].micro_batches, 2);
  EXPECT_EQ(split_results[2].overlapped_buckets, split_results[2].buckets);  // settled: overlap
  EXPECT_LE(allocator_for(Device::cpu(3)).stats().peak_in_use, limit);
  for (int i = 0; i < 3; ++i) {
    EXPECT_NEAR(split_results[i].loss, full_results[i].loss, 1e-5);
    EXPECT_EQ(split_results[i].correct, full_results[i].correct);
  }
  EXPECT_LE(max_relative_difference(split->model(0), full->model(0)), 1e-5);
  EXPECT_LE(max_relative_difference(split->model(1), full->model(0)), 1e-5);
  // Without the split option the same limit is a plain OutOfMemory.
  for (int d : {10, 11}) {
    set_memory_policy(Device::cpu(d), MemoryPolicy::parse("limit=" + std::to_string(limit)));
  }
  EXPECT_THROW(run({Device::cpu(10), Device::cpu(11)}, false, 1), OutOfMemory);
}

TEST(StrategyInproc, EvaluateStepReportsGlobalMetricsWithoutTraining) {
  MirroredStrategy s(cpu_devices(0, 2), factory(ModelKind::kGru), adam, options_with());
  nn::Sequential reference = small_model(ModelKind::kGru, Device::cpu(9), 100);
  const data::Batch g = global_batch(ModelKind::kGru, 5, 10, 9);
  auto batches = batches_for(s, g, 5);
  const std::uint64_t before = s.weights_fingerprint(0);
  const StepResult r = s.evaluate_step(batches);
  EXPECT_EQ(s.weights_fingerprint(0), before);
  const data::Batch all = shard(g, 0, g.size(), Device::cpu(9));
  nn::ForwardContext ctx;
  ctx.sample_ids = all.sample_ids;
  ctx.lengths = all.lengths;
  const Tensor logits = reference.forward(all.inputs, ctx);
  const auto loss = ops::softmax_cross_entropy(logits, all.labels, all.weights, 9.0);
  EXPECT_NEAR(r.loss, loss.loss, 1e-6);
  EXPECT_EQ(r.correct, ops::correct_count(logits, all.labels, all.weights));
  EXPECT_EQ(r.count, 9);
  EXPECT_NEAR(r.loss_sum, loss.loss * 9.0, 1e-5);
}

TEST(StrategyInproc, BatchesOnAnotherDeviceAreMovedToTheReplica) {
  // Loaders produce host batches on cpu:0; replica 1 lives on cpu:1 and computes there.
  auto same = [](Device d) { return small_model(ModelKind::kCnn, d, 100); };
  MirroredStrategy moved(cpu_devices(0, 2), same, adam, options_with());
  MirroredStrategy placed(cpu_devices(2, 2), same, adam, options_with());
  for (int step = 0; step < 2; ++step) {
    const data::Batch g = global_batch(ModelKind::kCnn, step, 6, 6);
    std::vector<data::Batch> on_cpu0 = {shard(g, 0, 3, Device::cpu(0)),
                                        shard(g, 3, 6, Device::cpu(0))};
    auto on_replicas = batches_for(placed, g, 3);
    EXPECT_DOUBLE_EQ(moved.train_step(on_cpu0, 0.01).loss,
                     placed.train_step(on_replicas, 0.01).loss);
  }
  EXPECT_EQ(moved.weights_fingerprint(1), moved.weights_fingerprint(0));
  EXPECT_EQ(moved.weights_fingerprint(0), placed.weights_fingerprint(0));
}

TEST(StrategyInproc, BadArgumentsAreRejected) {
  EXPECT_THROW(MirroredStrategy({}, factory(ModelKind::kCnn), adam), InvalidArgument);
  EXPECT_THROW(MirroredStrategy({Device::cpu(0), Device::cpu(0)}, factory(ModelKind::kCnn), adam),
               InvalidArgument);
  // A factory that builds a different model on one device.
  auto odd = [](Device d) { return small_cnn(d, 1, d.index == 1 ? 17 : 16); };
  try {
    MirroredStrategy s(cpu_devices(0, 2), odd, adam);
    ADD_FAILURE() << "expected CommError";
  } catch (const CommError& e) {
    EXPECT_NE(std::string(e.what()).find("dense_1/kernel"), std::string::npos) << e.what();
  }
  MirroredStrategy s(cpu_devices(0, 2), factory(ModelKind::kCnn), adam);
  auto one = batches_for(s, global_batch(ModelKind::kCnn, 0, 4, 4), 2);
  one.pop_back();
  EXPECT_THROW(s.train_step(one, 0.01), InvalidArgument);
  EXPECT_THROW(s.model(2), InvalidArgument);
}

TEST(StrategyInproc, AMarkedGradientBackwardNeverWroteIsAnErrorNamingIt) {
  // Note [First gradient write]: a gradient is marked instead of zeroed only when its layer's
  // backward overwrites it. A mark left after backward (here on a convolution kernel, whose
  // backward only adds) would leave last step's values in the gradient: the step refuses.
  const dist::ModelFactory marked = [](Device d) {
    nn::Sequential m = small_model(ModelKind::kCnn, d, 100);
    m.parameters()[0]->overwrites_grad = true;
    return m;
  };
  MirroredStrategy s({Device::cpu(0)}, marked, adam, options_with());
  const data::Batch g = global_batch(ModelKind::kCnn, 0, 6, 6);
  auto batches = batches_for(s, g, 6);
  const std::string name = s.model(0).parameters()[0]->name;
  try {
    s.train_step(batches, 0.01);
    FAIL() << "a step with an unwritten marked gradient succeeded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace mirror::testing
