// MirroredStrategy under the mixed-precision policies (Note [Mixed precision], Note [Loss
// scaling], mirror/precision.h), in one process: an fp16 overflow on one of two in-process
// replicas skips the step on both and halves the scale; the gradients of mixed steps are the
// float32 ones up to bf16/fp16 rounding (loss scaling undone exactly); a short mixed run tracks
// the float32 loss curve; the loss scale restore is validated.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>

#include "cpu/cpu_kernels.h"
#include "mirror/distributed/strategy.h"
#include "mpi/strategy_testing.h"

namespace mirror::testing {
namespace {

using dist::MirroredStrategy;
using dist::StrategyOptions;

StrategyOptions options(Precision p) {
  StrategyOptions o;
  o.seed = 9;
  o.divergence_check_every = 1;
  o.precision = p;
  return o;
}

dist::ModelFactory cnn() {
  return [](Device d) { return small_cnn(d, 100); };
}

std::unique_ptr<optim::Optimizer> sgd() { return std::make_unique<optim::SGD>(0.0); }

TEST(StrategyMixedPrecision, Fp16OverflowOnOneInProcessReplicaSkipsBoth) {
  setenv("MIRROR_TEST_FP16_OVERFLOW", "1:1", 1);
  MirroredStrategy s(cpu_devices(0, 2), cnn(), adam, options(Precision::kMixedFloat16));
  unsetenv("MIRROR_TEST_FP16_OVERFLOW");
  std::uint64_t before = 0;
  for (int k = 0; k < 3; ++k) {
    if (k == 1) before = s.weights_fingerprint(0);
    auto batches = local_batches(global_batch(ModelKind::kCnn, k, 8, 8), s, 4);
    ::testing::internal::CaptureStderr();
    const dist::StepResult r = s.train_step(batches, 0.01);
    const std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_EQ(r.skipped, k == 1) << "step " << k;
    if (k == 1) {
      EXPECT_NE(err.find("fp16 overflow"), std::string::npos) << err;
      EXPECT_NE(err.find("32768 -> 16384"), std::string::npos) << err;
      EXPECT_EQ(s.weights_fingerprint(0), before);
      EXPECT_EQ(s.weights_fingerprint(1), before);
    }
  }
  EXPECT_EQ(s.loss_scale().scale, 16384.0);
  EXPECT_EQ(s.loss_scale().good_steps, 1);
  EXPECT_EQ(s.optimizer(0).steps(), 2);
  EXPECT_EQ(s.weights_fingerprint(1), s.weights_fingerprint(0));
  EXPECT_NE(s.weights_fingerprint(0), before);
}

/// A model without kinks (no relu, no max pooling): the gradients of a mixed step then differ
/// from float32's only by the rounding of the operands, not by a unit switching on or off.
nn::Sequential linear_model(Device d) {
  nn::Sequential m;
  m.emplace<nn::Conv2D>(8, 3, 3, 1, nn::Padding::kSame, ops::Activation::kIdentity);
  m.emplace<nn::Conv2D>(4, 3, 3, 2, nn::Padding::kSame, ops::Activation::kTanh);
  m.emplace<nn::Flatten>();
  m.emplace<nn::Dense>(kClasses);
  m.build({1, kImage, kImage}, 100, DType::kFloat32, d);
  return m;
}

/// The weight change of one SGD step (lr 1: minus the gradient), all parameters in one vector.
std::vector<double> gradient_of_one_step(Precision p) {
  MirroredStrategy s(cpu_devices(0, 1), linear_model, sgd, options(p));
  std::vector<double> before, change;
  for (nn::Parameter* q : s.model(0).parameters())
    for (float v : q->value.to_vector<float>()) before.push_back(v);
  auto batches = local_batches(global_batch(ModelKind::kCnn, 0, 16, 16), s, 16);
  s.train_step(batches, 1.0);
  for (nn::Parameter* q : s.model(0).parameters())
    for (float v : q->value.to_vector<float>()) change.push_back(before[change.size()] - v);
  return change;
}

/// ||a - b|| / ||b||.
double relative_error(const std::vector<double>& a, const std::vector<double>& b) {
  double d = 0, n = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    d += (a[i] - b[i]) * (a[i] - b[i]);
    n += b[i] * b[i];
  }
  return std::sqrt(d / n);
}

TEST(StrategyMixedPrecision, GradientsMatchFloat32UpToTheLowPrecisionRounding) {
  const std::vector<double> f32 = gradient_of_one_step(Precision::kFloat32);
  // fp16: 11-bit significands (relative rounding 2^-12), loss scale 2^15 undone exactly.
  const double fp16 = relative_error(gradient_of_one_step(Precision::kMixedFloat16), f32);
  EXPECT_GT(fp16, 0.0);  // the operands really were rounded
  EXPECT_LT(fp16, 2e-3);
  if (!cpu::cpu_has_bf16()) GTEST_SKIP() << "this CPU lacks AVX-512 BF16";
  // bf16: 8-bit significands (2^-9), eight times coarser.
  const double bf16 = relative_error(gradient_of_one_step(Precision::kMixedBFloat16), f32);
  EXPECT_GT(bf16, 2 * fp16);
  EXPECT_LT(bf16, 1.5e-2);
  std::printf("gradient relative error: fp16 %.2e, bf16 %.2e\n", fp16, bf16);
}

std::vector<double> loss_curve(Precision p, int steps) {
  MirroredStrategy s(cpu_devices(0, 1), cnn(), adam, options(p));
  std::vector<double> losses;
  for (int k = 0; k < steps; ++k) {
    auto batches = local_batches(global_batch(ModelKind::kCnn, k % 4, 32, 32), s, 32);
    losses.push_back(s.train_step(batches, 0.01).loss);
  }
  return losses;
}

TEST(StrategyMixedPrecision, ShortMixedRunsTrackTheFloat32LossCurve) {
  const int steps = 40;
  const std::vector<double> f32 = loss_curve(Precision::kFloat32, steps);
  EXPECT_LT(f32.back(), 0.7 * f32.front());  // it learns (4 batches seen 10 times)
  std::vector<Precision> mixed{Precision::kMixedFloat16};
  if (cpu::cpu_has_bf16()) mixed.push_back(Precision::kMixedBFloat16);
  for (Precision p : mixed) {
    const std::vector<double> curve = loss_curve(p, steps);
    // Stated tolerance (docs/mixed_precision.md): every step within 0.05 + 5 % of float32's.
    for (int k = 0; k < steps; ++k) {
      EXPECT_NEAR(curve[k], f32[k], 0.05 + 0.05 * f32[k]) << precision_name(p) << " step " << k;
    }
  }
}

TEST(StrategyMixedPrecision, LossScaleRestoreIsValidated) {
  MirroredStrategy s(cpu_devices(0, 1), cnn(), adam, options(Precision::kMixedFloat16));
  s.set_loss_scale({1024.0, 17});
  EXPECT_EQ(s.loss_scale().scale, 1024.0);
  EXPECT_EQ(s.loss_scale().good_steps, 17);
  EXPECT_THROW(s.set_loss_scale({1000.0, 0}), InvalidArgument);  // not a power of two
  EXPECT_THROW(s.set_loss_scale({0.5, 0}), InvalidArgument);
  EXPECT_THROW(s.set_loss_scale({1024.0, LossScale::kGrowthInterval}), InvalidArgument);
  EXPECT_THROW(s.set_loss_scale({NAN, 0}), InvalidArgument);
}

TEST(StrategyMixedPrecision, BadOverflowHookIsNamed) {
  setenv("MIRROR_TEST_FP16_OVERFLOW", "1-3", 1);
  try {
    MirroredStrategy s(cpu_devices(0, 1), cnn(), adam, options(Precision::kMixedFloat16));
    ADD_FAILURE() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("replica:step"), std::string::npos) << e.what();
  }
  unsetenv("MIRROR_TEST_FP16_OVERFLOW");
}

}  // namespace
}  // namespace mirror::testing
