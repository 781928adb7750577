// Closed-form tests of the CPU loss, metric, embedding and optimizer ops: hand-computed loss
// and gradient, zero weights, label/id errors naming the bad value, the padding row, and SGD /
// Adam / AdamW against PyTorch's update formulas run as recurrences in double in the test.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "mirror/ops.h"
#include "ops_test_util.h"

namespace mirror {
namespace {

using ops_test::values;
using ::testing::HasSubstr;

class OpsLossTyped : public ops_test::DTypeTest {};

Tensor labels(const std::vector<std::int32_t>& v) {
  return Tensor::from_vector(v, {static_cast<std::int64_t>(v.size())});
}

// ---------------------------------------------------------------- softmax cross-entropy

TEST_P(OpsLossTyped, SoftmaxCrossEntropyByHand) {
  const Tensor logits = make({1, 2, 3, 1, 1, 1}, {2, 3});
  const double z = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  const double nll0 = std::log(z) - 3, nll1 = std::log(3.0);
  // global_count 4: this replica holds 2 of the step's 4 samples.
  const ops::LossResult r =
      ops::softmax_cross_entropy(logits, labels({2, 0}), make({1, 1}, {2}), 4);
  EXPECT_NEAR(r.loss, (nll0 + nll1) / 4, tol());
  const std::vector<double> want = {
      std::exp(1.0) / z / 4, std::exp(2.0) / z / 4, (std::exp(3.0) / z - 1) / 4,
      (1.0 / 3 - 1) / 4,     1.0 / 3 / 4,           1.0 / 3 / 4};
  ops_test::expect_close(values(r.dlogits), want, tol(), 0, "dlogits");
}

TEST_P(OpsLossTyped, ZeroWeightsContributeNothing) {
  const Tensor logits = make({1, 2, 3, 5, -1, 0}, {2, 3});
  const ops::LossResult r =
      ops::softmax_cross_entropy(logits, labels({2, 1}), make({0.5, 0}, {2}), 1);
  const double z = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  EXPECT_NEAR(r.loss, 0.5 * (std::log(z) - 3), tol());
  const auto d = values(r.dlogits);
  EXPECT_NEAR(d[0], 0.5 * std::exp(1.0) / z, tol());
  EXPECT_EQ(d[3], 0.0);
  EXPECT_EQ(d[4], 0.0);
  EXPECT_EQ(d[5], 0.0);
}

TEST_P(OpsLossTyped, LargeLogitsDoNotOverflow) {
  const ops::LossResult r = ops::softmax_cross_entropy(make({1000, 0, -1000, 1000}, {2, 2}),
                                                       labels({1, 1}), make({1, 1}, {2}), 2);
  EXPECT_NEAR(r.loss, 1000.0 / 2, 1e-9);  // row 0: nll = 1000; row 1: nll = ~e^-2000
  EXPECT_TRUE(ops::all_finite(r.dlogits));
}

TEST(OpsLoss, LabelOutOfRangeNamesSampleLabelAndClasses) {
  const Tensor logits = Tensor::zeros({3, 4});
  const Tensor w = Tensor::from_vector(std::vector<float>{1, 1, 1}, {3});
  for (std::int32_t bad : {4, -1}) {
    try {
      ops::softmax_cross_entropy(logits, labels({0, bad, 2}), w, 3);
      FAIL() << "expected InvalidArgument for label " << bad;
    } catch (const InvalidArgument& e) {
      EXPECT_THAT(e.what(), HasSubstr("label " + std::to_string(bad) + " of sample 1"));
      EXPECT_THAT(e.what(), HasSubstr("[0, 4)"));
    }
  }
}

TEST_P(OpsLossTyped, CorrectCountUsesFirstMaxAndSkipsZeroWeights) {
  // Row 0: argmax 2 (label 2, correct). Row 1: tie between 0 and 1 -> 0 (label 1: wrong).
  // Row 2: correct but weight 0. Row 3: correct.
  const Tensor logits = make({0, 1, 5, 3, 3, 1, 9, 0, 0, 0, 0, 2}, {4, 3});
  EXPECT_EQ(ops::correct_count(logits, labels({2, 1, 0, 2}), make({1, 1, 0, 1}, {4})), 2);
  EXPECT_EQ(ops::correct_count(logits, labels({2, 0, 0, 2}), make({1, 1, 1, 1}, {4})), 4);
}

// ---------------------------------------------------------------- embedding

TEST_P(OpsLossTyped, EmbeddingLookupAndPaddingRow) {
  const Tensor table = make({0, 0, 1, 2, 3, 4, 5, 6}, {4, 2});  // row 0 is padding (zeros)
  const Tensor id = Tensor::from_vector(std::vector<std::int32_t>{1, 0, 3, 3, 3, 0}, {2, 3});
  const Tensor y = ops::embedding_forward(id, table);
  ASSERT_EQ(y.shape(), (Shape{2, 3, 2}));
  EXPECT_EQ(values(y), (std::vector<double>{1, 2, 0, 0, 5, 6, 5, 6, 5, 6, 0, 0}));

  Tensor dtable = make({9, 9, 0, 0, 0, 0, 1, 1}, {4, 2});
  std::vector<double> g(12);
  for (int i = 0; i < 12; ++i) g[static_cast<std::size_t>(i)] = i;
  const Tensor dy = make(g, {2, 3, 2});
  ops::embedding_backward(id, dy, dtable);
  // Row 0 (padding) untouched; row 1 gets position 0; row 3 gets positions 2, 3, 4; row 2 none.
  EXPECT_EQ(values(dtable), (std::vector<double>{9, 9, 0, 1, 0, 0, 1 + 4 + 6 + 8, 1 + 5 + 7 + 9}));
  ops::embedding_backward(id, dy, dtable);  // accumulates
  EXPECT_EQ(values(dtable), (std::vector<double>{9, 9, 0, 2, 0, 0, 37, 43}));
}

TEST(OpsLoss, EmbeddingIdOutOfRangeNamesIdAndVocabulary) {
  const Tensor table = Tensor::zeros({5, 3});
  for (std::int32_t bad : {5, -2}) {
    const Tensor id = Tensor::from_vector(std::vector<std::int32_t>{1, 2, bad, 0}, {2, 2});
    try {
      ops::embedding_forward(id, table);
      FAIL() << "expected InvalidArgument for id " << bad;
    } catch (const InvalidArgument& e) {
      EXPECT_THAT(e.what(), HasSubstr("token id " + std::to_string(bad)));
      EXPECT_THAT(e.what(), HasSubstr("[0, 5)"));
      EXPECT_THAT(e.what(), HasSubstr("sample 1, step 0"));
    }
    Tensor dtable = Tensor::zeros({5, 3});
    EXPECT_THROW(ops::embedding_backward(id, Tensor::zeros({2, 2, 3}), dtable), InvalidArgument);
  }
}

// ---------------------------------------------------------------- optimizers

struct Recurrence {  // one element's state, advanced with PyTorch's formulas in double
  double p, buf = 0, m = 0, v = 0;
};

TEST_P(OpsLossTyped, SgdMomentumNesterovWeightDecayOverSteps) {
  const std::vector<double> p0 = {1.0, -0.5, 2.0};
  const std::vector<std::vector<double>> grads = {
      {0.1, 0.2, -0.3}, {0.0, -0.4, 0.5}, {1.0, 1.0, 1.0}};
  for (bool nesterov : {false, true}) {
    Tensor p = make(p0, {3}), buf = make({0, 0, 0}, {3});
    std::vector<Recurrence> ref;
    for (double x : p0) ref.push_back({x});
    for (const auto& g : grads) {
      ops::sgd_update(p, make(g, {3}), buf, 0.05, 0.9, nesterov, 1e-2);
      for (std::size_t i = 0; i < 3; ++i) {
        Recurrence& r = ref[i];
        const double d = g[i] + 1e-2 * r.p;  // L2 weight decay folded into the gradient
        r.buf = 0.9 * r.buf + d;             // dampening 0; the first step gives buf = d
        r.p -= 0.05 * (nesterov ? d + 0.9 * r.buf : r.buf);
      }
    }
    std::vector<double> want_p, want_buf;
    for (const auto& r : ref) {
      want_p.push_back(r.p);
      want_buf.push_back(r.buf);
    }
    ops_test::expect_close(values(p), want_p, tol(), tol(), "sgd param");
    ops_test::expect_close(values(buf), want_buf, tol(), tol(), "sgd momentum");
  }
  // momentum 0 needs no buffer
  Tensor p = make({1.0}, {1}), none;
  ops::sgd_update(p, make({2.0}, {1}), none, 0.25, 0, false, 0);
  EXPECT_EQ(values(p), std::vector<double>{0.5});
}

TEST_P(OpsLossTyped, AdamAndAdamWOverSteps) {
  const double lr = 0.01, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.1;
  const std::vector<double> p0 = {0.5, -1.0, 0.0};
  const std::vector<std::vector<double>> grads = {
      {0.3, -0.2, 0.0}, {0.1, 0.4, -1.0}, {-0.5, 0.0, 2.0}, {0.2, 0.2, 0.2}};
  for (bool decoupled : {false, true}) {
    Tensor p = make(p0, {3}), m = make({0, 0, 0}, {3}), v = make({0, 0, 0}, {3});
    std::vector<Recurrence> ref;
    for (double x : p0) ref.push_back({x});
    std::int64_t step = 0;
    for (const auto& g : grads) {
      ++step;
      ops::adam_update(p, make(g, {3}), m, v, lr, b1, b2, eps, wd, decoupled, step);
      const double bc1 = 1 - std::pow(b1, step), bc2 = 1 - std::pow(b2, step);
      for (std::size_t i = 0; i < 3; ++i) {
        Recurrence& r = ref[i];
        double gi = g[i];
        if (decoupled)
          r.p *= 1 - lr * wd;  // AdamW
        else
          gi += wd * r.p;  // Adam's L2
        r.m = b1 * r.m + (1 - b1) * gi;
        r.v = b2 * r.v + (1 - b2) * gi * gi;
        r.p -= lr / bc1 * r.m / (std::sqrt(r.v) / std::sqrt(bc2) + eps);
      }
    }
    std::vector<double> want_p, want_m, want_v;
    for (const auto& r : ref) {
      want_p.push_back(r.p);
      want_m.push_back(r.m);
      want_v.push_back(r.v);
    }
    const std::string what = decoupled ? "adamw " : "adam ";
    ops_test::expect_close(values(p), want_p, tol(), tol(), what + "param");
    ops_test::expect_close(values(m), want_m, tol(), tol(), what + "m");
    ops_test::expect_close(values(v), want_v, tol(), tol(), what + "v");
  }
}

TEST(OpsLoss, OptimizerStateDtypeMismatchIsAnError) {
  Tensor p = Tensor::zeros({2}), g = Tensor::zeros({2}), m = Tensor::zeros({2}, DType::kFloat64);
  Tensor v = Tensor::zeros({2});
  EXPECT_THROW(ops::adam_update(p, g, m, v, 1e-3, 0.9, 0.999, 1e-8, 0, false, 1), InvalidArgument);
  EXPECT_THROW(ops::sgd_update(p, g, m, 0.1, 0.9, false, 0), InvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, OpsLossTyped, ::testing::Values(DType::kFloat32, DType::kFloat64),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace mirror
