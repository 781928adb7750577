// Tests of the 1-D layers over sequences: Window1D's padding rules (TensorFlow's same, causal),
// im2col1d / col2im1d as adjoints, Conv1D against a direct computation (valid, same, causal,
// strides, dilation), mask-aware max and average pooling (padding never wins nor counts),
// finite-difference gradients with shorter sequences, padded vs unpadded equality in an
// Embedding(mask_zero) -> Conv1D -> pooling model, and the Keras JSON of these layers.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "gradcheck.h"
#include "mirror/nn/conv1d.h"
#include "mirror/nn/layers.h"
#include "mirror/nn/models.h"
#include "mirror/nn/recurrent.h"
#include "mirror/nn/sequential.h"
#include "mirror/ops.h"
#include "ops_test_util.h"

namespace mirror::nn {
namespace {

using nlohmann::json;
using ops_test::values;
using Vec = std::vector<double>;

TEST(Window1D, PaddingRules) {
  const ops::Window1D valid = ops::Window1D::make("valid", 10, 3, 2, 1);
  EXPECT_EQ(valid.out(10), 4);  // starts 0, 2, 4, 6
  // TensorFlow's same: ceil(10 / 3) = 4 outputs, total padding (4-1)*3 + 5 - 10 = 4 -> 2 / 2.
  const ops::Window1D same = ops::Window1D::make("same", 10, 5, 3, 1);
  EXPECT_EQ(same.out(10), 4);
  EXPECT_EQ(same.pad_left, 2);
  EXPECT_EQ(same.pad_right, 2);
  // An odd total puts the extra step after.
  const ops::Window1D even = ops::Window1D::make("same", 7, 4, 1, 1);
  EXPECT_EQ(even.pad_left, 1);
  EXPECT_EQ(even.pad_right, 2);
  // Causal: span - 1 zeros before, none after; dilation widens the span.
  const ops::Window1D causal = ops::Window1D::make("causal", 6, 3, 1, 2);
  EXPECT_EQ(causal.span(), 5);
  EXPECT_EQ(causal.pad_left, 4);
  EXPECT_EQ(causal.pad_right, 0);
  EXPECT_EQ(causal.out(6), 6);
  EXPECT_THROW(ops::Window1D::make("full", 6, 3, 1, 1), InvalidArgument);
  EXPECT_THROW(ops::Window1D::make("same", 6, 0, 1, 1), InvalidArgument);
  EXPECT_EQ(window_output_length("valid", 2, 3, 1, 1), 1);  // too short: one output, as Masking
  EXPECT_EQ(window_output_length("valid", 7, 3, 2, 1), 3);
  EXPECT_EQ(window_output_length("causal", 5, 3, 2, 1), 3);
}

TEST(Conv1DOps, Col2imIsTheAdjointOfIm2col) {
  for (const char* padding : {"valid", "same", "causal"}) {
    const ops::Window1D g =
        ops::Window1D::make(padding, 9, 3, padding[0] == 'c' ? 1 : 2, padding[0] == 'c' ? 2 : 1);
    const Tensor x = testing::random_tensor({2, 9, 3}, 1);
    const Tensor cols = ops::im2col1d(x, g);
    ASSERT_EQ(cols.shape(), (Shape{2, g.out(9), 9}));
    const Tensor c = testing::random_tensor(cols.shape(), 2);
    // <im2col(x), c> == <x, col2im(c)> for all x, c.
    EXPECT_NEAR(ops_test::dot(cols, c), ops_test::dot(x, ops::col2im1d(c, g, 9)), 1e-12) << padding;
  }
}

/// Conv1D computed straight from its definition (float64).
Vec direct_conv(const Vec& x, const Vec& w, const Vec& b, int n, int t, int c, int o, int k,
                const ops::Window1D& g) {
  const int out = g.out(t);
  Vec y(static_cast<std::size_t>(n * out * o), 0.0);
  for (int s = 0; s < n; ++s) {
    for (int step = 0; step < out; ++step) {
      for (int f = 0; f < o; ++f) {
        double v = b[f];
        for (int j = 0; j < k; ++j) {
          const int p = step * g.stride - g.pad_left + j * g.dilation;
          if (p < 0 || p >= t) continue;
          for (int ch = 0; ch < c; ++ch) v += w[(f * k + j) * c + ch] * x[(s * t + p) * c + ch];
        }
        y[(s * out + step) * o + f] = v;
      }
    }
  }
  return y;
}

TEST(Conv1DLayer, ForwardMatchesTheDefinition) {
  struct Case {
    const char* padding;
    int k, stride, dilation;
  };
  for (const Case& cs : {Case{"valid", 3, 1, 1}, Case{"valid", 2, 3, 1}, Case{"same", 4, 2, 1},
                         Case{"same", 3, 1, 2}, Case{"causal", 3, 1, 2}, Case{"causal", 2, 2, 1}}) {
    Conv1D conv(3, cs.k, cs.stride, cs.padding, cs.dilation);
    conv.set_name("conv1d_1");
    InitRng rng(4);
    const Shape out = conv.build({8, 2}, DType::kFloat64, Device::cpu(), rng);
    const ops::Window1D g = ops::Window1D::make(cs.padding, 8, cs.k, cs.stride, cs.dilation);
    EXPECT_EQ(out, (Shape{g.out(8), 3}));
    const Tensor x = testing::random_tensor({2, 8, 2}, 5);
    conv.parameters()[1]->value.copy_from(testing::random_tensor({3}, 6));
    ForwardContext ctx;
    const Vec want = direct_conv(values(x), values(conv.parameters()[0]->value),
                                 values(conv.parameters()[1]->value), 2, 8, 2, 3, cs.k, g);
    ops_test::expect_close(values(conv.forward(x, ctx)), want, 1e-14, 1e-12,
                           std::string(cs.padding) + " k" + std::to_string(cs.k));
    EXPECT_TRUE(ctx.lengths.empty());  // no lengths in, none invented
  }
  EXPECT_EQ(Conv1D(4, 3).parameters().size(), 2u);
  EXPECT_THROW(Conv1D(4, 3, 1, "full"), InvalidArgument);
  EXPECT_THROW(Conv1D(4, 3, 2, "same", 2), InvalidArgument);
}

TEST(Pool1DOps, PaddingNeverWinsNorCounts) {
  // One sample of length 3 in T = 5: steps 3, 4 hold large values that must be ignored.
  const Tensor x = Tensor::from_vector(Vec{1, -4, 2, 100, 100}, {1, 5, 1});
  const std::vector<std::int32_t> len = {3};
  const ops::Window1D g{2, 2, 1, 0, 0};  // windows {0,1}, {2,3}
  EXPECT_EQ(values(ops::pool1d_forward(ops::Pool1D::kMax, x, len, g)), (Vec{1, 2}));
  EXPECT_EQ(values(ops::pool1d_forward(ops::Pool1D::kAverage, x, len, g)), (Vec{-1.5, 2}));
  const Tensor dy = Tensor::from_vector(Vec{10, 20}, {1, 2, 1});
  EXPECT_EQ(values(ops::pool1d_backward(ops::Pool1D::kMax, x, dy, len, g)), (Vec{10, 0, 20, 0, 0}));
  EXPECT_EQ(values(ops::pool1d_backward(ops::Pool1D::kAverage, x, dy, len, g)),
            (Vec{5, 5, 20, 0, 0}));
  // A window entirely past the length gives 0; ties go to the first step.
  const Tensor tie = Tensor::from_vector(Vec{3, 3, 0, 0}, {1, 4, 1});
  EXPECT_EQ(values(ops::pool1d_forward(ops::Pool1D::kMax, tie, {2}, g)), (Vec{3, 0}));
  EXPECT_EQ(values(ops::pool1d_backward(ops::Pool1D::kMax, tie,
                                        Tensor::from_vector(Vec{1, 1}, {1, 2, 1}), {2}, g)),
            (Vec{1, 0, 0, 0}));
  EXPECT_THROW(ops::pool1d_forward(ops::Pool1D::kMax, x, {6}, g), InvalidArgument);
  EXPECT_EQ(values(ops::zero_past_lengths(Tensor::from_vector(Vec{1, 2, 3, 4}, {2, 2, 1}), {1, 2})),
            (Vec{1, 0, 3, 4}));
}

void expect_gradients_match(Layer& layer, const Shape& x_shape,
                            const std::vector<std::int32_t>& lengths, std::uint64_t seed) {
  ForwardContext ctx;
  ctx.training = true;
  ctx.lengths = lengths;
  const Tensor x = testing::random_tensor(x_shape, seed);
  Tensor w;
  {
    ForwardContext c = ctx;
    w = testing::random_tensor(layer.forward(x, c).shape(), seed + 1);
  }
  auto loss = [&] {
    ForwardContext c = ctx;
    c.training = false;
    return testing::weighted_sum(layer.forward(x, c), w);
  };
  for (Parameter* p : layer.parameters()) ops::fill(p->grad, 0.0);
  ForwardContext c = ctx;
  layer.forward(x, c);
  const Tensor dx = layer.backward(w);
  const Vec num = testing::numeric_gradient(x, loss);
  EXPECT_LT(testing::relative_error(values(dx), num), 1e-7) << layer.name() << " input";
  for (Parameter* p : layer.parameters()) {
    EXPECT_LT(testing::relative_error(values(p->grad), testing::numeric_gradient(p->value, loss)),
              1e-7)
        << p->name;
  }
}

TEST(Conv1DLayer, GradientsMatchFiniteDifferencesWithShorterSequences) {
  struct Case {
    const char* padding;
    int k, stride, dilation;
  };
  for (const Case& cs : {Case{"valid", 3, 1, 1}, Case{"same", 3, 2, 1}, Case{"causal", 2, 1, 2}}) {
    Conv1D conv(2, cs.k, cs.stride, cs.padding, cs.dilation, Activation::kTanh);
    conv.set_name(std::string("conv1d_") + cs.padding);
    InitRng rng(7);
    conv.build({6, 2}, DType::kFloat64, Device::cpu(), rng);
    conv.parameters()[1]->value.copy_from(testing::random_tensor({2}, 8));
    expect_gradients_match(conv, {3, 6, 2}, {6, 2, 4}, 9);
  }
}

TEST(Pool1DLayer, GradientsMatchFiniteDifferencesWithShorterSequences) {
  for (ops::Pool1D mode : {ops::Pool1D::kMax, ops::Pool1D::kAverage}) {
    for (const char* padding : {"valid", "same"}) {
      Pool1D pool(mode, 3, 2, padding);
      pool.set_name(pool.kind() + "_" + padding);
      InitRng rng(1);
      pool.build({7, 2}, DType::kFloat64, Device::cpu(), rng);
      expect_gradients_match(pool, {3, 7, 2}, {7, 2, 4}, 10);
    }
    GlobalPool1D global(mode);
    global.set_name(global.kind());
    InitRng rng(1);
    EXPECT_EQ(global.build({7, 2}, DType::kFloat64, Device::cpu(), rng), (Shape{2}));
    expect_gradients_match(global, {3, 7, 2}, {7, 2, 4}, 11);
  }
}

TEST(Pool1DLayer, LengthsFlowAndGlobalPoolingEndsThem) {
  Pool1D pool(ops::Pool1D::kMax, 2);
  pool.set_name("max_pooling1d_1");
  InitRng rng(1);
  EXPECT_EQ(pool.build({7, 1}, DType::kFloat64, Device::cpu(), rng), (Shape{3, 1}));
  ForwardContext ctx;
  ctx.lengths = {7, 3, 1};
  const Tensor y = pool.forward(testing::random_tensor({3, 7, 1}, 2, 1.0, 2.0), ctx);
  EXPECT_EQ(ctx.lengths, (std::vector<std::int32_t>{3, 1, 1}));
  const Vec v = values(y);
  EXPECT_EQ(v[4], 0.0);  // sample 1, step 1: past its output length
  EXPECT_GT(v[3], 0.0);
  GlobalPool1D avg(ops::Pool1D::kAverage);
  avg.set_name("global_average_pooling1d_1");
  avg.build({3, 1}, DType::kFloat64, Device::cpu(), rng);
  const Vec mean = values(avg.forward(y, ctx));
  EXPECT_TRUE(ctx.lengths.empty());
  EXPECT_NEAR(mean[1], v[3], 1e-15);  // one valid step
  EXPECT_NEAR(mean[0], (v[0] + v[1] + v[2]) / 3, 1e-15);
}

// Masking -> Embedding -> Conv1D(same) -> MaxPool1D -> Conv1D(causal, dilated) ->
// GlobalMaxPool1D -> Dense: a short sample padded next to a long one gives the output and the
// gradients of the sample alone, so the lengths are honoured through every 1-D layer.
TEST(Conv1DModel, PaddedIdsGiveTheSameOutputAndGradientsAsUnpadded) {
  Sequential m;
  m.emplace<Masking>().emplace<Embedding>(20, 3);
  m.emplace<Conv1D>(4, 3, 1, "same", 1, Activation::kRelu);
  m.emplace<Pool1D>(ops::Pool1D::kMax, 2);
  m.emplace<Conv1D>(4, 2, 1, "causal", 2, Activation::kTanh);
  m.emplace<GlobalPool1D>(ops::Pool1D::kMax).emplace<Dense>(2);
  m.build({9}, 3, DType::kFloat64);
  const Tensor padded = Tensor::from_vector(
      std::vector<std::int32_t>{4, 9, 2, 7, 5, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, {2, 9});
  const Tensor alone = Tensor::from_vector(std::vector<std::int32_t>{4, 9, 2, 7, 5}, {1, 5});
  ForwardContext c1, c2;
  c1.training = c2.training = true;
  const Vec y_pad = values(m.forward(padded, c1));
  m.backward(Tensor::from_vector(Vec{1.0, -0.5, 0.0, 0.0}, {2, 2}));
  std::vector<Vec> grads_pad;
  for (Parameter* p : m.parameters()) grads_pad.push_back(values(p->grad));
  m.zero_grad();
  const Vec y_alone = values(m.forward(alone, c2));
  m.backward(Tensor::from_vector(Vec{1.0, -0.5}, {1, 2}));
  EXPECT_NEAR(y_pad[0], y_alone[0], 1e-13);
  EXPECT_NEAR(y_pad[1], y_alone[1], 1e-13);
  const auto params = m.parameters();
  for (std::size_t i = 0; i < params.size(); ++i) {
    const Vec g = values(params[i]->grad);
    double norm = 0;
    for (std::size_t j = 0; j < g.size(); ++j) {
      EXPECT_NEAR(g[j], grads_pad[i][j], 1e-12) << params[i]->name << "[" << j << "]";
      norm += g[j] * g[j];
    }
    EXPECT_GT(norm, 0.0) << params[i]->name;
  }
}

TEST(Conv1DSpec, KerasLayersAreReadAndRejectionsNameTheField) {
  const json keras = json::parse(R"({"class_name": "Sequential", "config": {"name": "s", "layers": [
    {"class_name": "InputLayer", "config": {"batch_shape": [null, 12], "dtype": "int32"}},
    {"class_name": "Embedding", "config": {"input_dim": 30, "output_dim": 6, "mask_zero": true}},
    {"class_name": "Conv1D", "config": {"name": "conv1d", "filters": 8, "kernel_size": [3],
      "strides": [1], "padding": "causal", "data_format": "channels_last", "dilation_rate": [2],
      "groups": 1, "activation": "relu", "use_bias": true,
      "kernel_initializer": {"module": "keras.initializers", "class_name": "GlorotUniform",
                             "config": {"seed": null}, "registered_name": null},
      "bias_initializer": {"module": "keras.initializers", "class_name": "Zeros", "config": {},
                           "registered_name": null},
      "kernel_regularizer": null, "bias_regularizer": null, "activity_regularizer": null,
      "kernel_constraint": null, "bias_constraint": null}},
    {"class_name": "MaxPooling1D", "config": {"name": "mp", "pool_size": [2], "padding": "valid",
      "strides": [2], "data_format": "channels_last"}},
    {"class_name": "AveragePooling1D", "config": {"pool_size": [2], "padding": "same",
      "strides": null, "data_format": "channels_last"}},
    {"class_name": "GlobalAveragePooling1D", "config": {"data_format": "channels_last",
      "keepdims": false}},
    {"class_name": "Dense", "config": {"units": 4}}]}})");
  const DataShape tokens{{12}, DType::kInt32, 4, 30};
  const ModelSpec bound = ModelSpec::from_json(keras, "spec").bind(tokens);
  EXPECT_EQ(bound.layers()[2], json::parse(R"({"type": "conv1d", "filters": 8, "kernel": 3,
      "strides": 1, "dilation_rate": 2, "padding": "causal", "activation": "relu"})"));
  // The canonical form (what checkpoints store) reads back to the same layers.
  EXPECT_EQ(ModelSpec::from_json(bound.to_json()).bind(tokens).layers(), bound.layers());
  Sequential m = make_model(bound, DType::kFloat32, Device::cpu(), 1);
  const auto& shapes = m.layer_output_shapes();
  EXPECT_EQ(shapes[2], (Shape{12, 8}));
  EXPECT_EQ(shapes[3], (Shape{6, 8}));
  EXPECT_EQ(shapes[4], (Shape{3, 8}));
  EXPECT_EQ(shapes[5], (Shape{8}));
  EXPECT_EQ(m.parameters()[1]->value.shape(), (Shape{8, 3, 6}));  // [filters, k, C]
  ForwardContext ctx;
  EXPECT_EQ(m.forward(Tensor::zeros({2, 12}, DType::kInt32), ctx).shape(), (Shape{2, 4}));

  auto rejected = [&](const std::string& layer, const std::string& a, const std::string& b) {
    const json spec = json::parse(R"([{"type": "embedding", "output_dim": 4}, )" + layer +
                                  R"(, {"type": "global_maxpool1d"}, {"type": "dense"}])");
    try {
      ModelSpec::from_json(spec, "spec").bind(tokens);
      ADD_FAILURE() << "accepted " << layer;
    } catch (const InvalidArgument& e) {
      EXPECT_THAT(e.what(), ::testing::AllOf(::testing::HasSubstr(a), ::testing::HasSubstr(b)));
    }
  };
  rejected(R"({"class_name": "Conv1D", "config": {"filters": 2, "kernel_size": 3,
               "data_format": "channels_first"}})",
           "layer 1 (Conv1D), field 'data_format'", "channels_last");
  rejected(R"({"type": "maxpool1d", "pool": 2, "padding": "causal"})", "field 'padding'",
           "\"valid\", \"same\"");
  rejected(R"({"type": "conv1d", "filters": 2, "kernel": 3, "strides": 2, "dilation_rate": 2})",
           "field 'dilation_rate'", "not supported");
  rejected(R"({"type": "conv1d", "filters": 2, "kernel": 13})", "layer 1 (conv1d)", "does not fit");
  rejected(R"({"type": "conv1d", "filters": 2})", "field 'kernel'", "required");
}

}  // namespace
}  // namespace mirror::nn
