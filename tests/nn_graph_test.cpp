// The model graph (Note [Model graph], Note [Spec graph]): layers reading named inputs, forward
// in topological order, backward summing the gradient of a tensor read by several layers, the
// gradient-ready hook in backward order, set-up errors (cycles, dangling names, unread outputs,
// merge shape mismatches), Keras functional JSON, and the shipped graph models.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "gradcheck.h"
#include "mirror/nn/cnn_layers.h"
#include "mirror/nn/models.h"

namespace mirror::nn {
namespace {

using nlohmann::json;
using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::random_tensor;
using testing::relative_error;

/// Every parameter gradient and the input gradient of L = sum(w * model(x)) against central
/// differences (float64); returns the largest relative error.
double model_gradient_error(Sequential& m, const Tensor& x, ForwardContext& ctx) {
  const Tensor y = m.forward(x, ctx);
  const Tensor w = random_tensor(y.shape(), 99);
  m.zero_grad();
  m.backward(w);
  auto loss = [&] { return testing::weighted_sum(m.forward(x, ctx), w); };
  double worst = 0;
  for (Parameter* p : m.parameters()) {
    const double e =
        relative_error(p->grad.to_vector<double>(), testing::numeric_gradient(p->value, loss));
    EXPECT_LE(e, 1e-6) << p->name;
    worst = std::max(worst, e);
  }
  return worst;
}

void randomise(Sequential& m, std::uint64_t seed) {
  for (Parameter* p : m.parameters()) {
    p->value.copy_from(random_tensor(p->value.shape(), seed++, -0.5, 0.5));
  }
}

// A residual block: conv -> relu -> conv, plus the block input, then a shared tensor (the
// first conv's output) read by two layers.
Sequential residual_model() {
  Sequential m;
  m.add(std::make_unique<Conv2D>(3, 3, 3, 1, Padding::kSame, Activation::kTanh), {-1});  // 0
  m.add(std::make_unique<Conv2D>(3, 3, 3, 1, Padding::kSame, Activation::kTanh), {0});   // 1
  m.add(std::make_unique<Conv2D>(3, 1, 1, 1, Padding::kSame, Activation::kTanh), {1});   // 2
  m.add(std::make_unique<Add>(), {2, 0});              // 3: reads layer 0 a second time
  m.add(std::make_unique<BatchNormalization>(), {3});  // 4
  m.add(std::make_unique<GlobalAveragePooling2D>(), {4});
  m.add(std::make_unique<Dense>(2));
  m.build({2, 4, 4}, 1, DType::kFloat64);
  return m;
}

TEST(ModelGraph, ResidualGradientsMatchFiniteDifferences) {
  Sequential m = residual_model();
  EXPECT_FALSE(m.is_chain());
  randomise(m, 5);
  ForwardContext ctx;
  ctx.training = true;
  model_gradient_error(m, random_tensor({3, 2, 4, 4}, 4), ctx);
}

TEST(ModelGraph, ConcatenateBranchesMatchFiniteDifferences) {
  Sequential m;
  m.add(std::make_unique<Conv2D>(2, 1, 1), {-1});                                           // 0
  m.add(std::make_unique<Conv2D>(3, 3, 3, 1, Padding::kSame, Activation::kSigmoid), {-1});  // 1
  m.add(std::make_unique<AveragePooling2D>(3, 1, Padding::kSame), {0});                     // 2
  m.add(std::make_unique<Concatenate>(), {0, 1, 2});                                        // 3
  m.add(std::make_unique<LayerNormalization>(), {3});  // wrong rank: rejected below
  EXPECT_THROW(m.build({2, 5, 5}, 1, DType::kFloat64), InvalidArgument);

  Sequential ok;
  ok.add(std::make_unique<Conv2D>(2, 1, 1), {-1});
  ok.add(std::make_unique<Conv2D>(3, 3, 3, 1, Padding::kSame, Activation::kSigmoid), {-1});
  ok.add(std::make_unique<AveragePooling2D>(3, 1, Padding::kSame), {0});
  ok.add(std::make_unique<Concatenate>(), {0, 1, 2});
  ok.add(std::make_unique<Flatten>());
  ok.add(std::make_unique<Dense>(3));
  ok.build({2, 5, 5}, 1, DType::kFloat64);
  EXPECT_EQ(ok.layer_output_shapes()[3], (Shape{7, 5, 5}));
  randomise(ok, 2);
  ForwardContext ctx;
  model_gradient_error(ok, random_tensor({2, 2, 5, 5}, 3), ctx);
}

TEST(ModelGraph, AChainBuiltWithInputsIsTheSequentialModel) {
  auto make = [](bool explicit_inputs) {
    Sequential m;
    auto add = [&](std::unique_ptr<Layer> l, int in) {
      if (explicit_inputs) {
        m.add(std::move(l), {in});
      } else {
        m.add(std::move(l));
      }
    };
    add(std::make_unique<Conv2D>(4, 3, 3, 1, Padding::kSame, Activation::kRelu), -1);
    add(std::make_unique<Flatten>(), 0);
    add(std::make_unique<Dense>(3), 1);
    m.build({1, 6, 6}, 7);
    return m;
  };
  Sequential a = make(false), b = make(true);
  EXPECT_TRUE(b.is_chain());
  EXPECT_EQ(a.config(), b.config());
  ForwardContext ctx;
  const Tensor x = random_tensor({2, 1, 6, 6}, 1).to(Device::cpu());
  const Tensor xf = ops::cast(x, DType::kFloat32);
  EXPECT_EQ(a.forward(xf, ctx).to_vector<float>(), b.forward(xf, ctx).to_vector<float>());
}

TEST(ModelGraph, GradReadyHookFiresInReverseLayerOrder) {
  Sequential m = residual_model();
  ForwardContext ctx;
  const Tensor y = m.forward(random_tensor({2, 2, 4, 4}, 4), ctx);
  std::vector<std::string> order;
  m.backward(random_tensor(y.shape(), 3),
             [&](const std::vector<Parameter*>& ready) { order.push_back(ready.front()->name); });
  EXPECT_EQ(order,
            (std::vector<std::string>{"dense_1/kernel", "batch_normalization_1/gamma",
                                      "conv2d_3/kernel", "conv2d_2/kernel", "conv2d_1/kernel"}));
}

// step-bench --profile-gpu device: the fence runs right before each layer's clock starts and
// right before it stops, in both passes, and detaching the times stops it.
TEST(ModelGraph, LayerTimesFenceEachLayerInBothPasses) {
  Sequential m = residual_model();
  const std::size_t layers = m.layers().size();
  LayerTimes times;
  int fences = 0;
  times.fence = [&] { ++fences; };
  m.set_layer_times(&times);
  ForwardContext ctx;
  const Tensor y = m.forward(random_tensor({2, 2, 4, 4}, 4), ctx);
  EXPECT_EQ(fences, static_cast<int>(2 * layers));
  m.backward(random_tensor(y.shape(), 3));
  EXPECT_EQ(fences, static_cast<int>(4 * layers));
  EXPECT_EQ(times.forwards, 1);
  EXPECT_EQ(times.backwards, 1);
  ASSERT_EQ(times.forward_ms.size(), layers);
  ASSERT_EQ(times.backward_ms.size(), layers);
  m.set_layer_times(nullptr);
  (void)m.forward(random_tensor({2, 2, 4, 4}, 4), ctx);
  EXPECT_EQ(fences, static_cast<int>(4 * layers));
}
TEST(ModelGraph, SetUpErrors) {
  {
    Sequential m;
    EXPECT_THAT([&] { m.add(std::make_unique<Add>(), {-1}); },
                ::testing::ThrowsMessage<InvalidArgument>(HasSubstr("two or more inputs")));
    EXPECT_THAT([&] { m.add(std::make_unique<Dense>(2), {0}); },
                ::testing::ThrowsMessage<InvalidArgument>(HasSubstr("not an earlier layer")));
  }
  {  // merge shape mismatch names both inputs and shapes
    Sequential m;
    m.add(std::make_unique<Conv2D>(3, 3, 3, 2, Padding::kSame), {-1});
    m.add(std::make_unique<Conv2D>(3, 3, 3, 1, Padding::kSame), {-1});
    m.add(std::make_unique<Add>(), {0, 1});
    EXPECT_THAT(
        [&] {
          m.build({1, 6, 6}, 1);
        },
        ::testing::ThrowsMessage<InvalidArgument>(AllOf(HasSubstr("add_1"),
                                                        HasSubstr("'conv2d_1' is [3,3,3]"),
                                                        HasSubstr("'conv2d_2' is [3,6,6]"))));
  }
  {  // sequences [T, F] are joined along F, their last axis; a rank-4 sample is refused
    Sequential seq;
    seq.add(std::make_unique<ActivationLayer>(Activation::kTanh), {-1});
    seq.add(std::make_unique<ActivationLayer>(Activation::kRelu), {-1});
    seq.add(std::make_unique<Concatenate>(), {0, 1});
    seq.build({3, 4}, 1);
    EXPECT_EQ(seq.output_shape(), (Shape{3, 8}));
    Sequential volume;
    volume.add(std::make_unique<ActivationLayer>(Activation::kTanh), {-1});
    volume.add(std::make_unique<ActivationLayer>(Activation::kRelu), {-1});
    volume.add(std::make_unique<Concatenate>(), {0, 1});
    EXPECT_THAT(
        [&] {
          volume.build({2, 3, 4, 5}, 1);
        },
        ::testing::ThrowsMessage<InvalidArgument>(HasSubstr("sequences [T, F]")));
  }
  {  // an output nobody reads
    Sequential m;
    m.add(std::make_unique<Flatten>(), {-1});
    m.add(std::make_unique<Dense>(3), {-1});
    EXPECT_THAT([&] { m.build({4}, 1); },
                ::testing::ThrowsMessage<InvalidArgument>(HasSubstr("flatten_1")));
  }
}

// ---------------------------------------------------------------- specs

json graph_spec() {
  return json::parse(R"({"name": "g", "input_shape": [1, 8, 8], "layers": [
    {"type": "conv2d", "name": "a", "filters": 4, "kernel": [3, 3], "padding": "same"},
    {"type": "batch_normalization", "name": "b"},
    {"type": "add", "name": "sum", "inputs": ["b", "p"]},
    {"type": "conv2d", "name": "p", "inputs": ["input"], "filters": 4, "kernel": [1, 1],
     "use_bias": false},
    {"type": "global_average_pooling2d", "inputs": ["sum"]},
    {"type": "dense", "units": 3}
  ]})");
}

TEST(SpecGraph, SortsNamesAndBuilds) {
  const ModelSpec spec = ModelSpec::from_json(graph_spec(), "g.json");
  ASSERT_TRUE(spec.bound());
  std::vector<std::string> names;
  for (const json& l : spec.layers()) names.push_back(l["name"]);
  // "p" is listed after "sum" but computed before it; unnamed layers get layer_<index>.
  EXPECT_EQ(names, (std::vector<std::string>{"a", "b", "p", "sum", "layer_4", "layer_5"}));
  EXPECT_EQ(spec.layers()[3]["inputs"], json({"b", "p"}));
  EXPECT_EQ(spec.layers()[0]["inputs"], json({"input"}));
  // Canonical form round-trips.
  EXPECT_EQ(ModelSpec::from_json(spec.to_json()).to_json(), spec.to_json());
  Sequential m = make_model(spec, DType::kFloat32, Device::cpu(), 3);
  EXPECT_EQ(m.output_shape(), (Shape{3}));
  EXPECT_EQ(m.buffers().size(), 2u);
  EXPECT_EQ(m.parameters().size(), 2u + 2u + 1u + 2u);  // conv, bn, 1x1 without bias, dense
  EXPECT_EQ(m.layer_inputs(3), (std::vector<int>{1, 2}));
}

TEST(SpecGraph, AnUnnamedMaskedEmbeddingKeepsItsMaskingApart) {
  // Embedding(mask_zero) becomes Masking + Embedding, two layers from one entry: their default
  // names must differ (both were layer_0, refused as "names two layers").
  const json j = json::parse(R"({"name": "g", "input_shape": [7], "layers": [
      {"type": "embedding", "input_dim": 20, "output_dim": 4, "mask_zero": true},
      {"type": "gru", "units": 3, "name": "g1"},
      {"type": "dense", "units": 2, "inputs": ["g1"]}]})");
  const ModelSpec spec = ModelSpec::from_json(j, "g.json");
  std::vector<std::string> names;
  for (const json& l : spec.layers()) names.push_back(l["name"]);
  EXPECT_EQ(names, (std::vector<std::string>{"layer_0", "layer_0_1", "g1", "layer_2"}));
  EXPECT_EQ(make_model(spec.bind({{7}, DType::kInt32, 2, 20})).output_shape(), (Shape{2}));
}

TEST(SpecGraph, Errors) {
  auto fails = [](json j, const std::string& what) {
    EXPECT_THAT(
        [&] {
          ModelSpec::from_json(j, "g.json").bind({{1, 8, 8}, DType::kFloat32, 3});
        },
        ::testing::ThrowsMessage<InvalidArgument>(HasSubstr(what)))
        << what;
  };
  json cycle = graph_spec();
  cycle["layers"][0]["inputs"] = {"sum"};
  fails(cycle, "form a cycle");
  json dangling = graph_spec();
  dangling["layers"][2]["inputs"] = {"b", "nope"};
  fails(dangling, "no layer is named 'nope'");
  json unread = graph_spec();
  unread["layers"][2]["inputs"] = {"b", "a"};  // p is never read
  fails(unread, "'p' is read by no layer");
  json mismatch = graph_spec();
  mismatch["layers"][3]["filters"] = 5;
  fails(mismatch, "input 'b' is [4,8,8] and input 'p' is [5,8,8]");
  json lone = graph_spec();
  lone["layers"][2]["inputs"] = {"b"};
  lone["layers"].erase(3);
  fails(lone, "two or more inputs");
  json twice = graph_spec();
  twice["layers"][1]["name"] = "a";
  fails(twice, "names two layers");
}

TEST(SpecGraph, KerasFunctionalJson) {
  // Keras 3 Functional.to_json() shape (channels_last), trimmed to what Mirror reads.
  auto tensor = [](const std::string& layer) {
    return json{{"class_name", "__keras_tensor__"},
                {"config", {{"shape", {nullptr, 8, 8, 4}}, {"keras_history", {layer, 0, 0}}}}};
  };
  auto node = [&](std::vector<std::string> from) {
    json args = json::array();
    if (from.size() == 1) {
      args.push_back(tensor(from[0]));
    } else {
      json list = json::array();
      for (auto& f : from) list.push_back(tensor(f));
      args.push_back(list);
    }
    return json::array({{{"args", args}, {"kwargs", json::object()}}});
  };
  json layers = json::array();
  layers.push_back({{"class_name", "InputLayer"},
                    {"name", "input_layer"},
                    {"config", {{"batch_shape", {nullptr, 8, 8, 1}}, {"name", "input_layer"}}},
                    {"inbound_nodes", json::array()}});
  layers.push_back({{"class_name", "Conv2D"},
                    {"name", "conv2d"},
                    {"config",
                     {{"filters", 4},
                      {"kernel_size", {3, 3}},
                      {"padding", "same"},
                      {"use_bias", false},
                      {"name", "conv2d"}}},
                    {"inbound_nodes", node({"input_layer"})}});
  layers.push_back({{"class_name", "SyncBatchNormalization"},
                    {"name", "bn"},
                    {"config", {{"axis", -1}, {"momentum", 0.9}, {"name", "bn"}}},
                    {"inbound_nodes", node({"conv2d"})}});
  layers.push_back({{"class_name", "Conv2D"},
                    {"name", "side"},
                    {"config", {{"filters", 4}, {"kernel_size", {1, 1}}, {"name", "side"}}},
                    {"inbound_nodes", node({"input_layer"})}});
  layers.push_back({{"class_name", "Concatenate"},
                    {"name", "cat"},
                    {"config", {{"axis", -1}, {"name", "cat"}}},
                    {"inbound_nodes", node({"bn", "side"})}});
  layers.push_back({{"class_name", "GlobalAveragePooling2D"},
                    {"name", "gap"},
                    {"config", {{"name", "gap"}}},
                    {"inbound_nodes", node({"cat"})}});
  layers.push_back({{"class_name", "Dense"},
                    {"name", "out"},
                    {"config", {{"units", 3}, {"name", "out"}}},
                    {"inbound_nodes", node({"gap"})}});
  const json model = {{"class_name", "Functional"},
                      {"config",
                       {{"name", "f"},
                        {"layers", layers},
                        {"input_layers", {"input_layer", 0, 0}},
                        {"output_layers", {{"out", 0, 0}}}}}};
  const ModelSpec spec = ModelSpec::from_json(model, "f.json");
  ASSERT_TRUE(spec.bound());
  EXPECT_EQ(spec.input_shape(), (Shape{1, 8, 8}));
  EXPECT_EQ(spec.layers()[3]["type"], "concatenate");
  EXPECT_EQ(spec.layers()[3]["inputs"], json({"bn", "side"}));
  EXPECT_EQ(spec.layers()[1]["synchronized"], true);
  EXPECT_EQ(spec.layers()[0]["use_bias"], false);
  Sequential m = make_model(spec);
  EXPECT_EQ(m.layer_output_shapes()[3], (Shape{8, 8, 8}));

  json wrong_out = model;
  wrong_out["config"]["output_layers"] = {{"gap", 0, 0}};
  EXPECT_THROW(ModelSpec::from_json(wrong_out, "f.json"), InvalidArgument);
  json shared = model;
  shared["config"]["layers"][6]["inbound_nodes"].push_back(
      shared["config"]["layers"][6]["inbound_nodes"][0]);
  EXPECT_THAT([&] { ModelSpec::from_json(shared, "f.json"); },
              ::testing::ThrowsMessage<InvalidArgument>(HasSubstr("no shared layers")));
  // An input that is not the model's InputLayer, and references to calls or outputs a layer
  // does not have, are refused (they were once read as if they were right).
  json ghost = model;
  ghost["config"]["input_layers"] = {"ghost", 0, 0};
  EXPECT_THAT([&] { ModelSpec::from_json(ghost, "f.json"); },
              ::testing::ThrowsMessage<InvalidArgument>(HasSubstr(
                  "'config.input_layers': names 'ghost', which is not an InputLayer of the "
                  "model (its InputLayer: 'input_layer')")));
  json second_call = model;
  second_call["config"]["layers"][6]["inbound_nodes"][0]["args"][0]["config"]["keras_history"] =
      {"gap", 1, 0};
  EXPECT_THAT([&] { ModelSpec::from_json(second_call, "f.json"); },
              ::testing::ThrowsMessage<InvalidArgument>(HasSubstr("refers to call 1 of layer 'gap'")));
  json second_output = model;
  second_output["config"]["layers"][6]["inbound_nodes"][0]["args"][0]["config"]["keras_history"] =
      {"gap", 0, 2};
  EXPECT_THAT([&] { ModelSpec::from_json(second_output, "f.json"); },
              ::testing::ThrowsMessage<InvalidArgument>(HasSubstr("refers to output 2 of layer 'gap'")));
}

TEST(SpecSoftmax, ALastSoftmaxIsFoldedIntoTheLoss) {
  // Keras classifiers end in softmax: a Dense's becomes linear, an Activation layer is dropped.
  const ModelSpec dense = ModelSpec::from_json(json::parse(
      R"([{"type": "flatten"}, {"type": "dense", "units": 3, "activation": "softmax"}])"));
  EXPECT_TRUE(dense.softmax_folded());
  EXPECT_EQ(dense.layers().back()["activation"], "linear");
  EXPECT_EQ(dense.to_json()["softmax_folded"], true);
  EXPECT_TRUE(ModelSpec::from_json(dense.to_json()).softmax_folded());  // checkpoints keep it
  json graph = graph_spec();
  graph["layers"].push_back({{"type", "activation"}, {"activation", "softmax"}});
  const ModelSpec g = ModelSpec::from_json(graph, "g.json");
  EXPECT_TRUE(g.softmax_folded());
  EXPECT_EQ(g.layers().size(), 6u);
  EXPECT_EQ(g.layers().back()["type"], "dense");
  EXPECT_FALSE(ModelSpec::from_json(graph_spec()).softmax_folded());
  // Anywhere else it is an error.
  json early = graph_spec();
  early["layers"][0]["activation"] = "softmax";
  EXPECT_THAT(
      [&] { ModelSpec::from_json(early, "g.json"); },
      ::testing::ThrowsMessage<InvalidArgument>(HasSubstr("only on the model's last layer")));
}

TEST(SpecGraph, ShippedGraphModelsBuild) {
  const DataShape fmnist{{1, 28, 28}, DType::kFloat32, 10};
  Sequential resnet = make_model(ModelSpec::builtin("resnet").bind(fmnist));
  EXPECT_EQ(resnet.output_shape(), (Shape{10}));
  int adds = 0, bns = 0;
  for (auto& l : resnet.layers()) {
    adds += l->kind() == "add";
    bns += l->kind() == "batch_normalization";
  }
  EXPECT_EQ(adds, 6);
  EXPECT_EQ(bns, 15);  // stem, 2 per block, 2 projections
  Sequential inception = make_model(ModelSpec::builtin("inception").bind(fmnist));
  EXPECT_EQ(inception.output_shape(), (Shape{10}));
  ForwardContext ctx;
  ctx.training = true;
  const Tensor x = ops::cast(random_tensor({2, 1, 28, 28}, 1), DType::kFloat32);
  EXPECT_EQ(resnet.forward(x, ctx).shape(), (Shape{2, 10}));
  EXPECT_EQ(inception.forward(x, ctx).shape(), (Shape{2, 10}));
}

}  // namespace
}  // namespace mirror::nn
