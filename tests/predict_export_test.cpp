// mirror-predict's engine (tools/predict.cpp) and the ONNX exporter's graph (tools/onnx_export.cpp)
// without onnxruntime: predictions equal Sequential::forward with the data's lengths, checkpoints
// round-trip and are refused clearly, inputs are checked, and the exporter reorders gates, pads
// like TensorFlow and refuses a layer it cannot map by name. (onnxruntime runs the graphs in
// tests/e2e/onnx_export.sh.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "mirror/error.h"
#include "mirror/nn/recurrent.h"
#include "mirror/ops.h"
#include "temp_dir.h"
#include "tools/onnx_export.h"
#include "tools/predict.h"

namespace mirror {
namespace {

using nlohmann::json;

nn::ModelSpec word_spec(bool mask) {
  json layers = json::array();
  layers.push_back({{"type", "embedding"}, {"output_dim", 4}, {"mask_zero", mask}});
  layers.push_back({{"type", "gru"}, {"units", 5}});
  layers.push_back({{"type", "dense"}});
  return nn::ModelSpec::from_json({{"name", "w"}, {"layers", layers}})
      .bind({{6}, DType::kInt32, 3, 20});
}

predict::Inputs word_inputs() {
  predict::Inputs in;
  in.tokens = true;
  in.shape = {3, 6};
  in.ids = {1, 2, 3, 4, 5, 6,   // full
            7, 8, 0, 0, 0, 0,   // 2 steps
            9, 0, 3, 0, 0, 0};  // 3 steps (a zero inside counts)
  return in;
}

TEST(PredictRun, GivesTheDataLengthsLikeTraining) {
  // Without Masking the GRU still reads the batch's lengths (as the loader gives them).
  nn::Sequential model = nn::make_model(word_spec(false), DType::kFloat32, Device::cpu(), 3);
  const predict::Inputs in = word_inputs();
  const std::vector<float> got = predict::run_model(model, in, 0, 3, 2);
  nn::ForwardContext ctx;
  ctx.lengths = {6, 2, 3};
  const auto want = model.forward(Tensor::from_vector(in.ids, {3, 6}), ctx).to_vector<float>();
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-6) << i;
  nn::ForwardContext full;  // all 6 steps: another result, so the lengths above mattered
  const auto unmasked = model.forward(Tensor::from_vector(in.ids, {3, 6}), full).to_vector<float>();
  EXPECT_GT(std::abs(unmasked[3] - want[3]) + std::abs(unmasked[6] - want[6]), 1e-4);
}

TEST(PredictRun, ProbabilitiesAreTheSoftmax) {
  std::vector<float> v = {1, 2, 3, -1000, 0, 1000};
  predict::to_probabilities(v, 3, false);
  EXPECT_NEAR(v[0] + v[1] + v[2], 1.0, 1e-6);
  EXPECT_NEAR(v[2] / v[1], std::exp(1.0), 1e-4);
  EXPECT_FLOAT_EQ(v[5], 1.0f);
  EXPECT_FLOAT_EQ(v[3], 0.0f);
}

std::string read_all(const std::filesystem::path& p) {
  std::ifstream in(p);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(PredictClasses, ArgMaxNamedAndABinaryHeadAtItsThreshold) {
  testing_util::TempDir dir;
  const auto csv = dir.path() / "c.csv";
  predict::write_class_csv(csv.string(), {0.1f, 0.7f, 0.2f, 0.9f, 0.0f, 0.1f}, 3,
                           {"ankle", "bag", "coat"}, {"a.png", "b.png"});
  EXPECT_EQ(read_all(csv), "sample,class\na.png,bag\nb.png,ankle\n");
  // One output (a sigmoid head on labels 0/1): class 1 above the threshold, named by the two
  // class names the image folder had; before, the arg-max of one value named class 0 always.
  predict::write_class_csv(csv.string(), {-2.0f, 0.5f}, 1, {"cats", "dogs"}, {}, 0.0);
  EXPECT_EQ(read_all(csv), "sample,class\n0,cats\n1,dogs\n");
  predict::write_class_csv(csv.string(), {0.3f, 0.6f}, 1, {"cats", "dogs"}, {}, 0.5);
  EXPECT_EQ(read_all(csv), "sample,class\n0,cats\n1,dogs\n");
  predict::write_class_csv(csv.string(), {0.3f, 0.6f}, 1, {}, {}, 0.5);
  EXPECT_EQ(read_all(csv), "sample,class\n0,0\n1,1\n");
}

TEST(PredictInputs, AKerasTokenModelPadsShorterRowsAndRefusesLongerOnes) {
  // A Keras model stating its input length (5) saw every sequence padded to 5 in training.
  const json keras = {
      {"class_name", "Sequential"},
      {"config",
       {{"name", "k"},
        {"layers",
         {{{"class_name", "InputLayer"}, {"config", {{"batch_shape", {nullptr, 5}}}}},
          {{"class_name", "Embedding"},
           {"config", {{"input_dim", 20}, {"output_dim", 3}, {"mask_zero", true}}}},
          {{"class_name", "GRU"}, {"config", {{"units", 2}}}},
          {{"class_name", "Dense"}, {"config", {{"units", 2}}}}}}}}};
  const nn::ModelSpec spec =
      nn::ModelSpec::from_json(keras).bind({{5}, DType::kInt32, 2, 20});
  nn::Sequential model = nn::make_model(spec, DType::kFloat32, Device::cpu(), 1);
  predict::Inputs short_rows;
  short_rows.tokens = true;
  short_rows.shape = {2, 3};
  short_rows.ids = {1, 2, 3, 4, 5, 0};
  predict::prepare_inputs(short_rows, model, "x", {}, "");
  EXPECT_EQ(short_rows.shape, (Shape{2, 5}));
  EXPECT_EQ(short_rows.ids, (std::vector<std::int32_t>{1, 2, 3, 0, 0, 4, 5, 0, 0, 0}));
  predict::Inputs long_rows;
  long_rows.tokens = true;
  long_rows.shape = {1, 7};
  long_rows.ids = {1, 2, 3, 4, 5, 6, 7};
  try {
    predict::prepare_inputs(long_rows, model, "x", {}, "");
    FAIL() << "7 tokens were read by a model of 5";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("x holds sequences of 7 tokens, but the model reads 5"),
              std::string::npos)
        << e.what();
  }
}

TEST(PredictInputs, NameExpectedAndFound) {
  nn::Sequential model = nn::make_model(word_spec(true), DType::kFloat32, Device::cpu(), 3);
  const predict::InputSpec spec = predict::input_spec(model);
  EXPECT_TRUE(spec.tokens);
  EXPECT_EQ(spec.vocab, 20);
  predict::Inputs in = word_inputs();
  EXPECT_NO_THROW(predict::check_inputs(in, spec, "x.npy"));
  in.ids[8] = 20;
  try {
    predict::check_inputs(in, spec, "x.npy");
    FAIL() << "an id outside the vocabulary was accepted";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("token id 20 of sample 1, step 2 is outside the "
                                         "checkpoint's vocabulary [0, 20)"),
              std::string::npos)
        << e.what();
  }
  in = word_inputs();
  std::fill(in.ids.begin() + 6, in.ids.begin() + 12, 0);
  EXPECT_THROW(predict::check_inputs(in, spec, "x.npy"), DataError);  // an all-padding row
  predict::Inputs floats;
  floats.shape = {2, 6};
  floats.floats.assign(12, 0.5f);
  EXPECT_THROW(predict::check_inputs(floats, spec, "f.npy"), InvalidArgument);
  const predict::InputSpec image{{1, 4, 4}, false, 0};
  floats.shape = {1, 16};
  floats.floats.assign(16, 0.f);
  try {
    predict::check_inputs(floats, image, "f.npy");
    FAIL() << "a [16] sample was accepted for [1,4,4]";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("expects samples of shape [1,4,4] but found [16]"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("--input-shape"), std::string::npos) << e.what();
  }
  predict::reshape_samples(floats, {1, 4, 4});
  EXPECT_NO_THROW(predict::check_inputs(floats, image, "f.npy"));
}

TEST(PredictCheckpoint, RoundTripsAndRefusesClearly) {
  testing_util::TempDir dir;
  const nn::ModelSpec spec = word_spec(true);
  nn::Sequential trained = nn::make_model(spec, DType::kFloat32, Device::cpu(), 11);
  train::NamedTensors tensors;
  for (nn::Parameter* p : trained.parameters()) tensors[p->name] = p->value;
  train::Metadata meta = {{"mirror.model", spec.to_json().dump()},
                          {"mirror.step", "7"},
                          {"mirror.some_future_key", "ignored"}};
  const auto file = dir.path() / "ckpt-000000000007.safetensors";
  train::write_safetensors(file, tensors, meta);
  const predict::CheckpointModel ck = predict::load_checkpoint_model(dir.path().string());
  EXPECT_EQ(ck.step, 7);
  EXPECT_EQ(ck.file, file);
  nn::Sequential rebuilt = predict::build_model(ck);  // seed 0: the weights come from the file
  for (std::size_t i = 0; i < trained.parameters().size(); ++i) {
    EXPECT_EQ(rebuilt.parameters()[i]->value.to_vector<float>(),
              trained.parameters()[i]->value.to_vector<float>());
  }
  // A checkpoint kept in bfloat16 loads as its float32 values.
  train::NamedTensors half;
  for (const auto& [name, t] : tensors) half[name] = ops::cast(t, DType::kBFloat16);
  train::write_safetensors(dir.path() / "bf16.safetensors", half, meta);
  nn::Sequential from_half = predict::build_model(
      predict::load_checkpoint_model((dir.path() / "bf16.safetensors").string()));
  for (nn::Parameter* p : from_half.parameters()) {
    EXPECT_EQ(p->value.dtype(), DType::kFloat32);
    EXPECT_EQ(p->value.to_vector<float>(),
              ops::cast(half.at(p->name), DType::kFloat32).to_vector<float>());
  }
  tensors.erase("gru_1/recurrent_kernel");
  train::write_safetensors(dir.path() / "partial.safetensors", tensors, meta);
  try {
    predict::build_model(
        predict::load_checkpoint_model((dir.path() / "partial.safetensors").string()));
    FAIL() << "a checkpoint without gru_1/recurrent_kernel was accepted";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("lacks tensor 'gru_1/recurrent_kernel'"),
              std::string::npos)
        << e.what();
  }
  meta.erase("mirror.model");
  train::write_safetensors(dir.path() / "nospec.safetensors", tensors, meta);
  EXPECT_THROW(predict::load_checkpoint_model((dir.path() / "nospec.safetensors").string()),
               DataError);
  meta["mirror.model"] = "my C++ task";
  train::write_safetensors(dir.path() / "task.safetensors", tensors, meta);
  EXPECT_THROW(predict::load_checkpoint_model((dir.path() / "task.safetensors").string()),
               DataError);
  EXPECT_THROW(predict::load_checkpoint_model((dir.path() / "missing").string()), DataError);
}

/// The message of the DataError / OutOfMemory that loading and building `file` throws.
std::string refusal(const std::filesystem::path& file) {
  try {
    predict::build_model(predict::load_checkpoint_model(file.string()));
  } catch (const Error& e) {
    return e.what();
  }
  return "accepted";
}

TEST(PredictCheckpoint, RefusesEditedCheckpointsWithValidChecksums) {
  // Each file below is well-formed and checksummed (it was written, not corrupted), but what it
  // says is not a model Mirror can trust.
  testing_util::TempDir dir;
  const nn::ModelSpec spec = word_spec(true);
  nn::Sequential trained = nn::make_model(spec, DType::kFloat32, Device::cpu(), 11);
  train::NamedTensors tensors;
  for (nn::Parameter* p : trained.parameters()) tensors[p->name] = p->value;
  const train::Metadata meta = {{"mirror.model", spec.to_json().dump()}, {"mirror.step", "7"}};
  auto write = [&](const std::string& name, const train::NamedTensors& t, const train::Metadata& m) {
    train::write_safetensors(dir.path() / name, t, m);
    return dir.path() / name;
  };
  // A step that is not a number.
  train::Metadata bad_step = meta;
  bad_step["mirror.step"] = "12abc";
  EXPECT_NE(refusal(write("step.safetensors", tensors, bad_step))
                .find("metadata 'mirror.step' is '12abc': expected an integer >= 0"),
            std::string::npos);
  // A NaN weight, named.
  train::NamedTensors nan = tensors;
  nan["dense_1/bias"] = tensors.at("dense_1/bias").clone();
  nan["dense_1/bias"].data<float>()[1] = std::nanf("");
  const std::string nan_message = refusal(write("nan.safetensors", nan, meta));
  EXPECT_NE(nan_message.find("tensor 'dense_1/bias' holds a NaN or infinity (element 1)"),
            std::string::npos)
      << nan_message;
  // A tensor the spec does not have: refused, or ignored when asked.
  train::NamedTensors extra = tensors;
  extra["dense_9/kernel"] = Tensor::zeros({2, 2});
  const auto extra_file = write("extra.safetensors", extra, meta);
  EXPECT_NE(refusal(extra_file).find("holds tensor 'dense_9/kernel', which its model spec does "
                                     "not have"),
            std::string::npos);
  EXPECT_NO_THROW(predict::build_model(predict::load_checkpoint_model(extra_file.string()),
                                       Device::cpu(), true));
  // A spec stating a Dense of 10^9 units over 10^6 inputs: the estimate, before any allocation.
  nlohmann::json huge = spec.to_json();
  huge["layers"].back()["units"] = 1000000000;
  train::Metadata big = meta;
  big["mirror.model"] = huge.dump();
  const std::string big_message = refusal(write("big.safetensors", tensors, big));
  EXPECT_NE(big_message.find("of host memory"), std::string::npos) << big_message;
  EXPECT_NE(big_message.find("nothing was allocated"), std::string::npos) << big_message;
}

TEST(PredictInputs, ADeviceIsNotReadAsAFile) {
  try {
    predict::read_array_input("/dev/zero");
    FAIL() << "/dev/zero was read";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("/dev/zero is a device, not a data file"),
              std::string::npos)
        << e.what();
  }
}

const onnx::Initializer& initializer(const onnx::Graph& g, const std::string& name) {
  for (const auto& i : g.initializers)
    if (i.name.rfind(name, 0) == 0) return i;
  throw Error("no initializer " + name);
}

const onnx::Node& node(const onnx::Graph& g, const std::string& op) {
  for (const auto& n : g.nodes)
    if (n.op == op) return n;
  throw Error("no node " + op);
}

TEST(OnnxExport, GruGatesInOnnxOrderWithLinearBeforeReset) {
  nn::Sequential model = nn::make_model(word_spec(true), DType::kFloat32, Device::cpu(), 5);
  const onnx::Graph g = onnx::export_onnx(model, {false, true, "w"});
  EXPECT_EQ(g.opset, 17);
  const onnx::Node& gru = node(g, "GRU");
  EXPECT_EQ(gru.inputs.size(), 5u);  // X, W, R, B, sequence_lens
  bool linear_before_reset = false;
  for (const auto& a : gru.attributes)
    if (a.name == "linear_before_reset") linear_before_reset = a.i == 1;
  EXPECT_TRUE(linear_before_reset);
  // Mirror's kernel is [r; z; n] ([15, 4]); ONNX's W is [1, 15, 4] in z, r, h order.
  const auto kernel = model.parameters()[1]->value.to_vector<float>();
  const onnx::Initializer& w = initializer(g, "gru_1/W");
  ASSERT_EQ(w.dims, (std::vector<std::int64_t>{1, 15, 4}));
  std::vector<float> onnx_w(w.raw.size() / sizeof(float));
  std::memcpy(onnx_w.data(), w.raw.data(), w.raw.size());
  const std::size_t block = 5 * 4;
  for (std::size_t i = 0; i < block; ++i) {
    EXPECT_EQ(onnx_w[i], kernel[block + i]);                  // z
    EXPECT_EQ(onnx_w[block + i], kernel[i]);                  // r
    EXPECT_EQ(onnx_w[2 * block + i], kernel[2 * block + i]);  // n = h
  }
  EXPECT_EQ(g.inputs.at(0).type, onnx::ElemType::kInt32);
  EXPECT_EQ(g.inputs.at(0).dims, (std::vector<std::string>{"N", "T"}));
}

TEST(OnnxExport, SamePaddingIsTensorFlows) {
  json layers = json::array();
  layers.push_back(
      {{"type", "conv2d"}, {"filters", 2}, {"kernel", 3}, {"strides", 2}, {"padding", "same"}});
  layers.push_back({{"type", "flatten"}});
  layers.push_back({{"type", "dense"}});
  const auto spec =
      nn::ModelSpec::from_json({{"layers", layers}}).bind({{1, 28, 28}, DType::kFloat32, 4, 0});
  nn::Sequential model = nn::make_model(spec);
  const onnx::Graph g = onnx::export_onnx(model, {true, false, "c"});
  // 28 -> 14 with a 3x3 window at stride 2: one row/column of padding, at the bottom/right.
  std::vector<std::int64_t> pads;
  for (const auto& a : node(g, "Conv").attributes) {
    if (a.name == "pads") pads = a.ints;
  }
  EXPECT_EQ(pads, (std::vector<std::int64_t>{0, 0, 1, 1}));
  EXPECT_EQ(g.nodes.back().inputs.at(0), node(g, "Softmax").outputs.at(0));
}

class Mystery : public nn::Layer {
 public:
  std::string kind() const override { return "mystery"; }
  Shape build(const Shape& in, DType, Device, nn::InitRng&) override { return in; }
  Tensor forward(const Tensor& x, nn::ForwardContext&) override { return x; }
  Tensor backward(const Tensor& dy) override { return dy; }
  nlohmann::json config() const override { return json::object(); }
};

TEST(OnnxExport, RefusesAnUnknownLayerByName) {
  nn::Sequential model;
  model.emplace<Mystery>();
  model.build({4}, 0);
  try {
    onnx::export_onnx(model, {});
    FAIL() << "a layer without a mapping was exported";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("layer mystery_1 (mystery) cannot be exported to ONNX"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace mirror
