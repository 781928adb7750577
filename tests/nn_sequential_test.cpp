// Sequential: names and order, parameter counts, deterministic init and its statistics, the
// gradient-ready hook, zero_grad, summary and config; the model factory and its JSON spec.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <numeric>

#include "gradcheck.h"
#include "mirror/nn/init.h"
#include "mirror/nn/layers.h"
#include "mirror/nn/models.h"
#include "mirror/nn/recurrent.h"
#include "mirror/nn/sequential.h"

namespace mirror::nn {
namespace {

std::vector<std::string> names(Sequential& m) {
  std::vector<std::string> out;
  for (Parameter* p : m.parameters()) out.push_back(p->name);
  return out;
}

TEST(Sequential, CnnLayerAndParameterNamesShapesAndCount) {
  Sequential m = make_cnn();
  std::vector<std::string> layers;
  for (auto& l : m.layers()) layers.push_back(l->name());
  EXPECT_EQ(layers,
            (std::vector<std::string>{"conv2d_1", "max_pooling2d_1", "conv2d_2", "max_pooling2d_2",
                                      "flatten_1", "dense_1", "dropout_1", "dense_2"}));
  EXPECT_EQ(names(m), (std::vector<std::string>{
                          "conv2d_1/kernel", "conv2d_1/bias", "conv2d_2/kernel", "conv2d_2/bias",
                          "dense_1/kernel", "dense_1/bias", "dense_2/kernel", "dense_2/bias"}));
  const auto params = m.parameters();
  EXPECT_EQ(params[0]->value.shape(), (Shape{32, 1, 5, 5}));
  EXPECT_EQ(params[2]->value.shape(), (Shape{64, 32, 5, 5}));
  EXPECT_EQ(params[4]->value.shape(), (Shape{7 * 7 * 64, 1024}));
  EXPECT_EQ(params[6]->value.shape(), (Shape{1024, 10}));
  EXPECT_EQ(m.parameter_count(), 3274634);
  EXPECT_EQ(m.output_shape(), (Shape{10}));
  EXPECT_EQ(m.input_shape(), (Shape{1, 28, 28}));
  for (Parameter* p : params) {
    EXPECT_EQ(p->grad.shape(), p->value.shape()) << p->name;
    EXPECT_EQ(p->value.dtype(), DType::kFloat32);
  }
  // The first layer never needs its input gradient; the others do.
  EXPECT_FALSE(m.layers()[0]->input_grad_needed());
  EXPECT_TRUE(m.layers()[2]->input_grad_needed());
}

TEST(Sequential, GruModelsNamesAndCounts) {
  Sequential rows = make_row_gru();
  EXPECT_EQ(names(rows),
            (std::vector<std::string>{"gru_1/kernel", "gru_1/recurrent_kernel", "gru_1/bias",
                                      "gru_1/recurrent_bias", "dense_1/kernel", "dense_1/bias"}));
  // GRU: 3*64*(28 + 64) + 2*3*64; Dense: 64*10 + 10.
  EXPECT_EQ(rows.parameter_count(), 3 * 64 * (28 + 64) + 2 * 3 * 64 + 64 * 10 + 10);
  Sequential words = make_word_gru(100, 4, 12);
  EXPECT_EQ(names(words),
            (std::vector<std::string>{"embedding_1/embeddings", "gru_1/kernel",
                                      "gru_1/recurrent_kernel", "gru_1/bias",
                                      "gru_1/recurrent_bias", "dense_1/kernel", "dense_1/bias"}));
  EXPECT_EQ(words.parameter_count(), 100 * 32 + 3 * 64 * (32 + 64) + 2 * 3 * 64 + 64 * 4 + 4);
  EXPECT_EQ(words.layers()[0]->name(), "masking_1");
}

TEST(Sequential, InitIsDeterministicForASeed) {
  auto prints = [](Sequential m) {
    std::vector<std::uint64_t> out;
    for (Parameter* p : m.parameters()) out.push_back(ops::fingerprint(p->value));
    return out;
  };
  EXPECT_EQ(prints(make_row_gru(DType::kFloat32, Device::cpu(), 5)),
            prints(make_row_gru(DType::kFloat32, Device::cpu(), 5)));
  const auto a = prints(make_row_gru(DType::kFloat32, Device::cpu(), 5));
  const auto b = prints(make_row_gru(DType::kFloat32, Device::cpu(), 6));
  EXPECT_NE(a[0], b[0]);
  EXPECT_EQ(a[2], b[2]);  // zero biases agree
  // float64 and float32 builds hold the same values (cast from the same doubles).
  Sequential m32 = make_row_gru(DType::kFloat32, Device::cpu(), 9);
  Sequential m64 = make_row_gru(DType::kFloat64, Device::cpu(), 9);
  const auto v32 = m32.parameters()[0]->value.to_vector<float>();
  const auto v64 = m64.parameters()[0]->value.to_vector<double>();
  for (std::size_t i = 0; i < v32.size(); ++i) ASSERT_EQ(v32[i], static_cast<float>(v64[i]));
}

void expect_uniform_stats(const std::vector<float>& v, double limit, const std::string& what) {
  const double n = static_cast<double>(v.size());
  double mean = 0, var = 0, lo = 0, hi = 0;
  for (float x : v) {
    mean += x;
    lo = std::min<double>(lo, x);
    hi = std::max<double>(hi, x);
  }
  mean /= n;
  for (float x : v) var += (x - mean) * (x - mean);
  var /= n;
  const double want_var = limit * limit / 3;
  EXPECT_LE(hi, limit) << what;
  EXPECT_GE(lo, -limit) << what;
  EXPECT_GT(hi, 0.95 * limit) << what;
  EXPECT_LT(lo, -0.95 * limit) << what;
  EXPECT_LT(std::abs(mean), 5 * std::sqrt(want_var / n)) << what;
  EXPECT_NEAR(var, want_var, 0.05 * want_var) << what;
}

TEST(Init, GlorotUniformStatisticsOfTheCnn) {
  Sequential m = make_cnn(DType::kFloat32, Device::cpu(), 3);
  const auto p = m.parameters();
  expect_uniform_stats(p[0]->value.to_vector<float>(), std::sqrt(6.0 / (25 + 32 * 25)), "conv1");
  expect_uniform_stats(p[2]->value.to_vector<float>(), std::sqrt(6.0 / (32 * 25 + 64 * 25)),
                       "conv2");
  expect_uniform_stats(p[4]->value.to_vector<float>(), std::sqrt(6.0 / (3136 + 1024)), "dense1");
  for (int i : {1, 3, 5, 7}) {
    for (float b : p[i]->value.to_vector<float>()) ASSERT_EQ(b, 0.0f) << p[i]->name;
  }
}

TEST(Init, EmbeddingUniformWithZeroPaddingRow) {
  Sequential m = make_word_gru(500, 3, 8, DType::kFloat32, Device::cpu(), 1);
  const auto table = m.parameters()[0]->value.to_vector<float>();
  for (int j = 0; j < 32; ++j) EXPECT_EQ(table[j], 0.0f);
  expect_uniform_stats({table.begin() + 32, table.end()}, 0.05, "embeddings");
}

TEST(Init, OrthogonalHasOrthonormalRowsOrColumns) {
  for (auto [rows, cols] : {std::pair<int, int>{6, 4}, {4, 6}, {5, 5}}) {
    InitRng rng(11);
    const auto q = init::orthogonal_values(rows, cols, rng);
    const int k = std::min(rows, cols);
    // Q^T Q = I (tall or square) or Q Q^T = I (wide).
    for (int a = 0; a < k; ++a) {
      for (int b = 0; b < k; ++b) {
        double dot = 0;
        for (int i = 0; i < std::max(rows, cols); ++i) {
          dot +=
              rows >= cols ? q[i * cols + a] * q[i * cols + b] : q[a * cols + i] * q[b * cols + i];
        }
        EXPECT_NEAR(dot, a == b ? 1.0 : 0.0, 1e-12) << rows << "x" << cols;
      }
    }
    InitRng again(11);
    EXPECT_EQ(init::orthogonal_values(rows, cols, again), q);
  }
}

TEST(Init, UniformAndGlorotRanges) {
  InitRng rng(3);
  const auto u = init::uniform_values(1000, 2.0, 3.0, rng);
  EXPECT_GE(*std::min_element(u.begin(), u.end()), 2.0);
  EXPECT_LT(*std::max_element(u.begin(), u.end()), 3.0);
  const Tensor g = init::glorot_uniform({10, 20}, 10, 20, DType::kFloat64, Device::cpu(), rng);
  for (double x : g.to_vector<double>()) EXPECT_LE(std::abs(x), std::sqrt(6.0 / 30));
  EXPECT_THROW(init::to_tensor({1.0}, {1}, DType::kInt32, Device::cpu()), InvalidArgument);
}

// A tiny float64 model: checks Sequential's backward as a whole (chain of layers) against
// finite differences of the real loss.
Sequential tiny_cnn() {
  Sequential m;
  m.emplace<Conv2D>(3, 3, 3, 1, Padding::kSame, Activation::kTanh)
      .emplace<MaxPool2D>(2)
      .emplace<Flatten>()
      .emplace<Dense>(5, Activation::kSigmoid)
      .emplace<Dropout>(0.25)
      .emplace<Dense>(3);
  m.build({2, 6, 6}, 17, DType::kFloat64);
  return m;
}

TEST(Sequential, WholeModelGradientMatchesFiniteDifferences) {
  Sequential m = tiny_cnn();
  const Tensor x = testing::random_tensor({4, 2, 6, 6}, 3);
  const Tensor labels = Tensor::from_vector(std::vector<std::int32_t>{0, 2, 1, 2}, {4});
  const Tensor weights = Tensor::from_vector(std::vector<double>{1, 1, 1, 0}, {4});
  ForwardContext ctx;
  ctx.training = true;
  ctx.seed = 8;
  ctx.sample_ids = Tensor::from_vector(std::vector<std::int64_t>{0, 1, 2, 3}, {4});
  auto loss = [&] {
    return ops::softmax_cross_entropy(m.forward(x, ctx), labels, weights, 3).loss;
  };
  m.zero_grad();
  const auto r = ops::softmax_cross_entropy(m.forward(x, ctx), labels, weights, 3);
  std::vector<std::string> order;
  std::map<std::string, std::vector<double>> at_hook;
  m.backward(r.dlogits, [&](const std::vector<Parameter*>& ps) {
    for (Parameter* p : ps) {
      order.push_back(p->name);
      at_hook[p->name] = p->grad.to_vector<double>();
    }
  });
  // Hook: last layer first, each layer's parameters in order, gradients already final.
  EXPECT_EQ(order, (std::vector<std::string>{"dense_2/kernel", "dense_2/bias", "dense_1/kernel",
                                             "dense_1/bias", "conv2d_1/kernel", "conv2d_1/bias"}));
  for (Parameter* p : m.parameters()) {
    EXPECT_EQ(at_hook[p->name], p->grad.to_vector<double>()) << p->name;
    const auto numeric = testing::numeric_gradient(p->value, loss);
    EXPECT_LE(testing::relative_error(p->grad.to_vector<double>(), numeric), 1e-6) << p->name;
  }
  // Gradients accumulate across backward calls (a convolution's and a Dense kernel's alike).
  std::vector<std::vector<double>> once;
  for (Parameter* p : m.parameters()) once.push_back(p->grad.to_vector<double>());
  m.forward(x, ctx);
  m.backward(r.dlogits);
  for (std::size_t k = 0; k < once.size(); ++k) {
    const auto twice = m.parameters()[k]->grad.to_vector<double>();
    for (std::size_t i = 0; i < twice.size(); ++i) {
      ASSERT_NEAR(twice[i], 2 * once[k][i], 1e-12) << m.parameters()[k]->name;
    }
  }
  // zero_grad clears them: a fill, or for a Dense kernel (Note [First gradient write]) a mark
  // that makes the next backward overwrite whatever the buffer holds.
  m.zero_grad();
  for (Parameter* p : m.parameters()) {
    ASSERT_EQ(p->grad_unwritten,
              p->name.find("dense") == 0 && p->name.find("kernel") != std::string::npos)
        << p->name;
    if (p->grad_unwritten) {
      ops::fill(p->grad, std::numeric_limits<double>::quiet_NaN());
      continue;
    }
    for (double g : p->grad.to_vector<double>()) ASSERT_EQ(g, 0.0);
  }
  m.forward(x, ctx);
  m.backward(r.dlogits);
  for (std::size_t k = 0; k < once.size(); ++k) {
    EXPECT_FALSE(m.parameters()[k]->grad_unwritten);
    EXPECT_EQ(m.parameters()[k]->grad.to_vector<double>(), once[k]) << m.parameters()[k]->name;
  }
}

TEST(Sequential, WrongInputNamesTheFirstLayer) {
  Sequential m = make_cnn();
  ForwardContext ctx;
  try {
    m.forward(Tensor::zeros({2, 1, 27, 28}), ctx);
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("conv2d_1"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[N,1,28,28]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[2,1,27,28]"), std::string::npos) << msg;
  }
}

TEST(Sequential, MisuseIsReported) {
  Sequential empty;
  EXPECT_THROW(empty.build({3}, 1), InvalidArgument);
  Sequential m;
  m.emplace<Dense>(2);
  ForwardContext ctx;
  EXPECT_THROW(m.forward(Tensor::zeros({1, 3}), ctx), InvalidArgument);
  m.build({3}, 1);
  EXPECT_THROW(m.build({3}, 1), InvalidArgument);
  EXPECT_THROW(m.emplace<Dense>(2), InvalidArgument);
  Sequential bad;
  bad.emplace<Flatten>().emplace<Dense>(2);
  EXPECT_THROW(bad.build({3}, 1, DType::kInt32), InvalidArgument);
}

TEST(Sequential, SummaryAndConfig) {
  Sequential m = make_cnn();
  const std::string s = m.summary();
  EXPECT_NE(s.find("conv2d_1 (conv2d)"), std::string::npos) << s;
  EXPECT_NE(s.find("(None, 32, 28, 28)"), std::string::npos) << s;
  EXPECT_NE(s.find("(None, 3136)"), std::string::npos) << s;
  EXPECT_NE(s.find("3212288"), std::string::npos) << s;  // dense_1: 3136 * 1024 + 1024
  EXPECT_NE(s.find("Total params: 3274634"), std::string::npos) << s;
  const nlohmann::json c = m.config();
  EXPECT_EQ(c["input_shape"], nlohmann::json({1, 28, 28}));
  EXPECT_EQ(c["dtype"], "float32");
  ASSERT_EQ(c["layers"].size(), 8u);
  EXPECT_EQ(c["layers"][0]["kind"], "conv2d");
  EXPECT_EQ(c["layers"][0]["name"], "conv2d_1");
  EXPECT_EQ(c["layers"][0]["config"]["filters"], 32);
  EXPECT_EQ(c["layers"][0]["config"]["padding"], "same");
  EXPECT_EQ(c["layers"][0]["config"]["activation"], "relu");
  EXPECT_EQ(c["layers"][6]["config"]["rate"], 0.4);
  EXPECT_EQ(c["layers"][7]["config"]["units"], 10);
  EXPECT_EQ(c["layers"][7]["config"]["activation"], "linear");
}

TEST(Models, SpecRoundTripAndFactory) {
  const ModelSpec spec =
      ModelSpec::builtin("gru-words").bind({{9}, DType::kInt32, /*outputs=*/3, /*vocab=*/50});
  const ModelSpec back = ModelSpec::from_json(spec.to_json());
  EXPECT_EQ(back.to_json(), spec.to_json());
  EXPECT_TRUE(back.bound());
  Sequential words = make_model(back, DType::kFloat32, Device::cpu(), 2);
  EXPECT_EQ(words.output_shape(), (Shape{3}));
  EXPECT_EQ(words.input_shape(), (Shape{9}));
  EXPECT_EQ(make_model("cnn").parameter_count(), 3274634);
  EXPECT_EQ(make_model("gru-rows").output_shape(), (Shape{10}));
  EXPECT_EQ(make_model("resnet").parameter_count(), 174970);  // the graph models too
  EXPECT_THROW(make_model("vgg16"), InvalidArgument);
  EXPECT_THROW(make_model("gru-words"), InvalidArgument);                      // needs a vocabulary
  EXPECT_THROW(make_model(ModelSpec::builtin("gru-words")), InvalidArgument);  // not bound
  EXPECT_THROW(ModelSpec::from_json({{"name", "gru-words"}}), InvalidArgument);
  EXPECT_THROW(ModelSpec::from_json({{"name", "cnn"}, {"num_classes", "ten"}}), InvalidArgument);
  EXPECT_THROW(ModelSpec::from_json(nlohmann::json::array()), InvalidArgument);
}

}  // namespace
}  // namespace mirror::nn
