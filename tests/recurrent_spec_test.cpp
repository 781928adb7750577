// Model specs with LSTM and Bidirectional: Keras's to_json() (Keras 3 writes the backward layer
// out in full) read unchanged, the canonical form round-trips, the shipped specs bigru-words and
// lstm-rows bind and build, and every rejection names the layer and the field.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "mirror/nn/bidirectional.h"
#include "mirror/nn/models.h"
#include "mirror/nn/recurrent.h"

namespace mirror::nn {
namespace {

using nlohmann::json;
using ::testing::AllOf;
using ::testing::HasSubstr;

ModelSpec parse(const json& j) { return ModelSpec::from_json(j, "spec"); }
const DataShape kTokens{{12}, DType::kInt32, 4, 30};

/// A Keras 3 recurrent layer config as to_json() writes it.
json keras_rnn(const std::string& cls, const std::string& name, bool backwards, bool seq) {
  json c = {
      {"name", name},
      {"trainable", true},
      {"dtype",
       {{"module", "keras"}, {"class_name", "DTypePolicy"}, {"config", {{"name", "float32"}}}}},
      {"return_sequences", seq},
      {"return_state", false},
      {"go_backwards", backwards},
      {"stateful", false},
      {"unroll", false},
      {"zero_output_for_mask", true},
      {"units", 5},
      {"activation", "tanh"},
      {"recurrent_activation", "sigmoid"},
      {"use_bias", true},
      {"kernel_initializer",
       {{"module", "keras.initializers"},
        {"class_name", "GlorotUniform"},
        {"config", {{"seed", nullptr}}},
        {"registered_name", nullptr}}},
      {"recurrent_initializer",
       {{"module", "keras.initializers"},
        {"class_name", "Orthogonal"},
        {"config", {{"gain", 1.0}, {"seed", nullptr}}},
        {"registered_name", nullptr}}},
      {"bias_initializer",
       {{"module", "keras.initializers"},
        {"class_name", "Zeros"},
        {"config", json::object()},
        {"registered_name", nullptr}}},
      {"kernel_regularizer", nullptr},
      {"recurrent_regularizer", nullptr},
      {"bias_regularizer", nullptr},
      {"activity_regularizer", nullptr},
      {"kernel_constraint", nullptr},
      {"recurrent_constraint", nullptr},
      {"bias_constraint", nullptr},
      {"dropout", 0.0},
      {"recurrent_dropout", 0.0},
      {"seed", nullptr}};
  if (cls == "GRU") c["reset_after"] = true;
  if (cls == "LSTM") c["unit_forget_bias"] = true;
  return {
      {"module", "keras.layers"}, {"class_name", cls}, {"config", c}, {"registered_name", nullptr}};
}

json keras_model(const std::vector<json>& recurrent_layers) {
  json layers = json::array();
  layers.push_back({{"module", "keras.layers"},
                    {"class_name", "InputLayer"},
                    {"config",
                     {{"batch_shape", {nullptr, 12}},
                      {"dtype", "int32"},
                      {"sparse", false},
                      {"name", "input_layer"}}},
                    {"registered_name", nullptr}});
  layers.push_back(
      {{"module", "keras.layers"},
       {"class_name", "Embedding"},
       {"config",
        {{"name", "embedding"}, {"input_dim", 30}, {"output_dim", 6}, {"mask_zero", true}}},
       {"registered_name", nullptr}});
  for (const json& l : recurrent_layers) layers.push_back(l);
  layers.push_back({{"module", "keras.layers"},
                    {"class_name", "Dense"},
                    {"config", {{"name", "dense"}, {"units", 4}, {"activation", "linear"}}},
                    {"registered_name", nullptr}});
  return {{"module", "keras"},
          {"class_name", "Sequential"},
          {"config", {{"name", "sequential"}, {"trainable", true}, {"layers", layers}}},
          {"registered_name", nullptr}};
}

json keras_bidirectional(const std::string& cls, const std::string& merge, bool seq) {
  const std::string lower = cls == "GRU" ? "gru" : "lstm";
  return {{"module", "keras.layers"},
          {"class_name", "Bidirectional"},
          {"config",
           {{"name", "bidirectional"},
            {"trainable", true},
            {"merge_mode", merge},
            {"layer", keras_rnn(cls, "forward_" + lower, false, seq)},
            {"backward_layer", keras_rnn(cls, "backward_" + lower, true, seq)}}},
          {"registered_name", nullptr}};
}

TEST(RecurrentSpec, KerasBidirectionalGruThenLstmIsReadUnchanged) {
  const ModelSpec spec = parse(keras_model(
      {keras_bidirectional("GRU", "concat", true), keras_rnn("LSTM", "lstm", false, false)}));
  const ModelSpec bound = spec.bind(kTokens);
  EXPECT_EQ(bound.layers()[2], json::parse(R"({"type": "bidirectional", "merge_mode": "concat",
                            "layer": {"type": "gru", "units": 5, "return_sequences": true}})"));
  EXPECT_EQ(bound.layers()[3], json::parse(R"({"type": "lstm", "units": 5,
      "return_sequences": false, "unit_forget_bias": true})"));
  // The canonical form round-trips.
  EXPECT_EQ(ModelSpec::from_json(bound.to_json()).bind(kTokens).layers(), bound.layers());
  Sequential m = make_model(bound, DType::kFloat32, Device::cpu(), 3);
  // [T, 2*5] out of the bidirectional GRU, [5] out of the LSTM.
  const auto shapes = m.layer_output_shapes();
  EXPECT_EQ(shapes[2], (Shape{12, 10}));
  EXPECT_EQ(shapes[3], (Shape{5}));
  EXPECT_EQ(m.parameters()[1]->name, "bidirectional_1/forward/kernel");
  EXPECT_EQ(m.parameters()[1]->value.shape(), (Shape{15, 6}));
  EXPECT_EQ(m.parameters()[9]->name, "lstm_1/kernel");
  EXPECT_EQ(m.parameters()[9]->value.shape(), (Shape{20, 10}));
  Tensor ids = Tensor::zeros({2, 12}, DType::kInt32);
  ids.data<std::int32_t>()[0] = 3;
  ids.data<std::int32_t>()[12 + 4] = 7;
  ForwardContext ctx;
  EXPECT_EQ(m.forward(ids, ctx).shape(), (Shape{2, 4}));
  EXPECT_EQ(Masking::lengths_of(ids), (std::vector<std::int32_t>{1, 5}));
  EXPECT_TRUE(ctx.lengths.empty());  // ended by the LSTM (Note [Sequence masks])
}

TEST(RecurrentSpec, EveryMergeModeAndALstmInside) {
  for (const char* mode : {"concat", "sum", "ave", "mul"}) {
    const ModelSpec bound =
        parse(keras_model({keras_bidirectional("LSTM", mode, false)})).bind(kTokens);
    Sequential m = make_model(bound, DType::kFloat32, Device::cpu(), 1);
    auto* b = dynamic_cast<Bidirectional*>(m.layers()[2].get());
    ASSERT_NE(b, nullptr) << mode;
    EXPECT_EQ(merge_mode_name(b->merge_mode()), std::string(mode));
    EXPECT_EQ(m.layer_output_shapes()[2], (Shape{std::string(mode) == "concat" ? 10 : 5})) << mode;
  }
}

TEST(RecurrentSpec, ShippedSpecsBindAndBuild) {
  Sequential words = make_model(ModelSpec::builtin("bigru-words").bind(kTokens), DType::kFloat32,
                                Device::cpu(), 2);
  EXPECT_EQ(words.layer_output_shapes()[2], (Shape{12, 64}));
  EXPECT_EQ(words.output_shape(), (Shape{4}));
  Sequential rows =
      make_model(ModelSpec::builtin("lstm-rows").bind({{28, 28}, DType::kFloat32, 10}),
                 DType::kFloat32, Device::cpu(), 2);
  EXPECT_EQ(rows.parameters()[0]->name, "lstm_1/kernel");
  EXPECT_EQ(rows.parameters()[0]->value.shape(), (Shape{256, 28}));
  EXPECT_EQ(rows.output_shape(), (Shape{10}));
}

void expect_rejected(const json& spec, const std::string& a, const std::string& b) {
  try {
    parse(spec).bind(kTokens);
    ADD_FAILURE() << "accepted: " << spec.dump();
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr(a), HasSubstr(b)));
  }
}

TEST(RecurrentSpec, RejectionsNameTheLayerAndField) {
  json different = keras_bidirectional("GRU", "concat", true);
  different["config"]["backward_layer"]["config"]["units"] = 7;
  expect_rejected(keras_model({different}), "layer 2 (Bidirectional)", "\"units\":7");
  json null_merge = keras_bidirectional("GRU", "concat", false);
  null_merge["config"]["merge_mode"] = "first";
  expect_rejected(keras_model({null_merge}), "merge_mode", "concat, sum, ave or mul");
  null_merge["config"]["merge_mode"] = nullptr;
  expect_rejected(keras_model({null_merge}), "merge_mode", "multi-output");
  json dense_inside = keras_bidirectional("GRU", "concat", false);
  dense_inside["config"]["layer"]["class_name"] = "Dense";
  expect_rejected(keras_model({dense_inside}), "field 'layer'", "GRU or LSTM");
  json name_only = keras_bidirectional("GRU", "concat", false);
  name_only["config"]["layer"] = "GRU";
  expect_rejected(keras_model({name_only}), "field 'layer'", "GRU or LSTM layer object");
  name_only["config"]["layer"] = {{"class_name", 3}};
  expect_rejected(keras_model({name_only}), "field 'layer'", "GRU or LSTM layer object");
  json no_layer = keras_bidirectional("GRU", "concat", false);
  no_layer["config"].erase("layer");
  expect_rejected(keras_model({no_layer}), "field 'layer'", "required");
  expect_rejected(keras_model({keras_rnn("LSTM", "lstm", true, false)}), "go_backwards",
                  "wrap it in a Bidirectional");
  json peephole = keras_rnn("LSTM", "lstm", false, false);
  peephole["config"]["recurrent_dropout"] = 0.25;
  expect_rejected(keras_model({peephole}), "recurrent_dropout", "no LSTM dropout");
  // A sequence output must be reduced before a dense layer.
  expect_rejected(keras_model({keras_rnn("LSTM", "lstm", false, true)}), "dense",
                  "without return_sequences");
}

}  // namespace
}  // namespace mirror::nn
