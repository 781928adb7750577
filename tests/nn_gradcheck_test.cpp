// Every non-recurrent layer's backward and the loss against central finite differences in
// float64 (docs/architecture.md invariant 1), plus exact checks where differences are undefined
// (max-pool ties, the embedding padding row).
#include <gtest/gtest.h>

#include "gradcheck.h"
#include "mirror/nn/layers.h"

namespace mirror::nn {
namespace {

using testing::built;
using testing::check_layer;
using testing::random_tensor;

constexpr double kTol = 1e-6;

void expect_ok(const testing::GradCheckReport& r, std::size_t tensors) {
  testing::expect_gradients_within(r, tensors, kTol);
}

// Biases start at zero; nudge them so their gradient check is not trivially at zero.
void randomise_parameters(Layer& layer, std::uint64_t seed) {
  for (Parameter* p : layer.parameters()) {
    p->value.copy_from(random_tensor(p->value.shape(), seed++, -0.5, 0.5));
  }
}

class DenseGrad : public ::testing::TestWithParam<Activation> {};

TEST_P(DenseGrad, MatchesFiniteDifferences) {
  Dense dense(5, GetParam());
  built(dense, {4});
  randomise_parameters(dense, 1);
  ForwardContext ctx;
  const Tensor x = random_tensor({3, 4}, 11);
  expect_ok(check_layer(dense, x, ctx), 3);
}

INSTANTIATE_TEST_SUITE_P(Activations, DenseGrad,
                         ::testing::Values(Activation::kIdentity, Activation::kRelu,
                                           Activation::kTanh, Activation::kSigmoid));

TEST(DenseGrad, KernelLayoutIsInputByUnits) {
  Dense dense(3);
  built(dense, {2});
  EXPECT_EQ(dense.parameters()[0]->value.shape(), (Shape{2, 3}));
  // y = x @ W + b with W [in, units].
  dense.parameters()[0]->value.copy_from(
      Tensor::from_vector(std::vector<double>{1, 2, 3, 4, 5, 6}, {2, 3}));
  dense.parameters()[1]->value.copy_from(Tensor::from_vector(std::vector<double>{1, 0, -1}, {3}));
  ForwardContext ctx;
  const Tensor y = dense.forward(Tensor::from_vector(std::vector<double>{1, 10}, {1, 2}), ctx);
  EXPECT_EQ(y.to_vector<double>(), (std::vector<double>{42, 52, 62}));
}

struct ConvCase {
  int filters, kh, kw, stride;
  Padding padding;
  Activation act;
  Shape input;  // [C, H, W]
  Shape expected_output;
};

class Conv2DGrad : public ::testing::TestWithParam<ConvCase> {};

TEST_P(Conv2DGrad, MatchesFiniteDifferences) {
  const ConvCase c = GetParam();
  Conv2D conv(c.filters, c.kh, c.kw, c.stride, c.padding, c.act);
  conv.set_name("conv2d_1");
  InitRng rng(1);
  EXPECT_EQ(conv.build(c.input, DType::kFloat64, Device::cpu(), rng), c.expected_output);
  randomise_parameters(conv, 3);
  Shape xs = c.input;
  xs.insert(xs.begin(), 2);
  const Tensor x = random_tensor(xs, 5);
  ForwardContext ctx;
  expect_ok(check_layer(conv, x, ctx), 3);
}

INSTANTIATE_TEST_SUITE_P(
    Geometries, Conv2DGrad,
    ::testing::Values(
        // stride 2, same: 7 -> 4, total padding 2 (1/1)
        ConvCase{4, 3, 3, 2, Padding::kSame, Activation::kIdentity, {3, 7, 7}, {4, 4, 4}},
        // stride 2, same on an even size: 8 -> 4, total padding 1 (0 top, 1 bottom)
        ConvCase{3, 3, 3, 2, Padding::kSame, Activation::kTanh, {2, 8, 8}, {3, 4, 4}},
        // stride 2, valid: (7 - 3) / 2 + 1 = 3
        ConvCase{4, 3, 3, 2, Padding::kValid, Activation::kIdentity, {3, 7, 7}, {4, 3, 3}},
        // even kernel, stride 1, same: total padding 3 (1 top, 2 bottom), non-square
        ConvCase{2, 4, 2, 1, Padding::kSame, Activation::kSigmoid, {2, 6, 5}, {2, 6, 5}},
        // the CNN's 5x5 same + relu
        ConvCase{3, 5, 5, 1, Padding::kSame, Activation::kRelu, {2, 6, 6}, {3, 6, 6}}));

struct PoolCase {
  int pool, stride;
  Padding padding;
  Shape input, expected_output;
};

class MaxPoolGrad : public ::testing::TestWithParam<PoolCase> {};

TEST_P(MaxPoolGrad, MatchesFiniteDifferences) {
  const PoolCase c = GetParam();
  MaxPool2D pool(c.pool, c.stride, c.padding);
  pool.set_name("max_pooling2d_1");
  InitRng rng(1);
  EXPECT_EQ(pool.build(c.input, DType::kFloat64, Device::cpu(), rng), c.expected_output);
  Shape xs = c.input;
  xs.insert(xs.begin(), 2);
  // Distinct values (no ties), so the max is differentiable.
  const Tensor x = random_tensor(xs, 9, -3, 3);
  ForwardContext ctx;
  expect_ok(check_layer(pool, x, ctx), 1);
}

INSTANTIATE_TEST_SUITE_P(Geometries, MaxPoolGrad,
                         ::testing::Values(PoolCase{2, 2, Padding::kValid, {3, 6, 6}, {3, 3, 3}},
                                           PoolCase{2, 2, Padding::kValid, {2, 7, 7}, {2, 3, 3}},
                                           PoolCase{2, 2, Padding::kSame, {2, 7, 7}, {2, 4, 4}},
                                           PoolCase{3, 2, Padding::kSame, {2, 7, 6}, {2, 4, 3}}));

TEST(MaxPoolGrad, TiesSendTheGradientToTheFirstMaximumOnly) {
  MaxPool2D pool(2, 2, Padding::kValid);
  built(pool, {1, 2, 4});
  // Window 0 holds {1, 3 / 3, 2}: first maximum at (0, 1). Window 1 holds {3, 0 / 1, 3}:
  // first maximum at (0, 2).
  const Tensor x = Tensor::from_vector(std::vector<double>{1, 3, 3, 0, 3, 2, 1, 3}, {1, 1, 2, 4});
  ForwardContext ctx;
  const Tensor y = pool.forward(x, ctx);
  EXPECT_EQ(y.to_vector<double>(), (std::vector<double>{3, 3}));
  const Tensor dx = pool.backward(Tensor::from_vector(std::vector<double>{1, 10}, {1, 1, 1, 2}));
  EXPECT_EQ(dx.to_vector<double>(), (std::vector<double>{0, 1, 10, 0, 0, 0, 0, 0}));
}

TEST(FlattenGrad, MatchesFiniteDifferencesAndIsAView) {
  Flatten flatten;
  EXPECT_EQ(built(flatten, {2, 3, 4}).config(), nlohmann::json::object());
  const Tensor x = random_tensor({2, 2, 3, 4}, 3);
  ForwardContext ctx;
  const Tensor y = flatten.forward(x, ctx);
  EXPECT_EQ(y.shape(), (Shape{2, 24}));
  EXPECT_TRUE(y.shares_storage_with(x));
  expect_ok(check_layer(flatten, x, ctx), 1);
}

class ActivationGrad : public ::testing::TestWithParam<Activation> {};

TEST_P(ActivationGrad, MatchesFiniteDifferences) {
  ActivationLayer layer(GetParam());
  built(layer, {3, 5});
  const Tensor x = random_tensor({2, 3, 5}, 4, -2, 2);
  ForwardContext ctx;
  expect_ok(check_layer(layer, x, ctx), 1);
}

INSTANTIATE_TEST_SUITE_P(All, ActivationGrad,
                         ::testing::Values(Activation::kIdentity, Activation::kRelu,
                                           Activation::kTanh, Activation::kSigmoid));

Tensor sample_ids(std::vector<std::int64_t> ids) {
  const auto n = static_cast<std::int64_t>(ids.size());
  return Tensor::from_vector(ids, {n});
}

TEST(DropoutGrad, MatchesFiniteDifferencesWithAFixedMask) {
  Dropout dropout(0.5);
  built(dropout, {40}, "dropout_1");
  const Tensor x = random_tensor({4, 40}, 6);
  ForwardContext ctx;
  ctx.training = true;
  ctx.seed = 1234;
  ctx.sample_ids = sample_ids({7, 8, 9, 10});
  expect_ok(check_layer(dropout, x, ctx), 1);
  // Inverted dropout: every output is 0 or x / (1 - rate); a fair share of each.
  const auto y = dropout.forward(x, ctx).to_vector<double>();
  const auto xv = x.to_vector<double>();
  int kept = 0;
  for (std::size_t i = 0; i < y.size(); ++i) {
    if (y[i] != 0.0) {
      EXPECT_DOUBLE_EQ(y[i], 2.0 * xv[i]);
      ++kept;
    }
  }
  EXPECT_GT(kept, 50);
  EXPECT_LT(kept, 110);
}

TEST(DropoutGrad, MaskFollowsTheSampleNotItsPosition) {
  Dropout dropout(0.3);
  built(dropout, {16}, "dropout_1");
  const Tensor ones = Tensor::from_vector(std::vector<double>(32, 1.0), {2, 16});
  ForwardContext a, b;
  a.training = b.training = true;
  a.seed = b.seed = 99;
  a.sample_ids = sample_ids({5, 6});
  b.sample_ids = sample_ids({6, 5});
  const auto ya = dropout.forward(ones, a).to_vector<double>();
  const auto yb = dropout.forward(ones, b).to_vector<double>();
  EXPECT_TRUE(std::equal(ya.begin(), ya.begin() + 16, yb.begin() + 16));
  EXPECT_TRUE(std::equal(ya.begin() + 16, ya.end(), yb.begin()));
  EXPECT_NE(std::vector<double>(ya.begin(), ya.begin() + 16),
            std::vector<double>(ya.begin() + 16, ya.end()));
  // Another dropout layer (another name) draws another mask for the same step seed.
  Dropout other(0.3);
  built(other, {16}, "dropout_2");
  EXPECT_NE(dropout.layer_seed(99), other.layer_seed(99));
  EXPECT_NE(other.forward(ones, a).to_vector<double>(), ya);
}

TEST(DropoutGrad, IdentityWhenNotTraining) {
  Dropout dropout(0.5);
  built(dropout, {8});
  const Tensor x = random_tensor({3, 8}, 2);
  ForwardContext ctx;  // training = false
  const Tensor y = dropout.forward(x, ctx);
  EXPECT_EQ(y.to_vector<double>(), x.to_vector<double>());
  EXPECT_EQ(dropout.backward(x).to_vector<double>(), x.to_vector<double>());
}

TEST(DropoutGrad, TrainingWithoutSampleIdsIsAnError) {
  Dropout dropout(0.5);
  built(dropout, {8});
  ForwardContext ctx;
  ctx.training = true;
  EXPECT_THROW(dropout.forward(random_tensor({3, 8}, 2), ctx), InvalidArgument);
}

TEST(EmbeddingGrad, MatchesFiniteDifferencesAndPaddingRowStaysZero) {
  const int dim = 3;
  Embedding emb(6, dim);
  built(emb, {5}, "embedding_1");
  Parameter& table = *emb.parameters()[0];
  EXPECT_EQ(table.name, "embedding_1/embeddings");
  const auto init = table.value.to_vector<double>();
  for (int j = 0; j < dim; ++j) EXPECT_EQ(init[j], 0.0);
  // Repeated ids accumulate; 0 is padding (trailing and inside).
  const Tensor ids =
      Tensor::from_vector(std::vector<std::int32_t>{1, 3, 3, 0, 0, 5, 2, 0, 1, 0}, {2, 5});
  ForwardContext ctx;
  const Tensor y = emb.forward(ids, ctx);
  ASSERT_EQ(y.shape(), (Shape{2, 5, dim}));
  const Tensor w = random_tensor(y.shape(), 17);
  ops::fill(table.grad, 0.0);
  EXPECT_FALSE(emb.backward(w).defined());  // ids have no gradient
  const auto analytic = table.grad.to_vector<double>();
  const auto numeric = testing::numeric_gradient(
      table.value, [&] { return testing::weighted_sum(emb.forward(ids, ctx), w); });
  for (int j = 0; j < dim; ++j) EXPECT_EQ(analytic[j], 0.0);  // padding row: no gradient
  EXPECT_LE(testing::relative_error({analytic.begin() + dim, analytic.end()},
                                    {numeric.begin() + dim, numeric.end()}),
            kTol);
  // Row 4 is never used: zero gradient both ways.
  for (int j = 0; j < dim; ++j) EXPECT_EQ(analytic[4 * dim + j], 0.0);
}

TEST(LossGrad, SoftmaxCrossEntropyWithWeightsAndGlobalCount) {
  const Tensor logits = random_tensor({4, 5}, 21, -2, 2);
  const Tensor labels = Tensor::from_vector(std::vector<std::int32_t>{0, 3, 4, 1}, {4});
  const Tensor weights = Tensor::from_vector(std::vector<double>{1, 0, 1, 0.5}, {4});
  const double global = 7;
  const ops::LossResult r = ops::softmax_cross_entropy(logits, labels, weights, global);
  // Closed form.
  const auto z = logits.to_vector<double>();
  const std::vector<double> wv = {1, 0, 1, 0.5};
  const std::vector<int> lv = {0, 3, 4, 1};
  double expected = 0;
  for (int n = 0; n < 4; ++n) {
    double sum = 0;
    for (int c = 0; c < 5; ++c) sum += std::exp(z[n * 5 + c]);
    expected += wv[n] * (std::log(sum) - z[n * 5 + lv[n]]) / global;
  }
  EXPECT_NEAR(r.loss, expected, 1e-12);
  const auto numeric = testing::numeric_gradient(
      logits, [&] { return ops::softmax_cross_entropy(logits, labels, weights, global).loss; });
  EXPECT_LE(testing::relative_error(r.dlogits.to_vector<double>(), numeric), kTol);
  // A zero-weight sample contributes no gradient.
  const auto d = r.dlogits.to_vector<double>();
  for (int c = 0; c < 5; ++c) EXPECT_EQ(d[5 + c], 0.0);
}

TEST(LayerErrors, WrongInputShapeNamesTheLayerAndTheShapes) {
  Dense dense(4);
  built(dense, {3}, "dense_7");
  ForwardContext ctx;
  try {
    dense.forward(random_tensor({2, 5}, 1), ctx);
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("dense_7"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[N,3]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[2,5]"), std::string::npos) << msg;
  }
  Conv2D conv(2, 3, 3);
  built(conv, {1, 8, 8}, "conv2d_1");
  EXPECT_THROW(conv.forward(random_tensor({2, 1, 8, 9}, 1), ctx), InvalidArgument);
  EXPECT_THROW(conv.forward(random_tensor({2, 8, 8}, 1), ctx), InvalidArgument);
  // float32 input into a float64 layer.
  EXPECT_THROW(conv.forward(Tensor::zeros({2, 1, 8, 8}), ctx), InvalidArgument);
  Embedding emb(5, 2);
  built(emb, {4});
  EXPECT_THROW(emb.forward(random_tensor({2, 4}, 1), ctx), InvalidArgument);  // not int32
  EXPECT_THROW(Dense(0), InvalidArgument);
  EXPECT_THROW(Dropout(1.0), InvalidArgument);
  Dense flat_only(2);
  InitRng rng(1);
  // Features and sequences only: an image [C, H, W] needs a flatten (Keras's last axis is C).
  EXPECT_THROW(flat_only.build({2, 3, 4}, DType::kFloat64, Device::cpu(), rng), InvalidArgument);
}

}  // namespace
}  // namespace mirror::nn
