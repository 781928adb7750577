// The layers of residual and branching CNNs against central finite differences in float64
// (docs/architecture.md invariant 1), plus their forward semantics against closed forms:
// BatchNormalization (training and inference, padding left out), LayerNormalization, average
// pooling, zero padding, GELU and Conv2D without a bias.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "gradcheck.h"
#include "mirror/nn/cnn_layers.h"
#include "mirror/ops.h"

namespace mirror::nn {
namespace {

using testing::built;
using testing::check_layer;
using testing::random_tensor;

constexpr double kTol = 1e-6;

void expect_ok(const testing::GradCheckReport& r, std::size_t tensors) {
  testing::expect_gradients_within(r, tensors, kTol);
}

void randomise_parameters(Layer& layer, std::uint64_t seed) {
  for (Parameter* p : layer.parameters()) {
    p->value.copy_from(random_tensor(p->value.shape(), seed++, 0.5, 1.5));
  }
}

Shape batched(std::int64_t n, Shape s) {
  s.insert(s.begin(), n);
  return s;
}

// ---------------------------------------------------------------- BatchNormalization

struct BnCase {
  Shape input;
  bool center, scale, training;
};

class BatchNormGrad : public ::testing::TestWithParam<BnCase> {};

TEST_P(BatchNormGrad, MatchesFiniteDifferences) {
  const BnCase c = GetParam();
  BatchNormalization bn(0.9, 1e-3, c.center, c.scale);
  built(bn, c.input);
  randomise_parameters(bn, 3);
  if (!c.training) {
    const auto ch = static_cast<std::size_t>(bn.buffers()[0]->value.numel());
    bn.buffers()[0]->value.copy_from(random_tensor({static_cast<std::int64_t>(ch)}, 8));
    bn.buffers()[1]->value.copy_from(random_tensor({static_cast<std::int64_t>(ch)}, 9, 0.5, 2));
  }
  ForwardContext ctx;
  ctx.training = c.training;
  const Tensor x = random_tensor(batched(4, c.input), 5, -2, 3);
  expect_ok(check_layer(bn, x, ctx), 1 + (c.center ? 1 : 0) + (c.scale ? 1 : 0));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, BatchNormGrad,
    ::testing::Values(BnCase{{3, 4, 5}, true, true, true},  // images: channels of NCHW
                      BnCase{{6}, true, true, true},        // features
                      BnCase{{3, 4}, true, true, true},     // sequences: channels = F
                      BnCase{{2, 3, 3}, false, true, true}, BnCase{{2, 3, 3}, true, false, true},
                      BnCase{{2, 3, 3}, true, true, false}));  // inference: moving statistics

TEST(BatchNorm, TrainingNormalisesPerChannelAndUpdatesMovingStatistics) {
  BatchNormalization bn(0.9, 1e-3);
  built(bn, {2, 1, 2});
  // Channel 0 holds 1, 2, 3, 4 over (n, w); channel 1 holds 10, 10, 20, 20.
  const Tensor x =
      Tensor::from_vector(std::vector<double>{1, 2, 10, 10, 3, 4, 20, 20}, {2, 2, 1, 2});
  ForwardContext ctx;
  ctx.training = true;
  const auto y = bn.forward(x, ctx).to_vector<double>();
  // Channel 0: mean 2.5, biased variance 1.25.
  EXPECT_NEAR(y[0], (1 - 2.5) / std::sqrt(1.25 + 1e-3), 1e-12);
  EXPECT_NEAR(y[5], (4 - 2.5) / std::sqrt(1.25 + 1e-3), 1e-12);
  // Channel 1: mean 15, variance 25.
  EXPECT_NEAR(y[2], (10 - 15) / std::sqrt(25 + 1e-3), 1e-12);
  const auto mean = bn.buffers()[0]->value.to_vector<double>();
  const auto var = bn.buffers()[1]->value.to_vector<double>();
  EXPECT_NEAR(mean[0], 0.1 * 2.5, 1e-12);
  EXPECT_NEAR(mean[1], 0.1 * 15, 1e-12);
  EXPECT_NEAR(var[0], 0.9 + 0.1 * 1.25, 1e-12);
  EXPECT_NEAR(var[1], 0.9 + 0.1 * 25, 1e-12);
  EXPECT_EQ(bn.buffers()[0]->name, "layer_1/moving_mean");
  EXPECT_EQ(bn.buffers()[1]->name, "layer_1/moving_variance");
  // Inference uses the moving statistics and leaves them alone.
  ctx.training = false;
  const auto z = bn.forward(x, ctx).to_vector<double>();
  EXPECT_NEAR(z[0], (1 - 0.25) / std::sqrt(var[0] + 1e-3), 1e-12);
  EXPECT_EQ(bn.buffers()[0]->value.to_vector<double>(), mean);
}

TEST(BatchNorm, PaddingSamplesStayOutOfTheStatisticsAndGetNoGradient) {
  // A batch of 3 real samples plus 1 padding sample must normalise the real ones exactly like
  // the batch of the 3 alone, and give the padding sample a zero input gradient.
  BatchNormalization padded(0.9, 1e-3), plain(0.9, 1e-3);
  built(padded, {2, 2, 2});
  built(plain, {2, 2, 2});
  const Tensor x4 = random_tensor({4, 2, 2, 2}, 3, -1, 2);
  const Tensor x3 = x4.view(0, {3, 2, 2, 2}).clone();
  ForwardContext c4, c3;
  c4.training = c3.training = true;
  c4.sample_weights = Tensor::from_vector(std::vector<float>{1, 1, 1, 0}, {4});
  const auto y4 = padded.forward(x4, c4).to_vector<double>();
  const auto y3 = plain.forward(x3, c3).to_vector<double>();
  for (std::size_t i = 0; i < y3.size(); ++i) EXPECT_NEAR(y4[i], y3[i], 1e-12) << i;
  EXPECT_EQ(padded.buffers()[0]->value.to_vector<double>(),
            plain.buffers()[0]->value.to_vector<double>());
  Tensor dy4 = random_tensor({4, 2, 2, 2}, 4);
  Tensor pad_rows = dy4.view(24, {8});
  ops::fill(pad_rows, 0.0);  // the loss gives padding no gradient
  const Tensor dy3 = dy4.view(0, {3, 2, 2, 2}).clone();
  const auto dx4 = padded.backward(dy4).to_vector<double>();
  const auto dx3 = plain.backward(dy3).to_vector<double>();
  for (std::size_t i = 0; i < dx3.size(); ++i) EXPECT_NEAR(dx4[i], dx3[i], 1e-12) << i;
  for (std::size_t i = dx3.size(); i < dx4.size(); ++i) EXPECT_EQ(dx4[i], 0.0) << i;
}

TEST(BatchNorm, RejectsUnsupportedShapes) {
  BatchNormalization bn;
  bn.set_name("batch_normalization_1");
  InitRng rng(1);
  EXPECT_THROW(bn.build({1, 2, 3, 4}, DType::kFloat64, Device::cpu(), rng), InvalidArgument);
  EXPECT_THROW(BatchNormalization(1.5), InvalidArgument);
}

// ---------------------------------------------------------------- LayerNormalization

TEST(LayerNormGrad, FeaturesAndSequences) {
  for (const Shape& s : {Shape{7}, Shape{3, 5}}) {
    LayerNormalization ln;
    built(ln, s);
    randomise_parameters(ln, 2);
    ForwardContext ctx;
    expect_ok(check_layer(ln, random_tensor(batched(3, s), 4, -2, 2), ctx), 3);
  }
}

TEST(LayerNorm, NormalisesEachRow) {
  LayerNormalization ln(1e-3);
  built(ln, {4});
  ForwardContext ctx;
  const auto y =
      ln.forward(Tensor::from_vector(std::vector<double>{1, 2, 3, 4, 8, 8, 8, 8}, {2, 4}), ctx)
          .to_vector<double>();
  EXPECT_NEAR(y[0], (1 - 2.5) / std::sqrt(1.25 + 1e-3), 1e-12);
  EXPECT_NEAR(y[3], (4 - 2.5) / std::sqrt(1.25 + 1e-3), 1e-12);
  EXPECT_NEAR(y[5], 0.0, 1e-12);
  InitRng rng(1);
  LayerNormalization image;
  EXPECT_THROW(image.build({3, 4, 4}, DType::kFloat64, Device::cpu(), rng), InvalidArgument);
}

// ---------------------------------------------------------------- pooling, padding

TEST(AveragePoolGrad, ValidAndSame) {
  struct Case {
    int pool, stride;
    Padding padding;
    Shape out;
  };
  for (const Case& c :
       {Case{2, 2, Padding::kValid, {2, 2, 2}}, Case{3, 2, Padding::kSame, {2, 3, 3}},
        Case{2, 1, Padding::kValid, {2, 4, 4}}}) {
    AveragePooling2D pool(c.pool, c.stride, c.padding);
    pool.set_name("average_pooling2d_1");
    InitRng rng(1);
    EXPECT_EQ(pool.build({2, 5, 5}, DType::kFloat64, Device::cpu(), rng), c.out);
    ForwardContext ctx;
    expect_ok(check_layer(pool, random_tensor({2, 2, 5, 5}, 6), ctx), 1);
  }
}

TEST(Pooling2D, WindowsLargerThanTheInputAreRefusedByName) {
  // The same geometry serves both pools: "same" fits any window, "valid" needs room.
  for (const Padding padding : {Padding::kValid, Padding::kSame}) {
    AveragePooling2D avg(4, 1, padding);
    MaxPool2D max(4, 1, padding);
    avg.set_name("average_pooling2d_3");
    max.set_name("max_pooling2d_3");
    InitRng rng(1);
    if (padding == Padding::kSame) {
      EXPECT_EQ(avg.build({2, 3, 3}, DType::kFloat64, Device::cpu(), rng), (Shape{2, 3, 3}));
      EXPECT_EQ(max.build({2, 3, 3}, DType::kFloat64, Device::cpu(), rng), (Shape{2, 3, 3}));
      continue;
    }
    for (Layer* layer : std::initializer_list<Layer*>{&avg, &max}) {
      try {
        layer->build({2, 3, 3}, DType::kFloat64, Device::cpu(), rng);
        ADD_FAILURE() << layer->name() << " accepted a 4x4 window over a 3x3 input";
      } catch (const InvalidArgument& e) {
        EXPECT_NE(std::string(e.what()).find(layer->name() + " (" + layer->kind() +
                                             "): window 4 larger than input [2,3,3]"),
                  std::string::npos)
            << e.what();
      }
    }
  }
}

TEST(AveragePool, SamePaddingLeavesPaddingOutOfTheCount) {
  // TensorFlow: a 2x2 "same" window at the bottom-right corner of a 3x3 image covers one pixel.
  AveragePooling2D pool(2, 2, Padding::kSame);
  built(pool, {1, 3, 3});
  ForwardContext ctx;
  const auto y = pool.forward(Tensor::from_vector(std::vector<double>{1, 2, 3, 4, 5, 6, 7, 8, 9},
                                                  {1, 1, 3, 3}),
                              ctx)
                     .to_vector<double>();
  EXPECT_EQ(y, (std::vector<double>{3, 4.5, 7.5, 9}));
}

TEST(GlobalAveragePool, MeansEachPlaneAndMatchesFiniteDifferences) {
  GlobalAveragePooling2D gap;
  EXPECT_EQ(built(gap, {3, 4, 2}).name(), "layer_1");
  ForwardContext ctx;
  const Tensor x = random_tensor({2, 3, 4, 2}, 7);
  const auto y = gap.forward(x, ctx).to_vector<double>();
  const auto xv = x.to_vector<double>();
  double s = 0;
  for (int i = 0; i < 8; ++i) s += xv[static_cast<std::size_t>(8 + i)];  // sample 0, channel 1
  EXPECT_NEAR(y[1], s / 8, 1e-12);
  expect_ok(check_layer(gap, x, ctx), 1);
}

TEST(ZeroPadding, PadsAndCrops) {
  ZeroPadding2D pad(1, 2, 0, 1);
  InitRng rng(1);
  pad.set_name("zero_padding2d_1");
  EXPECT_EQ(pad.build({2, 3, 3}, DType::kFloat64, Device::cpu(), rng), (Shape{2, 6, 4}));
  ForwardContext ctx;
  const Tensor x = random_tensor({2, 2, 3, 3}, 8);
  const auto y = pad.forward(x, ctx);
  EXPECT_EQ(y.shape(), (Shape{2, 2, 6, 4}));
  const auto yv = y.to_vector<double>();
  EXPECT_EQ(yv[0], 0.0);                       // top row
  EXPECT_EQ(yv[4], x.to_vector<double>()[0]);  // row 1, column 0
  EXPECT_EQ(yv[7], 0.0);                       // right column
  expect_ok(check_layer(pad, x, ctx), 1);
}

// ---------------------------------------------------------------- GELU, Conv2D without bias

TEST(Gelu, ExactFormAndGradient) {
  auto gelu = ActivationLayer::gelu();
  built(*gelu, {5});
  ForwardContext ctx;
  const auto y =
      gelu->forward(Tensor::from_vector(std::vector<double>{1, -1, 0, 2, -3}, {1, 5}), ctx)
          .to_vector<double>();
  EXPECT_NEAR(y[0], 0.8413447460685429, 1e-15);  // x * Phi(x)
  EXPECT_NEAR(y[1], -0.15865525393145707, 1e-15);
  EXPECT_EQ(gelu->config()["activation"], "gelu");
  expect_ok(check_layer(*gelu, random_tensor({3, 5}, 9, -3, 3), ctx), 1);
}

TEST(Gelu, Float32KeepsItsDigitsInTheLeftTail) {
  // x Phi(x) with Phi from 1 + erf cancels to ~1e-3 relative error by x = -4 in float32; the
  // float kernels (CPU and CUDA share the formula) must stay within a few ulp of float64.
  std::vector<float> xs;
  for (float x = -7.0f; x <= 1.0f; x += 0.25f) xs.push_back(x);
  const auto n = static_cast<std::int64_t>(xs.size());
  const Tensor x = Tensor::from_vector(xs, {n});
  const auto y = ops::gelu_forward(x).to_vector<float>();
  const auto dx =
      ops::gelu_backward(x, Tensor::from_vector(std::vector<float>(xs.size(), 1.0f), {n}))
          .to_vector<float>();
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const double v = xs[i], cdf = 0.5 * std::erfc(-v / std::sqrt(2.0));
    const double pdf = std::exp(-0.5 * v * v) / std::sqrt(2.0 * M_PI);
    EXPECT_NEAR(y[i], v * cdf, 1e-5 * std::abs(v * cdf) + 1e-30) << "gelu(" << v << ")";
    // Relative to the terms: the two cancel near x = -0.75, where gelu' crosses zero.
    EXPECT_NEAR(dx[i], cdf + v * pdf, 1e-5 * (cdf + std::abs(v * pdf)))
        << "gelu'(" << v << ")";
  }
}

TEST(Conv2DNoBias, HasOnlyAKernelAndMatchesFiniteDifferences) {
  Conv2D conv(4, 1, 1, 2, Padding::kValid, Activation::kIdentity, false);  // 1x1 projection
  built(conv, {3, 5, 5}, "conv2d_1");
  ASSERT_EQ(conv.parameters().size(), 1u);
  EXPECT_EQ(conv.parameters()[0]->name, "conv2d_1/kernel");
  EXPECT_EQ(conv.config()["use_bias"], false);
  randomise_parameters(conv, 3);
  ForwardContext ctx;
  expect_ok(check_layer(conv, random_tensor({2, 3, 5, 5}, 4), ctx), 2);
}

}  // namespace
}  // namespace mirror::nn
