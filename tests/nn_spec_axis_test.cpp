// Note [Positive channel axes] (src/nn/model_spec_layers.cpp): Keras writes channel axes as
// positive indices counting the batch axis (keras.applications' BatchNormalization(axis=3),
// Concatenate(axis=3), Normalization(axis=[3])). Where such an axis is the channel axis of the
// layer's input it builds the model written with -1; any other axis is refused at bind() naming
// the layer, the axis and the input shape.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "gradcheck.h"
#include "mirror/nn/models.h"
#include "mirror/ops.h"

namespace mirror::nn {
namespace {

using nlohmann::json;
using ::testing::AllOf;
using ::testing::HasSubstr;

json keras_layer(const std::string& cls, json config) {
  return {{"class_name", cls}, {"config", std::move(config)}};
}

/// A Keras Sequential reading `batch_shape` (batch axis first, channels_last).
json keras_sequential(const json& batch_shape, const json& layers) {
  json all = json::array({keras_layer("InputLayer", {{"batch_shape", batch_shape}})});
  for (const auto& l : layers) all.push_back(l);
  return {{"class_name", "Sequential"}, {"config", {{"name", "seq"}, {"layers", all}}}};
}

/// Keras 3's inbound_nodes of a call reading the layers `from`.
json inbound(const std::vector<std::string>& from) {
  auto tensor = [](const std::string& layer) {
    return json{{"class_name", "__keras_tensor__"},
                {"config", {{"shape", {nullptr, 8, 8, 4}}, {"keras_history", {layer, 0, 0}}}}};
  };
  json args = json::array();
  if (from.size() == 1) {
    args.push_back(tensor(from[0]));
  } else {
    json list = json::array();
    for (const auto& f : from) list.push_back(tensor(f));
    args.push_back(list);
  }
  return json::array({{{"args", args}, {"kwargs", json::object()}}});
}

json keras_node(const std::string& cls, const std::string& name, json config,
                const std::vector<std::string>& from) {
  config["name"] = name;
  return {{"class_name", cls},
          {"name", name},
          {"config", std::move(config)},
          {"inbound_nodes", from.empty() ? json::array() : inbound(from)}};
}

/// Every parameter's and buffer's name, shape and bytes, in model order.
std::vector<std::pair<std::string, std::uint64_t>> weights(Sequential& m) {
  std::vector<std::pair<std::string, std::uint64_t>> out;
  for (Parameter* p : m.parameters()) out.emplace_back(p->name, ops::fingerprint(p->value));
  for (Buffer* b : m.buffers()) out.emplace_back(b->name, ops::fingerprint(b->value));
  return out;
}

/// Two bound specs are one model: the same canonical form (what checkpoints store), the same
/// parameters from the same seed and the same forward output.
void expect_same_model(const ModelSpec& a, const ModelSpec& b, const Shape& batch) {
  ASSERT_TRUE(a.bound());
  ASSERT_TRUE(b.bound());
  EXPECT_EQ(a.to_json(), b.to_json());
  Sequential ma = make_model(a, DType::kFloat32, Device::cpu(), 5);
  Sequential mb = make_model(b, DType::kFloat32, Device::cpu(), 5);
  EXPECT_EQ(ma.config(), mb.config());
  EXPECT_EQ(weights(ma), weights(mb));
  ForwardContext ctx;
  ctx.training = true;
  const Tensor x = ops::cast(testing::random_tensor(batch, 3), DType::kFloat32);
  EXPECT_EQ(ma.forward(x, ctx).to_vector<float>(), mb.forward(x, ctx).to_vector<float>());
}

/// Conv2D -> BatchNormalization(image_axis) -> pooling -> Dense -> BatchNormalization(
/// feature_axis) -> Dense over [N, H, W, 3] (H, W null: the spec stays unbound).
json bn_model(const json& image_axis, const json& feature_axis, const json& hw = 8) {
  return keras_sequential(
      {nullptr, hw, hw, 3},
      json::array(
          {keras_layer("Conv2D", {{"filters", 4}, {"kernel_size", {3, 3}}, {"padding", "same"}}),
           keras_layer("BatchNormalization", {{"axis", image_axis}}),
           keras_layer("GlobalAveragePooling2D", json::object()),
           keras_layer("Dense", {{"units", 6}}),
           keras_layer("BatchNormalization", {{"axis", feature_axis}}),
           keras_layer("Dense", {{"units", 3}})}));
}

TEST(PositiveAxes, BatchNormalizationAxis3OfImagesAnd1OfFeaturesIsTheChannelAxis) {
  const ModelSpec keras = ModelSpec::from_json(bn_model(3, 1), "keras.json");
  const ModelSpec minus = ModelSpec::from_json(bn_model(-1, -1), "minus.json");
  expect_same_model(keras, minus, {4, 3, 8, 8});
  // A list of one, as Keras writes some axes, alike.
  expect_same_model(ModelSpec::from_json(bn_model({3}, {1}), "list.json"), minus, {4, 3, 8, 8});

  // Unbound (the image size is open), the layers record the axis and the layout it counts in,
  // survive to_json() -> from_json(), and bind to the -1 model.
  const ModelSpec open = ModelSpec::from_json(bn_model(3, 1, nullptr), "open.json");
  ASSERT_FALSE(open.bound());
  EXPECT_EQ(open.layers()[1]["axis"], 3);
  EXPECT_EQ(open.layers()[1]["data_format"], "channels_last");
  EXPECT_EQ(open.layers()[4]["axis"], 1);
  const ModelSpec again = ModelSpec::from_json(open.to_json(), "again.json");
  EXPECT_EQ(again.to_json(), open.to_json());
  const DataShape data{{3, 8, 8}, DType::kFloat32, 3};
  const ModelSpec open_minus = ModelSpec::from_json(bn_model(-1, -1, nullptr), "open_minus.json");
  expect_same_model(open.bind(data), open_minus.bind(data), {4, 3, 8, 8});
  expect_same_model(again.bind(data), open_minus.bind(data), {4, 3, 8, 8});
  EXPECT_EQ(open.bind(data).to_json(), minus.to_json());
}

json concat_model(const json& axis) {
  json layers = json::array(
      {keras_node("InputLayer", "in", {{"batch_shape", {nullptr, 8, 8, 3}}}, {}),
       keras_node("Conv2D", "a", {{"filters", 4}, {"kernel_size", {3, 3}}, {"padding", "same"}},
                  {"in"}),
       keras_node("Conv2D", "b", {{"filters", 2}, {"kernel_size", {1, 1}}}, {"in"}),
       keras_node("Concatenate", "cat", {{"axis", axis}}, {"a", "b"}),
       keras_node("BatchNormalization", "bn", {{"axis", axis}}, {"cat"}),
       keras_node("GlobalAveragePooling2D", "gap", json::object(), {"bn"}),
       keras_node("Dense", "out", {{"units", 3}}, {"gap"})});
  return {{"class_name", "Functional"},
          {"config",
           {{"name", "branches"},
            {"layers", layers},
            {"input_layers", {"in", 0, 0}},
            {"output_layers", {{"out", 0, 0}}}}}};
}

TEST(PositiveAxes, ConcatenateAxis3OfTwoImageBranchesIsTheChannelAxis) {
  const ModelSpec keras = ModelSpec::from_json(concat_model(3), "keras.json");
  expect_same_model(keras, ModelSpec::from_json(concat_model(-1), "minus.json"), {2, 3, 8, 8});
  Sequential m = make_model(keras);
  EXPECT_EQ(m.layer_output_shapes()[2], (Shape{6, 8, 8}));
}

TEST(PositiveAxes, NormalizationAxisListAndLayerNormalizationOfSequences) {
  const auto normalized = [](const json& axis) {
    return ModelSpec::from_json(
        keras_sequential({nullptr, 4, 4, 3},
                         json::array({keras_layer("Rescaling", {{"scale", 0.5}}),
                                      keras_layer("Normalization", {{"axis", axis},
                                                                    {"mean", {0.1, 0.2, 0.3}},
                                                                    {"variance", {1.0, 2.0, 4.0}}}),
                                      keras_layer("GlobalAveragePooling2D", json::object()),
                                      keras_layer("Dense", {{"units", 2}})})),
        "norm.json");
  };
  const ModelSpec three = normalized({3});
  EXPECT_EQ(three.layers()[1]["axis"], -1);  // bound: as if -1 were written
  EXPECT_FALSE(three.layers()[1].contains("data_format"));
  expect_same_model(three, normalized({-1}), {2, 3, 4, 4});
  expect_same_model(normalized(3), normalized({-1}), {2, 3, 4, 4});

  const auto sequences = [](const json& axis) {
    return ModelSpec::from_json(
        keras_sequential({nullptr, 5, 4},
                         json::array({keras_layer("LayerNormalization", {{"axis", axis}}),
                                      keras_layer("GlobalAveragePooling1D", json::object()),
                                      keras_layer("Dense", {{"units", 2}})})),
        "seq.json");
  };
  expect_same_model(sequences(2), sequences(-1), {3, 5, 4});
  expect_same_model(sequences({2}), sequences(-1), {3, 5, 4});
}

std::string error_of(const json& spec) {
  try {
    ModelSpec::from_json(spec, "spec.json");
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(PositiveAxes, AnotherAxisIsRefusedNamingTheLayerTheAxisAndTheShape) {
  EXPECT_THAT(error_of(bn_model(2, 1)),
              AllOf(HasSubstr("layer 2 (batch_normalization)"),
                    HasSubstr("axis 2 of a [N, 8, 8, 4] input (channels_last: [N, H, W, C]) is "
                              "not the channel axis; Mirror normalises along the channel axis "
                              "only (-1 or 3 here)")));
  EXPECT_THAT(error_of(bn_model(3, 2)),
              AllOf(HasSubstr("layer 5 (batch_normalization)"),
                    HasSubstr("axis 2 of a [N, 6] input is not the channel axis"),
                    HasSubstr("(-1 or 1 here)")));
  EXPECT_THAT(error_of(concat_model(1)),
              AllOf(HasSubstr("(concatenate)"), HasSubstr("'cat'"),
                    HasSubstr("axis 1 of a [N, 8, 8, 4] input (channels_last: [N, H, W, C])"),
                    HasSubstr("joins inputs along the channel axis only (-1 or 3 here)")));
  // A Normalization of features [N, 4] names its axis [3] as 3.
  const json features = keras_sequential(
      {nullptr, 4},
      json::array({keras_layer("Normalization", {{"axis", {3}}, {"mean", 0.0}, {"variance", 1.0}}),
                   keras_layer("Dense", {{"units", 2}})}));
  EXPECT_THAT(error_of(features),
              AllOf(HasSubstr("layer 1 (normalization)"), HasSubstr("axis 3 of a [N, 4] input"),
                    HasSubstr("(-1 or 1 here)")));
  // Unbound, the check waits for the shape; binding refuses.
  const ModelSpec open = ModelSpec::from_json(bn_model(1, 1, nullptr), "open.json");
  EXPECT_THAT(
      [&] {
        open.bind({{3, 8, 8}, DType::kFloat32, 3});
      },
      ::testing::ThrowsMessage<InvalidArgument>(
          HasSubstr("axis 1 of a [N, 8, 8, 4] input (channels_last")));
  // The batch axis and axes past an input's rank are refused as they are read.
  EXPECT_THAT(
      error_of(bn_model(0, 1)),
      AllOf(HasSubstr("field 'axis'"), HasSubstr("only the channel axis"), HasSubstr("got 0")));
  EXPECT_THAT(error_of(bn_model(4, 1)), HasSubstr("got 4"));
  EXPECT_THAT(error_of(bn_model(-2, 1)), HasSubstr("got -2"));
  // Inside a TimeDistributed only -1 is read.
  const json td = keras_sequential(
      {nullptr, 5, 4},
      json::array({keras_layer("TimeDistributed",
                               {{"layer", keras_layer("BatchNormalization", {{"axis", 1}})}}),
                   keras_layer("GlobalAveragePooling1D", json::object()),
                   keras_layer("Dense", {{"units", 2}})}));
  EXPECT_THAT(error_of(td), HasSubstr("inside a TimeDistributed is not read"));
}

TEST(PositiveAxes, ChannelsFirstAxis1IsStillTheChannelAxis) {
  // Keras channels_first: BatchNormalization(axis=1) after and before the first conv.
  const auto cf = [](const json& before, const json& after) {
    return keras_sequential({nullptr, 3, 8, 8},
                            json::array({keras_layer("BatchNormalization", {{"axis", before}}),
                                         keras_layer("Conv2D", {{"filters", 4},
                                                                {"kernel_size", {3, 3}},
                                                                {"data_format", "channels_first"}}),
                                         keras_layer("BatchNormalization", {{"axis", after}}),
                                         keras_layer("Flatten", json::object()),
                                         keras_layer("Dense", {{"units", 2}})}));
  };
  const ModelSpec keras = ModelSpec::from_json(cf(1, 1), "cf.json");
  EXPECT_EQ(keras.input_shape(), (Shape{3, 8, 8}));
  EXPECT_FALSE(keras.layers()[0].contains("axis"));
  EXPECT_FALSE(keras.layers()[2].contains("axis"));
  expect_same_model(keras, ModelSpec::from_json(cf(-1, -1), "cf_minus.json"), {2, 3, 8, 8});
  // Axis 3 of a channels_first image is its width.
  EXPECT_THAT(error_of(cf(1, 3)),
              AllOf(HasSubstr("layer 3 (batch_normalization)"),
                    HasSubstr("axis 3 of a [N, 4, 6, 6] input (channels_first: [N, C, H, W])"),
                    HasSubstr("(-1 or 1 here)")));

  // Mirror's own format is NCHW: 1 is the channel axis of an image, as always; 3 is not.
  const auto mirror = [](const json& axis) {
    return json{{"input_shape", {3, 8, 8}},
                {"layers",
                 {{{"type", "conv2d"}, {"filters", 4}, {"kernel", {3, 3}}},
                  {{"type", "batch_normalization"}, {"axis", axis}},
                  {{"type", "flatten"}},
                  {{"type", "dense"}, {"units", 2}}}}};
  };
  expect_same_model(ModelSpec::from_json(mirror(1), "m1.json"),
                    ModelSpec::from_json(mirror(-1), "m.json"), {2, 3, 8, 8});
  EXPECT_THAT(error_of(mirror(3)), HasSubstr("axis 3 of a [N, 4, 6, 6] input (channels_first"));
}

}  // namespace
}  // namespace mirror::nn
