// Masks (Note [Sequence masks] in include/mirror/nn/layer.h, Note [Keras mask nodes] in
// src/nn/model_spec_masks.cpp): the mask nodes of Keras 3 functional JSON (fixtures written by
// Keras in tests/data/keras/reference/), the masks a call is given checked against Mirror's, and
// padding masked exactly where each semantics masks it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>

#include "gradcheck.h"
#include "mirror/nn/models.h"

namespace mirror::nn {
namespace {

using nlohmann::json;
using ::testing::AllOf;
using ::testing::HasSubstr;

json keras_model(const std::string& name) {
  std::ifstream in(std::string(MIRROR_SOURCE_DIR) + "/tests/data/keras/reference/" + name +
                   ".json");
  return json::parse(in)["model"];
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

std::vector<std::string> types(const ModelSpec& s) {
  std::vector<std::string> out;
  for (const auto& l : s.layers()) out.push_back(l["type"]);
  return out;
}

/// A functional model's first layer of a Keras class.
json& layer_named(json& model, const std::string& class_name) {
  for (json& l : model["config"]["layers"])
    if (l["class_name"] == class_name) return l;
  throw Error("no layer " + class_name);
}

TEST(KerasMaskNodes, NotEqualAndAnyBuildNothingAndTheMasksAreChecked) {
  const json model = keras_model("masked_bigru_lstm");
  std::vector<std::string> classes;
  for (const auto& l : model["config"]["layers"]) classes.push_back(l["class_name"]);
  EXPECT_THAT(classes, ::testing::Contains("NotEqual"));  // what Keras 3 writes
  const ModelSpec spec = ModelSpec::from_json(model);
  EXPECT_TRUE(spec.keras_masks());
  EXPECT_EQ(types(spec),
            (std::vector<std::string>{"masking", "embedding", "bidirectional", "lstm", "dense"}));
  EXPECT_EQ(spec.to_json()["masks"], "keras");
  EXPECT_EQ(ModelSpec::from_json(spec.to_json()).to_json(), spec.to_json());
  // Masking adds NotEqual and Any; merges add LogicalOr, ExpandDims, ZerosLike, Concatenate, Any.
  EXPECT_EQ(types(ModelSpec::from_json(keras_model("masking_rows")))[0], "masking");
  const ModelSpec merged = ModelSpec::from_json(keras_model("merged_masks"));
  int concatenates = 0;
  for (const auto& t : types(merged)) concatenates += t == "concatenate";
  EXPECT_EQ(concatenates, 1);  // the mask's Concatenate op is no layer
}

TEST(KerasMaskNodes, AMaskMirrorDoesNotComputeIsRefused) {
  // The LSTM given the mask of a NotEqual against 1: not trailing zeros.
  json model = keras_model("masked_bigru_lstm");
  json& not_equal = layer_named(model, "NotEqual");
  not_equal["inbound_nodes"][0]["args"][1] = 1;
  EXPECT_THAT(error_of([&] { ModelSpec::from_json(model); }),
              AllOf(HasSubstr("compares with 1"), HasSubstr("value 0 only")));
  // A mask handed by hand to the Dense after the LSTM, whose last state Keras leaves unmasked.
  json by_hand = keras_model("masked_bigru_lstm");
  layer_named(by_hand, "Dense")["inbound_nodes"][0]["kwargs"]["mask"] =
      layer_named(by_hand, "LSTM")["inbound_nodes"][0]["kwargs"]["mask"];
  EXPECT_THAT(error_of([&] { ModelSpec::from_json(by_hand); }),
              AllOf(HasSubstr("by hand"), HasSubstr("give its input no mask")));
  // Keras writes an explicit null where a call takes a mask and its input has none.
  json conv = keras_model("conv1d_after_mask");
  EXPECT_TRUE(
      layer_named(conv, "GlobalAveragePooling1D")["inbound_nodes"][0]["kwargs"]["mask"].is_null());
  EXPECT_NO_THROW(ModelSpec::from_json(conv));
}

TEST(KerasMaskNodes, BatchNormalizationOfAMaskedSequenceIsRefused) {
  const json model = {
      {"class_name", "Sequential"},
      {"config",
       {{"layers",
         json::array({{{"class_name", "InputLayer"}, {"config", {{"batch_shape", {nullptr, 8}}}}},
                      {{"class_name", "Embedding"},
                       {"config", {{"input_dim", 20}, {"output_dim", 4}, {"mask_zero", true}}}},
                      {{"class_name", "BatchNormalization"}, {"config", json::object()}},
                      {{"class_name", "GRU"}, {"config", {{"units", 3}}}},
                      {{"class_name", "Dense"}, {"config", {{"units", 2}}}}})}}}};
  EXPECT_THAT(error_of([&] { ModelSpec::from_json(model); }),
              AllOf(HasSubstr("masked sequence"), HasSubstr("LayerNormalization")));
}

// ---- padding is masked exactly where the semantics says

const DataShape kTokens{{6}, DType::kInt32, 2, 20};

std::vector<float> run(Sequential& m, const Tensor& ids, std::vector<std::int32_t> lengths) {
  ForwardContext ctx;
  ctx.lengths = std::move(lengths);  // what the loader gives token batches
  return m.forward(ids, ctx).to_vector<float>();
}

ModelSpec conv_words(bool keras) {
  json spec = {
      {"layers",
       json::array({{{"type", "embedding"}, {"output_dim", 4}},
                    {{"type", "conv1d"}, {"filters", 3}, {"kernel", 3}, {"padding", "same"}},
                    {{"type", "global_maxpool1d"}},
                    {{"type", "dense"}}})}};
  if (keras) spec["masks"] = "keras";
  return ModelSpec::from_json(spec).bind(kTokens);
}

TEST(SequenceMasks, KerasConv1dOverAnUnmaskedEmbeddingSeesThePadding) {
  const Tensor padded = Tensor::from_vector(std::vector<std::int32_t>{4, 9, 2, 0, 0, 0}, {1, 6});
  const Tensor alone = Tensor::from_vector(std::vector<std::int32_t>{4, 9, 2}, {1, 3});
  // Mirror's masks: the batch's lengths make the padded sequence give the unpadded result.
  Sequential mirror = make_model(conv_words(false), DType::kFloat32, Device::cpu(), 3);
  EXPECT_EQ(run(mirror, padded, {3}), run(mirror, alone, {3}));
  // Keras's: no mask anywhere, so the padding is input (and the lengths change nothing).
  Sequential keras = make_model(conv_words(true), DType::kFloat32, Device::cpu(), 3);
  EXPECT_EQ(keras.parameters()[0]->value.to_vector<float>(),
            mirror.parameters()[0]->value.to_vector<float>());  // same weights
  // As in a trained Keras model, the embedding of id 0 is a vector like the others.
  Tensor row0 = keras.parameters()[0]->value.view(0, {1, 4});
  ops::fill(row0, 0.5);
  EXPECT_EQ(run(keras, padded, {3}), run(keras, padded, {}));
  EXPECT_NE(run(keras, padded, {3}), run(keras, alone, {3}));
}

TEST(SequenceMasks, KerasMaskingReachesTheRecurrentLayerAndEndsThere) {
  // Masking (Embedding mask_zero) -> GRU(sequences) -> Dense per step -> GlobalAveragePooling1D
  // (masked mean) -> Dense: the padded sequence gives the unpadded result.
  const ModelSpec spec =
      ModelSpec::from_json(
          {{"masks", "keras"},
           {"layers", json::array({{{"type", "embedding"}, {"output_dim", 4}, {"mask_zero", true}},
                                   {{"type", "gru"}, {"units", 3}, {"return_sequences", true}},
                                   {{"type", "dense"}, {"units", 5}, {"activation", "relu"}},
                                   {{"type", "global_avgpool1d"}},
                                   {{"type", "dense"}}})}})
          .bind(kTokens);
  Sequential m = make_model(spec, DType::kFloat32, Device::cpu(), 4);
  const Tensor padded = Tensor::from_vector(std::vector<std::int32_t>{4, 9, 2, 0, 0, 0}, {1, 6});
  const Tensor alone = Tensor::from_vector(std::vector<std::int32_t>{4, 9, 2}, {1, 3});
  const auto a = run(m, padded, {}), b = run(m, alone, {});
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-6);
}

TEST(SequenceMasks, EachGraphBranchSeesItsOwnInputsLengths) {
  // Mirror's masks: a strided Conv1D shortens its branch's lengths; the GRU beside it reads the
  // embedding's, and the merge takes the longest (Keras 3 ORs masks).
  json layers = json::array({{{"type", "embedding"}, {"name", "e"}, {"output_dim", 4}},
                             {{"type", "conv1d"},
                              {"name", "c"},
                              {"filters", 4},
                              {"kernel", 2},
                              {"strides", 2},
                              {"padding", "same"},
                              {"inputs", {"e"}}},
                             {{"type", "gru"}, {"name", "g1"}, {"units", 3}, {"inputs", {"c"}}},
                             {{"type", "gru"}, {"name", "g2"}, {"units", 3}, {"inputs", {"e"}}},
                             {{"type", "add"}, {"name", "sum"}, {"inputs", {"g1", "g2"}}},
                             {{"type", "dense"}, {"inputs", {"sum"}}}});
  const ModelSpec spec = ModelSpec::from_json({{"layers", layers}}).bind(kTokens);
  Sequential m = make_model(spec, DType::kFloat32, Device::cpu(), 5);
  // Sample 0 is [4, 9, 2] padded: with its lengths it equals itself unpadded, branch by branch.
  const Tensor padded = Tensor::from_vector(std::vector<std::int32_t>{4, 9, 2, 0, 0, 0}, {1, 6});
  const Tensor alone = Tensor::from_vector(std::vector<std::int32_t>{4, 9, 2}, {1, 3});
  const auto a = run(m, padded, {3}), b = run(m, alone, {3});
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-6);
}

}  // namespace
}  // namespace mirror::nn
