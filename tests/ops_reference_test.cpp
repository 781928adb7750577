// The float32 CPU path (oneDNN GEMM and convolution primitives) against the float64 reference
// loops on seeded random inputs, and central finite differences (float64) through the ops layer
// for convolution (stride 2, same and valid padding) and max pooling.
//
// Tolerances: inputs are U(-1, 1); each float32 output is a sum of at most a few hundred
// products, so its rounding error is far below 1e-4 absolute; we assert
// |f32 - f64| <= 1e-4 + 1e-4 * |f64| (GEMM, convolution forward / backward-data /
// backward-weights, bias). Finite differences in float64 with eps = 1e-6 on functions that are
// linear (convolution) or piecewise linear with well-separated inputs (pooling) are accurate to
// ~1e-9; we assert 1e-7 absolute.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "mirror/ops.h"
#include "ops_test_util.h"

namespace mirror {
namespace {

using ops_test::expect_close;
using ops_test::f32;
using ops_test::f64;
using ops_test::random;
using ops_test::values;

constexpr double kAtol = 1e-4, kRtol = 1e-4;

// ---------------------------------------------------------------- gemm

TEST(OpsReference, GemmFloat32MatchesFloat64) {
  std::uint64_t seed = 100;
  for (auto [m, n, k] : {std::tuple{1, 1, 1}, {7, 5, 3}, {33, 17, 65}, {64, 128, 96}}) {
    for (int ta = 0; ta < 2; ++ta) {
      for (int tb = 0; tb < 2; ++tb) {
        const Tensor a = random(ta ? Shape{k, m} : Shape{m, k}, ++seed);
        const Tensor b = random(tb ? Shape{n, k} : Shape{k, n}, ++seed);
        const Tensor c0 = random({m, n}, ++seed);
        Tensor c64 = c0.clone(), c32 = f32(c0);
        ops::gemm(ta, tb, 1.5, a, b, -0.5, c64);
        ops::gemm(ta, tb, 1.5, f32(a), f32(b), -0.5, c32);
        expect_close(c32, c64, kAtol, kRtol,
                     "gemm " + std::to_string(m) + "x" + std::to_string(n) + "x" +
                         std::to_string(k) + " ta=" + std::to_string(ta) +
                         " tb=" + std::to_string(tb));
      }
    }
  }
}

TEST(OpsReference, GemmOnViewsReadsTheViewedRows) {
  // Callers (GRU steps, buckets) pass views with an offset into a larger storage.
  const Tensor big = random({10, 4}, 7);
  const Tensor a = big.view(8, {2, 4});  // rows 2..3
  const Tensor b = random({4, 3}, 8);
  Tensor c = Tensor::zeros({2, 3}, DType::kFloat64), c32 = Tensor::zeros({2, 3});
  ops::gemm(false, false, 1.0, a, b, 0.0, c);
  ops::gemm(false, false, 1.0, f32(big).view(8, {2, 4}), f32(b), 0.0, c32);
  const auto av = values(big), bv = values(b), cv = values(c);
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 3; ++j) {
      double s = 0;
      for (int p = 0; p < 4; ++p) s += av[(2 + i) * 4 + p] * bv[p * 3 + j];
      EXPECT_NEAR(cv[i * 3 + j], s, 1e-14);
    }
  }
  expect_close(c32, c, kAtol, kRtol, "gemm on a view");
}

// ---------------------------------------------------------------- convolution

struct ConvCase {
  const char* name;
  Shape x, w;
  ops::Conv2DGeometry g;
};

std::vector<ConvCase> conv_cases() {
  ops::Conv2DGeometry odd;  // explicit asymmetric padding, different strides per axis
  odd.stride_h = 2;
  odd.stride_w = 1;
  odd.pad_top = 2;
  odd.pad_bottom = 0;
  odd.pad_left = 0;
  odd.pad_right = 1;
  return {
      {"3x3_same_s1", {2, 3, 9, 7}, {4, 3, 3, 3}, ops::Conv2DGeometry::same(9, 7, 3, 3, 1, 1)},
      {"3x3_same_s2", {2, 3, 9, 8}, {5, 3, 3, 3}, ops::Conv2DGeometry::same(9, 8, 3, 3, 2, 2)},
      {"4x4_same_s2_asym", {1, 2, 7, 7}, {3, 2, 4, 4}, ops::Conv2DGeometry::same(7, 7, 4, 4, 2, 2)},
      {"3x3_valid_s2", {3, 2, 11, 9}, {4, 2, 3, 3}, ops::Conv2DGeometry::valid(2, 2)},
      {"5x5_same_s1", {2, 1, 12, 12}, {8, 1, 5, 5}, ops::Conv2DGeometry::same(12, 12, 5, 5, 1, 1)},
      {"1x1", {2, 6, 5, 5}, {3, 6, 1, 1}, ops::Conv2DGeometry::valid(1, 1)},
      // Note [Strided 1x1 gradients] (cpu_conv.cpp): a ResNet-style strided shortcut on an image
      // large enough for oneDNN 2.6's AVX-512 jit_1x1 gradients to corrupt memory.
      {"1x1_s2_shortcut",
       {16, 8, 64, 64},
       {8, 8, 1, 1},
       ops::Conv2DGeometry::same(64, 64, 1, 1, 2, 2)},
      {"explicit_asym", {2, 3, 8, 6}, {2, 3, 3, 2}, odd},
      {"mnist_like",
       {8, 16, 14, 14},
       {32, 16, 3, 3},
       ops::Conv2DGeometry::same(14, 14, 3, 3, 1, 1)},
  };
}

class OpsReferenceConv : public ::testing::TestWithParam<ConvCase> {};

TEST_P(OpsReferenceConv, OneDnnFloat32MatchesFloat64Loops) {
  const ConvCase& cc = GetParam();
  const auto& g = cc.g;
  const Tensor x = random(cc.x, 1), w = random(cc.w, 2), b = random({cc.w[0]}, 3);
  const Tensor y64 = ops::conv2d_forward(x, w, b, g);
  const Tensor y32 = ops::conv2d_forward(f32(x), f32(w), f32(b), g);
  ASSERT_EQ(y32.dtype(), DType::kFloat32);
  expect_close(y32, y64, kAtol, kRtol, std::string(cc.name) + " forward");
  expect_close(ops::conv2d_forward(f32(x), f32(w), Tensor(), g),
               ops::conv2d_forward(x, w, Tensor(), g), kAtol, kRtol,
               std::string(cc.name) + " forward without bias");

  const Tensor dy = random(y64.shape(), 4);
  expect_close(ops::conv2d_backward_data(f32(dy), f32(w), cc.x, g),
               ops::conv2d_backward_data(dy, w, cc.x, g), kAtol, kRtol,
               std::string(cc.name) + " backward data");

  // Accumulation: start both from the same non-zero gradients.
  const Tensor dw0 = random(cc.w, 5), db0 = random({cc.w[0]}, 6);
  Tensor dw64 = dw0.clone(), db64 = db0.clone(), dw32 = f32(dw0), db32 = f32(db0);
  ops::conv2d_backward_weights(x, dy, dw64, db64, g);
  ops::conv2d_backward_weights(f32(x), f32(dy), dw32, db32, g);
  expect_close(dw32, dw64, kAtol, kRtol, std::string(cc.name) + " backward weights");
  expect_close(db32, db64, kAtol, kRtol, std::string(cc.name) + " backward bias");
}

INSTANTIATE_TEST_SUITE_P(Shapes, OpsReferenceConv, ::testing::ValuesIn(conv_cases()),
                         [](const auto& info) { return std::string(info.param.name); });

/// sum(conv(x, w, b) * r): its gradients are backward_data(r), backward_weights(x, r).
void conv_gradcheck(const Shape& xs, const Shape& ws, const ops::Conv2DGeometry& g) {
  Tensor x = random(xs, 11), w = random(ws, 12), b = random({ws[0]}, 13);
  const Tensor r = random(ops::conv2d_forward(x, w, b, g).shape(), 14);
  auto loss = [&] { return ops_test::dot(ops::conv2d_forward(x, w, b, g), r); };
  const Tensor dx = ops::conv2d_backward_data(r, w, xs, g);
  Tensor dw = Tensor::zeros(ws, DType::kFloat64), db = Tensor::zeros({ws[0]}, DType::kFloat64);
  ops::conv2d_backward_weights(x, r, dw, db, g);
  expect_close(values(dx), ops_test::numeric_gradient(x, loss), 1e-7, 0, "dx");
  expect_close(values(dw), ops_test::numeric_gradient(w, loss), 1e-7, 0, "dw");
  expect_close(values(db), ops_test::numeric_gradient(b, loss), 1e-7, 0, "db");
}

TEST(OpsReference, ConvFiniteDifferencesStride2SamePadding) {
  conv_gradcheck({2, 2, 7, 6}, {3, 2, 3, 3}, ops::Conv2DGeometry::same(7, 6, 3, 3, 2, 2));
  conv_gradcheck({1, 2, 6, 6}, {2, 2, 4, 4}, ops::Conv2DGeometry::same(6, 6, 4, 4, 2, 2));
}

TEST(OpsReference, ConvFiniteDifferencesStride2ValidPadding) {
  conv_gradcheck({2, 2, 7, 8}, {3, 2, 3, 3}, ops::Conv2DGeometry::valid(2, 2));
}

// ---------------------------------------------------------------- pooling

/// Distinct values spaced 0.01 apart in random order: no ties, and a +-1e-6 nudge never changes
/// which element is the maximum, so pooling is linear around the point.
Tensor shuffled_distinct(const Shape& shape, std::uint64_t seed, double offset) {
  std::vector<double> v(static_cast<std::size_t>(shape_numel(shape)));
  std::iota(v.begin(), v.end(), 0.0);
  std::shuffle(v.begin(), v.end(), std::mt19937_64(seed));
  for (double& e : v) e = e * 0.01 + offset;
  return Tensor::from_vector(v, shape);
}

TEST(OpsReference, MaxPoolFiniteDifferences) {
  std::vector<ops::Pool2DGeometry> geos(3);
  geos[1].k_h = geos[1].k_w = 3;  // overlapping windows with asymmetric padding
  geos[1].pad_top = geos[1].pad_left = 1;
  geos[2].k_h = 3;  // non-square window and stride
  geos[2].stride_h = 1;
  geos[2].pad_bottom = 2;
  for (const auto& g : geos) {
    // All-negative inputs: a padded zero would win (and take the gradient) if padding counted.
    Tensor x = shuffled_distinct({2, 2, 7, 6}, 21, -10.0);
    const Tensor r = random(ops::maxpool2d_forward(x, g).shape(), 22);
    auto loss = [&] { return ops_test::dot(ops::maxpool2d_forward(x, g), r); };
    const Tensor y = ops::maxpool2d_forward(x, g);
    const Tensor dx = ops::maxpool2d_backward(x, y, r, g);
    expect_close(values(dx), ops_test::numeric_gradient(x, loss), 1e-7, 0,
                 "maxpool k" + std::to_string(g.k_h) + "x" + std::to_string(g.k_w));
    // The float32 path runs the same loops: identical up to the rounding of the inputs.
    expect_close(ops::maxpool2d_backward(f32(x), f32(y), f32(r), g), dx, 1e-6, 1e-6, "f32 pool");
  }
}

// ---------------------------------------------------------------- dense / loss

TEST(OpsReference, BiasGradAndLossFloat32MatchFloat64) {
  const Tensor dy = random({16, 10, 5, 5}, 31);
  Tensor db64 = Tensor::zeros({10}, DType::kFloat64), db32 = Tensor::zeros({10});
  ops::bias_grad(dy, db64);
  ops::bias_grad(f32(dy), db32);
  expect_close(db32, db64, kAtol, kRtol, "bias_grad");

  const Tensor logits = random({32, 10}, 32, DType::kFloat64, -5, 5);
  std::vector<std::int32_t> lab(32);
  for (int i = 0; i < 32; ++i) lab[static_cast<std::size_t>(i)] = (i * 7) % 10;
  const Tensor labels = Tensor::from_vector(lab, {32});
  const Tensor w = random({32}, 33, DType::kFloat64, 0, 1);
  const auto r64 = ops::softmax_cross_entropy(logits, labels, w, 40);
  const auto r32 = ops::softmax_cross_entropy(f32(logits), labels, f32(w), 40);
  EXPECT_NEAR(r32.loss, r64.loss, 1e-6 * std::abs(r64.loss));
  expect_close(r32.dlogits, r64.dlogits, 1e-7, 1e-5, "dlogits");
  // The loss gradient agrees with finite differences in float64.
  Tensor lg = logits.clone();
  const auto fd = ops_test::numeric_gradient(
      lg, [&] { return ops::softmax_cross_entropy(lg, labels, w, 40).loss; });
  expect_close(values(r64.dlogits), fd, 1e-8, 0, "dlogits vs finite differences");
}

}  // namespace
}  // namespace mirror
