// The float-target losses on the CPU: binary cross-entropy with logits and mean squared error
// against hand-computed closed forms (weights, padding rows, the global count, [N] targets),
// their metric sums, extreme logits (|x| = 100) staying finite and exact, central-difference
// gradient checks in float64, and the shape/dtype errors naming both shapes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "gradcheck.h"
#include "mirror/ops.h"
#include "ops_test_util.h"

namespace mirror {
namespace {

using ops_test::values;
using ::testing::HasSubstr;

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
// The textbook form: fine for the moderate logits of the closed-form tests.
double bce(double x, double t) {
  return -(t * std::log(sigmoid(x)) + (1 - t) * std::log1p(-sigmoid(x)));
}

class OpsTargetLossTyped : public ops_test::DTypeTest {};

TEST_P(OpsTargetLossTyped, MeanSquaredErrorByHand) {
  // Two real rows (weights 1 and 0.5), one padding row; 5 real samples in the global batch.
  const Tensor x = make({1, 2, 0, -1, 7, 7}, {3, 2});
  const Tensor t = make({0, 2, 1, 1, 0, 0}, {3, 2});
  const ops::TargetLossResult r = ops::mean_squared_error(x, t, make({1, 0.5, 0}, {3}), 5);
  const double row0 = (1 + 0) / 2.0, row1 = (1 + 4) / 2.0;  // mean over each row's 2 elements
  EXPECT_NEAR(r.loss, (1 * row0 + 0.5 * row1) / 5, tol());
  // d/dx = w * 2 (x - t) / K / global_count; the padding row gets zeros.
  const std::vector<double> want = {1 * 2 * 1 / 2.0 / 5,    0, 0.5 * 2 * -1 / 2.0 / 5,
                                    0.5 * 2 * -2 / 2.0 / 5, 0, 0};
  ops_test::expect_close(values(r.dlogits), want, tol(), 0, "dlogits");
  // Metrics: unweighted, over the real rows' 4 elements; MSE has no accuracy.
  EXPECT_NEAR(r.squared_error_sum, 1 + 0 + 1 + 4, tol());
  EXPECT_NEAR(r.abs_error_sum, 1 + 0 + 1 + 2, tol());
  EXPECT_EQ(r.target_values, 4);
  EXPECT_EQ(r.correct, 0);
}

TEST_P(OpsTargetLossTyped, BinaryCrossEntropyByHand) {
  const Tensor x = make({2, -1, 0.5, 0, 3, -3}, {3, 2});
  const Tensor t = make({1, 0, 0.25, 1, 1, 1}, {3, 2});
  const ops::TargetLossResult r = ops::binary_cross_entropy(x, t, make({2, 1, 0}, {3}), 4);
  const double row0 = (bce(2, 1) + bce(-1, 0)) / 2, row1 = (bce(0.5, 0.25) + bce(0, 1)) / 2;
  EXPECT_NEAR(r.loss, (2 * row0 + 1 * row1) / 4, tol());
  const std::vector<double> want = {2 * (sigmoid(2) - 1) / 2 / 4,
                                    2 * sigmoid(-1) / 2 / 4,
                                    1 * (sigmoid(0.5) - 0.25) / 2 / 4,
                                    1 * (0.5 - 1) / 2 / 4,
                                    0,
                                    0};
  ops_test::expect_close(values(r.dlogits), want, tol(), 0, "dlogits");
  // Correct elements: (x > 0) == (t > 0.5): x=2/t=1 yes, x=-1/t=0 yes, x=0.5/t=0.25 no, x=0/t=1
  // no (0 is not positive); the padding row's two matches do not count.
  EXPECT_EQ(r.correct, 2);
  EXPECT_EQ(r.target_values, 4);
  const double e[] = {sigmoid(2) - 1, sigmoid(-1), sigmoid(0.5) - 0.25, 0.5 - 1};
  EXPECT_NEAR(r.squared_error_sum, e[0] * e[0] + e[1] * e[1] + e[2] * e[2] + e[3] * e[3], tol());
  EXPECT_NEAR(r.abs_error_sum, -e[0] + e[1] + e[2] - e[3], tol());
}

TEST_P(OpsTargetLossTyped, VectorTargetsForOneOutput) {
  const Tensor x = make({1, 3}, {2, 1});
  const ops::TargetLossResult r =
      ops::mean_squared_error(x, make({0, 1}, {2}), make({1, 1}, {2}), 2);
  EXPECT_NEAR(r.loss, (1 + 4) / 2.0, tol());
  ops_test::expect_close(values(r.dlogits), {1.0, 2.0}, tol(), 0, "dlogits");
  const ops::TargetLossResult b = ops::target_loss(ops::TargetLoss::kBinaryCrossEntropy, x,
                                                   make({0, 1}, {2}), make({1, 1}, {2}), 2);
  EXPECT_NEAR(b.loss, (bce(1, 0) + bce(3, 1)) / 2, tol());
}

TEST_P(OpsTargetLossTyped, ExtremeLogitsStayFiniteAndExact) {
  // Confidently right and confidently wrong at |x| = 100: the naive -log(sigmoid(x)) would give
  // log(0) = -inf in float32 for the wrong ones.
  const Tensor x = make({100, -100, -100, 100}, {1, 4});
  const Tensor t = make({1, 0, 1, 0}, {1, 4});
  const ops::TargetLossResult r = ops::binary_cross_entropy(x, t, make({1}, {1}), 1);
  ASSERT_TRUE(std::isfinite(r.loss));
  ASSERT_TRUE(ops::all_finite(r.dlogits));
  EXPECT_NEAR(r.loss, (0 + 0 + 100 + 100) / 4.0, 1e-9);  // log1p(e^-100) ~ 4e-44
  ops_test::expect_close(values(r.dlogits), {0, 0, -0.25, 0.25}, 1e-7, 0, "dlogits");
  EXPECT_EQ(r.correct, 2);
  EXPECT_NEAR(r.squared_error_sum, 2, 1e-9);
  // At |x| = 1000 even double's exp overflows/underflows: only the stable form survives.
  const ops::TargetLossResult far = ops::binary_cross_entropy(
      make({1000, -1000}, {1, 2}), make({0, 0}, {1, 2}), make({1}, {1}), 1);
  EXPECT_NEAR(far.loss, 1000 / 2.0, 1e-9);
  ops_test::expect_close(values(far.dlogits), {0.5, 0}, 1e-7, 0, "dlogits at 1000");
  const ops::TargetLossResult m = ops::mean_squared_error(x, t, make({1}, {1}), 1);
  ASSERT_TRUE(std::isfinite(m.loss));
  EXPECT_NEAR(m.loss, (99 * 99 + 100 * 100 + 101 * 101 + 100 * 100) / 4.0, 1e-9 * m.loss);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, OpsTargetLossTyped,
                         ::testing::Values(DType::kFloat32, DType::kFloat64),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// ---------------------------------------------------------------- gradient checks (float64)

void check_gradient(ops::TargetLoss kind) {
  const Shape shape{5, 3};
  const Tensor x = testing::random_tensor(shape, 11, -3, 3);
  // BCE targets are probabilities (fractional ones included); MSE targets anything.
  const Tensor t = kind == ops::TargetLoss::kBinaryCrossEntropy
                       ? testing::random_tensor(shape, 12, 0, 1)
                       : testing::random_tensor(shape, 12, -2, 2);
  // Uneven weights and a padding row.
  const Tensor w = Tensor::from_vector(std::vector<double>{1, 0.5, 0, 2, 1}, {5});
  const ops::TargetLossResult r = ops::target_loss(kind, x, t, w, 7);
  const auto numeric =
      testing::numeric_gradient(x, [&] { return ops::target_loss(kind, x, t, w, 7).loss; });
  EXPECT_LE(testing::relative_error(r.dlogits.to_vector<double>(), numeric), 1e-7);
  // The padding row's gradient is exactly zero, and so is the numeric one.
  for (int j = 0; j < 3; ++j) EXPECT_EQ(r.dlogits.to_vector<double>()[6 + j], 0.0);
}

TEST(OpsTargetLoss, BinaryCrossEntropyGradientMatchesFiniteDifferences) {
  check_gradient(ops::TargetLoss::kBinaryCrossEntropy);
}

TEST(OpsTargetLoss, MeanSquaredErrorGradientMatchesFiniteDifferences) {
  check_gradient(ops::TargetLoss::kMeanSquaredError);
}

// ---------------------------------------------------------------- errors

TEST(OpsTargetLoss, ShapeMismatchNamesBothShapes) {
  const Tensor w = Tensor::from_vector(std::vector<float>{1, 1, 1, 1}, {4});
  for (const Shape& bad : {Shape{4, 2}, Shape{4}, Shape{3, 3}, Shape{4, 3, 1}}) {
    try {
      ops::binary_cross_entropy(Tensor::zeros({4, 3}), Tensor::zeros(bad), w, 4);
      FAIL() << "expected InvalidArgument for targets " << shape_str(bad);
    } catch (const InvalidArgument& e) {
      EXPECT_THAT(e.what(), HasSubstr("binary_cross_entropy"));
      EXPECT_THAT(e.what(), HasSubstr("targets " + shape_str(bad)));
      EXPECT_THAT(e.what(), HasSubstr("logits [4,3]"));
    }
  }
  try {
    ops::mean_squared_error(Tensor::zeros({4, 3}), Tensor::zeros({4, 3}, DType::kFloat64), w, 4);
    FAIL() << "expected InvalidArgument for float64 targets";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("mean_squared_error"));
    EXPECT_THAT(e.what(), HasSubstr("dtype"));
  }
  EXPECT_THROW(
      ops::mean_squared_error(Tensor::zeros({4, 3}), Tensor::zeros({4, 3}), Tensor::zeros({3}), 4),
      InvalidArgument);
  EXPECT_THROW(ops::mean_squared_error(Tensor::zeros({4, 3}), Tensor::zeros({4, 3}), w, 0),
               InvalidArgument);
}

}  // namespace
}  // namespace mirror
