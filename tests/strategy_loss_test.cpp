// MirroredStrategy with the float-target losses inside one process: R in-process replicas with
// batch b equal one plain model trained on the global batch of R*b (MSE and BCE, with padding),
// the step's float-target metrics, [n] targets for one output, evaluation, parse_loss/loss_name,
// and the loss/data/model mismatches failing the first step with the loss and both shapes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "mirror/distributed/strategy.h"
#include "mpi/strategy_testing.h"
#include "mpi/target_testing.h"

namespace mirror::testing {
namespace {

using dist::LossKind;
using dist::MirroredStrategy;
using dist::StepResult;
using dist::StrategyOptions;
using ::testing::HasSubstr;

StrategyOptions options_for(LossKind loss) {
  StrategyOptions o;
  o.buckets = {1, 1};  // one bucket per tensor: every all-reduce path is exercised
  o.divergence_check_every = 1;
  o.loss = loss;
  return o;
}

dist::ModelFactory dense_factory(int outputs = kTargets) {
  // Each device initialises differently; the broadcast makes them replica 0's (seed 100).
  return [outputs](Device d) {
    return small_dense(d, 100 + 7 * static_cast<std::uint64_t>(d.index), outputs);
  };
}

std::unique_ptr<optim::Optimizer> sgd() { return std::make_unique<optim::SGD>(0.9); }

/// R = 3 replicas, 3 samples each, 2 of the 9 padding, 4 SGD-momentum steps (SGD, unlike Adam,
/// exposes a wrong averaging scale) against the plain reference.
void expect_matches_one_big_batch(LossKind loss) {
  SCOPED_TRACE(dist::loss_name(loss));
  constexpr std::int64_t kPer = 3, kPadding = 2;
  MirroredStrategy s(cpu_devices(0, 3), dense_factory(), sgd, options_for(loss));
  nn::Sequential reference = small_dense(Device::cpu(9), 100);
  auto opt = sgd();
  const std::int64_t global = kPer * s.world_replicas(), real = global - kPadding;
  const double lr = 0.2;
  for (int step = 0; step < 4; ++step) {
    const data::Batch g = target_batch(loss, step, global, real);
    auto batches = local_batches(g, s, kPer);
    const StepResult r = s.train_step(batches, lr);
    const ops::TargetLossResult want = reference_target_step(reference, *opt, g, loss, lr);
    EXPECT_NEAR(r.loss, want.loss, 1e-5 * std::max(1.0, want.loss)) << "step " << step;
    EXPECT_EQ(r.count, real);
    EXPECT_EQ(r.target_values, real * kTargets);
    EXPECT_EQ(want.target_values, real * kTargets);
    EXPECT_NEAR(r.squared_error_sum, want.squared_error_sum, 1e-5 * want.squared_error_sum);
    EXPECT_NEAR(r.abs_error_sum, want.abs_error_sum, 1e-5 * want.abs_error_sum);
    EXPECT_EQ(r.correct, want.correct);
    if (loss == LossKind::kMeanSquaredError) {
      EXPECT_EQ(r.correct, 0);
    }
    for (int i = 1; i < s.local_replicas(); ++i) {
      EXPECT_EQ(s.weights_fingerprint(i), s.weights_fingerprint(0)) << "step " << step;
    }
  }
  EXPECT_LE(max_relative_difference(s.model(0), reference), 1e-5);
  // The weights moved: the comparison is not between initial weights.
  nn::Sequential initial = small_dense(Device::cpu(9), 100);
  EXPECT_GT(max_relative_difference(s.model(0), initial), 1e-3);
}

TEST(StrategyLoss, MeanSquaredErrorReplicasMatchOneBigBatch) {
  expect_matches_one_big_batch(LossKind::kMeanSquaredError);
}

TEST(StrategyLoss, BinaryCrossEntropyReplicasMatchOneBigBatch) {
  expect_matches_one_big_batch(LossKind::kBinaryCrossEntropy);
}

TEST(StrategyLoss, VectorTargetsTrainOneOutput) {
  MirroredStrategy s(cpu_devices(0, 2), dense_factory(1), sgd,
                     options_for(LossKind::kMeanSquaredError));
  nn::Sequential reference = small_dense(Device::cpu(9), 100, 1);
  auto opt = sgd();
  for (int step = 0; step < 3; ++step) {
    const data::Batch g = target_batch(LossKind::kMeanSquaredError, step, 6, 5, /*width=*/0);
    ASSERT_EQ(g.labels.rank(), 1);
    auto batches = local_batches(g, s, 3);
    const StepResult r = s.train_step(batches, 0.1);
    const auto want = reference_target_step(reference, *opt, g, LossKind::kMeanSquaredError, 0.1);
    EXPECT_NEAR(r.loss, want.loss, 1e-5 * std::max(1.0, want.loss));
    EXPECT_EQ(r.target_values, 5);
  }
  EXPECT_LE(max_relative_difference(s.model(0), reference), 1e-5);
}

TEST(StrategyLoss, EvaluateStepReportsTheMetricsWithoutTraining) {
  for (LossKind loss : {LossKind::kMeanSquaredError, LossKind::kBinaryCrossEntropy}) {
    SCOPED_TRACE(dist::loss_name(loss));
    MirroredStrategy s(cpu_devices(0, 2), dense_factory(), sgd, options_for(loss));
    nn::Sequential reference = small_dense(Device::cpu(9), 100);
    const std::uint64_t before = s.weights_fingerprint();
    const data::Batch g = target_batch(loss, 5, 8, 7);
    auto batches = local_batches(g, s, 4);
    const StepResult r = s.evaluate_step(batches);
    EXPECT_EQ(s.weights_fingerprint(), before);
    nn::ForwardContext ctx;
    const data::Batch b = shard(g, 0, 8, reference.device());
    const Tensor logits = reference.forward(b.inputs, ctx);
    const auto want = ops::target_loss(op_kind(loss), logits, b.labels, b.weights, 7);
    EXPECT_NEAR(r.loss, want.loss, 1e-6 * std::max(1.0, want.loss));
    EXPECT_NEAR(r.loss_sum, want.loss * 7, 1e-5 * std::max(1.0, want.loss * 7));
    EXPECT_EQ(r.count, 7);
    EXPECT_EQ(r.target_values, 7 * kTargets);
    EXPECT_NEAR(r.squared_error_sum, want.squared_error_sum, 1e-5 * want.squared_error_sum);
    EXPECT_NEAR(r.abs_error_sum, want.abs_error_sum, 1e-5 * want.abs_error_sum);
    EXPECT_EQ(r.correct, want.correct);
  }
}

TEST(StrategyLoss, ParseLossAcceptsNamesAndAliases) {
  for (LossKind k : {LossKind::kSoftmaxCrossEntropy, LossKind::kBinaryCrossEntropy,
                     LossKind::kMeanSquaredError}) {
    EXPECT_EQ(dist::parse_loss(dist::loss_name(k)), k);
  }
  EXPECT_STREQ(dist::loss_name(LossKind::kMeanSquaredError), "mse");
  EXPECT_EQ(dist::parse_loss("cross-entropy"), LossKind::kSoftmaxCrossEntropy);
  EXPECT_EQ(dist::parse_loss("bce"), LossKind::kBinaryCrossEntropy);
  EXPECT_EQ(dist::parse_loss("mean-squared-error"), LossKind::kMeanSquaredError);
  try {
    dist::parse_loss("hinge");
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("'hinge'"));
    for (const char* choice : {"softmax-cross-entropy", "binary-cross-entropy", "mse"}) {
      EXPECT_THAT(e.what(), HasSubstr(choice));
    }
  }
}

/// The batch with int32 class labels in place of its float targets.
data::Batch with_class_labels(data::Batch b) {
  b.labels = Tensor::from_vector(std::vector<std::int32_t>(static_cast<std::size_t>(b.size()), 1),
                                 {b.size()});
  return b;
}

void expect_step_fails(LossKind loss, int outputs, const data::Batch& g,
                       const std::vector<std::string>& needles) {
  SCOPED_TRACE(dist::loss_name(loss));
  MirroredStrategy s(cpu_devices(0, 2), dense_factory(outputs), sgd, options_for(loss));
  for (bool train : {true, false}) {
    auto batches = local_batches(g, s, g.size() / 2);
    try {
      if (train) {
        s.train_step(batches, 0.1);
      } else {
        s.evaluate_step(batches);
      }
      FAIL() << "expected InvalidArgument";
    } catch (const InvalidArgument& e) {
      EXPECT_THAT(e.what(), HasSubstr(train ? "train_step" : "evaluate_step"));
      EXPECT_THAT(e.what(), HasSubstr(std::string("loss ") + dist::loss_name(loss)));
      for (const auto& n : needles) EXPECT_THAT(e.what(), HasSubstr(n));
    }
  }
  EXPECT_EQ(s.steps(), 0);
  // Nothing was left half done: a well-formed step runs afterwards.
  if (loss != LossKind::kSoftmaxCrossEntropy && outputs == kTargets) {
    auto good = local_batches(target_batch(loss, 0, 4, 4), s, 2);
    EXPECT_NO_THROW(s.train_step(good, 0.1));
  }
}

TEST(StrategyLoss, MismatchedLossDataOrModelFailsTheFirstStep) {
  const data::Batch floats = target_batch(LossKind::kMeanSquaredError, 0, 4, 4);
  const data::Batch classes = with_class_labels(floats);
  // Class labels with a float-target loss.
  expect_step_fails(LossKind::kMeanSquaredError, kTargets, classes,
                    {"output is [3]", "int32 [2]", "float targets", "softmax-cross-entropy"});
  expect_step_fails(LossKind::kBinaryCrossEntropy, kTargets, classes,
                    {"output is [3]", "int32 [2]"});
  // Float targets with softmax cross-entropy.
  expect_step_fails(LossKind::kSoftmaxCrossEntropy, kTargets, floats,
                    {"output is [3]", "float32 [2,3]", "class labels"});
  // Output width 2 against 3 target elements per sample.
  expect_step_fails(LossKind::kBinaryCrossEntropy, 2, floats,
                    {"output is [2]", "float32 [2,3]", "3 per sample"});
  expect_step_fails(LossKind::kMeanSquaredError, 2,
                    target_batch(LossKind::kMeanSquaredError, 0, 4, 4, /*width=*/0),
                    {"output is [2]", "float32 [2]"});
}

}  // namespace
}  // namespace mirror::testing
