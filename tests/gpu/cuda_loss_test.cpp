// The float-target losses (BCE with logits, MSE) on CUDA vs the CPU oracle, on seeded random
// logits with padding rows, weights, and extreme logits (|x| = 100), and one MSE train step of
// MirroredStrategy on cuda:0 vs the same step on the CPU. Tolerances, and why:
//   rtol 1e-5   loss value, metric sums and dlogits (CUDA's exp/log1p vs glibc: a few ulp,
//               accumulated in double over rows)
//   exact       correct elements and target_values (sign tests on the same float logits)
// Without a usable GPU every test skips with discover_gpus()'s reason.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "gpu/gpu_test_util.h"
#include "mirror/distributed/strategy.h"
#include "mirror/nn/layers.h"
#include "mirror/ops.h"
#include "mirror/optim/optimizer.h"

namespace mirror {
namespace {

using testing::expect_close;
using testing::GpuTest;
using testing::random_floats;
using testing::random_tensor;

class CudaLoss : public GpuTest {};

void expect_same(const ops::TargetLossResult& g, const ops::TargetLossResult& c,
                 const std::string& what) {
  SCOPED_TRACE(what);
  EXPECT_NEAR(g.loss, c.loss, 1e-5 * std::fabs(c.loss));
  EXPECT_NEAR(g.squared_error_sum, c.squared_error_sum, 1e-5 * c.squared_error_sum);
  EXPECT_NEAR(g.abs_error_sum, c.abs_error_sum, 1e-5 * c.abs_error_sum);
  EXPECT_EQ(g.correct, c.correct);
  EXPECT_EQ(g.target_values, c.target_values);
  expect_close(g.dlogits, c.dlogits, 1e-5, 1e-9, what + " dlogits");
}

TEST_F(CudaLoss, MatchesTheCpuOracle) {
  constexpr std::int64_t n = 37, k = 5;
  std::vector<float> x = random_floats(n * k, 6.0f, 200);
  x[3] = 100.0f;  // extreme logits: stay finite on both sides
  x[4] = -100.0f;
  x[11] = -100.0f;
  std::vector<float> w(n, 1.0f);
  w[2] = 0.0f;  // padded samples
  w[30] = 0.0f;
  w[7] = 0.5f;
  const Tensor logits = Tensor::from_vector(x, {n, k}), weights = Tensor::from_vector(w, {n});
  std::vector<float> p = random_floats(n * k, 0.5f, 201);
  for (std::size_t i = 0; i < p.size(); ++i) p[i] = i % 3 == 0 ? p[i] + 0.5f : (p[i] > 0 ? 1 : 0);
  const Tensor probs = Tensor::from_vector(p, {n, k});
  const Tensor values = random_tensor({n, k}, 202, 3.0f);
  for (auto kind : {ops::TargetLoss::kBinaryCrossEntropy, ops::TargetLoss::kMeanSquaredError}) {
    const bool bce = kind == ops::TargetLoss::kBinaryCrossEntropy;
    const Tensor& t = bce ? probs : values;
    const auto c = ops::target_loss(kind, logits, t, weights, 80.0);
    const auto g = ops::target_loss(kind, logits.to(gpu()), t.to(gpu()), weights.to(gpu()), 80.0);
    ASSERT_TRUE(ops::all_finite(g.dlogits));
    expect_same(g, c, bce ? "bce" : "mse");
  }
  // [n] targets for one output.
  const Tensor one = random_tensor({n, 1}, 203, 2.0f), t1 = random_tensor({n}, 204);
  expect_same(ops::mean_squared_error(one.to(gpu()), t1.to(gpu()), weights.to(gpu()), 40.0),
              ops::mean_squared_error(one, t1, weights, 40.0), "mse [n]");
}

TEST_F(CudaLoss, StrategyStepOnTheGpuMatchesTheCpu) {
  auto model = [](Device d) {
    nn::Sequential m;
    m.emplace<nn::Dense>(8, ops::Activation::kTanh);
    m.emplace<nn::Dense>(3);
    m.build({6}, 100, DType::kFloat32, d);
    return m;
  };
  auto sgd = []() -> std::unique_ptr<optim::Optimizer> {
    return std::make_unique<optim::SGD>(0.9);
  };
  dist::StrategyOptions o;
  o.loss = dist::LossKind::kMeanSquaredError;
  dist::MirroredStrategy on_gpu({gpu()}, model, sgd, o);
  dist::MirroredStrategy on_cpu({Device::cpu()}, model, sgd, o);
  data::Batch b;
  b.inputs = random_tensor({8, 6}, 210);
  b.labels = random_tensor({8, 3}, 211);
  b.weights = Tensor::from_vector(std::vector<float>{1, 1, 1, 1, 1, 1, 1, 0}, {8});
  b.sample_ids = Tensor::from_vector(std::vector<std::int64_t>{0, 1, 2, 3, 4, 5, 6, -1}, {8});
  b.global_count = 7;
  std::vector<data::Batch> g{b}, c{b};
  const dist::StepResult rg = on_gpu.train_step(g, 0.1), rc = on_cpu.train_step(c, 0.1);
  EXPECT_NEAR(rg.loss, rc.loss, 1e-5 * rc.loss);
  EXPECT_EQ(rg.target_values, 21);
  EXPECT_NEAR(rg.squared_error_sum, rc.squared_error_sum, 1e-5 * rc.squared_error_sum);
  const auto pg = on_gpu.model().parameters(), pc = on_cpu.model().parameters();
  for (std::size_t i = 0; i < pc.size(); ++i) {
    expect_close(pg[i]->value, pc[i]->value, 1e-5, 1e-6, pc[i]->name);
  }
}

}  // namespace
}  // namespace mirror
