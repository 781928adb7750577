// What the model decides about its data in mirror-train's task (src/train/train_data.cpp):
// sigmoid and one-output heads on labels 0/1 (Note [Binary heads], Note [Folded sigmoid]), the
// built-in data read in the form the model's input takes (Note [Built-in data follow the
// model]), Keras token models padded to their stated length, and the message for a
// Normalization whose adapted values to_json() did not write.
#include <algorithm>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <optional>
#include <fstream>

#include "data_test_util.h"
#include "mirror/data/npy.h"
#include "temp_dir.h"
#include "train/dataset_views.h"
#include "mirror/train/keras_weights.h"
#include "train/trainer_impl.h"

namespace mirror::testing_util {
namespace {

using nlohmann::json;
using ::testing::AllOf;
using ::testing::HasSubstr;

void write_npy(const std::filesystem::path& path, data::ElementType type,
               std::vector<std::int64_t> shape, const void* values, std::size_t bytes) {
  data::NumericArray a;
  a.type = type;
  a.shape = std::move(shape);
  a.bytes.resize(bytes);
  std::memcpy(a.bytes.data(), values, bytes);
  const std::vector<std::uint8_t> file = data::encode_npy(a);
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(file.data()), static_cast<std::streamsize>(file.size()));
}

/// x [n, 6] float32 and y [n] int32 labels in [0, classes) (or float32 targets [n] in [0, 1]).
struct Files {
  TempDir dir;
  std::string x, y;
  Files(int classes, bool float_targets = false) {
    const int n = 64;
    std::vector<float> xs(n * 6), ys(n);
    std::vector<std::int32_t> labels(n);
    for (int i = 0; i < n; ++i) {
      labels[i] = i % classes;
      ys[i] = static_cast<float>(i % 5) / 4.0f;
      for (int f = 0; f < 6; ++f) xs[i * 6 + f] = static_cast<float>((i * 7 + f * 3) % 11) / 11.0f;
    }
    x = (dir.path() / "x.npy").string();
    y = (dir.path() / "y.npy").string();
    write_npy(x, data::ElementType::kFloat32, {n, 6}, xs.data(), xs.size() * 4);
    if (float_targets)
      write_npy(y, data::ElementType::kFloat32, {n}, ys.data(), ys.size() * 4);
    else
      write_npy(y, data::ElementType::kInt32, {n}, labels.data(), labels.size() * 4);
  }
  std::string spec(const json& j) const {
    const std::string path = (dir.path() / "spec.json").string();
    std::ofstream(path) << j.dump();
    return path;
  }
};

json keras_head(int units, const std::string& activation, bool separate_activation = false) {
  json layers =
      json::array({{{"class_name", "InputLayer"}, {"config", {{"batch_shape", {nullptr, 6}}}}},
                   {{"class_name", "Dense"}, {"config", {{"units", 5}, {"activation", "relu"}}}}});
  if (separate_activation) {
    layers.push_back({{"class_name", "Dense"}, {"config", {{"units", units}}}});
    layers.push_back({{"class_name", "Activation"}, {"config", {{"activation", activation}}}});
  } else {
    layers.push_back(
        {{"class_name", "Dense"}, {"config", {{"units", units}, {"activation", activation}}}});
  }
  return {{"class_name", "Sequential"}, {"config", {{"name", "head"}, {"layers", layers}}}};
}

train::TrainConfig config(const Files& f, const std::string& spec) {
  train::TrainConfig c;
  c.model_spec = spec;
  c.train_x = f.x;
  c.train_y = f.y;
  return c;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(BinaryHeads, KerasSigmoidOnLabelsZeroOneTrainsWithBinaryCrossEntropy) {
  for (bool separate : {false, true}) {
    Files f(2);
    const train::ConfigTask t =
        train::task_from_config(config(f, f.spec(keras_head(1, "sigmoid", separate))));
    EXPECT_EQ(t.loss, "binary-cross-entropy");
    // Labels 0/1 served as one float target each.
    EXPECT_EQ(t.task.train->target_kind(), data::TargetKind::kFloat);
    EXPECT_EQ(t.task.train->target_shape(), (Shape{1}));
    float target = -1;
    t.task.train->decode_target(3, &target);
    EXPECT_EQ(target, 1.0f);  // sample 3 has label 1
    // The canonical spec records the fold; the model ends in logits.
    const json spec = json::parse(t.task.model_description);
    EXPECT_EQ(spec["sigmoid_folded"], true);
    EXPECT_EQ(spec["layers"].back()["type"], "dense");
    EXPECT_EQ(spec["layers"].back()["activation"], "linear");
    EXPECT_EQ(spec["layers"].back()["units"], 1);
    EXPECT_TRUE(nn::ModelSpec::from_json(spec).sigmoid_folded());  // checkpoints keep it
    EXPECT_EQ(train::resolve_loss(t.loss, *t.task.train), dist::LossKind::kBinaryCrossEntropy);
  }
}

TEST(BinaryHeads, OneLinearOutputOnLabelsIsABinaryLogit) {
  Files f(2);
  const train::ConfigTask t = train::task_from_config(config(f, f.spec(keras_head(1, "linear"))));
  EXPECT_EQ(t.loss, "binary-cross-entropy");
  EXPECT_EQ(json::parse(t.task.model_description).value("sigmoid_folded", false), false);
}

TEST(BinaryHeads, ModelsThatDoNotFitTheLabelsNameTheFix) {
  Files three(3);
  EXPECT_THAT(error_of([&] {
                train::task_from_config(config(three, three.spec(keras_head(1, "sigmoid"))));
              }),
              AllOf(HasSubstr("3 classes"), HasSubstr("dense of 3 units")));
  EXPECT_THAT(error_of([&] {
                train::task_from_config(config(three, three.spec(keras_head(3, "sigmoid"))));
              }),
              AllOf(HasSubstr("sigmoid"), HasSubstr("Dense(1, sigmoid)")));
  Files two(2);
  train::TrainConfig c = config(two, two.spec(keras_head(1, "sigmoid")));
  c.loss = "softmax-cross-entropy";
  EXPECT_THAT(error_of([&] { train::task_from_config(c); }),
              HasSubstr("--loss binary-cross-entropy"));
}

TEST(BinaryHeads, FloatTargetsFoldTheSigmoidForBinaryCrossEntropyOnly) {
  Files f(2, true);
  train::TrainConfig c = config(f, f.spec(keras_head(1, "sigmoid")));
  c.loss = "binary-cross-entropy";
  EXPECT_EQ(json::parse(train::task_from_config(c).task.model_description)["sigmoid_folded"], true);
  c.loss = "mse";  // a sigmoid in front of a squared error is part of the model
  const json kept = json::parse(train::task_from_config(c).task.model_description);
  EXPECT_FALSE(kept.contains("sigmoid_folded"));
  EXPECT_EQ(kept["layers"].back()["activation"], "sigmoid");
}

// ---- built-in data follow the model (synthetic data of the built-in shapes)

train::ConfigTask builtin(const json& spec, const std::string& input_shape = "") {
  static TempDir dir;
  static int k = 0;
  const std::string path = (dir.path() / ("spec" + std::to_string(++k) + ".json")).string();
  std::ofstream(path) << spec.dump();
  train::TrainConfig c;
  c.model_spec = path;
  c.data = "synthetic";
  c.train_limit = 32;
  c.test_limit = 16;
  c.input_shape = input_shape;
  return train::task_from_config(c);
}

json keras_model(const json& input_shape, const json& layers) {
  json all = json::array(
      {{{"class_name", "InputLayer"}, {"config", {{"batch_shape", json::array({nullptr})}}}}});
  for (const auto& d : input_shape) all[0]["config"]["batch_shape"].push_back(d);
  for (const auto& l : layers) all.push_back(l);
  return {{"class_name", "Sequential"}, {"config", {{"layers", all}}}};
}

TEST(BuiltinData, FollowTheModelsInput) {
  const json gru = {{"class_name", "GRU"}, {"config", {{"units", 4}}}};
  const json dense = {{"class_name", "Dense"}, {"config", {{"units", 10}}}};
  const json flatten = {{"class_name", "Flatten"}, {"config", json::object()}};
  const json conv = {{"class_name", "Conv2D"}, {"config", {{"filters", 2}, {"kernel_size", 3}}}};
  // [28, 28]: Fashion-MNIST as 28 rows (the time-series models of the Keras examples).
  auto rows = builtin(keras_model({28, 28}, json::array({gru, dense})));
  EXPECT_EQ(rows.task.train->sample_shape(), (Shape{28, 28}));
  EXPECT_TRUE(rows.task.train->is_sequence());
  // [28, 28, 1] (Keras) and [1, 28, 28]: images.
  EXPECT_EQ(builtin(keras_model({28, 28, 1}, json::array({conv, flatten, dense})))
                .task.train->sample_shape(),
            (Shape{1, 28, 28}));
  // [784]: the same pixels, flat.
  auto flat = builtin(keras_model({784}, json::array({dense})));
  EXPECT_EQ(flat.task.train->sample_shape(), (Shape{784}));
  EXPECT_EQ(flat.task.test->sample_shape(), (Shape{784}));
  // Nothing stated: the first layer decides.
  EXPECT_EQ(builtin(json::array({{{"type", "gru"}, {"units", 4}}, {{"type", "dense"}}}))
                .task.train->sample_shape(),
            (Shape{28, 28}));
  EXPECT_EQ(builtin(json::array({{{"type", "dense"}, {"units", 8}}, {{"type", "dense"}}}))
                .task.train->sample_shape(),
            (Shape{784}));
  EXPECT_EQ(builtin(json::array({{{"type", "embedding"}, {"output_dim", 4}},
                                 {{"type", "gru"}, {"units", 4}},
                                 {{"type", "dense"}}}))
                .task.train->input_dtype(),
            DType::kInt32);
  // --input-shape reads the built-in images in that shape.
  EXPECT_EQ(builtin(json::array({{{"type", "flatten"}}, {{"type", "dense"}}}), "28,28")
                .task.train->sample_shape(),
            (Shape{28, 28}));
}

TEST(BuiltinData, AModelThatFitsNoneNamesWhatWould) {
  const json dense = {{"class_name", "Dense"}, {"config", {{"units", 10}}}};
  const json flatten = {{"class_name", "Flatten"}, {"config", json::object()}};
  const json conv = {{"class_name", "Conv2D"}, {"config", {{"filters", 2}, {"kernel_size", 3}}}};
  EXPECT_THAT(error_of([&] {
                builtin(keras_model({32, 32, 3}, json::array({conv, flatten, dense})));
              }),
              AllOf(HasSubstr("[3,32,32]"), HasSubstr("784 elements"), HasSubstr("--train-x")));
}

// ---- Keras's masks and the data

TEST(KerasTokens, AStatedLengthPadsEverySequenceToIt) {
  TempDir dir;
  const std::string tokens = (dir.path() / "t.txt").string();
  std::ofstream(tokens) << "0 3 4\n1 5\n0 6 7 8\n1 2 2 2 2\n";
  const auto spec = [&](int t) {
    return keras_model({t}, json::array({{{"class_name", "Embedding"},
                                          {"config", {{"input_dim", 10}, {"output_dim", 3}}}},
                                         {{"class_name", "GRU"}, {"config", {{"units", 2}}}},
                                         {{"class_name", "Dense"}, {"config", {{"units", 2}}}}}));
  };
  train::TrainConfig c;
  c.train_tokens = tokens;
  c.model_spec = (dir.path() / "s.json").string();
  std::ofstream(c.model_spec) << spec(6).dump();
  const train::ConfigTask t = train::task_from_config(c);
  EXPECT_EQ(t.task.train->sample_shape(), (Shape{6}));
  EXPECT_FALSE(t.task.train->variable_length());
  EXPECT_EQ(t.task.train->length(1), 6);
  std::ofstream(c.model_spec) << spec(3).dump();
  EXPECT_THAT(error_of([&] { train::task_from_config(c); }),
              AllOf(HasSubstr("sequences of 3 tokens"), HasSubstr("up to 4")));
}

/// A base dataset whose optional answers are all set, counting check_unchanged calls.
class Annotated final : public data::Dataset {
 public:
  Annotated(DType dtype, Shape shape) : dtype_(dtype), shape_(std::move(shape)) {}
  std::int64_t size() const override { return 4; }
  int num_classes() const override { return 2; }
  DType input_dtype() const override { return dtype_; }
  Shape sample_shape() const override { return shape_; }
  bool is_sequence() const override { return dtype_ == DType::kInt32; }
  bool variable_length() const override { return dtype_ == DType::kInt32; }
  std::int32_t length(std::int64_t) const override { return 2; }
  std::int32_t label(std::int64_t i) const override { return static_cast<std::int32_t>(i % 2); }
  std::string describe() const override { return "annotated"; }
  std::vector<std::string> notes() const override { return {"read into memory"}; }
  std::optional<double> input_bound() const override { return 1.0; }
  bool checks_at_batch() const override { return true; }
  void check_unchanged() const override { ++checks; }
  std::vector<std::string> class_names() const override { return {"cats", "dogs"}; }
  // Undrawn 0; drawn (epoch + 1) / 8: a view that loses the draw reads 0.
  void decode_float(std::int64_t, float* dst) const override {
    std::fill_n(dst, shape_numel(shape_), 0.0f);
  }
  void decode_float_drawn(std::int64_t, std::uint64_t, int epoch, float* dst) const override {
    std::fill_n(dst, shape_numel(shape_), static_cast<float>(epoch + 1) / 8.0f);
  }
  mutable int checks = 0;

 private:
  DType dtype_;
  Shape shape_;
};

TEST(DatasetViews, KeepTheBasesClassNamesFileChecksAndNotes) {
  // A sigmoid head on an image folder (binary_targets) must still store the class names in its
  // checkpoints, and a padded token file (fixed_length) must still notice a file changed under
  // the run: every view forwards what it does not change.
  const auto images = std::make_shared<Annotated>(DType::kFloat32, Shape{1, 2, 2});
  const auto tokens = std::make_shared<Annotated>(DType::kInt32, Shape{3});
  const std::vector<std::pair<std::string, std::shared_ptr<const data::Dataset>>> views = {
      {"reshaped", train::reshaped(images, {4})},
      {"binary_targets", train::binary_targets(images)},
      {"raw_pixels", train::raw_pixels(images)},
      {"channels_first", train::channels_first(images)},
      {"fixed_length", train::fixed_length(tokens, 5)}};
  for (const auto& [name, view] : views) {
    const Annotated& base = name == "fixed_length" ? *tokens : *images;
    EXPECT_EQ(view->class_names(), (std::vector<std::string>{"cats", "dogs"})) << name;
    EXPECT_EQ(view->notes(), (std::vector<std::string>{"read into memory"})) << name;
    EXPECT_TRUE(view->checks_at_batch()) << name;
    const int before = base.checks;
    view->check_unchanged();
    EXPECT_EQ(base.checks, before + 1) << name;
    EXPECT_EQ(view->input_bound(), name == "raw_pixels" ? 255.0 : 1.0) << name;
  }
}

TEST(DatasetViews, PassTheLoadersDrawnSamples) {
  // The loader reads training samples with decode_float_drawn (an image folder's random crop is
  // drawn there from seed, epoch and sample): a view that forwarded only decode_float would
  // train every epoch on the undrawn sample.
  const auto images = std::make_shared<Annotated>(DType::kFloat32, Shape{1, 2, 2});
  const std::vector<std::pair<std::string, std::shared_ptr<const data::Dataset>>> views = {
      {"reshaped", train::reshaped(images, {4})},
      {"raw_pixels", train::raw_pixels(images)},
      {"channels_first", train::channels_first(images)},
      {"wider_classes", train::wider_classes(images, 5)},
      {"random_subset", train::random_subset(images, 2, 7, 1)}};
  for (const auto& [name, view] : views) {
    std::vector<float> got(4, -1.0f);
    view->decode_float_drawn(1, 9, 3, got.data());
    const float want = name == "raw_pixels" ? 128.0f : 0.5f;  // 255 * 4 / 8, rounded
    EXPECT_EQ(got, std::vector<float>(4, want)) << name;
  }
  EXPECT_EQ(train::wider_classes(images, 5)->num_classes(), 5);
  EXPECT_EQ(train::wider_classes(images, 5)->class_names(),
            (std::vector<std::string>{"cats", "dogs", "2", "3", "4"}));
}

TEST(TokenArrays, TestIdsTheEmbeddingCannotReadAreRefusedAtLoad) {
  // Before, the run trained a whole epoch and then died in the embedding at evaluation.
  TempDir dir;
  const auto write_tokens = [&](const std::string& name, std::int64_t largest) {
    std::vector<std::int64_t> ids(8 * 4), labels(8);
    for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = 1 + static_cast<std::int64_t>(i % 9);
    ids[5] = largest;
    for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<std::int64_t>(i % 2);
    const std::string x = (dir.path() / (name + "-x.npy")).string();
    write_npy(x, data::ElementType::kInt64, {8, 4}, ids.data(), ids.size() * 8);
    write_npy((dir.path() / (name + "-y.npy")).string(), data::ElementType::kInt64, {8},
              labels.data(), labels.size() * 8);
    return std::pair{x, (dir.path() / (name + "-y.npy")).string()};
  };
  const auto [train_x, train_y] = write_tokens("train", 9);
  const auto [fits_x, fits_y] = write_tokens("fits", 9);
  const auto [beyond_x, beyond_y] = write_tokens("beyond", 40);
  train::TrainConfig c;
  c.model_spec = (dir.path() / "spec.json").string();
  std::ofstream(c.model_spec) << json{{"name", "t"},
                                      {"layers",
                                       {{{"type", "embedding"}, {"output_dim", 3}},
                                        {{"type", "gru"}, {"units", 2}},
                                        {{"type", "dense"}}}}}
                                     .dump();
  c.train_x = train_x;
  c.train_y = train_y;
  c.test_x = fits_x;
  c.test_y = fits_y;
  EXPECT_EQ(train::task_from_config(c).task.test->vocab_size(), 10);
  c.test_x = beyond_x;
  c.test_y = beyond_y;
  EXPECT_THAT(error_of([&] { train::task_from_config(c); }),
              AllOf(HasSubstr("token ids up to 40"), HasSubstr("reads ids below 10"),
                    HasSubstr("beyond-x.npy")));
}

TEST(OwnData, OneClassOfLabelsIsWarnedAbout) {
  const Files one(1), two(2);
  const json spec = {{"name", "m"}, {"layers", {{{"type", "dense"}}}}};
  const auto warnings = [&](const Files& f) {
    std::string all;
    for (const std::string& w : train::task_from_config(config(f, f.spec(spec))).warnings)
      all += w + "\n";
    return all;
  };
  EXPECT_THAT(warnings(one), HasSubstr("every training label is 0: one class"));
  EXPECT_THAT(warnings(two), ::testing::Not(HasSubstr("one class")));
}

TEST(Normalization, AdaptedValuesThatToJsonDidNotWriteAreNamed) {
  Files f(2);
  json model = keras_head(1, "sigmoid");
  const json normalization = {
      {"class_name", "Normalization"},
      {"config", {{"axis", {-1}}, {"mean", nullptr}, {"variance", nullptr}, {"invert", false}}}};
  model["config"]["layers"].insert(model["config"]["layers"].begin() + 1, normalization);
  EXPECT_THAT(error_of([&] { train::task_from_config(config(f, f.spec(model))); }),
              AllOf(HasSubstr("normalization layer 1"), HasSubstr("no mean and variance"),
                    HasSubstr("model.weights.h5")));
}

TEST(Normalization, AdaptedValuesComeFromTheKerasWeightsFile) {
  // Note [Adapted normalization]: --init-weights model.weights.h5 of the adapted Keras model
  // brings the mean and variance to_json() left out (Keras keeps them at
  // layers/normalization/vars/0 and 1).
  if (!train::keras_weights_file_supported()) GTEST_SKIP() << "this build has no HDF5";
  Files f(2);
  json model = keras_head(1, "sigmoid");
  const json normalization = {
      {"class_name", "Normalization"},
      {"config", {{"axis", {-1}}, {"mean", nullptr}, {"variance", nullptr}, {"invert", false}}}};
  model["config"]["layers"].insert(model["config"]["layers"].begin() + 1, normalization);
  // The file: the Dense layers' variables (the layout of the model with stated values) and the
  // normalization's three adapt variables.
  json stated = model;
  const std::vector<float> mean = {0.5f, 0.4f, 0.3f, 0.2f, 0.1f, 0.0f};
  const std::vector<float> variance = {1.0f, 2.0f, 3.0f, 4.0f, 0.5f, 0.25f};
  stated["config"]["layers"][1]["config"]["mean"] = mean;
  stated["config"]["layers"][1]["config"]["variance"] = variance;
  train::TrainConfig c = config(f, f.spec(stated));
  const train::ConfigTask with_values = train::task_from_config(c);
  std::vector<train::KerasVariables> file = train::keras_weights_layout(
      nn::ModelSpec::from_json(json::parse(with_values.task.model_description), "stated"));
  file.push_back({"layers/normalization", "",
                  {Tensor::from_vector(mean, {6}), Tensor::from_vector(variance, {6}),
                   Tensor::from_vector(std::vector<float>{64.0f}, {})}});
  const auto weights = f.dir.path() / "model.weights.h5";
  train::write_keras_weights_file(weights, file);
  c = config(f, f.spec(model));
  c.init_weights = weights.string();
  const train::ConfigTask task = train::task_from_config(c);
  const json bound = json::parse(task.task.model_description);
  const json* norm = nullptr;
  for (const json& l : bound["layers"]) {
    if (l["type"] == "normalization") norm = &l;
  }
  ASSERT_NE(norm, nullptr);
  EXPECT_EQ((*norm)["mean"].get<std::vector<float>>(), mean);
  EXPECT_EQ((*norm)["variance"].get<std::vector<float>>(), variance);
  // Exported again where Keras keeps them, count included: Keras's load_weights of the adapted
  // model expects all three. The model with stated values has no such variables.
  const auto exported = train::keras_weights_layout(nn::ModelSpec::from_json(bound, "bound"));
  const auto found = std::find_if(exported.begin(), exported.end(), [](const auto& v) {
    return v.path == "layers/normalization";
  });
  ASSERT_NE(found, exported.end());
  ASSERT_EQ(found->values.size(), 3u);
  EXPECT_EQ(found->values[0].to_vector<float>(), mean);
  EXPECT_EQ(found->values[1].to_vector<float>(), variance);
  EXPECT_EQ(found->values[2].shape(), Shape{});
  EXPECT_EQ(found->values[2].to_vector<float>(), std::vector<float>{64.0f});
  for (const auto& v : train::keras_weights_layout(nn::ModelSpec::from_json(
           json::parse(with_values.task.model_description), "stated"))) {
    EXPECT_NE(v.path, "layers/normalization") << "a stated normalization has no Keras variables";
  }
  // A file without them names the path it looked for.
  file.pop_back();
  train::write_keras_weights_file(weights, file);
  EXPECT_THAT(error_of([&] { train::task_from_config(c); }),
              AllOf(HasSubstr("no adapted values for normalization layer 1"),
                    HasSubstr("layers/normalization/vars/0")));
}

}  // namespace
}  // namespace mirror::testing_util
