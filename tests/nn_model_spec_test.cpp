// ModelSpec: the built-in specs build today's weights, every layer type parses/binds/builds,
// Keras's to_json() is read, and every rejection names the layer index and the field.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>

#include "gradcheck.h"
#include "mirror/nn/layers.h"
#include "mirror/nn/models.h"
#include "mirror/nn/recurrent.h"
#include "mirror/ops.h"
#include "temp_dir.h"

namespace mirror::nn {
namespace {

using nlohmann::json;
using ::testing::AllOf;
using ::testing::HasSubstr;

/// FNV-1a over every parameter's name, shape and bytes, in build order.
std::uint64_t weights_print(Sequential& m) {
  std::uint64_t h = 14695981039346656037ull;
  auto mix = [&h](std::uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xff;
      h *= 1099511628211ull;
    }
  };
  for (Parameter* p : m.parameters()) {
    for (char c : p->name) mix(static_cast<unsigned char>(c));
    for (auto d : p->value.shape()) mix(static_cast<std::uint64_t>(d));
    mix(ops::fingerprint(p->value));
  }
  return h;
}

// Note [Pinned fingerprints]: recorded from the hand-written make_cnn / make_row_gru /
// make_word_gru before the reference models became JSON specs (commit 045441f); the specs must
// build bit-identical weights with the same parameter names.
TEST(ModelSpecPins, BuiltinsBuildTheWeightsOfTheHandWrittenModels) {
  struct Pin {
    std::uint64_t seed, cnn, rows, words;
  };
  for (const Pin& pin :
       {Pin{0, 0xbc838e15b3501160ull, 0x5a24abfe86f01aecull, 0x36fffedfd26cfe73ull},
        Pin{7, 0xf573381f36610cfbull, 0x952b8afe962987c0ull, 0xee064ec4896edbbfull}}) {
    SCOPED_TRACE("seed " + std::to_string(pin.seed));
    Sequential cnn = make_model(ModelSpec::builtin("cnn").bind({{1, 28, 28}, DType::kFloat32, 10}),
                                DType::kFloat32, Device::cpu(), pin.seed);
    Sequential rows =
        make_model(ModelSpec::builtin("gru-rows").bind({{28, 28}, DType::kFloat32, 10}),
                   DType::kFloat32, Device::cpu(), pin.seed);
    Sequential words =
        make_model(ModelSpec::builtin("gru-words").bind({{32}, DType::kInt32, 5, 60}),
                   DType::kFloat32, Device::cpu(), pin.seed);
    EXPECT_EQ(weights_print(cnn), pin.cnn);
    EXPECT_EQ(weights_print(rows), pin.rows);
    EXPECT_EQ(weights_print(words), pin.words);
    // The wrappers are the same models.
    Sequential cnn2 = make_cnn(DType::kFloat32, Device::cpu(), pin.seed);
    Sequential words2 = make_word_gru(60, 5, 32, DType::kFloat32, Device::cpu(), pin.seed);
    EXPECT_EQ(weights_print(cnn2), pin.cnn);
    EXPECT_EQ(weights_print(words2), pin.words);
  }
}

// ---------------------------------------------------------------- helpers

ModelSpec parse(const json& j) { return ModelSpec::from_json(j, "spec"); }

/// The InvalidArgument message of `f` (fails the test when nothing is thrown).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected InvalidArgument";
  return "";
}

std::vector<std::string> kinds(Sequential& m) {
  std::vector<std::string> out;
  for (auto& l : m.layers()) out.push_back(l->name());
  return out;
}

std::vector<std::string> names(Sequential& m) {
  std::vector<std::string> out;
  for (Parameter* p : m.parameters()) out.push_back(p->name);
  return out;
}

const DataShape kImages{{1, 28, 28}, DType::kFloat32, 10, 0};
const DataShape kTokens{{12}, DType::kInt32, 4, 30};

// ---------------------------------------------------------------- built-ins

TEST(ModelSpecBuiltin, NamesRoundTripAndParameterNames) {
  const auto all = ModelSpec::builtin_names();
  for (const char* n : {"cnn", "gru-rows", "gru-words", "cnn-stride2"}) {
    EXPECT_NE(std::find(all.begin(), all.end(), n), all.end()) << n;
    const ModelSpec spec = ModelSpec::builtin(n);
    EXPECT_EQ(spec.name(), n);
    EXPECT_FALSE(spec.bound());
    EXPECT_EQ(ModelSpec::from_json(spec.to_json()).to_json(), spec.to_json());
  }
  EXPECT_THAT(error_of([] { ModelSpec::builtin("vgg16"); }),
              AllOf(HasSubstr("vgg16"), HasSubstr("cnn"), HasSubstr("resnet")));
  Sequential cnn = make_model("cnn");
  EXPECT_EQ(names(cnn), (std::vector<std::string>{
                            "conv2d_1/kernel", "conv2d_1/bias", "conv2d_2/kernel", "conv2d_2/bias",
                            "dense_1/kernel", "dense_1/bias", "dense_2/kernel", "dense_2/bias"}));
  Sequential rows = make_model("gru-rows");
  EXPECT_EQ(names(rows),
            (std::vector<std::string>{"gru_1/kernel", "gru_1/recurrent_kernel", "gru_1/bias",
                                      "gru_1/recurrent_bias", "dense_1/kernel", "dense_1/bias"}));
}

TEST(ModelSpecBuiltin, BoundSpecsRoundTripThroughJsonAsCheckpointsStoreThem) {
  const ModelSpec bound = ModelSpec::builtin("gru-words").bind(kTokens);
  const json j = bound.to_json();
  EXPECT_EQ(j["input_shape"], json({12}));
  EXPECT_EQ(j["layers"][1]["input_dim"], 30);
  EXPECT_EQ(j["layers"][3]["units"], 4);
  const ModelSpec back = ModelSpec::from_json(json::parse(j.dump()));
  EXPECT_TRUE(back.bound());
  EXPECT_EQ(back.to_json(), j);
  // Legacy checkpoints ({"name", "num_classes", "vocab", "max_len"}) read as the same model.
  const ModelSpec legacy = ModelSpec::from_json(
      {{"name", "gru-words"}, {"num_classes", 4}, {"vocab", 30}, {"max_len", 12}});
  EXPECT_EQ(legacy.to_json(), j);
  EXPECT_EQ(ModelSpec::from_json({{"name", "cnn"}, {"num_classes", 10}}).to_json(),
            ModelSpec::builtin("cnn").bind(kImages).to_json());
}

// ---------------------------------------------------------------- every layer type

TEST(ModelSpecLayers, ImageLayersParseBindAndBuild) {
  const ModelSpec spec = parse(json::parse(R"({
    "name": "all-image-layers",
    "input_shape": [1, 12, 12],
    "layers": [
      {"type": "input", "shape": [1, 12, 12]},
      {"type": "conv2d", "filters": 4, "kernel": 3, "strides": 1, "padding": "valid", "activation": "tanh"},
      {"type": "maxpool2d", "pool": 2, "strides": 1, "padding": "same"},
      {"type": "activation", "activation": "sigmoid"},
      {"type": "relu"},
      {"type": "conv2d", "filters": 2, "kernel_size": [2, 3], "strides": [2, 2], "padding": "same"},
      {"type": "max_pooling2d", "pool_size": [2, 2]},
      {"type": "flatten"},
      {"type": "dense", "units": 6, "activation": "relu"},
      {"type": "dropout", "rate": 0.25},
      {"type": "dense"}
    ]})"));
  EXPECT_FALSE(spec.bound());  // the last Dense's units come from the data
  EXPECT_EQ(spec.input_shape(), (Shape{1, 12, 12}));
  const ModelSpec bound = spec.bind({{1, 12, 12}, DType::kFloat32, 3, 0});
  Sequential m = make_model(bound, DType::kFloat32, Device::cpu(), 1);
  EXPECT_EQ(kinds(m), (std::vector<std::string>{"conv2d_1", "max_pooling2d_1", "activation_1",
                                                "activation_2", "conv2d_2", "max_pooling2d_2",
                                                "flatten_1", "dense_1", "dropout_1", "dense_2"}));
  // 12 -valid 3-> 10 -pool same s1-> 10 -conv 2x3 same s2-> 5x5 -pool 2-> 2x2 (x2 filters).
  EXPECT_EQ(m.layers()[6]->config(), json::object());
  EXPECT_EQ(m.output_shape(), (Shape{3}));
  EXPECT_EQ(bound.layers()[4]["kernel"], json({2, 3}));
  EXPECT_EQ(m.parameters()[4]->value.shape(), (Shape{8, 6}));  // dense_1/kernel [2*2*2, 6]
  EXPECT_EQ(bound.layers()[3], json({{"type", "activation"}, {"activation", "relu"}}));
  Tensor x = Tensor::zeros({2, 1, 12, 12}, DType::kFloat32);
  ForwardContext ctx;
  EXPECT_EQ(m.forward(x, ctx).shape(), (Shape{2, 3}));
}

TEST(ModelSpecLayers, SequenceLayersParseBindAndBuild) {
  const ModelSpec spec = parse(json::parse(R"([
      {"type": "embedding", "output_dim": 5, "mask_zero": true},
      {"type": "gru", "units": 6, "return_sequences": true},
      {"type": "gru", "units": 3, "reset_after": true},
      {"type": "dense", "units": 4}
    ])"));
  EXPECT_EQ(spec.layers()[0], json({{"type", "masking"}}));  // mask_zero -> Masking first
  const ModelSpec bound = spec.bind(kTokens);
  Sequential m = make_model(bound, DType::kFloat32, Device::cpu(), 3);
  EXPECT_EQ(kinds(m),
            (std::vector<std::string>{"masking_1", "embedding_1", "gru_1", "gru_2", "dense_1"}));
  EXPECT_EQ(m.parameters()[0]->value.shape(), (Shape{30, 5}));
  EXPECT_EQ(m.parameters()[1]->value.shape(), (Shape{18, 5}));  // gru_1/kernel [3*units, F]
  Tensor ids = Tensor::from_vector<std::int32_t>({3, 4, 0, 0, 1, 2, 29, 0}, {2, 4});
  ForwardContext ctx;
  EXPECT_EQ(m.forward(ids, ctx).shape(), (Shape{2, 4}));
  EXPECT_EQ(Masking::lengths_of(ids), (std::vector<std::int32_t>{2, 3}));
  EXPECT_TRUE(ctx.lengths.empty());  // ended by the last GRU (Note [Sequence masks])
  // A float sequence model: masking over [T, F] then a GRU.
  const ModelSpec rows = parse(json::parse(R"([{"type": "masking", "mask_value": 0},
                                               {"type": "gru", "units": 2}, {"type": "dense"}])"));
  Sequential r = make_model(rows.bind({{5, 3}, DType::kFloat32, 2, 0}));
  EXPECT_EQ(r.output_shape(), (Shape{2}));
}

// ---------------------------------------------------------------- Keras

// What keras.Sequential([...]).to_json() writes (Keras 3) for the tutorial CNN.
const char* kKerasCnn = R"({"module": "keras", "class_name": "Sequential", "config": {
  "name": "tutorial_cnn", "trainable": true,
  "dtype": {"module": "keras", "class_name": "DTypePolicy", "config": {"name": "float32"}, "registered_name": null},
  "layers": [
    {"module": "keras.layers", "class_name": "InputLayer", "config": {"batch_shape": [null, 28, 28, 1], "dtype": "float32", "sparse": false, "name": "input_layer"}, "registered_name": null},
    {"module": "keras.layers", "class_name": "Conv2D", "config": {"name": "conv2d", "trainable": true,
      "dtype": {"module": "keras", "class_name": "DTypePolicy", "config": {"name": "float32"}, "registered_name": null},
      "filters": 32, "kernel_size": [5, 5], "strides": [1, 1], "padding": "same", "data_format": "channels_last",
      "dilation_rate": [1, 1], "groups": 1, "activation": "relu", "use_bias": true,
      "kernel_initializer": {"module": "keras.initializers", "class_name": "GlorotUniform", "config": {"seed": null}, "registered_name": null},
      "bias_initializer": {"module": "keras.initializers", "class_name": "Zeros", "config": {}, "registered_name": null},
      "kernel_regularizer": null, "bias_regularizer": null, "activity_regularizer": null, "kernel_constraint": null, "bias_constraint": null},
     "registered_name": null, "build_config": {"input_shape": [null, 28, 28, 1]}},
    {"module": "keras.layers", "class_name": "MaxPooling2D", "config": {"name": "max_pooling2d", "trainable": true, "dtype": "float32",
      "pool_size": [2, 2], "padding": "valid", "strides": [2, 2], "data_format": "channels_last"}, "registered_name": null},
    {"module": "keras.layers", "class_name": "Conv2D", "config": {"name": "conv2d_1", "trainable": true, "dtype": "float32",
      "filters": 64, "kernel_size": [5, 5], "strides": [1, 1], "padding": "same", "data_format": "channels_last",
      "dilation_rate": [1, 1], "groups": 1, "activation": "relu", "use_bias": true,
      "kernel_initializer": {"module": "keras.initializers", "class_name": "GlorotUniform", "config": {"seed": null}, "registered_name": null},
      "bias_initializer": {"module": "keras.initializers", "class_name": "Zeros", "config": {}, "registered_name": null},
      "kernel_regularizer": null, "bias_regularizer": null, "activity_regularizer": null, "kernel_constraint": null, "bias_constraint": null}},
    {"module": "keras.layers", "class_name": "MaxPooling2D", "config": {"name": "max_pooling2d_1", "trainable": true, "dtype": "float32",
      "pool_size": [2, 2], "padding": "valid", "strides": null, "data_format": "channels_last"}},
    {"module": "keras.layers", "class_name": "Flatten", "config": {"name": "flatten", "trainable": true, "dtype": "float32", "data_format": "channels_last"}},
    {"module": "keras.layers", "class_name": "Dense", "config": {"name": "dense", "trainable": true, "dtype": "float32",
      "units": 1024, "activation": "relu", "use_bias": true,
      "kernel_initializer": {"module": "keras.initializers", "class_name": "GlorotUniform", "config": {"seed": null}, "registered_name": null},
      "bias_initializer": {"module": "keras.initializers", "class_name": "Zeros", "config": {}, "registered_name": null},
      "kernel_regularizer": null, "bias_regularizer": null, "kernel_constraint": null, "bias_constraint": null}},
    {"module": "keras.layers", "class_name": "Dropout", "config": {"name": "dropout", "trainable": true, "dtype": "float32", "rate": 0.4, "seed": null, "noise_shape": null}},
    {"module": "keras.layers", "class_name": "Dense", "config": {"name": "dense_1", "trainable": true, "dtype": "float32",
      "units": 10, "activation": "linear", "use_bias": true,
      "kernel_initializer": {"module": "keras.initializers", "class_name": "GlorotUniform", "config": {"seed": null}, "registered_name": null},
      "bias_initializer": {"module": "keras.initializers", "class_name": "Zeros", "config": {}, "registered_name": null},
      "kernel_regularizer": null, "bias_regularizer": null, "kernel_constraint": null, "bias_constraint": null}}
  ], "build_input_shape": [null, 28, 28, 1]},
 "registered_name": null, "build_config": {"input_shape": [null, 28, 28, 1]}})";

// Keras 2 (tf.keras) style: batch_input_shape on the first layer, time_major, implementation.
const char* kKerasWords =
    R"({"class_name": "Sequential", "keras_version": "2.15.0", "backend": "tensorflow",
  "config": {"name": "words", "layers": [
    {"class_name": "InputLayer", "config": {"batch_input_shape": [null, 12], "dtype": "int32", "sparse": false, "ragged": false, "name": "embedding_input"}},
    {"class_name": "Embedding", "config": {"name": "embedding", "trainable": true, "dtype": "float32", "batch_input_shape": [null, 12],
      "input_dim": 30, "output_dim": 32,
      "embeddings_initializer": {"class_name": "RandomUniform", "config": {"minval": -0.05, "maxval": 0.05, "seed": null}},
      "embeddings_regularizer": null, "activity_regularizer": null, "embeddings_constraint": null, "mask_zero": true, "input_length": null}},
    {"class_name": "GRU", "config": {"name": "gru", "trainable": true, "dtype": "float32", "return_sequences": false, "return_state": false,
      "go_backwards": false, "stateful": false, "unroll": false, "time_major": false, "units": 64, "activation": "tanh",
      "recurrent_activation": "sigmoid", "use_bias": true,
      "kernel_initializer": {"class_name": "GlorotUniform", "config": {"seed": null}},
      "recurrent_initializer": {"class_name": "Orthogonal", "config": {"gain": 1.0, "seed": null}},
      "bias_initializer": {"class_name": "Zeros", "config": {}},
      "kernel_regularizer": null, "recurrent_regularizer": null, "bias_regularizer": null, "activity_regularizer": null,
      "kernel_constraint": null, "recurrent_constraint": null, "bias_constraint": null,
      "dropout": 0.0, "recurrent_dropout": 0.0, "implementation": 2, "reset_after": true}},
    {"class_name": "Dense", "config": {"name": "dense", "trainable": true, "dtype": "float32", "units": 4, "activation": "linear", "use_bias": true,
      "kernel_initializer": {"class_name": "GlorotUniform", "config": {"seed": null}}, "bias_initializer": {"class_name": "Zeros", "config": {}},
      "kernel_regularizer": null, "bias_regularizer": null, "activity_regularizer": null, "kernel_constraint": null, "bias_constraint": null}}
  ]}})";

TEST(ModelSpecKeras, TutorialCnnIsTheBuiltinCnn) {
  const ModelSpec keras = parse(json::parse(kKerasCnn));
  EXPECT_EQ(keras.name(), "tutorial_cnn");
  EXPECT_TRUE(keras.bound());                          // everything is stated
  EXPECT_EQ(keras.input_shape(), (Shape{1, 28, 28}));  // channels_last [28, 28, 1] -> NCHW
  const ModelSpec bound = keras.bind(kImages);
  EXPECT_EQ(bound.layers(), ModelSpec::builtin("cnn").bind(kImages).layers());
  Sequential m = make_model(bound, DType::kFloat32, Device::cpu(), 0);
  EXPECT_EQ(weights_print(m), 0xbc838e15b3501160ull);  // the pinned builtin cnn, seed 0
  // Canonical JSON reads back to the same spec.
  EXPECT_EQ(ModelSpec::from_json(bound.to_json()).to_json(), bound.to_json());
}

TEST(ModelSpecKeras, WordGruIsTheBuiltinGruWords) {
  const ModelSpec keras = parse(json::parse(kKerasWords));
  const ModelSpec bound = keras.bind(kTokens);
  EXPECT_EQ(bound.layers(), ModelSpec::builtin("gru-words").bind(kTokens).layers());
  Sequential a = make_model(bound, DType::kFloat32, Device::cpu(), 5);
  Sequential b = make_word_gru(30, 4, 12, DType::kFloat32, Device::cpu(), 5);
  EXPECT_EQ(weights_print(a), weights_print(b));
  // A bare Keras layer list is accepted too.
  const ModelSpec bare = parse(json::parse(kKerasWords)["config"]["layers"]);
  EXPECT_EQ(bare.bind(kTokens).layers(), bound.layers());
}

TEST(ModelSpecKeras, StatedInputShapeIsCheckedAgainstTheData) {
  const ModelSpec keras = parse(json::parse(kKerasCnn));
  EXPECT_THAT(error_of([&] {
                keras.bind({{3, 32, 32}, DType::kFloat32, 10, 0});
              }),
              AllOf(HasSubstr("[1,28,28]"), HasSubstr("[3,32,32]")));
  const ModelSpec words = parse(json::parse(kKerasWords));
  EXPECT_THAT(error_of([&] {
                words.bind({{12}, DType::kInt32, 4, 31});
              }),
              AllOf(HasSubstr("layer 1 (embedding)"), HasSubstr("input_dim"), HasSubstr("30"),
                    HasSubstr("31")));
  EXPECT_THAT(error_of([&] {
                words.bind({{12}, DType::kInt32, 7, 30});
              }),
              AllOf(HasSubstr("layer 3 (dense)"), HasSubstr("'units'"), HasSubstr("states 4"),
                    HasSubstr("7 outputs")));
  // A smaller vocabulary fits the stated input_dim.
  EXPECT_NO_THROW(words.bind({{12}, DType::kInt32, 4, 20}));
}

// ---------------------------------------------------------------- rejections

struct Rejection {
  const char* spec;
  std::vector<const char*> expected;  // substrings of the message
};

TEST(ModelSpecRejects, EveryUnsupportedTypeAndFieldNamesTheLayerAndField) {
  const std::vector<Rejection> cases = {
      {R"([{"type": "simplernn", "units": 3}])",
       {"layer 0 (simplernn)", "unknown layer type", "lstm", "batch_normalization", "add"}},
      {R"([{"class_name": "RandomCrop", "config": {"height": 0, "width": 4}}])",
       {"layer 0 (RandomCrop)", "field 'height'", "expected an integer"}},
      {R"([{"class_name": "RandomFlip", "config": {"mode": "diagonal"}}])",
       {"layer 0 (RandomFlip)", "field 'mode'", "horizontal_and_vertical"}},
      {R"([{"type": "dense", "units": 3, "kernel_sz": 1}])",
       {"layer 0 (dense)", "field 'kernel_sz'", "unknown field", "units"}},
      {R"([{"type": "flatten"}, {"class_name": "GRU", "config": {"units": 4, "reset_after": false}}])",
       {"layer 1 (GRU)", "field 'reset_after'", "only true"}},
      {R"([{"type": "conv2d", "filters": 2, "kernel": 3, "strides": [1, 2]}])",
       {"layer 0 (conv2d)", "field 'strides'", "[1, 2]"}},
      {R"([{"type": "conv2d", "filters": 2, "kernel": 3, "use_bias": 0}])",
       {"layer 0 (conv2d)", "field 'use_bias'"}},
      {R"([{"type": "dense", "units": 2, "use_bias": false}])",
       {"layer 0 (dense)", "field 'use_bias'"}},
      {R"([{"type": "conv2d", "filters": 2, "kernel": 3, "dilation_rate": 2}])",
       {"field 'dilation_rate'"}},
      {R"([{"type": "conv2d", "filters": 2, "kernel": 3, "padding": "causal"}])",
       {"field 'padding'", "same", "valid"}},
      {R"([{"type": "conv2d", "kernel": 3}])", {"layer 0 (conv2d)", "field 'filters'", "required"}},
      {R"([{"type": "conv2d", "filters": 2}])", {"field 'kernel'", "required"}},
      {R"([{"type": "conv2d", "filters": "32", "kernel": 3}])", {"field 'filters'", "integer"}},
      {R"([{"type": "conv2d", "filters": 2, "kernel": 3, "kernel_size": 3}])",
       {"field 'kernel_size'", "twice"}},
      {R"([{"type": "maxpool2d", "pool": [2, 3]}])", {"layer 0 (maxpool2d)", "field 'pool'"}},
      {R"([{"type": "flatten"}, {"type": "dense", "units": 3, "activation": "softmax"}, {"type": "dense"}])",
       {"layer 1 (dense)", "field 'activation'", "logits", "last layer"}},
      {R"([{"type": "dense", "units": 3, "activation": "log_softmax"}])",
       {"layer 0 (dense)", "field 'activation'", "logits"}},
      {R"([{"type": "dense", "units": 3, "activation": "softplus"}])",
       {"field 'activation'", "linear, relu, tanh, sigmoid, silu"}},
      {R"([{"type": "dense", "units": 3, "kernel_initializer": "identity"}])",
       {"field 'kernel_initializer'", "unsupported initializer 'identity'", "GlorotUniform"}},
      {R"([{"type": "batch_normalization", "gamma_initializer": "he_normal"}])",
       {"field 'gamma_initializer'", "supports no other initializer"}},
      {R"([{"type": "dense", "units": 3, "kernel_regularizer": {"class_name": "L2"}}])",
       {"field 'kernel_regularizer'", "regularizers"}},
      {R"([{"type": "dense"}, {"type": "dense", "units": 2}])",
       {"layer 0 (dense)", "field 'units'", "last dense"}},
      {R"([{"type": "dropout"}])", {"layer 0 (dropout)", "field 'rate'", "required"}},
      {R"([{"type": "dropout", "rate": 1.5}])", {"field 'rate'", "[0, 1)"}},
      {R"([{"type": "dropout", "rate": 0.1, "noise_shape": [1, 3]}])", {"field 'noise_shape'"}},
      {R"([{"type": "embedding", "input_dim": 9}])", {"field 'output_dim'", "required"}},
      {R"([{"type": "embedding", "output_dim": 4, "embeddings_initializer": {"class_name": "RandomUniform", "config": {"minval": -1, "maxval": 1}}}])",
       {"field 'embeddings_initializer'", "RandomUniform"}},
      {R"([{"type": "masking", "mask_value": -1}])", {"layer 0 (masking)", "field 'mask_value'"}},
      {R"([{"type": "gru", "units": 3, "recurrent_activation": "hard_sigmoid"}])",
       {"field 'recurrent_activation'"}},
      {R"([{"type": "gru", "units": 3, "go_backwards": true}])", {"field 'go_backwards'"}},
      {R"([{"type": "gru", "units": 3, "stateful": true}])", {"field 'stateful'"}},
      {R"([{"type": "gru", "units": 3, "return_state": true}])", {"field 'return_state'"}},
      {R"([{"type": "gru", "units": 3, "recurrent_dropout": 0.2}])", {"field 'recurrent_dropout'"}},
      {R"([{"type": "gru", "units": 3, "recurrent_initializer": "glorot_uniform"}])",
       {"field 'recurrent_initializer'", "Orthogonal"}},
      {R"([{"type": "gru"}])", {"layer 0 (gru)", "field 'units'", "required"}},
      {R"([{"type": "relu", "max_value": -1}])", {"field 'max_value'", ">= 0"}},
      {R"([{"type": "activation"}])", {"field 'activation'", "required"}},
      {R"([{"type": "conv2d", "filters": 2, "kernel": 3}, {"type": "maxpool2d", "data_format": "channels_last"}])",
       {"layer 1 (maxpool2d)", "field 'data_format'", "one layout"}},
      {R"([{"type": "conv2d", "filters": 2, "kernel": 3, "data_format": "NHWC"}])",
       {"field 'data_format'", "channels_first or channels_last"}},
      {R"([{"type": "flatten"}, {"type": "flatten", "batch_input_shape": [null, 2, 2]}])",
       {"layer 1 (flatten)", "field 'batch_input_shape'", "first layer"}},
      {R"({"input_shape": [4], "layers": [{"type": "input", "shape": [5]}, {"type": "dense"}]})",
       {"layer 0 (input)", "field 'shape'", "[5]", "[4]"}},
      {R"([{"type": "input", "shape": [0, 3]}])", {"field 'shape'", "positive"}},
      {R"([{"class_name": "InputLayer", "config": {"batch_shape": [null, 3], "sparse": true}}])",
       {"layer 0 (InputLayer)", "field 'sparse'"}},
      {R"([{"units": 3}])", {"layer 0", "\"type\""}},
      {R"([3])", {"layer 0", "object"}},
      {R"([{"class_name": "Dense", "config": {"units": 2}, "inbound_nodes": []}])",
       {"layer 0", "field 'inbound_nodes'"}},
      {R"({"class_name": "Subclassed", "config": {"layers": []}})",
       {"field 'class_name'", "Sequential or Functional"}},
      {R"({"class_name": "Functional", "config": {"layers": []}})",
       {"field 'config.input_layers'", "one input"}},
      {R"({"class_name": "Sequential", "config": {"layers": [{"type": "flatten"}], "optimizer": "adam"}})",
       {"field 'config.optimizer'"}},
      {R"({"layers": [{"type": "flatten"}], "loss": "mse"})", {"field 'loss'", "layers"}},
      {R"({"layers": []})", {"non-empty list"}},
      {R"({"name": "resnet"})", {"resnet", "layers"}},
      {R"("cnn")", {"expected a list of layers"}},
  };
  for (const Rejection& c : cases) {
    SCOPED_TRACE(c.spec);
    const std::string message = error_of([&] { parse(json::parse(c.spec)); });
    EXPECT_THAT(message, HasSubstr("spec"));
    for (const char* e : c.expected) EXPECT_THAT(message, HasSubstr(e));
  }
}

TEST(ModelSpecRejects, DataThatDoesNotFitTheLayers) {
  const ModelSpec cnn = ModelSpec::builtin("cnn");
  EXPECT_THAT(error_of([&] {
                cnn.bind({{12}, DType::kInt32, 4, 30});
              }),
              AllOf(HasSubstr("layer 0 (conv2d)"), HasSubstr("token ids"), HasSubstr("embedding")));
  EXPECT_THAT(error_of([&] {
                cnn.bind({{28, 28}, DType::kFloat32, 10, 0});
              }),
              AllOf(HasSubstr("layer 0 (conv2d)"), HasSubstr("[C, H, W]"), HasSubstr("[28,28]"),
                    HasSubstr("[1, H, W]")));
  EXPECT_THAT(error_of([] {
                ModelSpec::builtin("gru-words").bind({{28, 28}, DType::kFloat32, 10, 0});
              }),
              AllOf(HasSubstr("layer 1 (embedding)"), HasSubstr("int32 token ids")));
  EXPECT_THAT(error_of([] {
                ModelSpec::builtin("gru-words").bind({{12}, DType::kInt32, 4, 0});
              }),
              AllOf(HasSubstr("layer 1 (embedding)"), HasSubstr("field 'input_dim'"),
                    HasSubstr("vocabulary")));
  EXPECT_THAT(error_of([] {
                ModelSpec::builtin("gru-rows").bind({{1, 28, 28}, DType::kFloat32, 10, 0});
              }),
              AllOf(HasSubstr("layer 0 (gru)"), HasSubstr("[T, F]"), HasSubstr("[1,28,28]")));
  EXPECT_THAT(error_of([] {
                ModelSpec::builtin("cnn").bind({{1, 28, 28}, DType::kFloat32, 0, 0});
              }),
              AllOf(HasSubstr("layer 7 (dense)"), HasSubstr("field 'units'")));
  const ModelSpec no_flatten =
      parse(json::parse(R"([{"type": "conv2d", "filters": 2, "kernel": 3}, {"type": "dense"}])"));
  EXPECT_THAT(error_of([&] { no_flatten.bind(kImages); }),
              AllOf(HasSubstr("layer 1 (dense)"), HasSubstr("[2,26,26]"), HasSubstr("flatten")));
  const ModelSpec big = parse(json::parse(
      R"([{"type": "conv2d", "filters": 2, "kernel": 30}, {"type": "flatten"}, {"type": "dense"}])"));
  EXPECT_THAT(error_of([&] { big.bind(kImages); }),
              AllOf(HasSubstr("layer 0 (conv2d)"), HasSubstr("30x30"), HasSubstr("does not fit")));
  const ModelSpec seq = parse(
      json::parse(R"([{"type": "gru", "units": 3, "return_sequences": true}, {"type": "dense"}])"));
  EXPECT_THAT(error_of([&] {
                seq.bind({{5, 2}, DType::kFloat32, 2, 0});
              }),
              AllOf(HasSubstr("outputs [5,2] per sample"), HasSubstr("per-step labels [N, T]")));
  const ModelSpec no_head = parse(json::parse(R"([{"type": "gru", "units": 3}])"));
  EXPECT_THAT(error_of([&] {
                no_head.bind({{5, 2}, DType::kFloat32, 2, 0});
              }),
              AllOf(HasSubstr("outputs [3]"), HasSubstr("needs [2]")));
  EXPECT_THAT(error_of([] { make_model(ModelSpec::builtin("cnn")); }), HasSubstr("not bound"));
  const ModelSpec stated = parse(json::parse(
      R"({"input_shape": [null, 3], "layers": [{"type": "gru", "units": 2}, {"type": "dense"}]})"));
  EXPECT_NO_THROW(stated.bind({{7, 3}, DType::kFloat32, 2, 0}));  // null: any length
  EXPECT_THAT(error_of([&] {
                stated.bind({{7, 4}, DType::kFloat32, 2, 0});
              }),
              AllOf(HasSubstr("[-1,3]"), HasSubstr("[7,4]")));
}

// ---------------------------------------------------------------- files

TEST(ModelSpecFile, ReadsFilesAndNamesThemInErrors) {
  testing_util::TempDir dir("mirror-spec");
  const std::string good = (dir.path() / "tiny-mlp.json").string();
  std::ofstream(good)
      << R"([{"type": "flatten"}, {"type": "dense", "units": 8, "activation": "relu"}, {"type": "dense"}])";
  const ModelSpec spec = ModelSpec::from_file(good);
  EXPECT_EQ(spec.name(), "tiny-mlp");
  Sequential m = make_model(spec.bind(kImages));
  EXPECT_EQ(m.parameter_count(), 784 * 8 + 8 + 8 * 10 + 10);
  const std::string bad = (dir.path() / "bad.json").string();
  std::ofstream(bad) << R"([{"type": "flatten"}, {"type": "dense", "units": "eight"}])";
  EXPECT_THAT(error_of([&] { ModelSpec::from_file(bad); }),
              AllOf(HasSubstr(bad), HasSubstr("layer 1 (dense)"), HasSubstr("field 'units'")));
  const std::string broken = (dir.path() / "broken.json").string();
  std::ofstream(broken) << "[{";
  EXPECT_THROW(ModelSpec::from_file(broken), DataError);
  EXPECT_THROW(ModelSpec::from_file((dir.path() / "missing.json").string()), DataError);
  try {
    ModelSpec::from_file((dir.path() / "missing.json").string());
  } catch (const DataError& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr("missing.json: cannot open the file"),
                                HasSubstr("No such file or directory")));
  }
}

TEST(ModelSpecFile, TheSpecsOwnNameWinsOverTheFileStem) {
  testing_util::TempDir dir("mirror-spec");
  const std::string mirror = (dir.path() / "v2.json").string();
  std::ofstream(mirror) << R"({"name": "small-mlp", "description": "two dense layers",
      "layers": [{"type": "flatten"}, {"type": "dense"}]})";
  const ModelSpec spec = ModelSpec::from_file(mirror);
  EXPECT_EQ(spec.name(), "small-mlp");
  EXPECT_EQ(spec.description(), "two dense layers");
  EXPECT_EQ(spec.bind(kImages).description(), "two dense layers");
  const std::string keras = (dir.path() / "exported.json").string();
  std::ofstream(keras) << R"({"class_name": "Sequential", "config": {"name": "my_keras_net",
      "layers": [{"class_name": "Flatten", "config": {}}, {"class_name": "Dense",
      "config": {"units": 10}}]}})";
  EXPECT_EQ(ModelSpec::from_file(keras).name(), "my_keras_net");
  const std::string unnamed = (dir.path() / "plain.json").string();
  std::ofstream(unnamed) << R"({"layers": [{"type": "flatten"}, {"type": "dense"}]})";
  EXPECT_EQ(ModelSpec::from_file(unnamed).name(), "plain");
}

// ---------------------------------------------------------------- stride 2, even kernel

// TensorFlow's "same" for a 4x4 kernel at stride 2 on 7x7: out = ceil(7 / 2) = 4, total
// padding (4 - 1) * 2 + 4 - 7 = 3, of which floor(3 / 2) = 1 before and 2 after.
TEST(ModelSpecStride2, EvenKernelSamePaddingMatchesTensorFlow) {
  const ModelSpec spec = ModelSpec::builtin("cnn-stride2").bind(kImages);
  Sequential m = make_model(spec, DType::kFloat32, Device::cpu(), 0);
  EXPECT_EQ(m.output_shape(), (Shape{10}));
  EXPECT_EQ(m.parameters()[6]->value.shape(), (Shape{64 * 4 * 4, 256}));  // 28 -> 14 -> 7 -> 4
  Conv2D conv(3, 4, 4, 2, Padding::kSame);
  conv.set_name("conv2d_1");
  InitRng rng(1);
  EXPECT_EQ(conv.build({2, 7, 7}, DType::kFloat64, Device::cpu(), rng), (Shape{3, 4, 4}));
  for (Parameter* p : conv.parameters())
    p->value.copy_from(testing::random_tensor(p->value.shape(), 5));
  const Tensor x = testing::random_tensor({1, 2, 7, 7}, 9);
  ForwardContext ctx;
  const Tensor y = conv.forward(x, ctx);
  const double* px = x.data<double>();
  const double* pw = conv.parameters()[0]->value.data<double>();
  const double* pb = conv.parameters()[1]->value.data<double>();
  const double* py = y.data<double>();
  for (int o = 0; o < 3; ++o) {
    for (int i = 0; i < 4; ++i) {
      for (int j = 0; j < 4; ++j) {
        double want = pb[o];
        for (int c = 0; c < 2; ++c) {
          for (int a = 0; a < 4; ++a) {
            for (int b = 0; b < 4; ++b) {
              const int r = 2 * i + a - 1, s = 2 * j + b - 1;  // pad_top = pad_left = 1
              if (r < 0 || r >= 7 || s < 0 || s >= 7) continue;
              want += px[(c * 7 + r) * 7 + s] * pw[((o * 2 + c) * 4 + a) * 4 + b];
            }
          }
        }
        EXPECT_NEAR(py[(o * 4 + i) * 4 + j], want, 1e-12) << o << "," << i << "," << j;
      }
    }
  }
  const auto report = testing::check_layer(conv, testing::random_tensor({2, 2, 7, 7}, 3), ctx);
  EXPECT_EQ(report.errors.size(), 3u);  // input, kernel, bias
  EXPECT_LE(report.max_error, 1e-6) << report.worst;
}

}  // namespace
}  // namespace mirror::nn
