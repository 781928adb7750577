// Synchronized BatchNormalization's device path (Note [Device batch norm], mirror/ops.h) against
// its host path, on the CPU (force_device_batchnorm): the same outputs, input and parameter
// gradients and moving statistics, with padding samples, for images, features and sequences,
// with a replica sum that goes through the device-tensor entry point; and a whole strategy with
// synchronized BN over in-process replicas giving the same weights either way.
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "mirror/nn/cnn_layers.h"
#include "mirror/ops.h"
#include "mpi/strategy_testing.h"

namespace mirror::nn {
namespace {

/// Switches the device path on for one scope.
class DevicePath {
 public:
  explicit DevicePath(bool on) : previous_(force_device_batchnorm(on)) {}
  ~DevicePath() { force_device_batchnorm(previous_); }

 private:
  bool previous_;
};

/// Another replica's contribution, added to every sum; records which entry point was used.
class FakeReplicaSum final : public ReplicaSum {
 public:
  void sum(std::vector<double>& values, const std::string& tag) override {
    ++host_calls;
    for (std::size_t i = 0; i < values.size(); ++i) values[i] += other(i, values.size());
    tags.push_back(tag);
  }
  void sum_on_device(Tensor& values, const std::string& tag) override {
    ++device_calls;
    ReplicaSum::sum_on_device(values, tag);  // through sum(): the same arithmetic
    --host_calls;
  }
  /// A made-up other replica: a few samples' sums, and 6 more elements per channel.
  static double other(std::size_t i, std::size_t n) {
    return i + 1 == n && n % 2 == 1 ? 6.0 : 0.25 * static_cast<double>(i % 5) - 0.5;
  }
  int host_calls = 0, device_calls = 0;
  std::vector<std::string> tags;
};

struct Outcome {
  std::vector<float> y, dx, gamma_grad, beta_grad, moving_mean, moving_variance;
  int host_calls = 0, device_calls = 0;
  bool ran_on_device = false;
};

Tensor values(const Shape& shape, std::uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> v(static_cast<std::size_t>(shape_numel(shape)));
  for (float& x : v) x = u(rng) + 0.3f;
  return Tensor::from_vector(v, shape);
}

/// Two training steps (forward, backward) of one BN layer on `input` [N, ...], synchronized
/// unless `synchronized` is false.
Outcome run(bool device_path, const Shape& input, const std::vector<float>& weights, bool sum,
            bool synchronized = true) {
  DevicePath path(device_path);
  BatchNormalization bn(0.9, 1e-3, true, true, synchronized);
  bn.set_name("bn");
  InitRng rng(1);
  const Shape per_sample(input.begin() + 1, input.end());
  bn.build(per_sample, DType::kFloat32, Device::cpu(), rng);
  for (Parameter* p : bn.parameters()) p->grad = Tensor::zeros(p->value.shape());
  FakeReplicaSum replicas;
  Outcome out;
  for (int step = 0; step < 2; ++step) {
    ForwardContext ctx;
    ctx.training = true;
    ctx.replica_sum = sum ? &replicas : nullptr;
    if (!weights.empty()) {
      ctx.sample_weights =
          Tensor::from_vector(weights, {static_cast<std::int64_t>(weights.size())});
    }
    const Tensor x = values(input, 10 + step, 2.0f);
    out.y = bn.forward(x, ctx).to_vector<float>();
    out.ran_on_device = bn.ran_on_device();
    out.dx = bn.backward(values(input, 20 + step)).to_vector<float>();
  }
  out.gamma_grad = bn.parameters()[0]->grad.to_vector<float>();
  out.beta_grad = bn.parameters()[1]->grad.to_vector<float>();
  out.moving_mean = bn.buffers()[0]->value.to_vector<float>();
  out.moving_variance = bn.buffers()[1]->value.to_vector<float>();
  out.host_calls = replicas.host_calls;
  out.device_calls = replicas.device_calls;
  return out;
}

void expect_same(const Outcome& host, const Outcome& device) {
  EXPECT_EQ(device.y, host.y);
  EXPECT_EQ(device.dx, host.dx);
  EXPECT_EQ(device.gamma_grad, host.gamma_grad);
  EXPECT_EQ(device.beta_grad, host.beta_grad);
  EXPECT_EQ(device.moving_mean, host.moving_mean);
  EXPECT_EQ(device.moving_variance, host.moving_variance);
}

struct Case {
  const char* name;
  Shape input;
  std::vector<float> weights;
};

TEST(DeviceBatchNorm, MatchesTheHostPathBitForBit) {
  const std::vector<Case> cases = {
      {"images", {4, 3, 5, 5}, {}},
      {"images with padding", {4, 3, 5, 5}, {1, 1, 0, 1}},
      {"features", {6, 7}, {}},
      {"features with padding", {6, 7}, {1, 0.5f, 1, 1, 0, 0}},
      {"sequences", {3, 4, 5}, {1, 1, 0}},
  };
  for (const Case& c : cases) {
    for (bool sum : {false, true}) {
      SCOPED_TRACE(std::string(c.name) + (sum ? ", summed over replicas" : ", one replica"));
      const Outcome host = run(false, c.input, c.weights, sum);
      const Outcome device = run(true, c.input, c.weights, sum);
      expect_same(host, device);
      EXPECT_EQ(host.device_calls, 0);
      // The device path sums device tensors: statistics and gradient sums, two steps.
      EXPECT_EQ(device.device_calls, sum ? 4 : 0);
      EXPECT_EQ(device.host_calls, 0);
    }
  }
}

// An unsynchronized layer takes the device path too (a GPU's step then never waits inside BN),
// with the host path's results, and never calls the replica sum even when one is there.
TEST(DeviceBatchNorm, UnsynchronizedLayersMatchTheHostPathAndSumNothing) {
  const std::vector<Case> cases = {
      {"images", {4, 3, 5, 5}, {}},
      {"images with padding", {4, 3, 5, 5}, {1, 1, 0, 1}},
      {"features with padding", {6, 7}, {1, 0.5f, 1, 1, 0, 0}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const Outcome host = run(false, c.input, c.weights, /*sum=*/true, /*synchronized=*/false);
    const Outcome device = run(true, c.input, c.weights, /*sum=*/true, /*synchronized=*/false);
    expect_same(host, device);
    EXPECT_FALSE(host.ran_on_device);
    EXPECT_TRUE(device.ran_on_device);
    EXPECT_EQ(host.host_calls + host.device_calls, 0);
    EXPECT_EQ(device.host_calls + device.device_calls, 0);
    // And the same as a synchronized layer with no other replica.
    expect_same(run(false, c.input, c.weights, /*sum=*/false), device);
  }
}

TEST(DeviceBatchNorm, AnAllPaddingShardKeepsItsMovingStatisticsAndGetsNoGradient) {
  for (bool device : {false, true}) {
    const Outcome o = run(device, {3, 2, 2, 2}, {0, 0, 0}, /*sum=*/false);
    EXPECT_EQ(o.moving_mean, std::vector<float>(2, 0.0f)) << device;
    EXPECT_EQ(o.moving_variance, std::vector<float>(2, 1.0f)) << device;
    EXPECT_EQ(o.dx, std::vector<float>(o.dx.size(), 0.0f)) << device;
  }
}

TEST(DeviceBatchNorm, OpsRejectBadArguments) {
  const Tensor x = values({2, 3, 2, 2}, 1);
  const ops::ChannelView v{2, 3, 4};
  EXPECT_THROW(ops::batchnorm_statistics(x, Tensor::zeros({3}), v), InvalidArgument);
  EXPECT_THROW(ops::batchnorm_statistics(x, {}, {2, 3, 3}), InvalidArgument);
  // 24 values of 2 samples seen as 3 rows: a row would straddle two samples.
  EXPECT_THROW(ops::batchnorm_statistics(x, {}, {3, 2, 4}), InvalidArgument);
  EXPECT_NO_THROW(ops::batchnorm_statistics(x, {}, {4, 3, 2}));  // 2 rows per sample
  const Tensor stats = ops::batchnorm_statistics(x, {}, v);
  EXPECT_EQ(stats.dtype(), DType::kFloat64);
  EXPECT_EQ(stats.numel(), 7);
  EXPECT_EQ(stats.to_vector<double>()[6], 8.0) << "elements per channel";
  Tensor mm = Tensor::zeros({3}), mv = Tensor::zeros({2});
  EXPECT_THROW(ops::batchnorm_normalize(x, stats, {}, {}, mm, mv, 0.9, 1e-3, v), InvalidArgument);
  Tensor mv3 = Tensor::zeros({3});
  EXPECT_THROW(ops::batchnorm_normalize(x, stats, {}, {}, mm, mv3, 1.5, 1e-3, v), InvalidArgument);
}

// A whole training run: in-process replicas with synchronized BatchNorm give the same weights
// (bitwise) on the device path as on the host path; the replica sums go through the
// communicator's express lane (the same in-process group here).
TEST(DeviceBatchNorm, AStrategyWithSyncBatchNormTrainsTheSameOnBothPaths) {
  using namespace mirror::testing;
  auto train = [](bool device_path) {
    DevicePath path(device_path);
    dist::StrategyOptions o;
    o.seed = 3;
    o.divergence_check_every = 1;
    dist::MirroredStrategy s(
        cpu_devices(0, 2), [](Device d) { return small_resnet(d, 100); }, adam, o);
    const std::int64_t per = 3, global = per * s.world_replicas();
    for (std::int64_t k = 0; k < 3; ++k) {
      auto batches = local_batches(global_batch(ModelKind::kResBn, k, global, global - 1), s, per);
      s.train_step(batches, 0.01);
    }
    return s.weights_fingerprint(0);
  };
  EXPECT_EQ(train(true), train(false));
}

}  // namespace
}  // namespace mirror::nn
