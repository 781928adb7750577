// Keras's own applications, unchanged (keras.applications.EfficientNetB0 and MobileNetV3Small
// from to_json()): what they need, each against its definition, and both models read from their
// JSON (tests/data/keras/make_applications.py), built and trained a step.
//  - the spec's initializers (Note [Spec initializers], nn/init.h): the statistics of the drawn
//    values, the canonical fields the reader writes, the refusals;
//  - the activations differentiated through their input (silu, hard_sigmoid, hard_silu, gelu in
//    both forms) as Activation layers and fused into Dense, Conv2D and DepthwiseConv2D (Note
//    [Activations through the input], nn/keras_ops_layers.h): values and float64 gradients;
//  - broadcasting merges ([C, H, W] * [C, 1, 1]) and Keras's x + c, x * c, c - x, x / c op nodes
//    (Note [Scalar operands], model_spec_scalar_ops.cpp);
//  - Dropout(noise_shape) and GlobalAveragePooling2D(keepdims=True).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include "gradcheck.h"
#include "mirror/nn/cnn_layers.h"
#include "mirror/nn/init.h"
#include "mirror/nn/keras_layers.h"
#include "mirror/nn/keras_ops_layers.h"
#include "mirror/nn/layers.h"
#include "mirror/nn/models.h"

namespace mirror::nn {
namespace {

using nlohmann::json;
using testing::built;
using testing::check_layer;
using testing::expect_gradients_within;
using testing::random_tensor;

std::vector<double> v(const Tensor& t) { return t.to_vector<double>(); }

struct Stats {
  double mean = 0, stddev = 0, low = 0, high = 0;
};

Stats stats(const std::vector<double>& x) {
  Stats s;
  s.mean = std::accumulate(x.begin(), x.end(), 0.0) / static_cast<double>(x.size());
  double sq = 0;
  for (double e : x) sq += (e - s.mean) * (e - s.mean);
  s.stddev = std::sqrt(sq / static_cast<double>(x.size()));
  s.low = *std::min_element(x.begin(), x.end());
  s.high = *std::max_element(x.begin(), x.end());
  return s;
}

json initializer(const std::string& cls, const json& config = json::object()) {
  return {{"class_name", cls}, {"config", config}};
}

json variance_scaling(double scale, const std::string& mode, const std::string& distribution) {
  return initializer("VarianceScaling",
                     {{"scale", scale}, {"mode", mode}, {"distribution", distribution}});
}

// ---------------------------------------------------------------- initializers

// A 3x3 convolution kernel 32 -> 64 (Mirror's OIHW): Keras's fans are 32 * 9 and 64 * 9.
constexpr std::int64_t kFanIn = 288, kFanOut = 576;
const Shape kKernel = {64, 32, 3, 3};

std::vector<double> draw(const json& spec, std::uint64_t seed = 1) {
  InitRng rng(seed);
  return init::initializer_values(spec, kKernel, kFanIn, kFanOut, rng);
}

/// A truncated normal of standard deviation `stddev` (after the truncation) and bound `bound`.
void expect_truncated(const std::vector<double>& x, double stddev, double bound,
                      const std::string& what) {
  const Stats s = stats(x);
  EXPECT_NEAR(s.mean, 0.0, 4 * stddev / std::sqrt(static_cast<double>(x.size()))) << what;
  EXPECT_NEAR(s.stddev, stddev, 0.02 * stddev) << what;
  EXPECT_LE(std::max(-s.low, s.high), bound) << what;
  EXPECT_GE(std::max(-s.low, s.high), 0.97 * bound) << what;  // the tails reach the bound
}

void expect_uniform(const std::vector<double>& x, double limit, const std::string& what) {
  const Stats s = stats(x);
  EXPECT_NEAR(s.mean, 0.0, 4 * limit / std::sqrt(3.0 * static_cast<double>(x.size()))) << what;
  EXPECT_NEAR(s.stddev, limit / std::sqrt(3.0), 0.02 * limit) << what;
  EXPECT_GE(s.low, -limit) << what;
  EXPECT_LT(s.high, limit) << what;
  EXPECT_LE(s.low, -0.99 * limit) << what;
  EXPECT_GE(s.high, 0.99 * limit) << what;
}

TEST(SpecInitializers, VarianceScalingHasKerassStatistics) {
  // Keras: scale / max(1, fan); truncated_normal's stddev is sqrt(scale) / 0.8796..., cut at two
  // of those, which leaves a standard deviation of sqrt(scale).
  const double tn = 0.87962566103423978;
  for (const auto& [mode, fan] : {std::pair<std::string, double>{"fan_in", kFanIn},
                                  {"fan_out", kFanOut},
                                  {"fan_avg", (kFanIn + kFanOut) / 2.0}}) {
    const double var = 2.0 / fan;
    expect_truncated(draw(variance_scaling(2.0, mode, "truncated_normal")), std::sqrt(var),
                     2 * std::sqrt(var) / tn, mode + " truncated_normal");
    expect_uniform(draw(variance_scaling(2.0, mode, "uniform")), std::sqrt(3 * var),
                   mode + " uniform");
    const Stats s = stats(draw(variance_scaling(2.0, mode, "untruncated_normal")));
    EXPECT_NEAR(s.stddev, std::sqrt(var), 0.02 * std::sqrt(var)) << mode;
    EXPECT_GT(std::max(-s.low, s.high), 3 * std::sqrt(var)) << mode << ": not truncated";
  }
  // EfficientNet's Dense: VarianceScaling(1/3, fan_out, uniform) on a [1280, 10] kernel.
  InitRng rng(3);
  const std::vector<double> dense = init::initializer_values(
      variance_scaling(1.0 / 3.0, "fan_out", "uniform"), {1280, 10}, 1280, 10, rng);
  expect_uniform(dense, std::sqrt(1.0 / 10.0), "EfficientNet's dense");
}

TEST(SpecInitializers, NamedCasesAndTheOthers) {
  const double tn = 0.87962566103423978;
  const auto sd = [](double var) { return std::sqrt(var); };
  expect_truncated(draw(initializer("HeNormal")), sd(2.0 / kFanIn), 2 * sd(2.0 / kFanIn) / tn,
                   "HeNormal");
  expect_uniform(draw(initializer("HeUniform")), sd(6.0 / kFanIn), "HeUniform");
  expect_truncated(draw(initializer("LecunNormal")), sd(1.0 / kFanIn), 2 * sd(1.0 / kFanIn) / tn,
                   "LecunNormal");
  expect_uniform(draw(initializer("LecunUniform")), sd(3.0 / kFanIn), "LecunUniform");
  const double avg = (kFanIn + kFanOut) / 2.0;
  expect_truncated(draw(initializer("GlorotNormal")), sd(1.0 / avg), 2 * sd(1.0 / avg) / tn,
                   "GlorotNormal");
  expect_uniform(draw(initializer("GlorotUniform")), sd(3.0 / avg), "GlorotUniform");

  // TruncatedNormal(mean, stddev): cut at two stddev, so its spread is 0.8796 stddev.
  const std::vector<double> t =
      draw(initializer("TruncatedNormal", {{"mean", 1.0}, {"stddev", 0.5}}));
  Stats s = stats(t);
  EXPECT_NEAR(s.mean, 1.0, 0.01);
  EXPECT_NEAR(s.stddev, 0.5 * tn, 0.01);
  EXPECT_GE(s.low, 0.0);
  EXPECT_LE(s.high, 2.0);
  s = stats(draw(initializer("RandomNormal", {{"mean", -1.0}, {"stddev", 2.0}})));
  EXPECT_NEAR(s.mean, -1.0, 0.05);
  EXPECT_NEAR(s.stddev, 2.0, 0.04);
  EXPECT_LT(s.low, -1.0 - 3 * 2.0);  // not truncated
  s = stats(draw(initializer("RandomUniform", {{"minval", 0.0}, {"maxval", 3.0}})));
  EXPECT_NEAR(s.mean, 1.5, 0.03);
  EXPECT_GE(s.low, 0.0);
  EXPECT_LT(s.high, 3.0);
  for (const auto& [spec, value] : {std::pair<json, double>{initializer("Zeros"), 0.0},
                                    {initializer("Ones"), 1.0},
                                    {initializer("Constant", {{"value", 0.25}}), 0.25}}) {
    const std::vector<double> c = draw(spec);
    EXPECT_TRUE(std::all_of(c.begin(), c.end(), [&](double x) { return x == value; })) << spec;
  }
  // Orthogonal(gain 2) of a [6, 10] matrix: orthogonal rows of norm 2.
  InitRng rng(5);
  const std::vector<double> q =
      init::initializer_values(initializer("Orthogonal", {{"gain", 2.0}}), {6, 10}, 6, 10, rng);
  for (int i = 0; i < 6; ++i)
    for (int j = 0; j < 6; ++j) {
      double dot = 0;
      for (int k = 0; k < 10; ++k) dot += q[i * 10 + k] * q[j * 10 + k];
      EXPECT_NEAR(dot, i == j ? 4.0 : 0.0, 1e-12) << i << ", " << j;
    }
  // The same seed draws the same values; another seed others.
  EXPECT_EQ(draw(initializer("HeNormal"), 9), draw(initializer("HeNormal"), 9));
  EXPECT_NE(draw(initializer("HeNormal"), 9), draw(initializer("HeNormal"), 10));
  InitRng r2(1);
  EXPECT_THROW(init::initializer_values(initializer("Identity"), kKernel, 1, 1, r2),
               InvalidArgument);
}

ModelSpec keras_sequential(const std::string& layers,
                           const std::string& input = "[null, 6, 6, 4]") {
  return ModelSpec::from_json(json::parse(
      R"({"class_name": "Sequential", "config": {"layers": [{"class_name": "InputLayer", "config": {"batch_shape": )" +
      input + R"(}}, )" + layers + "]}}"));
}

std::string conv(const std::string& extra) {
  return R"({"class_name": "Conv2D", "config": {"filters": 64, "kernel_size": [3, 3], "padding": "same")" +
         extra + "}}";
}

TEST(SpecInitializers, TheReaderKeepsWhatDiffersFromTheDefault) {
  // EfficientNet's stem convolution.
  const ModelSpec spec = keras_sequential(
      conv(
          R"(, "kernel_initializer": {"module": "keras.initializers", "class_name": "VarianceScaling", "config": {"seed": null, "scale": 2.0, "mode": "fan_out", "distribution": "truncated_normal", "input_axes": null, "output_axes": null}, "registered_name": null}, "bias_initializer": {"module": "keras.initializers", "class_name": "Zeros", "config": {}, "registered_name": null})") +
          R"(, {"class_name": "Flatten", "config": {}}, {"class_name": "Dense", "config": {"units": 3, "kernel_initializer": "he_normal", "bias_initializer": {"class_name": "Constant", "config": {"value": 0.1}}}})",
      "[null, 6, 6, 32]");
  const json& c = spec.layers()[0];
  EXPECT_EQ(c["kernel_initializer"], variance_scaling(2.0, "fan_out", "truncated_normal"));
  EXPECT_FALSE(c.contains("bias_initializer"));  // Zeros: the default
  const json& d = spec.layers()[2];
  EXPECT_EQ(d["kernel_initializer"], initializer("HeNormal"));
  EXPECT_EQ(d["bias_initializer"], initializer("Constant", {{"value", 0.1}}));
  // The canonical spec reads back as itself (checkpoints store it).
  EXPECT_EQ(ModelSpec::from_json(spec.to_json()).layers(), spec.layers());
  // Defaults write nothing: a Keras model at its defaults keeps the spec (and weights) it had.
  const ModelSpec plain = keras_sequential(conv(
      R"(, "kernel_initializer": {"class_name": "GlorotUniform", "config": {"seed": null}}, "bias_initializer": "zeros")"));
  EXPECT_FALSE(plain.layers()[0].contains("kernel_initializer"));

  // The model draws them: the kernel's spread is VarianceScaling's, the bias the constant.
  Sequential m =
      make_model(spec.bind({{32, 6, 6}, DType::kFloat32, 3, 0}), DType::kFloat64, Device::cpu(), 7);
  const std::vector<Parameter*> p = m.parameters();
  ASSERT_EQ(p.size(), 4u);
  EXPECT_EQ(p[0]->name, "conv2d_1/kernel");
  EXPECT_NEAR(stats(v(p[0]->value)).stddev, std::sqrt(2.0 / (64 * 9)), 0.02 * std::sqrt(2.0 / 576));
  EXPECT_LE(stats(v(p[0]->value)).high, 2 * std::sqrt(2.0 / 576) / 0.87962566103423978);
  EXPECT_EQ(v(p[3]->value), std::vector<double>(3, 0.1));
  // HeNormal's fans for the Dense: fan_in = 64 * 6 * 6.
  EXPECT_NEAR(stats(v(p[2]->value)).stddev, std::sqrt(2.0 / 2304), 0.03 * std::sqrt(2.0 / 2304));
}

TEST(SpecInitializers, RefusesWhatItCannotDraw) {
  const auto refused = [](const std::string& layers, const std::string& needle) {
    try {
      keras_sequential(layers, "[null, 6, 6, 32]");
      ADD_FAILURE() << "accepted " << layers;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  refused(
      conv(R"(, "kernel_initializer": {"class_name": "Identity", "config": {"gain": 1.0}})"),
      "field 'kernel_initializer': unsupported initializer 'Identity'; supported: VarianceScaling");
  refused(
      conv(
          R"(, "kernel_initializer": {"class_name": "VarianceScaling", "config": {"mode": "fan_sum"}})"),
      "mode must be fan_in, fan_out or fan_avg");
  refused(
      conv(
          R"(, "kernel_initializer": {"class_name": "VarianceScaling", "config": {"distribution": "poisson"}})"),
      "distribution must be truncated_normal");
  refused(
      conv(R"(, "kernel_initializer": {"class_name": "VarianceScaling", "config": {"scale": -1}})"),
      "scale must be positive");
  refused(
      conv(R"(, "kernel_initializer": {"class_name": "HeNormal", "config": {"input_axes": [0]}})"),
      "config 'input_axes': must be null");
  refused(conv(R"(, "kernel_initializer": {"class_name": "RandomNormal", "config": {"sigma": 1}})"),
          "config 'sigma': unknown field; known: mean, stddev");
  refused(conv(R"(, "bias_initializer": "orthogonal")"), "Orthogonal initialises matrices");
  refused(
      R"({"class_name": "DepthwiseConv2D", "config": {"kernel_size": 3, "depthwise_initializer": "orthogonal"}})",
      "Orthogonal initialises matrices");
  // Layers that draw only their own defaults still say so.
  refused(R"({"class_name": "BatchNormalization", "config": {"gamma_initializer": "he_normal"}})",
          "supports no other initializer");
}

// ---------------------------------------------------------------- activations

ops::Eltwise eltwise(ops::Eltwise::Kind kind) {
  ops::Eltwise f;
  f.kind = kind;
  return f;
}

double phi(double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); }

TEST(InputActivations, ComputeKerassDefinitions) {
  using Kind = ops::Eltwise::Kind;
  const std::vector<double> xs = {-5, -3, -2.5, -1, -0.2, 0, 0.3, 1, 2.9, 3, 4.5};
  const Tensor x = Tensor::from_vector(xs, {1, static_cast<std::int64_t>(xs.size())});
  const auto relu6 = [](double z) { return std::min(std::max(z, 0.0), 6.0); };
  const std::vector<std::pair<Kind, std::function<double(double)>>> cases = {
      {Kind::kSilu, [](double z) { return z / (1 + std::exp(-z)); }},
      {Kind::kHardSigmoid, [&](double z) { return relu6(z + 3) / 6; }},
      {Kind::kHardSilu, [&](double z) { return z * relu6(z + 3) / 6; }},
      {Kind::kGelu, [](double z) { return z * phi(z); }},
      {Kind::kGeluTanh, [](double z) {
         return 0.5 * z * (1 + std::tanh(std::sqrt(2 / M_PI) * (z + 0.044715 * z * z * z)));
       }}};
  for (const auto& [kind, f] : cases) {
    const std::vector<double> y = v(ops::eltwise_forward(eltwise(kind), x));
    for (std::size_t i = 0; i < xs.size(); ++i) {
      EXPECT_NEAR(y[i], f(xs[i]), 1e-15) << input_activation_name(eltwise(kind)) << " at " << xs[i];
    }
  }
  // The names a spec uses, Keras's aliases included.
  EXPECT_EQ(input_activation("swish")->kind, Kind::kSilu);
  EXPECT_EQ(input_activation("hard_swish")->kind, Kind::kHardSilu);
  EXPECT_EQ(input_activation("relu6")->max_value, 6.0);
  EXPECT_FALSE(input_activation("relu").has_value());
  EXPECT_FALSE(input_activation("softplus").has_value());
}

TEST(InputActivations, MatchFiniteDifferences) {
  using Kind = ops::Eltwise::Kind;
  ForwardContext ctx;
  for (const Kind kind :
       {Kind::kSilu, Kind::kHardSigmoid, Kind::kHardSilu, Kind::kGelu, Kind::kGeluTanh}) {
    ParametricActivation a(eltwise(kind));
    SCOPED_TRACE(input_activation_name(eltwise(kind)));
    EXPECT_EQ(a.kind(), "activation");
    const auto r = check_layer(built(a, {4, 5}), random_tensor({3, 4, 5}, 3, -5, 5), ctx);
    expect_gradients_within(r, 1);
  }
}

TEST(InputActivations, FusedIntoDenseConvAndDepthwise) {
  ForwardContext ctx;
  // Dense(silu): the wrapper is the layer, named and counted as the Dense.
  ActivatedLayer dense(std::make_unique<Dense>(4), *input_activation("silu"));
  const auto r = check_layer(built(dense, {6}, "dense_1"), random_tensor({3, 6}, 1, -2, 2), ctx);
  expect_gradients_within(r, 3);
  EXPECT_EQ(dense.kind(), "dense");
  EXPECT_EQ(dense.parameters()[0]->name, "dense_1/kernel");
  EXPECT_EQ(dense.config()["activation"], "silu");
  EXPECT_EQ(dense.config()["units"], 4);
  ActivatedLayer conv2d(std::make_unique<Conv2D>(3, 3, 3, 1, Padding::kSame),
                        *input_activation("hard_silu"));
  expect_gradients_within(
      check_layer(built(conv2d, {2, 5, 5}), random_tensor({2, 2, 5, 5}, 2, -2, 2), ctx), 3);
  ActivatedLayer depthwise(
      std::make_unique<DepthwiseConv2D>(3, 3, 1, Padding::kSame, 2, Activation::kIdentity, true),
      *input_activation("gelu"));
  expect_gradients_within(
      check_layer(built(depthwise, {2, 4, 4}), random_tensor({2, 2, 4, 4}, 4, -2, 2), ctx), 3);
  // The forward is the layer's then the function's.
  Dense plain(4);
  built(plain, {6}, "dense_1");
  const Tensor x = random_tensor({3, 6}, 1, -2, 2);
  const std::vector<double> z = v(plain.forward(x, ctx)), y = v(dense.forward(x, ctx));
  for (std::size_t i = 0; i < z.size(); ++i) EXPECT_NEAR(y[i], z[i] / (1 + std::exp(-z[i])), 1e-15);
}

TEST(InputActivations, SpecsReadThemWhereKerasWritesThem) {
  const ModelSpec spec =
      keras_sequential(conv(R"(, "activation": "swish")") +
                       R"(, {"class_name": "Activation", "config": {"activation": "hard_swish"}},
         {"class_name": "DepthwiseConv2D", "config": {"kernel_size": 3, "activation": "hard_sigmoid"}},
         {"class_name": "Activation", "config": {"activation": "gelu"}},
         {"class_name": "GlobalAveragePooling2D", "config": {}},
         {"class_name": "Dense", "config": {"units": 5, "activation": "gelu"}},
         {"class_name": "Dense", "config": {"units": 3, "activation": "softmax"}})");
  const json& l = spec.layers();
  EXPECT_EQ(l[0]["activation"], "silu");
  EXPECT_EQ(l[1], (json{{"type", "activation"}, {"activation", "hard_silu"}}));
  EXPECT_EQ(l[2]["activation"], "hard_sigmoid");
  EXPECT_EQ(l[3], (json{{"type", "activation"}, {"activation", "gelu"}}));
  EXPECT_EQ(l[5]["activation"], "gelu");
  Sequential m =
      make_model(spec.bind({{4, 6, 6}, DType::kFloat32, 3, 0}), DType::kFloat32, Device::cpu(), 3);
  ForwardContext ctx;
  ctx.training = true;
  const Tensor y = m.forward(ops::cast(random_tensor({2, 4, 6, 6}, 5), DType::kFloat32), ctx);
  EXPECT_EQ(y.shape(), (Shape{2, 3}));
  m.backward(ops::cast(random_tensor({2, 3}, 6), DType::kFloat32));
  // Mirror's own spelling of the tanh GELU.
  const ModelSpec tanh_gelu = ModelSpec::from_json(json::parse(
      R"([{"type": "dense", "units": 4}, {"type": "activation", "activation": "gelu", "approximate": true}, {"type": "dense"}])"));
  EXPECT_EQ(tanh_gelu.layers()[1]["approximate"], true);
  try {
    keras_sequential(conv(R"(, "activation": "softplus")"));
    ADD_FAILURE() << "softplus accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("supported: linear, relu, tanh, sigmoid, silu (swish)"),
              std::string::npos)
        << e.what();
  }
}

// ---------------------------------------------------------------- broadcasting merges

/// d(sum(w * merge(xs))) / d xs by central differences, against the merge's backward.
void check_merge(MergeLayer& m, const std::vector<Tensor>& xs) {
  ForwardContext ctx;
  const Tensor y = m.forward_inputs(xs, ctx);
  const Tensor w = random_tensor(y.shape(), 11);
  const std::vector<Tensor> grads = m.backward_inputs(w);
  ASSERT_EQ(grads.size(), xs.size());
  for (std::size_t i = 0; i < xs.size(); ++i) {
    EXPECT_EQ(grads[i].shape(), xs[i].shape()) << i;
    const auto numeric = testing::numeric_gradient(
        xs[i], [&] { return testing::weighted_sum(m.forward_inputs(xs, ctx), w); });
    EXPECT_LE(testing::relative_error(v(grads[i]), numeric), 1e-8) << "input " << i;
  }
}

TEST(BroadcastMerges, MultiplyByASqueezeAndExcitationGate) {
  ElementwiseMerge m(ElementwiseMerge::Op::kMultiply);
  m.set_name("multiply_1");
  EXPECT_EQ(m.build_inputs({{3, 4, 5}, {3, 1, 1}}, {"x", "gate"}, DType::kFloat64, Device::cpu()),
            (Shape{3, 4, 5}));
  const Tensor x = random_tensor({2, 3, 4, 5}, 1), gate = random_tensor({2, 3, 1, 1}, 2);
  ForwardContext ctx;
  const std::vector<double> y = v(m.forward_inputs({x, gate}, ctx)), xs = v(x), gs = v(gate);
  for (std::size_t i = 0; i < y.size(); ++i) EXPECT_EQ(y[i], xs[i] * gs[i / 20]);
  check_merge(m, {x, gate});
  // The gate first, too.
  ElementwiseMerge first(ElementwiseMerge::Op::kMultiply);
  first.set_name("multiply_2");
  first.build_inputs({{3, 1, 1}, {3, 4, 5}}, {"gate", "x"}, DType::kFloat64, Device::cpu());
  check_merge(first, {random_tensor({2, 3, 1, 1}, 3), random_tensor({2, 3, 4, 5}, 4)});
}

TEST(BroadcastMerges, SubtractAverageAndAddAlongAnyAxis) {
  // [1, H, W] against [C, H, W]: the channel axis comes before the kept ones (its gradient is
  // summed through a transposed copy); [C, H, 1] against [C, 1, W]: both broadcast.
  ElementwiseMerge s(ElementwiseMerge::Op::kSubtract);
  s.set_name("subtract_1");
  EXPECT_EQ(s.build_inputs({{1, 4, 5}, {3, 4, 5}}, {"a", "b"}, DType::kFloat64, Device::cpu()),
            (Shape{3, 4, 5}));
  check_merge(s, {random_tensor({2, 1, 4, 5}, 5), random_tensor({2, 3, 4, 5}, 6)});
  ElementwiseMerge a(ElementwiseMerge::Op::kAverage);
  a.set_name("average_1");
  EXPECT_EQ(a.build_inputs({{3, 4, 1}, {3, 1, 5}, {1, 1, 1}}, {"a", "b", "c"}, DType::kFloat64,
                           Device::cpu()),
            (Shape{3, 4, 5}));
  check_merge(a, {random_tensor({2, 3, 4, 1}, 7), random_tensor({2, 3, 1, 5}, 8),
                  random_tensor({2, 1, 1, 1}, 9)});
  // Add, too (its other inputs of the full shape may be blocked images; these are plain).
  Add add;
  add.set_name("add_1");
  EXPECT_EQ(add.build_inputs({{3, 4, 5}, {3, 1, 1}, {3, 4, 5}}, {"a", "b", "c"}, DType::kFloat64,
                             Device::cpu()),
            (Shape{3, 4, 5}));
  check_merge(add, {random_tensor({2, 3, 4, 5}, 10), random_tensor({2, 3, 1, 1}, 11),
                    random_tensor({2, 3, 4, 5}, 12)});
  ElementwiseMerge bad(ElementwiseMerge::Op::kMultiply);
  bad.set_name("multiply_3");
  try {
    bad.build_inputs({{3, 4, 5}, {3, 2, 5}}, {"x", "y"}, DType::kFloat64, Device::cpu());
    ADD_FAILURE() << "accepted [3, 4, 5] * [3, 2, 5]";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("input 'x' [3,4,5], input 'y' [3,2,5]"), std::string::npos)
        << e.what();
  }
}

TEST(BroadcastMerges, GraphsBindAndTrainThem) {
  // A gate [C, 1, 1] (a keepdims pooling) added to and multiplying the image [C, H, W].
  const ModelSpec spec = ModelSpec::from_json(json::parse(R"({"input_shape": [3, 6, 6], "layers": [
      {"type": "conv2d", "name": "c", "filters": 4, "kernel": 3, "padding": "same"},
      {"type": "global_average_pooling2d", "name": "g", "keepdims": true},
      {"type": "add", "name": "a", "inputs": ["c", "g"]},
      {"type": "multiply", "name": "m", "inputs": ["a", "g"]},
      {"type": "flatten", "name": "f"}, {"type": "dense", "name": "d", "units": 2}]})"));
  EXPECT_TRUE(spec.bound());
  Sequential m = make_model(spec, DType::kFloat64, Device::cpu(), 1);
  ForwardContext ctx;
  const Tensor x = random_tensor({2, 3, 6, 6}, 1);
  const Tensor y = m.forward(x, ctx);
  EXPECT_EQ(y.shape(), (Shape{2, 2}));
  m.zero_grad();
  m.backward(random_tensor({2, 2}, 2));
  // The convolution's kernel gradient by central differences (it reaches the kernel through the
  // image, the gate, the sum and the product).
  Parameter* kernel = m.parameters()[0];
  const Tensor w = random_tensor({2, 2}, 2);
  const auto numeric = testing::numeric_gradient(
      kernel->value, [&] { return testing::weighted_sum(m.forward(x, ctx), w); });
  EXPECT_LE(testing::relative_error(v(kernel->grad), numeric), 1e-7);
  // A size that is neither equal nor 1 is refused, naming both inputs.
  try {
    ModelSpec::from_json(json::parse(R"({"input_shape": [3, 6, 6], "layers": [
        {"type": "conv2d", "name": "c", "filters": 4, "kernel": 3, "padding": "same"},
        {"type": "conv2d", "name": "s", "filters": 4, "kernel": 3, "strides": 2, "padding": "same",
         "inputs": ["c"]},
        {"type": "add", "name": "a", "inputs": ["c", "s"]},
        {"type": "flatten", "name": "f"}, {"type": "dense", "name": "d", "units": 2}]})"));
    ADD_FAILURE() << "[4, 6, 6] + [4, 3, 3] accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("inputs must have one shape (or sizes 1 to broadcast), "
                                         "but input 'c' is [4,6,6] and input 's' is [4,3,3]"),
              std::string::npos)
        << e.what();
  }
}

// ---------------------------------------------------------------- scalar operands

std::string tensor_arg(const std::string& from) {
  return R"({"class_name": "__keras_tensor__", "config": {"shape": [null, 4], "dtype": "float32", "keras_history": [")" +
         from + R"(", 0, 0]}})";
}

std::string op_node(const std::string& cls, const std::string& name, const std::string& args) {
  return R"({"module": "keras.src.ops.numpy", "class_name": ")" + cls +
         R"(", "config": {"name": ")" + name + R"("}, "registered_name": ")" + cls +
         R"(", "name": ")" + name + R"(", "inbound_nodes": [{"args": [)" + args +
         R"(], "kwargs": {}}]})";
}

ModelSpec functional(const std::vector<std::string>& nodes, const std::string& last) {
  std::string layers =
      R"({"class_name": "InputLayer", "name": "in", "config": {"batch_shape": [null, 4], "name": "in"}, "inbound_nodes": []},
         {"class_name": "Dense", "name": "d", "config": {"name": "d", "units": 4}, "inbound_nodes": [{"args": [)" +
      tensor_arg("in") + R"(], "kwargs": {}}]})";
  for (const std::string& n : nodes) layers += ", " + n;
  layers +=
      R"(, {"class_name": "Dense", "name": "out", "config": {"name": "out", "units": 2}, "inbound_nodes": [{"args": [)" +
      tensor_arg(last) + R"(], "kwargs": {}}]})";
  return ModelSpec::from_json(
      json::parse(R"({"class_name": "Functional", "config": {"name": "m", "layers": [)" + layers +
                  R"(], "input_layers": ["in", 0, 0], "output_layers": ["out", 0, 0]}})"));
}

TEST(ScalarOperands, KerassArithmeticWithANumberIsARescaling) {
  // MobileNetV3's hard sigmoid: ReLU(6)(x + 3) * (1 / 6); and 1 - x, x / 4.
  const ModelSpec spec = functional(
      {op_node("Add", "add", tensor_arg("d") + ", 3.0"),
       R"({"class_name": "ReLU", "name": "r", "config": {"name": "r", "max_value": 6.0}, "inbound_nodes": [{"args": [)" +
           tensor_arg("add") + R"(], "kwargs": {}}]})",
       op_node("Multiply", "mul", tensor_arg("r") + ", 0.16666666666666666"),
       op_node("Subtract", "sub", "1.0, " + tensor_arg("mul")),
       op_node("TrueDivide", "div", tensor_arg("sub") + ", 4")},
      "div");
  const json& l = spec.layers();
  const auto rescaling = [](double scale, double offset) {
    return json{{"type", "rescaling"}, {"scale", scale}, {"offset", offset}};
  };
  const auto without_graph = [](json j) {
    j.erase("name");
    j.erase("inputs");
    return j;
  };
  EXPECT_EQ(without_graph(l[1]), rescaling(1, 3));
  EXPECT_EQ(l[2]["type"], "relu");
  EXPECT_EQ(without_graph(l[3]), rescaling(0.16666666666666666, 0));
  EXPECT_EQ(without_graph(l[4]), rescaling(-1, 1));
  EXPECT_EQ(without_graph(l[5]), rescaling(0.25, 0));
  EXPECT_EQ(l[1]["inputs"], json::array({"d"}));

  // Computed: (1 - relu6(d + 3) / 6) / 4 for the Dense's outputs d.
  Sequential m =
      make_model(spec.bind({{4}, DType::kFloat32, 2, 0}), DType::kFloat64, Device::cpu(), 1);
  ForwardContext ctx;
  const Tensor x = random_tensor({3, 4}, 1, -6, 6);
  const Tensor d = m.layers()[0]->forward(x, ctx);
  Tensor h = d;
  for (std::size_t i = 1; i < 6; ++i) h = m.layers()[i]->forward(h, ctx);
  const std::vector<double> ds = v(d), hs = v(h);
  for (std::size_t i = 0; i < ds.size(); ++i) {
    EXPECT_NEAR(hs[i], (1 - std::min(std::max(ds[i] + 3, 0.0), 6.0) * 0.16666666666666666) / 4,
                1e-15);
  }

  // Two tensors stay a merge; a number over a tensor is refused.
  const ModelSpec merge =
      functional({op_node("Multiply", "mul", tensor_arg("d") + ", " + tensor_arg("d"))}, "mul");
  EXPECT_EQ(merge.layers()[1]["type"], "multiply");
  try {
    functional({op_node("Divide", "div", "2.0, " + tensor_arg("d"))}, "div");
    ADD_FAILURE() << "2 / x accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("divides the number 2"), std::string::npos) << e.what();
  }
}

// ---------------------------------------------------------------- dropout, keepdims

TEST(NoiseShapedDropout, DropsWholeSamplesOrChannels) {
  ForwardContext ctx;
  ctx.training = true;
  ctx.seed = 17;
  std::vector<std::int64_t> ids(64);
  std::iota(ids.begin(), ids.end(), 100);
  ctx.sample_ids = Tensor::from_vector(ids, {64});
  const Tensor x = random_tensor({64, 3, 4, 5}, 1, 1, 2);  // no zeros of its own
  // EfficientNet's [None, 1, 1, 1]: each sample kept whole (times 2) or dropped whole.
  Dropout sample(0.5, {-1, 1, 1, 1}, true);
  built(sample, {3, 4, 5}, "dropout_1");
  const std::vector<double> y = v(sample.forward(x, ctx)), xs = v(x);
  int kept = 0;
  for (int n = 0; n < 64; ++n) {
    const bool on = y[static_cast<std::size_t>(n) * 60] != 0;
    kept += on;
    for (int i = 0; i < 60; ++i) {
      const std::size_t k = static_cast<std::size_t>(n) * 60 + i;
      EXPECT_EQ(y[k], on ? 2 * xs[k] : 0.0) << n << ", " << i;
    }
  }
  EXPECT_GT(kept, 16);
  EXPECT_LT(kept, 48);
  // Drawn like plain dropout of one element per sample: the same seed, layer name and ids.
  Dropout plain(0.5);
  built(plain, {1}, "dropout_1");
  Tensor ones = Tensor::from_vector(std::vector<double>(64, 1.0), {64, 1});
  const std::vector<double> p = v(plain.forward(ones, ctx));
  for (int n = 0; n < 64; ++n) EXPECT_EQ(p[static_cast<std::size_t>(n)] != 0, y[n * 60] != 0) << n;
  // The gradient is masked alike.
  const std::vector<double> g =
      v(sample.backward(Tensor::from_vector(std::vector<double>(64 * 60, 1.0), {64, 3, 4, 5})));
  for (std::size_t k = 0; k < g.size(); ++k) EXPECT_EQ(g[k], y[k] != 0 ? 2.0 : 0.0);

  // Keras's [None, 1, 1, C] (channels_last): one decision per channel, shared by its pixels.
  Dropout channels(0.5, {-1, 1, 1, 3}, true);
  built(channels, {3, 4, 5}, "dropout_2");
  const std::vector<double> c = v(channels.forward(x, ctx));
  for (int n = 0; n < 64; ++n)
    for (int ch = 0; ch < 3; ++ch) {
      const std::size_t first = (static_cast<std::size_t>(n) * 3 + ch) * 20;
      for (int i = 0; i < 20; ++i) EXPECT_EQ(c[first + i] != 0, c[first] != 0);
    }
  // Inference: the identity.
  ForwardContext eval;
  EXPECT_EQ(v(sample.forward(x, eval)), xs);
  // The batch entry must be None; the others None, 1 or the input's.
  Dropout batch(0.5, {1, 1, 1, 1}, true);
  EXPECT_THROW(built(batch, {3, 4, 5}), InvalidArgument);
  Dropout wrong(0.5, {-1, 2, 1, 1}, true);
  EXPECT_THROW(built(wrong, {3, 4, 5}), InvalidArgument);
}

TEST(NoiseShapedDropout, TheReaderKeepsKerassNoiseShape) {
  const ModelSpec spec = keras_sequential(
      R"({"class_name": "Dropout", "config": {"rate": 0.2, "seed": null, "noise_shape": [null, 1, 1, 1]}},
         {"class_name": "Dropout", "config": {"rate": 0.2, "noise_shape": [null, null, null, null]}},
         {"class_name": "GlobalAveragePooling2D", "config": {"keepdims": true}},
         {"class_name": "Flatten", "config": {}}, {"class_name": "Dense", "config": {"units": 2}})");
  EXPECT_EQ(spec.layers()[0]["noise_shape"], json::parse("[null, 1, 1, 1]"));
  EXPECT_EQ(spec.layers()[0]["channels_last"], true);
  EXPECT_FALSE(spec.layers()[1].contains("noise_shape"));  // all None: plain dropout
  // GlobalAveragePooling2D(keepdims=True): the pooled channels as Keras's [1, 1, C].
  EXPECT_EQ(spec.layers()[2]["type"], "global_average_pooling2d");
  EXPECT_EQ(spec.layers()[3]["type"], "reshape");
  const ModelSpec bound = spec.bind({{4, 6, 6}, DType::kFloat32, 2, 0});
  Sequential m = make_model(bound, DType::kFloat64, Device::cpu(), 1);
  ForwardContext ctx;
  const Tensor x = random_tensor({2, 4, 6, 6}, 3);
  Tensor h = x;
  for (std::size_t i = 0; i < 4; ++i) h = m.layers()[i]->forward(h, ctx);
  EXPECT_EQ(h.shape(), (Shape{2, 4, 1, 1}));
  const std::vector<double> xs = v(x), hs = v(h);
  for (std::size_t p = 0; p < 8; ++p) {
    const double mean = std::accumulate(xs.begin() + p * 36, xs.begin() + (p + 1) * 36, 0.0) / 36;
    EXPECT_NEAR(hs[p], mean, 1e-15);
  }
  const auto refused = [](const std::string& layer) {
    EXPECT_THROW(keras_sequential(layer), InvalidArgument) << layer;
  };
  refused(R"({"class_name": "Dropout", "config": {"rate": 0.2, "noise_shape": [1, 1, 1, 1]}})");
  refused(R"({"class_name": "Dropout", "config": {"rate": 0.2, "noise_shape": [null, 0, 1, 1]}})");
  // A size that is not the input's is refused when the spec meets its input (here at once:
  // the spec states it).
  try {
    keras_sequential(
        conv("") +
        R"(, {"class_name": "Dropout", "config": {"rate": 0.2, "noise_shape": [null, 5, 1, 1]}},
           {"class_name": "Flatten", "config": {}}, {"class_name": "Dense", "config": {"units": 2}})");
    ADD_FAILURE() << "noise_shape [None, 5, 1, 1] accepted for a 6x6x64 input";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("layer 2 (dropout): noise_shape [None, 5, 1, 1] has 5 "
                                         "where the input has 6"),
              std::string::npos)
        << e.what();
  }
}

// ---------------------------------------------------------------- the applications

std::string fixture(const std::string& name) {
  return std::string(MIRROR_SOURCE_DIR) + "/tests/data/keras/" + name + ".keras.json";
}

/// The fixture as to_json() wrote it; EfficientNet's Normalization was never adapted, and Keras
/// then normalises with its initial state (mean 0, variance 1): stated here, as a user states the
/// adapted values (or passes --init-weights).
ModelSpec application(const std::string& name) {
  std::ifstream in(fixture(name));
  json j = json::parse(in);
  for (json& l : j["config"]["layers"]) {
    if (l["class_name"] != "Normalization") continue;
    l["config"]["mean"] = {0.0, 0.0, 0.0};
    l["config"]["variance"] = {1.0, 1.0, 1.0};
  }
  return ModelSpec::from_json(j, fixture(name));
}

TEST(KerasApplications, EfficientNetB0AndMobileNetV3SmallTrainAStep) {
  // Keras's trainable parameters (make_applications.py prints them).
  for (const auto& [name, params] :
       {std::pair<std::string, std::int64_t>{"efficientnet_b0", 4020358},
        {"mobilenet_v3_small", 1528106}}) {
    SCOPED_TRACE(name);
    const ModelSpec spec = application(name).bind({{3, 32, 32}, DType::kFloat32, 10, 0});
    EXPECT_TRUE(spec.softmax_folded());
    Sequential m = make_model(spec, DType::kFloat32, Device::cpu(), 1);
    EXPECT_EQ(m.parameter_count(), params);
    ForwardContext ctx;
    ctx.training = true;
    ctx.seed = 3;
    ctx.sample_ids = Tensor::from_vector(std::vector<std::int64_t>{0, 1}, {2});
    const Tensor x = ops::cast(random_tensor({2, 3, 32, 32}, 3, 0, 255), DType::kFloat32);
    const Tensor y = m.forward(x, ctx);
    EXPECT_EQ(y.shape(), (Shape{2, 10}));
    EXPECT_TRUE(ops::all_finite(y));
    m.zero_grad();
    m.backward(ops::cast(random_tensor({2, 10}, 4), DType::kFloat32));
    double norm = 0;
    for (Parameter* p : m.parameters()) {
      EXPECT_TRUE(ops::all_finite(p->grad)) << p->name;
      norm += ops::sum_squares(p->grad);
    }
    EXPECT_GT(norm, 0);
  }
  // What they are made of: EfficientNet's initializers, silu and gates; MobileNet's hard_silu,
  // op nodes and keepdims pooling.
  const ModelSpec efficient = application("efficientnet_b0");
  int varying = 0, silu = 0, sample_dropout = 0, gates = 0;
  for (const json& l : efficient.layers()) {
    varying += l.contains("kernel_initializer") || l.contains("depthwise_initializer");
    silu += l.value("activation", "") == "silu";
    sample_dropout += l.contains("noise_shape");
    gates += l["type"] == "multiply";
  }
  EXPECT_EQ(varying, 82);  // every Conv2D, DepthwiseConv2D and the Dense
  EXPECT_EQ(gates, 16);
  EXPECT_EQ(sample_dropout, 9);
  EXPECT_EQ(silu, 49);  // Activation layers and Conv2D activations
  const ModelSpec mobile = application("mobilenet_v3_small");
  int hard_silu = 0, rescalings = 0;
  for (const json& l : mobile.layers()) {
    hard_silu += l.value("activation", "") == "hard_silu";
    rescalings += l["type"] == "rescaling";
  }
  EXPECT_EQ(hard_silu, 19);
  EXPECT_EQ(rescalings, 1 + 2 * 9);  // the input's, then x + 3 and x / 6 of 9 gates
}

}  // namespace
}  // namespace mirror::nn
