// The layers Keras tutorial models carry (include/mirror/nn/preprocessing.h) and Dense,
// Activation and Concatenate on sequences: float64 finite-difference checks, the interpolation
// matrices, and the spec fields (Keras's spelling) with their errors. Agreement with Keras on
// the same weights is keras_reference_test.cpp.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <numeric>

#include "gradcheck.h"
#include "mirror/nn/cnn_layers.h"
#include "mirror/nn/layers.h"
#include "mirror/nn/models.h"
#include "mirror/nn/preprocessing.h"
#include "mirror/nn/recurrent.h"

namespace mirror::nn {
namespace {

using nlohmann::json;
using ::testing::AllOf;
using testing::built;
using testing::check_layer;
using testing::expect_gradients_within;
using ::testing::HasSubstr;
using testing::random_tensor;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// ---------------------------------------------------------------- gradients (float64)

TEST(PreprocessingGradients, RescalingAndNormalizationPerChannelAndForAll) {
  ForwardContext ctx;
  Rescaling per_channel({0.5, -2.0, 3.0}, {0.1, 0.0, -1.0});
  built(per_channel, {3, 4, 5});
  expect_gradients_within(check_layer(per_channel, random_tensor({2, 3, 4, 5}, 1), ctx), 1);
  Rescaling one({1.0 / 255}, {-0.5});
  built(one, {7, 3});  // a sequence [T, F]
  expect_gradients_within(check_layer(one, random_tensor({2, 7, 3}, 2), ctx), 1);
  Normalization norm({0.2, -0.4, 1.0}, {0.5, 2.0, 0.0}, false);  // variance 0: Keras's epsilon
  built(norm, {4, 3});
  expect_gradients_within(check_layer(norm, random_tensor({2, 4, 3}, 3), ctx), 1);
  Normalization inverted({0.3}, {4.0}, true);
  built(inverted, {6});
  expect_gradients_within(check_layer(inverted, random_tensor({3, 6}, 4), ctx), 1);
}

TEST(PreprocessingGradients, ResizingAndCenterCropEveryPath) {
  ForwardContext ctx;
  const Tensor x = random_tensor({2, 2, 6, 7}, 5);
  for (auto interp : {Resizing::Interpolation::kBilinear, Resizing::Interpolation::kNearest}) {
    for (bool crop : {false, true}) {
      for (auto [h, w] : {std::pair{9, 11}, std::pair{4, 3}}) {
        Resizing r(h, w, interp, crop);
        built(r, {2, 6, 7});
        expect_gradients_within(check_layer(r, x, ctx), 1);
      }
    }
  }
  CenterCrop crop(4, 3);  // a window
  built(crop, {2, 6, 7});
  EXPECT_EQ(crop.top(), 1);
  EXPECT_EQ(crop.left(), 2);
  expect_gradients_within(check_layer(crop, x, ctx), 1);
  CenterCrop upsize(8, 5);  // taller than the image: Keras resizes instead
  built(upsize, {2, 6, 7});
  EXPECT_NE(upsize.resize(), nullptr);
  expect_gradients_within(check_layer(upsize, x, ctx), 1);
}

TEST(PreprocessingValues, CenterCropIsTheCentredWindowAndResizeMatricesInterpolate) {
  CenterCrop crop(2, 2);
  built(crop, {1, 4, 5});
  ForwardContext ctx;
  std::vector<double> v(20);
  std::iota(v.begin(), v.end(), 0.0);
  const auto y = crop.forward(Tensor::from_vector(v, {1, 1, 4, 5}), ctx).to_vector<double>();
  EXPECT_EQ(y, (std::vector<double>{6, 7, 11, 12}));  // rows 1-2, columns 1-2 (floor of 3/2)
  // Bilinear rows sum to one, edges take the edge pixel, the same size is the identity.
  for (int out : {3, 8, 13}) {
    const auto m = detail::resize_matrix(6, 0, 6, out, true);
    for (int i = 0; i < out; ++i) {
      EXPECT_NEAR(std::accumulate(m.begin() + i * 6, m.begin() + (i + 1) * 6, 0.0), 1.0, 1e-12);
    }
  }
  EXPECT_EQ(detail::resize_matrix(4, 0, 4, 8, true)[0], 1.0);  // sample -0.25: pixel 0
  const auto same = detail::resize_matrix(3, 0, 3, 3, true);
  EXPECT_EQ(same, (std::vector<double>{1, 0, 0, 0, 1, 0, 0, 0, 1}));
  // Nearest: floor((i + 0.5) * in / out).
  const auto nearest = detail::resize_matrix(5, 0, 5, 2, false);
  EXPECT_EQ(nearest[1], 1.0);      // i 0 -> 1
  EXPECT_EQ(nearest[5 + 3], 1.0);  // i 1 -> 3
  // Keras's crop to the target's aspect ratio: a 10x12 image to 9x9 takes the centred 10x10.
  EXPECT_EQ(detail::aspect_crop(10, 12, 9, 9), (std::vector<int>{0, 1, 10, 10}));
}

TEST(SequenceLayers, DenseOnEveryStepWithMirrorsAndKerassMasks) {
  Dense d(3, Activation::kTanh);
  built(d, {5, 4});
  const Tensor x = random_tensor({2, 5, 4}, 6);
  ForwardContext full;
  expect_gradients_within(check_layer(d, x, full), 3);
  // One row of the batch is the Dense of that step.
  ForwardContext ctx;
  const auto y = d.forward(x, ctx).to_vector<double>();
  Dense flat(3, Activation::kTanh);
  built(flat, {4});
  flat.parameters()[0]->value.copy_from(d.parameters()[0]->value);
  const auto row = flat.forward(x.reshape({10, 4}), ctx).to_vector<double>();
  EXPECT_EQ(y, row);
  // Mirror's masks: zero past each length, no gradient from there.
  ForwardContext masked;
  masked.lengths = {2, 5};
  const auto ym = d.forward(x, masked).to_vector<double>();
  for (int t = 2; t < 5; ++t)
    for (int u = 0; u < 3; ++u) EXPECT_EQ(ym[t * 3 + u], 0.0);
  EXPECT_EQ(masked.lengths, (std::vector<std::int32_t>{2, 5}));  // passed on
  expect_gradients_within(check_layer(d, x, masked), 3);
  // Keras's: every step computed.
  ForwardContext keras;
  keras.lengths = {2, 5};
  keras.keras_masks = true;
  EXPECT_EQ(d.forward(x, keras).to_vector<double>(), y);
  // A sigmoid Activation keeps Mirror's zeros too.
  ActivationLayer sigmoid(Activation::kSigmoid);
  built(sigmoid, {5, 3});
  EXPECT_EQ(sigmoid.forward(random_tensor({2, 5, 3}, 7), masked).to_vector<double>()[2 * 3], 0.0);
  expect_gradients_within(check_layer(sigmoid, random_tensor({2, 5, 3}, 7), masked), 1);
}

TEST(SequenceLayers, KerasRecurrentOutputsCarryTheLastStepPastTheLength) {
  // Note [Carried outputs]: zero_output_for_mask false with Keras's masks.
  for (bool gru : {true, false}) {
    std::unique_ptr<Recurrent> rnn;
    if (gru) rnn = std::make_unique<GRU>(3, true);
    if (!gru) rnn = std::make_unique<LSTM>(3, true);
    rnn->set_zero_output_for_mask(false);
    built(*rnn, {5, 2});
    const Tensor x = random_tensor({2, 5, 2}, 11);
    ForwardContext keras;
    keras.training = true;
    keras.keras_masks = true;
    keras.lengths = {2, 5};
    const auto y = rnn->forward(x, keras).to_vector<double>();
    for (int t = 2; t < 5; ++t)
      for (int u = 0; u < 3; ++u) EXPECT_EQ(y[t * 3 + u], y[1 * 3 + u]) << "step " << t;
    expect_gradients_within(check_layer(*rnn, x, keras), 5);
    // Mirror's masks (or zero_output_for_mask true): zeros there.
    ForwardContext mirror = keras;
    mirror.keras_masks = false;
    EXPECT_EQ(rnn->forward(x, mirror).to_vector<double>()[4 * 3], 0.0);
  }
}

TEST(SequenceLayers, EmbeddingWithoutAPaddingRowTrainsRowZero) {
  Embedding keras(6, 3, false);
  built(keras, {4});
  const Tensor ids = Tensor::from_vector(std::vector<std::int32_t>{2, 0, 0, 5, 0, 1, 3, 0}, {2, 4});
  ForwardContext ctx;
  const auto report = check_layer(keras, ids, ctx);
  expect_gradients_within(report, 1);
  EXPECT_NE(testing::relative_error(keras.parameters()[0]->grad.to_vector<double>(),
                                    std::vector<double>(18, 0.0)),
            0.0);
  // Row 0 received the sum of its four steps' gradients; Mirror's padding row none.
  Embedding mirror(6, 3);
  built(mirror, {4});
  mirror.forward(ids, ctx);
  ops::fill(mirror.parameters()[0]->grad, 0.0);
  mirror.backward(random_tensor({2, 4, 3}, 9));
  const auto g = mirror.parameters()[0]->grad.to_vector<double>();
  EXPECT_EQ(std::vector<double>(g.begin(), g.begin() + 3), std::vector<double>(3, 0.0));
}

TEST(SequenceLayers, ConcatenateJoinsSequencesAlongTheirFeatures) {
  Concatenate cat;
  cat.set_name("concatenate_1");
  EXPECT_EQ(cat.build_inputs({{5, 2}, {5, 3}}, {"a", "b"}, DType::kFloat64, Device::cpu()),
            (Shape{5, 5}));
  ForwardContext ctx;
  const Tensor a = random_tensor({2, 4, 2}, 1), b = random_tensor({2, 4, 3}, 2);  // T varies
  const auto y = cat.forward_inputs({a, b}, ctx).to_vector<double>();
  const auto av = a.to_vector<double>(), bv = b.to_vector<double>();
  EXPECT_EQ(y[5 * 3 + 1], av[2 * 3 + 1]);  // row 3, feature 1 from a
  EXPECT_EQ(y[5 * 3 + 4], bv[3 * 3 + 2]);  // row 3, feature 4 from b's third
  const auto parts = cat.backward_inputs(Tensor::from_vector(y, {2, 4, 5}));
  EXPECT_EQ(parts[0].to_vector<double>(), av);
  EXPECT_EQ(parts[1].to_vector<double>(), bv);
  EXPECT_THAT(error_of([&] {
                cat.build_inputs({{5, 2}, {4, 3}}, {"a", "b"}, DType::kFloat64, Device::cpu());
              }),
              HasSubstr("every dimension but the channel axis"));
}

// ---------------------------------------------------------------- spec fields

ModelSpec keras_sequential(const json& input, const json& layers) {
  json all = json::array({{{"class_name", "InputLayer"}, {"config", {{"batch_shape", input}}}}});
  for (const auto& l : layers) all.push_back(l);
  return ModelSpec::from_json({{"class_name", "Sequential"}, {"config", {{"layers", all}}}});
}

TEST(PreprocessingSpec, KerasFieldsBecomeCanonicalLayers) {
  const ModelSpec spec = keras_sequential(
      {nullptr, 12, 10, 3},
      json::array({{{"class_name", "Rescaling"},
                    {"config", {{"scale", 0.00392156862745098}, {"offset", -0.5}}}},
                   {{"class_name", "Normalization"},
                    {"config",
                     {{"axis", {-1}},
                      {"mean", {0.1, 0.2, 0.3}},
                      {"variance", {1, 2, 3}},
                      {"invert", false}}}},
                   {{"class_name", "Resizing"},
                    {"config",
                     {{"height", 16},
                      {"width", 16},
                      {"interpolation", "nearest"},
                      {"crop_to_aspect_ratio", true},
                      {"pad_to_aspect_ratio", false},
                      {"fill_mode", "constant"},
                      {"fill_value", 0.0},
                      {"antialias", false},
                      {"data_format", "channels_last"}}}},
                   {{"class_name", "CenterCrop"},
                    {"config", {{"height", 8}, {"width", 6}, {"data_format", "channels_last"}}}},
                   {{"class_name", "Flatten"}, {"config", {{"data_format", "channels_last"}}}},
                   {{"class_name", "Dense"}, {"config", {{"units", 2}}}}}));
  EXPECT_TRUE(spec.bound());
  EXPECT_EQ(spec.input_shape(), (Shape{3, 12, 10}));
  const json& l = spec.layers();
  EXPECT_EQ(l[0], json({{"type", "rescaling"}, {"scale", 0.00392156862745098}, {"offset", -0.5}}));
  EXPECT_EQ(l[1]["mean"], json({0.1, 0.2, 0.3}));
  EXPECT_EQ(l[2]["interpolation"], "nearest");
  EXPECT_EQ(l[3], json({{"type", "center_crop"}, {"height", 8}, {"width", 6}}));
  EXPECT_EQ(ModelSpec::from_json(spec.to_json()).to_json(), spec.to_json());
  Sequential m = make_model(spec);
  EXPECT_EQ(m.layer_output_shapes()[2], (Shape{3, 16, 16}));
  EXPECT_EQ(m.layer_output_shapes()[3], (Shape{3, 8, 6}));
}

TEST(PreprocessingSpec, WhatMirrorCannotComputeIsRefusedByName) {
  const auto resize = [](const json& extra) {
    json config = {{"height", 4}, {"width", 4}};
    config.update(extra);
    return keras_sequential({nullptr, 8, 8, 1},
                            json::array({{{"class_name", "Resizing"}, {"config", config}},
                                         {{"class_name", "Flatten"}, {"config", json::object()}},
                                         {{"class_name", "Dense"}, {"config", {{"units", 2}}}}}));
  };
  EXPECT_THAT(error_of([&] {
                resize({{"interpolation", "bicubic"}});
              }),
              AllOf(HasSubstr("'interpolation'"), HasSubstr("bilinear and nearest")));
  EXPECT_THAT(error_of([&] {
                resize({{"pad_to_aspect_ratio", true}});
              }),
              HasSubstr("'pad_to_aspect_ratio'"));
  EXPECT_THAT(error_of([&] { resize({{"antialias", true}}); }), HasSubstr("antialiasing"));
  const auto norm = [](const json& config) {
    return keras_sequential({nullptr, 4},
                            json::array({{{"class_name", "Normalization"}, {"config", config}},
                                         {{"class_name", "Dense"}, {"config", {{"units", 2}}}}}));
  };
  EXPECT_THAT(error_of([&] {
                norm({{"mean", {1, 2}}, {"variance", {1}}});
              }),
              HasSubstr("1 values for 2 means"));
  EXPECT_THAT(error_of([&] {
                norm({{"mean", {1, 2, 3}}, {"variance", {1, 1, 1}}});
              }),
              AllOf(HasSubstr("3 values for 4 channels"), HasSubstr("one per channel")));
  EXPECT_THAT(error_of([&] {
                norm({{"axis", {0}}, {"mean", 1}, {"variance", 1}});
              }),
              HasSubstr("only the channel axis"));
  EXPECT_THAT(error_of([&] { norm({{"mean", 0.5}}); }), HasSubstr("go together"));
  // Unstated values (adapt()) parse; the trainer names them (train_model_data_test.cpp).
  EXPECT_FALSE(norm({{"axis", {-1}}, {"mean", nullptr}, {"variance", nullptr}})
                   .layers()[0]
                   .contains("mean"));
}

}  // namespace
}  // namespace mirror::nn
