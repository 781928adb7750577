// Keras's ConvNeXt pieces (issue 44): nested Sequential and Functional models (Note [Nested
// models]), Conv2D(groups), Dense and LayerNormalization over an image's channels and LayerScale
// (Note [Keras layers on image channels]), on tests/data/keras/convnext_mini.keras.json (written
// by make_nested.py; CI needs no Keras): read, gradients against central differences, training,
// Keras's weight paths, and the errors for what does not fit.
#include <gtest/gtest.h>

#include <map>

#include "gradcheck.h"
#include "mirror/nn/cnn_layers.h"
#include "mirror/nn/image_channels.h"
#include "mirror/nn/layers.h"
#include "mirror/nn/models.h"
#include "mirror/nn/stochastic_depth.h"
#include "mirror/ops.h"
#include "mirror/train/keras_weights.h"
#include "tools/onnx_export.h"

namespace mirror::nn {
namespace {

using nlohmann::json;
using testing::built;
using testing::check_layer;
using testing::expect_gradients_within;
using testing::random_tensor;

std::string fixture(const std::string& name) {
  return std::string(MIRROR_SOURCE_DIR) + "/tests/data/keras/" + name;
}

const json& named(const ModelSpec& spec, const std::string& name) {
  for (const json& l : spec.layers()) {
    if (l.value("name", "") == name) return l;
  }
  throw std::runtime_error("no layer " + name);
}

TEST(KerasNested, ReadsNestedModelsIntoTheGraph) {
  const ModelSpec spec = ModelSpec::from_file(fixture("convnext_mini.keras.json"));
  ASSERT_TRUE(spec.bound());  // the InputLayer states [16, 16, 3]
  EXPECT_EQ(spec.input_shape(), (Shape{3, 16, 16}));
  // The stem Sequential's layers: the first reads the model input, the last is named "stem".
  EXPECT_EQ(named(spec, "stem/conv2d")["inputs"], json({"input"}));
  EXPECT_EQ(named(spec, "stem")["type"], "layer_normalization");
  EXPECT_EQ(named(spec, "stem")["inputs"], json({"stem/conv2d"}));
  EXPECT_EQ(named(spec, "conv2d_1")["inputs"], json({"stem"}));
  EXPECT_EQ(named(spec, "stem/conv2d")["keras_scope"], json::parse(R"([["sequential", "stem"]])"));
  // The nested Functional: its InputLayer is the tensor its call passes (the ops.add "add"); its
  // output layer (an Add) takes the model's name.
  EXPECT_EQ(named(spec, "grouped/conv2d_2")["inputs"], json({"add"}));
  EXPECT_EQ(named(spec, "grouped")["type"], "add");
  EXPECT_EQ(named(spec, "grouped")["inputs"], json({"add", "grouped/conv2d_2"}));
  EXPECT_EQ(named(spec, "grouped/conv2d_2")["keras_scope"],
            json::parse(R"([["functional", "grouped"]])"));
  EXPECT_EQ(named(spec, "down/layer_normalization_2")["inputs"], json({"grouped"}));
  // Conv2D(groups): the depthwise 7x7 of ConvNeXt and a grouped one.
  EXPECT_EQ(named(spec, "conv2d_1")["groups"], 8);
  EXPECT_EQ(named(spec, "grouped/conv2d_2")["groups"], 2);
  EXPECT_FALSE(named(spec, "stem/conv2d").contains("groups"));
  // Dense and LayerNormalization on images keep the mark; the head's (on [F]) lose it.
  EXPECT_EQ(named(spec, "dense")["keras_channels_last"], true);
  EXPECT_EQ(named(spec, "layer_normalization_1")["keras_channels_last"], true);
  EXPECT_FALSE(named(spec, "dense_2").contains("keras_channels_last"));
  EXPECT_FALSE(named(spec, "layer_normalization_3").contains("keras_channels_last"));
  EXPECT_EQ(named(spec, "layer_scale")["projection_dim"], 8);
  EXPECT_TRUE(spec.softmax_folded());
  // The bound spec reads back unchanged in Mirror's form (checkpoints store it so).
  const ModelSpec again = ModelSpec::from_json(spec.to_json(), "round trip");
  EXPECT_EQ(again.to_json(), spec.to_json());
}

TEST(KerasNested, ConvNextMiniGradientsMatchCentralDifferences) {
  const ModelSpec spec = ModelSpec::from_file(fixture("convnext_mini.keras.json"));
  Sequential m = make_model(spec, DType::kFloat64, Device::cpu(), 3);
  const Tensor x = random_tensor({2, 3, 16, 16}, 5);
  ForwardContext ctx;
  ctx.training = true;
  const Tensor w = random_tensor({2, 5}, 6);
  m.zero_grad();
  m.forward(x, ctx);
  m.backward(w);
  auto loss = [&] { return testing::weighted_sum(m.forward(x, ctx), w); };
  int checked = 0;
  for (Parameter* p : m.parameters()) {
    const std::vector<double> analytic = p->grad.to_vector<double>();
    const std::vector<double> numeric = testing::numeric_gradient(p->value, loss);
    EXPECT_LE(testing::relative_error(analytic, numeric), 1e-6) << p->name;
    ++checked;
  }
  EXPECT_EQ(checked, 23);  // every Keras variable of the model (23 arrays in its .weights.h5)
}

TEST(KerasNested, ConvNextMiniTrains) {
  const ModelSpec spec = ModelSpec::from_file(fixture("convnext_mini.keras.json"));
  Sequential m = make_model(spec, DType::kFloat32, Device::cpu(), 3);
  const std::int64_t n = 8;
  const Tensor x = ops::cast(random_tensor({n, 3, 16, 16}, 9), DType::kFloat32);
  std::vector<std::int32_t> labels(n);
  for (std::int64_t i = 0; i < n; ++i)
    labels[static_cast<std::size_t>(i)] = static_cast<int>(i % 5);
  const Tensor y = Tensor::from_vector(labels, {n});
  const Tensor weights = Tensor::from_vector(std::vector<float>(n, 1.0f), {n});
  std::vector<double> losses;
  for (int step = 0; step < 8; ++step) {
    ForwardContext ctx;
    ctx.training = true;
    m.zero_grad();
    const ops::LossResult r = ops::softmax_cross_entropy(m.forward(x, ctx), y, weights, n);
    m.backward(r.dlogits);
    for (Parameter* p : m.parameters()) ops::axpy(-0.1, p->grad, p->value);
    losses.push_back(r.loss);
  }
  EXPECT_TRUE(std::isfinite(losses.back()));
  EXPECT_LT(losses.back(), 0.8 * losses.front());
}

TEST(KerasNested, WeightPathsAreKerassOwn) {
  // What Keras 3's save_weights writes for this model (make_nested.py; listed with h5py).
  const std::map<std::string, std::vector<Shape>> keras = {
      {"layers/conv2d", {{3, 3, 1, 8}, {8}}},
      {"layers/dense", {{8, 16}, {16}}},
      {"layers/dense_1", {{16, 8}, {8}}},
      {"layers/dense_2", {{16, 5}, {5}}},
      {"layers/functional/layers/conv2d", {{3, 3, 4, 8}, {8}}},
      {"layers/layer_normalization", {{8}, {8}}},
      {"layers/layer_normalization_1", {{16}, {16}}},
      {"layers/layer_scale", {{8}}},
      {"layers/sequential/layers/conv2d", {{2, 2, 3, 8}, {8}}},
      {"layers/sequential/layers/layer_normalization", {{8}, {8}}},
      {"layers/sequential_1/layers/conv2d", {{2, 2, 8, 16}, {16}}},
      {"layers/sequential_1/layers/layer_normalization", {{8}, {8}}},
  };
  const ModelSpec spec = ModelSpec::from_file(fixture("convnext_mini.keras.json"));
  std::map<std::string, std::vector<Shape>> mirror;
  for (const train::KerasVariables& v : train::keras_weights_layout(spec)) {
    for (const Tensor& t : v.values) mirror[v.path].push_back(t.shape());
  }
  EXPECT_EQ(mirror, keras);
  // And back: the layout's own variables load into the model they came from.
  const auto layout = train::keras_weights_layout(spec);
  EXPECT_NO_THROW(train::from_keras_weights(spec, layout, "layout"));
}

TEST(KerasNested, OnnxExportRefusesWhatItCannotMapExactly) {
  // mirror-export --onnx has no mapping for a grouped Conv2D or a Dense over image channels yet:
  // it must refuse by name, not write the NCHW graph of a plain layer.
  const auto refuses = [](const std::string& json_text, const std::string& what) {
    Sequential m = make_model(ModelSpec::from_json(json::parse(json_text), "onnx"), DType::kFloat32,
                              Device::cpu(), 1);
    try {
      onnx::export_onnx(m, {});
      ADD_FAILURE() << "exported " << what;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  refuses(R"({"input_shape": [4, 6, 6], "layers": [{"type": "conv2d", "filters": 4, "kernel": 3,
      "groups": 2}, {"type": "flatten"}, {"type": "dense", "units": 2}]})",
          "layer conv2d_1 (conv2d, groups 2) cannot be exported to ONNX");
  refuses(R"({"input_shape": [4, 6, 6], "layers": [{"type": "dense", "units": 3,
      "keras_channels_last": true}, {"type": "flatten"}, {"type": "dense", "units": 2}]})",
          "layer dense_1 (dense over an image's channels) cannot be exported to ONNX");
}

TEST(KerasNested, LayerScaleAndImageChannelGradients) {
  ForwardContext ctx;
  LayerScale image(0.5, 4);
  expect_gradients_within(check_layer(built(image, {4, 3, 5}), random_tensor({2, 4, 3, 5}, 1), ctx),
                          2);
  LayerScale features(-2.0, 6);
  expect_gradients_within(check_layer(built(features, {3, 6}), random_tensor({2, 3, 6}, 2), ctx),
                          2);
  ChannelsLastImage norm(std::make_unique<LayerNormalization>(1e-6));
  expect_gradients_within(check_layer(built(norm, {4, 3, 5}), random_tensor({2, 4, 3, 5}, 3), ctx),
                          3);
  ChannelsLastImage dense(std::make_unique<Dense>(6, Activation::kIdentity));
  EXPECT_EQ(built(dense, {4, 3, 5}).parameters()[0]->name, "layer_1/kernel");
  expect_gradients_within(check_layer(dense, random_tensor({2, 4, 3, 5}, 4), ctx), 3);
  Conv2D grouped(6, 3, 3, 1, Padding::kSame, Activation::kIdentity, true, 3);
  expect_gradients_within(
      check_layer(built(grouped, {9, 5, 4}), random_tensor({2, 9, 5, 4}, 5), ctx), 3);
}

TEST(KerasNested, ImageChannelsMeanKerassLastAxis) {
  // A Dense over an image's channels is, per pixel, the product of the channel vector with the
  // kernel; LayerScale scales channel c by gamma[c].
  ChannelsLastImage dense(std::make_unique<Dense>(2, Activation::kIdentity));
  built(dense, {3, 2, 2});
  const Tensor x = random_tensor({1, 3, 2, 2}, 8);
  ForwardContext ctx;
  const std::vector<double> y = dense.forward(x, ctx).to_vector<double>();
  const std::vector<double> k = dense.parameters()[0]->value.to_vector<double>();  // [3, 2]
  const std::vector<double> b = dense.parameters()[1]->value.to_vector<double>();
  const std::vector<double> xv = x.to_vector<double>();
  for (int o = 0; o < 2; ++o) {
    for (int p = 0; p < 4; ++p) {
      double want = b[static_cast<std::size_t>(o)];
      for (int c = 0; c < 3; ++c)
        want += xv[static_cast<std::size_t>(c * 4 + p)] * k[static_cast<std::size_t>(c * 2 + o)];
      EXPECT_NEAR(y[static_cast<std::size_t>(o * 4 + p)], want, 1e-12);
    }
  }
}

TEST(KerasNested, StochasticDepthDropsWholeSamples) {
  // Keras's StochasticDepth as ConvNeXt(drop_path_rate > 0) writes it, read by the parser.
  const ModelSpec spec = ModelSpec::from_json(json::parse(R"({"input_shape": [2, 3, 3], "layers": [
      {"class_name": "StochasticDepth", "config": {"name": "sd", "trainable": true,
       "drop_path_rate": 0.5}}, {"type": "flatten"}, {"type": "dense", "units": 2}]})"),
                                              "sd");
  EXPECT_EQ(spec.layers()[0], json::parse(R"({"type": "stochastic_depth", "rate": 0.5})"));
  StochasticDepth sd(0.5);
  built(sd, {2, 3, 3});
  const std::int64_t n = 64;
  const Tensor x = random_tensor({n, 2, 3, 3}, 3, 1, 2);  // no zeros
  std::vector<std::int64_t> ids(n);
  for (std::int64_t i = 0; i < n; ++i) ids[static_cast<std::size_t>(i)] = i;
  ForwardContext ctx;
  ctx.training = true;
  ctx.seed = 7;
  ctx.sample_ids = Tensor::from_vector(ids, {n});
  const std::vector<double> xv = x.to_vector<double>(), y = sd.forward(x, ctx).to_vector<double>();
  const std::vector<double> dx =
      sd.backward(Tensor::from_vector(std::vector<double>(static_cast<std::size_t>(x.numel()), 1.0),
                                      x.shape()))
          .to_vector<double>();
  int kept = 0;
  for (std::int64_t s = 0; s < n; ++s) {
    const std::size_t at = static_cast<std::size_t>(s * 18);
    const bool keep = y[at] != 0.0;
    kept += keep;
    for (std::size_t k = at; k < at + 18; ++k) {  // the whole sample shares the decision
      EXPECT_DOUBLE_EQ(y[k], keep ? 2.0 * xv[k] : 0.0);
      EXPECT_DOUBLE_EQ(dx[k], keep ? 2.0 : 0.0);
    }
  }
  EXPECT_GT(kept, 16);  // about half of 64
  EXPECT_LT(kept, 48);
  ctx.training = false;
  EXPECT_EQ(sd.forward(x, ctx).to_vector<double>(), xv);
}

json nested_sequential(const json& inner_extra) {
  json inner = json::parse(R"({"class_name": "Sequential", "config": {"name": "inner",
      "layers": [{"class_name": "InputLayer", "config": {"batch_shape": [null, 6], "name": "i"}},
                 {"class_name": "Dense", "config": {"units": 4, "name": "d1"}}]},
      "build_config": {"input_shape": [null, 6]}, "compile_config": {}})");
  inner.update(inner_extra);
  return json{
      {"class_name", "Sequential"},
      {"config",
       {{"name", "outer"},
        {"layers",
         {json::parse(R"({"class_name": "InputLayer",
                                  "config": {"batch_shape": [null, 6], "name": "x"}})"),
          inner,
          json::parse(R"({"class_name": "Dense", "config": {"units": 3, "name": "d2"}})")}}}}};
}

TEST(KerasNested, ASequentialInASequentialIsAStack) {
  const ModelSpec spec = ModelSpec::from_json(nested_sequential(json::object()), "nested");
  ASSERT_EQ(spec.layers().size(), 2u);
  EXPECT_EQ(spec.layers()[0]["units"], 4);
  EXPECT_EQ(spec.layers()[1]["units"], 3);
  EXPECT_EQ(spec.layers()[0]["keras_scope"], json::parse(R"([["sequential", "inner"]])"));
  EXPECT_FALSE(spec.layers()[1].contains("keras_scope"));
}

TEST(KerasNested, AFunctionalInASequentialReadsTheLayerBeforeIt) {
  const json inner = json::parse(R"({"class_name": "Functional", "name": "block", "config": {
      "name": "block", "trainable": true,
      "layers": [
        {"class_name": "InputLayer", "name": "bi", "config": {"batch_shape": [null, 4], "name": "bi"},
         "inbound_nodes": []},
        {"class_name": "Dense", "name": "d", "config": {"units": 4, "name": "d"},
         "inbound_nodes": [{"args": [{"class_name": "__keras_tensor__",
                                      "config": {"keras_history": ["bi", 0, 0]}}], "kwargs": {}}]},
        {"class_name": "Add", "name": "sum", "config": {"name": "sum"},
         "inbound_nodes": [{"args": [[{"class_name": "__keras_tensor__",
                                       "config": {"keras_history": ["bi", 0, 0]}},
                                      {"class_name": "__keras_tensor__",
                                       "config": {"keras_history": ["d", 0, 0]}}]], "kwargs": {}}]}],
      "input_layers": ["bi", 0, 0], "output_layers": ["sum", 0, 0]}})");
  const json model = {
      {"class_name", "Sequential"},
      {"config",
       {{"name", "outer"},
        {"layers",
         {json::parse(R"({"class_name": "InputLayer", "config": {"batch_shape": [null, 3]}})"),
          json::parse(R"({"class_name": "Dense", "config": {"units": 4, "name": "first"}})"), inner,
          json::parse(R"({"class_name": "Dense", "config": {"units": 2, "name": "last"}})")}}}}};
  const ModelSpec spec = ModelSpec::from_json(model, "nested functional");
  ASSERT_TRUE(spec.bound());
  EXPECT_EQ(named(spec, "block/d")["inputs"], json({"first"}));
  EXPECT_EQ(named(spec, "block")["inputs"], json({"first", "block/d"}));
  EXPECT_EQ(named(spec, "last")["inputs"], json({"block"}));
  Sequential m = make_model(spec, DType::kFloat32, Device::cpu(), 1);
  ForwardContext ctx;
  EXPECT_EQ(m.forward(Tensor::zeros({5, 3}), ctx).shape(), (Shape{5, 2}));
}

TEST(KerasNested, ModelsInModelsKeepKerassWeightPaths) {
  // keras.Sequential([Input(4), Sequential([Input(4), Dense(4), Sequential([Input(4), Dense(3)],
  // name="inner")], name="mid"), Dense(2)]) as to_json() writes it (fields trimmed), and the
  // paths Keras 3's save_weights gives its variables.
  const ModelSpec spec = ModelSpec::from_json(json::parse(R"({"class_name": "Sequential",
      "config": {"name": "outer", "layers": [
        {"class_name": "InputLayer", "config": {"batch_shape": [null, 4], "name": "input_layer_2"}},
        {"class_name": "Sequential", "config": {"name": "mid", "layers": [
          {"class_name": "InputLayer", "config": {"batch_shape": [null, 4], "name": "input_layer_1"}},
          {"class_name": "Dense", "config": {"name": "dense_1", "units": 4}},
          {"class_name": "Sequential", "config": {"name": "inner", "layers": [
            {"class_name": "InputLayer", "config": {"batch_shape": [null, 4], "name": "input_layer"}},
            {"class_name": "Dense", "config": {"name": "dense", "units": 3}}]}}]}},
        {"class_name": "Dense", "config": {"name": "dense_2", "units": 2}}]}})"),
                                              "models in models");
  ASSERT_EQ(spec.layers().size(), 3u);
  EXPECT_EQ(spec.layers()[1]["keras_scope"],
            json::parse(R"([["sequential", "mid"], ["sequential", "inner"]])"));
  std::map<std::string, std::vector<Shape>> mirror;
  for (const train::KerasVariables& v : train::keras_weights_layout(spec)) {
    for (const Tensor& t : v.values) mirror[v.path].push_back(t.shape());
  }
  const std::map<std::string, std::vector<Shape>> keras = {
      {"layers/dense", {{3, 2}, {2}}},
      {"layers/sequential/layers/dense", {{4, 4}, {4}}},
      {"layers/sequential/layers/sequential/layers/dense", {{4, 3}, {3}}}};
  EXPECT_EQ(mirror, keras);
}

void expect_error(const json& j, const std::vector<std::string>& parts) {
  try {
    ModelSpec::from_json(j, "spec");
    ADD_FAILURE() << "no error for " << j.dump().substr(0, 200);
  } catch (const InvalidArgument& e) {
    for (const std::string& p : parts)
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what() << " lacks " << p;
  }
}

TEST(KerasNested, BadInputIsNamed) {
  expect_error(nested_sequential({{"weights", 1}}),
               {"layer 1 (Sequential 'inner')", "field 'weights'", "unknown field"});
  json bad_inner = nested_sequential(json::object());
  bad_inner["config"]["layers"][1]["config"]["layers"][1]["config"]["units"] = "four";
  expect_error(bad_inner, {"Sequential 'inner'), inside: layer 1 (Dense)", "field 'units'"});
  json groups = json::parse(R"([{"type": "conv2d", "filters": 8, "kernel": [3, 3], "groups": 3}])");
  expect_error(groups, {"field 'groups'", "3 does not divide filters 8"});
  json channels = json::parse(R"({"input_shape": [6, 8, 8], "layers": [
      {"type": "conv2d", "filters": 8, "kernel": [3, 3], "groups": 4}, {"type": "flatten"},
      {"type": "dense", "units": 2}]})");
  expect_error(channels, {"field 'groups'", "does not divide the input's 6 channels"});
  json scale = json::parse(R"({"input_shape": [6], "layers": [
      {"type": "layer_scale", "init_values": 0.1, "projection_dim": 5}, {"type": "dense", "units": 2}]})");
  expect_error(scale, {"projection_dim is 5", "6 channels"});
}

}  // namespace
}  // namespace mirror::nn
