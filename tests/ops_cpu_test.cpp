// Closed-form tests of the CPU backend through the ops layer, in float32 (oneDNN where it is
// used) and float64 (reference loops): values worked out by hand, tie and padding rules,
// accumulate semantics, dropout reproducibility, error messages.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <omp.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "cpu/cpu_dnnl.h"
#include "math/dropout.h"
#include "mirror/ops.h"
#include "ops_test_util.h"

namespace mirror {
namespace {

using ops_test::values;
using ::testing::HasSubstr;

class OpsCpuTyped : public ops_test::DTypeTest {};

std::vector<double> iota(int n, double start = 1) {
  std::vector<double> v(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = start + i;
  return v;
}

// ---------------------------------------------------------------- gemm

TEST_P(OpsCpuTyped, GemmAllTransposesAlphaBeta) {
  const std::vector<double> ab = {58, 64, 139, 154};  // [[1,2,3],[4,5,6]] @ [[7,8],[9,10],[11,12]]
  const Tensor a = make({1, 2, 3, 4, 5, 6}, {2, 3}), at = make({1, 4, 2, 5, 3, 6}, {3, 2});
  const Tensor b = make({7, 8, 9, 10, 11, 12}, {3, 2}), bt = make({7, 9, 11, 8, 10, 12}, {2, 3});
  for (int ta = 0; ta < 2; ++ta) {
    for (int tb = 0; tb < 2; ++tb) {
      Tensor c = make({1, 1, 1, 1}, {2, 2});
      ops::gemm(ta, tb, 2.0, ta ? at : a, tb ? bt : b, 0.5, c);
      std::vector<double> want;
      for (double v : ab) want.push_back(2 * v + 0.5);
      EXPECT_EQ(values(c), want) << "trans_a=" << ta << " trans_b=" << tb;
    }
  }
}

TEST_P(OpsCpuTyped, GemmBetaZeroIgnoresGarbageInC) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Tensor c = make({nan, nan, nan, nan}, {2, 2});
  ops::gemm(false, false, 1.0, make({1, 2, 3, 4, 5, 6}, {2, 3}), make(iota(6, 7), {3, 2}), 0.0, c);
  EXPECT_EQ(values(c), (std::vector<double>{58, 64, 139, 154}));
  // Every size class of the float32 kernels (small, gemv-like, blocked), every transpose, and
  // the bfloat16 matmul: C is written, never read (the CPU backend does not zero it first).
  struct Size {
    std::int64_t m, n, k;
  };
  // The bfloat16 matmul where this CPU (or ONEDNN_MAX_CPU_ISA) has it; reported below otherwise.
  const ops::MathSupport bf16 = ops::math_support(Device::cpu(), MathMode::kBFloat16);
  const bool bf16_too = dt() == DType::kFloat32 && bf16.missing.empty();
  for (const Size s : {Size{1, 1, 1}, Size{1, 513, 64}, Size{3, 17, 5}, Size{64, 100, 300},
                       Size{513, 64, 1024}}) {
    for (int mode = 0; mode < (bf16_too ? 2 : 1); ++mode) {
      const ScopedMathMode scoped(mode ? MathMode::kBFloat16 : MathMode::kFloat32);
      for (int ta = 0; ta < 2; ++ta) {
        for (int tb = 0; tb < 2; ++tb) {
          const Tensor a = make(std::vector<double>(s.m * s.k, 0.5), ta ? Shape{s.k, s.m}
                                                                        : Shape{s.m, s.k});
          const Tensor b = make(std::vector<double>(s.k * s.n, 0.25), tb ? Shape{s.n, s.k}
                                                                         : Shape{s.k, s.n});
          Tensor g = make(std::vector<double>(s.m * s.n, nan), {s.m, s.n});
          ops::gemm(ta, tb, 1.0, a, b, 0.0, g);
          const std::vector<double> got = values(g);
          ASSERT_EQ(got, std::vector<double>(got.size(), 0.125 * static_cast<double>(s.k)))
              << s.m << "x" << s.n << "x" << s.k << " ta=" << ta << " tb=" << tb
              << " bf16=" << mode;
          // alpha and beta on the same shapes (the largest N,T one runs oneDNN's matmul
          // primitive, Note [Large float32 products]).
          Tensor h = make(std::vector<double>(s.m * s.n, 1.0), {s.m, s.n});
          ops::gemm(ta, tb, 2.0, a, b, 0.5, h);
          const std::vector<double> scaled = values(h);
          ASSERT_EQ(scaled,
                    std::vector<double>(scaled.size(), 0.25 * static_cast<double>(s.k) + 0.5))
              << s.m << "x" << s.n << "x" << s.k << " ta=" << ta << " tb=" << tb
              << " bf16=" << mode;
        }
      }
    }
  }
  if (dt() == DType::kFloat32 && !bf16_too) {
    GTEST_SKIP() << "float32 passed; the bfloat16 matmul was not run: " << bf16.missing;
  }
}

TEST_P(OpsCpuTyped, BiasAddAndAccumulatedBiasGrad) {
  Tensor y = make(iota(12, 0), {2, 3, 2});  // [N=2, C=3, 2]
  ops::bias_add(y, make({10, 20, 30}, {3}));
  EXPECT_EQ(values(y), (std::vector<double>{10, 11, 22, 23, 34, 35, 16, 17, 28, 29, 40, 41}));
  Tensor db = make({1, 1, 1}, {3});
  const Tensor dy = make(iota(12, 0), {2, 3, 2});
  ops::bias_grad(dy, db);  // channel c sums dy[n, c, :] over n: 0+1+6+7, 2+3+8+9, 4+5+10+11
  EXPECT_EQ(values(db), (std::vector<double>{15, 23, 31}));
  ops::bias_grad(dy, db);
  EXPECT_EQ(values(db), (std::vector<double>{29, 45, 61}));
}

TEST_P(OpsCpuTyped, DenseBiasLoopsRunAlongTheChannelsWithTheSameSums) {
  // A dense layer's [N, C] output (inner 1) takes the loops along the channels; each channel's
  // gradient is still the rows' sum in double, in row order, added to dbias in T. 600 channels:
  // more than one span of the channel loop, and not a multiple of it.
  const std::int64_t n = 67, c = 600;
  const Tensor dy = ops_test::random({n, c}, 31, dt());
  const Tensor db0 = ops_test::random({c}, 32, dt());
  Tensor y = dy.clone(), db = db0.clone();
  ops::bias_add(y, db0);
  ops::bias_grad(dy, db);
  const std::vector<double> d = values(dy), b0 = values(db0), got_y = values(y), got_b = values(db);
  const bool f32 = dt() == DType::kFloat32;
  const auto in_t = [f32](double v) {
    return f32 ? static_cast<double>(static_cast<float>(v)) : v;
  };
  for (std::int64_t k = 0; k < c; ++k) {
    double s = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      s += d[static_cast<std::size_t>(i * c + k)];
      ASSERT_EQ(got_y[static_cast<std::size_t>(i * c + k)],
                in_t(d[static_cast<std::size_t>(i * c + k)] + b0[static_cast<std::size_t>(k)]))
          << "row " << i << ", channel " << k;
    }
    ASSERT_EQ(got_b[static_cast<std::size_t>(k)], in_t(b0[static_cast<std::size_t>(k)] + in_t(s)))
        << "channel " << k;
  }
}

// ---------------------------------------------------------------- convolution

TEST_P(OpsCpuTyped, Conv3x3SamePaddingByHand) {
  const Tensor x = make(iota(9), {1, 1, 3, 3});
  const Tensor w = make(std::vector<double>(9, 1.0), {1, 1, 3, 3});
  const auto g = ops::Conv2DGeometry::same(3, 3, 3, 3, 1, 1);
  ASSERT_EQ(g.pad_top, 1);
  const std::vector<double> window_sums = {12, 21, 16, 27, 45, 33, 24, 39, 28};
  Tensor y = ops::conv2d_forward(x, w, make({0.5}, {1}), g);
  std::vector<double> want;
  for (double v : window_sums) want.push_back(v + 0.5);
  EXPECT_EQ(values(y), want);
  EXPECT_EQ(values(ops::conv2d_forward(x, w, Tensor(), g)), window_sums);

  // dy = 1: dx counts the windows covering each pixel; dw[a,b] sums x shifted by (a-1, b-1),
  // which for this symmetric case is the same window-sum pattern; dbias = 9 outputs.
  const Tensor dy = make(std::vector<double>(9, 1.0), {1, 1, 3, 3});
  EXPECT_EQ(values(ops::conv2d_backward_data(dy, w, x.shape(), g)),
            (std::vector<double>{4, 6, 4, 6, 9, 6, 4, 6, 4}));
  Tensor dw = zeros({1, 1, 3, 3}), db = zeros({1});
  ops::conv2d_backward_weights(x, dy, dw, db, g);
  EXPECT_EQ(values(dw), window_sums);
  EXPECT_EQ(values(db), std::vector<double>{9});
  ops::conv2d_backward_weights(x, dy, dw, db, g);  // accumulates
  std::vector<double> twice;
  for (double v : window_sums) twice.push_back(2 * v);
  EXPECT_EQ(values(dw), twice);
  EXPECT_EQ(values(db), std::vector<double>{18});
  Tensor no_bias;
  ops::conv2d_backward_weights(x, dy, dw, no_bias, g);  // without a bias gradient
  EXPECT_EQ(values(dw)[4], 3 * 45.0);
}

TEST_P(OpsCpuTyped, ConvStride2AsymmetricSamePaddingGoesBottomRight) {
  const Tensor x = make(iota(25), {1, 1, 5, 5});  // rows 1..5, 6..10, ...
  const Tensor w = make({1, 1, 1, 1}, {1, 1, 2, 2});
  const auto g = ops::Conv2DGeometry::same(5, 5, 2, 2, 2, 2);
  ASSERT_EQ(g.pad_top, 0);
  ASSERT_EQ(g.pad_bottom, 1);
  ASSERT_EQ(g.pad_right, 1);
  const Tensor y = ops::conv2d_forward(x, w, Tensor(), g);
  ASSERT_EQ(y.shape(), (Shape{1, 1, 3, 3}));
  // Windows start at rows/cols 0, 2, 4; the last one overlaps the bottom/right padding.
  EXPECT_EQ(values(y), (std::vector<double>{16, 24, 15, 56, 64, 35, 43, 47, 25}));
}

TEST_P(OpsCpuTyped, ConvMultiChannelBias) {
  // Two input channels, two output channels, 1x1 kernels: y[o] = sum_c w[o,c] x[c] + b[o].
  const Tensor x = make({1, 2, 3, 4, 10, 20, 30, 40}, {1, 2, 2, 2});
  const Tensor w = make({1, 0.5, -1, 2}, {2, 2, 1, 1});
  const Tensor y =
      ops::conv2d_forward(x, w, make({100, 200}, {2}), ops::Conv2DGeometry::valid(1, 1));
  EXPECT_EQ(values(y), (std::vector<double>{106, 112, 118, 124, 219, 238, 257, 276}));
}

// ---------------------------------------------------------------- max pooling

TEST_P(OpsCpuTyped, MaxPoolTiesGoToTheFirstMaximum) {
  const Tensor x = make(std::vector<double>(16, 1.0), {1, 1, 4, 4});
  ops::Pool2DGeometry g;  // 2x2, stride 2
  const Tensor y = ops::maxpool2d_forward(x, g);
  EXPECT_EQ(values(y), std::vector<double>(4, 1.0));
  const Tensor dx = ops::maxpool2d_backward(x, y, make({1, 2, 3, 4}, {1, 1, 2, 2}), g);
  EXPECT_EQ(values(dx), (std::vector<double>{1, 0, 2, 0, 0, 0, 0, 0, 3, 0, 4, 0, 0, 0, 0, 0}));

  // A tie at (0,1) and (1,0) of one window: row-major order picks (0,1).
  const Tensor x2 = make({3, 5, 5, 1}, {1, 1, 2, 2});
  const Tensor dx2 =
      ops::maxpool2d_backward(x2, ops::maxpool2d_forward(x2, g), make({7}, {1, 1, 1, 1}), g);
  EXPECT_EQ(values(dx2), (std::vector<double>{0, 7, 0, 0}));
}

TEST_P(OpsCpuTyped, MaxPoolOverlappingWindowsAccumulate) {
  ops::Pool2DGeometry g;
  g.k_h = g.k_w = 2;
  g.stride_h = g.stride_w = 1;
  const Tensor x = make({0, 0, 0, 0, 9, 0, 0, 0, 0}, {1, 1, 3, 3});
  const Tensor y = ops::maxpool2d_forward(x, g);
  EXPECT_EQ(values(y), std::vector<double>(4, 9.0));
  const Tensor dx = ops::maxpool2d_backward(x, y, make({1, 2, 3, 4}, {1, 1, 2, 2}), g);
  EXPECT_EQ(values(dx), (std::vector<double>{0, 0, 0, 0, 10, 0, 0, 0, 0}));
}

TEST_P(OpsCpuTyped, MaxPoolPaddingNeverWins) {
  // All inputs negative: a padded zero would win if padding took part.
  ops::Pool2DGeometry g;
  g.k_h = g.k_w = 2;
  g.pad_bottom = g.pad_right = 1;  // asymmetric: 3x3 -> 2x2
  std::vector<double> v = iota(9);
  for (double& e : v) e = -e;
  const Tensor x = make(v, {1, 1, 3, 3});
  const Tensor y = ops::maxpool2d_forward(x, g);
  EXPECT_EQ(values(y), (std::vector<double>{-1, -3, -7, -9}));
  const Tensor dx = ops::maxpool2d_backward(x, y, make({1, 1, 1, 1}, {1, 1, 2, 2}), g);
  EXPECT_EQ(values(dx), (std::vector<double>{1, 0, 1, 0, 0, 0, 1, 0, 1}));
}

TEST_P(OpsCpuTyped, MaxPoolBackwardWithTheReluMaskIsReluBackwardOfItsGradient) {
  // Note [ReLU through max pool]: x is a ReLU's output (zeros, ties among them and positive
  // values); the fused backward equals relu_backward(x, maxpool2d_backward(...)) bit for bit,
  // for the 2x2 loops, a padded 3x3 window, overlapping windows and an odd size.
  std::vector<double> v = values(ops_test::random({2, 3, 7, 9}, 5, DType::kFloat64));
  for (double& e : v) e = std::max(0.0, std::round(e * 3) / 3);  // many exact zeros and ties
  const Tensor x = make(v, {2, 3, 7, 9});
  ops::Pool2DGeometry two, three, overlapping;
  three.k_h = three.k_w = 3;
  three.pad_bottom = three.pad_right = 1;
  overlapping.k_h = overlapping.k_w = 3;
  overlapping.stride_h = overlapping.stride_w = 1;
  overlapping.pad_top = overlapping.pad_left = overlapping.pad_bottom = overlapping.pad_right = 1;
  for (const ops::Pool2DGeometry& g : {two, three, overlapping}) {
    const Tensor y = ops::maxpool2d_forward(x, g);
    const Tensor dy = make(values(ops_test::random(y.shape(), 6, DType::kFloat64)), y.shape());
    const Tensor fused = ops::maxpool2d_backward(x, y, dy, g, true);
    const Tensor apart =
        ops::activation_backward(ops::Activation::kRelu, x, ops::maxpool2d_backward(x, y, dy, g));
    EXPECT_EQ(values(fused), values(apart)) << "window " << g.k_h << " stride " << g.stride_h;
    EXPECT_NE(values(fused), values(ops::maxpool2d_backward(x, y, dy, g)))
        << "the mask removed nothing: the input has no window whose maximum is 0";
  }
}

TEST(OpsCpu, PlainPoolsOfEightKChannelsRouteAsOneChannelAtATime) {
  // A plain float32 image with 8k channels takes the blocked 2x2 loops (converted there and
  // back); one channel at a time takes the plain loop. Same windows, tie rule and ReLU mask: the
  // same bits, for blocks of 16 (32 channels) and 8 (24), odd edges and many ties.
  for (const std::int64_t c : {32, 24}) {
    const Shape xs{3, c, 9, 7};
    std::vector<float> xv = ops_test::random(xs, 7, DType::kFloat32).to_vector<float>();
    for (float& e : xv) e = std::round(e * 3.0f) / 4.0f;
    const Tensor x = Tensor::from_vector(xv, xs);
    const ops::Pool2DGeometry g;
    const Tensor y = ops::maxpool2d_forward(x, g);
    const Tensor dy = ops_test::random(y.shape(), 8, DType::kFloat32);
    const std::vector<float> dyv = dy.to_vector<float>();
    for (const bool relu : {false, true}) {
      const std::vector<float> dx = ops::maxpool2d_backward(x, y, dy, g, relu).to_vector<float>();
      for (std::int64_t n = 0; n < 3; ++n) {
        for (std::int64_t k = 0; k < c; ++k) {
          const auto plane = [&](const std::vector<float>& v, std::int64_t size) {
            const auto at = static_cast<std::ptrdiff_t>((n * c + k) * size);
            return std::vector<float>(v.begin() + at, v.begin() + at + size);
          };
          const Tensor xk = Tensor::from_vector(plane(xv, 63), {1, 1, 9, 7});
          const Tensor dyk = Tensor::from_vector(plane(dyv, 12), {1, 1, 4, 3});
          const Tensor dxk =
              ops::maxpool2d_backward(xk, ops::maxpool2d_forward(xk, g), dyk, g, relu);
          ASSERT_EQ(plane(dx, 63), dxk.to_vector<float>())
              << c << " channels, sample " << n << ", channel " << k << (relu ? ", relu" : "");
        }
      }
    }
  }
}

TEST(OpsCpu, MaxPoolRejectsPaddingAsLargeAsTheWindow) {
  ops::Pool2DGeometry g;
  g.pad_top = 2;
  try {
    ops::maxpool2d_forward(Tensor::zeros({1, 1, 4, 4}), g);
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("padding smaller than the window"));
  }
}

// ---------------------------------------------------------------- element-wise

TEST_P(OpsCpuTyped, ActivationsAndGradients) {
  const std::vector<double> xs = {-2, -0.5, 0, 0.5, 3};
  const Tensor x = make(xs, {5});
  const Tensor dy = make({1, 2, 3, 4, 5}, {5});
  const double tol = dt() == DType::kFloat32 ? 1e-6 : 1e-15;
  const Tensor r = ops::activation_forward(ops::Activation::kRelu, x);
  EXPECT_EQ(values(r), (std::vector<double>{0, 0, 0, 0.5, 3}));
  EXPECT_EQ(values(ops::activation_backward(ops::Activation::kRelu, r, dy)),
            (std::vector<double>{0, 0, 0, 4, 5}));
  const Tensor t = ops::activation_forward(ops::Activation::kTanh, x);
  const Tensor s = ops::activation_forward(ops::Activation::kSigmoid, x);
  const auto tv = values(t), sv = values(s);
  const auto dt_ = values(ops::activation_backward(ops::Activation::kTanh, t, dy));
  const auto ds = values(ops::activation_backward(ops::Activation::kSigmoid, s, dy));
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const double th = std::tanh(xs[i]), sg = 1 / (1 + std::exp(-xs[i]));
    EXPECT_NEAR(tv[i], th, tol);
    EXPECT_NEAR(sv[i], sg, tol);
    EXPECT_NEAR(dt_[i], (i + 1) * (1 - th * th), 4 * tol);
    EXPECT_NEAR(ds[i], (i + 1) * sg * (1 - sg), 4 * tol);
  }
  EXPECT_EQ(values(ops::activation_forward(ops::Activation::kIdentity, x)), xs);
}

TEST_P(OpsCpuTyped, AxpyScaleFillSumSquares) {
  Tensor a = make({1, 2, 3}, {3});
  ops::axpy(2.0, make({1, 1, 1}, {3}), a);
  EXPECT_EQ(values(a), (std::vector<double>{3, 4, 5}));
  ops::scale(a, 0.5);
  EXPECT_EQ(values(a), (std::vector<double>{1.5, 2, 2.5}));
  EXPECT_EQ(ops::sum_squares(a), 2.25 + 4 + 6.25);
  ops::fill(a, -4);
  EXPECT_EQ(values(a), (std::vector<double>{-4, -4, -4}));
}

TEST(OpsCpu, SumSquaresAccumulatesInDouble) {
  // 2^20 copies of float(0.1): float accumulation would drift by ~1e-3 relative.
  const std::int64_t n = 1 << 20;
  Tensor a = Tensor::empty({n}, DType::kFloat32);
  ops::fill(a, 0.1);
  const double e = static_cast<double>(0.1f);
  EXPECT_NEAR(ops::sum_squares(a), n * e * e, 1e-9 * n * e * e);
}

TEST(OpsCpu, ChannelSumsMatchAnExactSumForEveryRowLengthAndThreadCount) {
  // Note [Channel sums]: 32 fixed lanes and a tail, so row lengths around 32; the largest case
  // is above kParallelGrain, where two threads split the channels.
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-3, 3);
  const int saved_threads = omp_get_max_threads();
  for (const std::int64_t inner : {1, 7, 31, 32, 33, 49, 100, 784}) {
    const ops::ChannelView v{.outer = 48, .channels = 5, .inner = inner};
    std::vector<float> xa(static_cast<std::size_t>(v.numel())), xb(xa.size());
    for (float& e : xa) e = u(rng);
    for (float& e : xb) e = u(rng);
    const Tensor a = Tensor::from_vector(xa, {v.numel()});
    const Tensor b = Tensor::from_vector(xb, {v.numel()});
    omp_set_num_threads(1);
    const std::vector<double> one = ops::channel_sums(a, b, v);
    omp_set_num_threads(2);
    const std::vector<double> two = ops::channel_sums(a, b, v);
    omp_set_num_threads(saved_threads);
    EXPECT_EQ(one, two) << "inner " << inner;
    for (std::int64_t c = 0; c < v.channels; ++c) {
      long double s1 = 0, s2 = 0, scale = 0;
      for (std::int64_t o = 0; o < v.outer; ++o) {
        for (std::int64_t i = 0; i < inner; ++i) {
          const auto k = static_cast<std::size_t>((o * v.channels + c) * inner + i);
          s1 += xa[k];
          s2 += static_cast<long double>(xa[k]) * xb[k];
          scale += std::fabs(xa[k]) * 3;
        }
      }
      EXPECT_NEAR(one[static_cast<std::size_t>(c)], static_cast<double>(s1), 1e-14 * scale)
          << "inner " << inner << " channel " << c;
      EXPECT_NEAR(one[static_cast<std::size_t>(v.channels + c)], static_cast<double>(s2),
                  1e-14 * scale)
          << "inner " << inner << " channel " << c;
    }
  }
}

TEST(OpsCpu, AllFinite) {
  Tensor a = Tensor::from_vector(std::vector<float>{1, 2, 3}, {3});
  EXPECT_TRUE(ops::all_finite(a));
  a.data<float>()[1] = std::numeric_limits<float>::infinity();
  EXPECT_FALSE(ops::all_finite(a));
  a.data<float>()[1] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_FALSE(ops::all_finite(a));
  EXPECT_FALSE(ops::all_finite(ops::cast(a, DType::kFloat16)));
  EXPECT_FALSE(ops::all_finite(ops::cast(a, DType::kBFloat16)));
  EXPECT_FALSE(ops::all_finite(ops::cast(a, DType::kFloat64)));
  EXPECT_TRUE(ops::all_finite(Tensor::from_vector(std::vector<double>{0, -1e300}, {2})));
  // 70000 overflows float16 (to Inf), not bfloat16.
  const Tensor big = Tensor::from_vector(std::vector<float>{70000}, {1});
  EXPECT_FALSE(ops::all_finite(ops::cast(big, DType::kFloat16)));
  EXPECT_TRUE(ops::all_finite(ops::cast(big, DType::kBFloat16)));
}

TEST(OpsCpu, CastRoundTripsAndRejectsUnsupportedPairs) {
  const Tensor a = Tensor::from_vector(std::vector<float>{1.0f, -2.5f, 1e-3f, 65504.0f}, {4});
  const Tensor h = ops::cast(a, DType::kFloat16);
  EXPECT_EQ(h.dtype(), DType::kFloat16);
  EXPECT_EQ(h.data<Half>()[0].bits, 0x3C00);
  EXPECT_EQ(h.data<Half>()[3].bits, 0x7BFF);
  const auto back = ops::cast(h, DType::kFloat32).to_vector<float>();
  EXPECT_EQ(back[0], 1.0f);
  EXPECT_EQ(back[1], -2.5f);
  EXPECT_NEAR(back[2], 1e-3f, 1e-6f);  // fp16 has 11 significant bits
  const Tensor b = ops::cast(a, DType::kBFloat16);
  EXPECT_EQ(b.data<BFloat16>()[0].bits, 0x3F80);
  EXPECT_EQ(ops::cast(b, DType::kFloat32).to_vector<float>()[1], -2.5f);
  EXPECT_EQ(ops::cast(ops::cast(a, DType::kFloat64), DType::kFloat32).to_vector<float>(),
            a.to_vector<float>());
  EXPECT_THROW(ops::cast(h, DType::kBFloat16), InvalidArgument);
  EXPECT_THROW(ops::cast(Tensor::zeros({2}, DType::kInt32), DType::kFloat32), InvalidArgument);
}

// ---------------------------------------------------------------- dropout

Tensor ids(const std::vector<std::int64_t>& v) {
  return Tensor::from_vector(v, {static_cast<std::int64_t>(v.size())});
}

TEST_P(OpsCpuTyped, DropoutMaskFollowsTheSampleNotTheSlot) {
  const float rate = 0.25f;
  const Tensor x = make(std::vector<double>(3 * 40, 2.0), {3, 40});
  Tensor m1, m2;
  const Tensor y1 = ops::dropout_forward(x, rate, 42, ids({7, 8, 9}), m1);
  ops::dropout_forward(x, rate, 42, ids({9, 7, 8}), m2);  // same samples, other batch slots
  const auto v1 = values(m1), v2 = values(m2), yv = values(y1);
  const double keep = 1.0 / (1.0 - rate);
  for (int j = 0; j < 40; ++j) {
    EXPECT_EQ(v1[j], v2[40 + j]);       // sample 7
    EXPECT_EQ(v1[40 + j], v2[80 + j]);  // sample 8
    EXPECT_EQ(v1[80 + j], v2[j]);       // sample 9
  }
  for (std::size_t i = 0; i < v1.size(); ++i) {
    EXPECT_TRUE(v1[i] == 0 || std::abs(v1[i] - keep) < 1e-6) << v1[i];
    EXPECT_EQ(yv[i], 2.0 * v1[i]);
  }
  // Element by element the decision of math::dropout_scale, which the GPU kernel draws too
  // (Note [Dropout by sample id]); the CPU kernel hashes each sample's key once.
  const std::int64_t sample_of_row[] = {7, 8, 9};
  for (int s = 0; s < 3; ++s) {
    for (int j = 0; j < 40; ++j) {
      const double want = dt() == DType::kFloat32
                              ? math::dropout_scale<float>(42, sample_of_row[s], j, rate)
                              : math::dropout_scale<double>(42, sample_of_row[s], j, rate);
      ASSERT_EQ(v1[static_cast<std::size_t>(s * 40 + j)], want) << "sample row " << s << ", " << j;
    }
  }
  // Other sample ids or another seed give other masks.
  EXPECT_NE(std::vector<double>(v1.begin(), v1.begin() + 40),
            std::vector<double>(v1.begin() + 40, v1.begin() + 80));
  Tensor m3;
  ops::dropout_forward(x, rate, 43, ids({7, 8, 9}), m3);
  EXPECT_NE(values(m3), v1);
  // Backward multiplies by the mask.
  const Tensor dy = make(std::vector<double>(120, 3.0), {3, 40});
  const auto dx = values(ops::dropout_backward(dy, m1));
  for (std::size_t i = 0; i < v1.size(); ++i) EXPECT_NEAR(dx[i], 3.0 * v1[i], 1e-6);
  // The mask tensor is reused when its shape fits.
  Tensor before = m1;
  ops::dropout_forward(x, rate, 44, ids({1, 2, 3}), m1);
  EXPECT_TRUE(m1.shares_storage_with(before));
}

TEST(OpsCpu, DropoutKeepRateMatchesOneMinusRate) {
  const std::int64_t n = 64, per = 4096;  // 262144 elements: the keep rate's sd is ~0.001
  Tensor x = Tensor::empty({n, per});
  ops::fill(x, 1.0);
  std::vector<std::int64_t> id(n);
  for (std::int64_t i = 0; i < n; ++i) id[i] = 1000 + i;
  for (float rate : {0.0f, 0.1f, 0.5f, 0.8f}) {
    Tensor mask;
    ops::dropout_forward(x, rate, 2024, ids(id), mask);
    std::int64_t kept = 0;
    for (float m : mask.to_vector<float>()) kept += m != 0;
    EXPECT_NEAR(static_cast<double>(kept) / (n * per), 1.0 - rate, 0.006) << rate;
  }
}

// A replica can hold no sample of an uneven last batch: every op must accept N = 0.
TEST_P(OpsCpuTyped, EmptyBatchIsANoOp) {
  const auto g = ops::Conv2DGeometry::same(5, 5, 3, 3, 2, 2);
  const Tensor x = zeros({0, 2, 5, 5}), w = ops_test::random({3, 2, 3, 3}, 1, dt());
  const Tensor y = ops::conv2d_forward(x, w, zeros({3}), g);
  EXPECT_EQ(y.shape(), (Shape{0, 3, 3, 3}));
  EXPECT_EQ(ops::conv2d_backward_data(y, w, x.shape(), g).shape(), x.shape());
  Tensor dw = ops_test::random({3, 2, 3, 3}, 2, dt()), db = make({1, 2, 3}, {3});
  const auto dw_before = values(dw);
  ops::conv2d_backward_weights(x, y, dw, db, g);
  EXPECT_EQ(values(dw), dw_before);
  EXPECT_EQ(values(db), (std::vector<double>{1, 2, 3}));
  ops::Pool2DGeometry pg;
  const Tensor p = ops::maxpool2d_forward(x, pg);
  EXPECT_EQ(ops::maxpool2d_backward(x, p, p, pg).shape(), x.shape());
  Tensor c = zeros({0, 4});
  ops::gemm(false, false, 1.0, zeros({0, 3}), zeros({3, 4}), 0.0, c);
  Tensor c2 = make({1, 1}, {1, 2});
  ops::gemm(false, false, 1.0, zeros({1, 0}), zeros({0, 2}), 1.0, c2);  // k = 0: C stays
  EXPECT_EQ(values(c2), (std::vector<double>{1, 1}));
  ops::bias_grad(zeros({0, 3}), db);
  EXPECT_EQ(values(db), (std::vector<double>{1, 2, 3}));
  const auto r =
      ops::softmax_cross_entropy(zeros({0, 4}), Tensor::zeros({0}, DType::kInt32), zeros({0}), 8);
  EXPECT_EQ(r.loss, 0.0);
  EXPECT_EQ(r.dlogits.shape(), (Shape{0, 4}));
  Tensor mask;
  EXPECT_EQ(
      ops::dropout_forward(zeros({0, 6}), 0.5f, 1, Tensor::zeros({0}, DType::kInt64), mask).shape(),
      (Shape{0, 6}));
  const Tensor e = ops::embedding_forward(Tensor::zeros({0, 3}, DType::kInt32), zeros({4, 2}));
  EXPECT_EQ(e.shape(), (Shape{0, 3, 2}));
}

INSTANTIATE_TEST_SUITE_P(Dtypes, OpsCpuTyped, ::testing::Values(DType::kFloat32, DType::kFloat64),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// ---------------------------------------------------------------- primitive cache

TEST(OpsCpu, RepeatedShapesReuseOneDnnPrimitives) {
  const Tensor x = ops_test::random({2, 3, 8, 8}, 1, DType::kFloat32);
  const Tensor w = ops_test::random({4, 3, 3, 3}, 2, DType::kFloat32);
  const auto g = ops::Conv2DGeometry::same(8, 8, 3, 3, 1, 1);
  ops::conv2d_forward(x, w, Tensor(), g);  // may create
  const std::int64_t created = cpu::dnnl_primitives_created();
  for (int i = 0; i < 3; ++i) ops::conv2d_forward(x, w, Tensor(), g);
  EXPECT_EQ(cpu::dnnl_primitives_created(), created);
}

}  // namespace
}  // namespace mirror
