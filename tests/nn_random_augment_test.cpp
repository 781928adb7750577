// Keras's augmentation layers in the model (nn/random_augment.h): identity outside training;
// draws that depend only on (seed, layer, sample id); flips and integer translations exact;
// zoom and rotation by Keras's matrices; brightness and contrast by Keras's formulas; backward
// against central differences; and reading them from a Keras model's to_json().
#include "mirror/nn/random_augment.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "gradcheck.h"
#include "math/random_augment.h"
#include "mirror/nn/models.h"
#include "mirror/nn/preprocessing.h"
#include "nn/model_spec_augment.h"

namespace mirror::nn {
namespace {

using testing::built;
using testing::check_layer;
using testing::expect_gradients_within;
using testing::random_tensor;
using K = ops::ImageAugment::Kind;
using Fill = ops::ImageAugment::Fill;

const char* kind_name(K k) {
  switch (k) {
    case K::kFlip:
      return "random_flip";
    case K::kTranslation:
      return "random_translation";
    case K::kZoom:
      return "random_zoom";
    case K::kRotation:
      return "random_rotation";
    case K::kContrast:
      return "random_contrast";
    case K::kBrightness:
      return "random_brightness";
    case K::kCrop:
      return "random_crop";
  }
  return "";
}

ops::ImageAugment augment(K kind, double lo = -0.2, double hi = 0.3) {
  ops::ImageAugment a;
  a.kind = kind;
  a.flip_horizontal = a.flip_vertical = true;
  a.lower[0] = a.lower[1] = lo;
  a.upper[0] = a.upper[1] = hi;
  a.value_lo = -10;
  a.value_hi = 10;
  return a;
}

ForwardContext training(std::vector<std::int64_t> ids, std::uint64_t seed = 11) {
  ForwardContext ctx;
  ctx.training = true;
  ctx.seed = seed;
  const auto n = static_cast<std::int64_t>(ids.size());
  ctx.sample_ids = Tensor::from_vector(ids, {n});
  return ctx;
}

std::vector<double> v(const Tensor& t) {
  return (t.dtype() == DType::kFloat64 ? t : ops::cast(t, DType::kFloat64)).to_vector<double>();
}

/// Sample n of a batch [N, ...] as a vector.
std::vector<double> sample(const Tensor& t, std::int64_t n) {
  const std::vector<double> all = v(t);
  const std::int64_t per = t.numel() / t.dim(0);
  return {all.begin() + n * per, all.begin() + (n + 1) * per};
}

const std::vector<K> kAll = {K::kFlip,     K::kTranslation, K::kZoom,
                             K::kRotation, K::kContrast,    K::kBrightness};

TEST(RandomAugment, FloorAndRoundAsTheCLibrary) {
  // Nearest interpolation rounds half away from zero, as JAX's map_coordinates; without libm.
  for (float v : {-3.5f, -2.5f, -2.4999998f, -0.5f, -0.49999997f, -0.0f, 0.0f, 0.49999997f, 0.5f,
                  1.5f, 2.4999998f, 2.5f, 7.25f, -7.75f, 179.5f, -180.5f}) {
    EXPECT_EQ(math::augment_floor(v), static_cast<std::int64_t>(std::floor(v))) << v;
    EXPECT_EQ(math::augment_round(v), static_cast<std::int64_t>(std::round(v))) << v;
  }
}

TEST(RandomAugment, IdentityOutsideTraining) {
  for (K k : kAll) {
    SCOPED_TRACE(kind_name(k));
    RandomAugment layer(kind_name(k), augment(k));
    built(layer, {2, 5, 6});
    const Tensor x = random_tensor({3, 2, 5, 6}, 1);
    ForwardContext ctx;  // training false: predict, evaluate
    EXPECT_EQ(v(layer.forward(x, ctx)), v(x));
    const Tensor dy = random_tensor({3, 2, 5, 6}, 2);
    EXPECT_EQ(v(layer.backward(dy)), v(dy));
  }
}

TEST(RandomAugment, DrawsDependOnSeedLayerAndSampleIdOnly) {
  for (K k : kAll) {
    SCOPED_TRACE(kind_name(k));
    RandomAugment layer(kind_name(k), augment(k));
    built(layer, {2, 7, 7}, "aug_1");
    const Tensor x = random_tensor({1, 2, 7, 7}, 3);
    // The same image as sample 5 and as sample 9, in different batch slots and batch sizes.
    std::vector<double> twice = v(x);
    twice.insert(twice.end(), twice.begin(), twice.end());
    const Tensor pair = Tensor::from_vector(twice, {2, 2, 7, 7});
    ForwardContext a = training({5, 9}), b = training({9, 5}), one = training({9});
    const Tensor ya = layer.forward(pair, a), yb = layer.forward(pair, b);
    const Tensor y1 = layer.forward(x, one);
    EXPECT_EQ(sample(ya, 0), sample(yb, 1));
    EXPECT_EQ(sample(ya, 1), sample(yb, 0));
    EXPECT_EQ(sample(ya, 1), sample(y1, 0));
    // Different samples, steps and layers draw differently (flip: a 50% draw, so look at many).
    if (k == K::kFlip) continue;
    EXPECT_NE(sample(ya, 0), sample(ya, 1));
    ForwardContext other_step = training({9}, 12);
    EXPECT_NE(sample(layer.forward(x, other_step), 0), sample(y1, 0));
    RandomAugment twin(kind_name(k), augment(k));
    built(twin, {2, 7, 7}, "aug_2");
    EXPECT_NE(sample(twin.forward(x, one), 0), sample(y1, 0));
  }
}

/// x [1, C, H, W] with each sample's flip applied or not.
TEST(RandomAugment, FlipsExactlyAboutHalfTheSamples) {
  for (const char* mode : {"horizontal", "vertical", "both"}) {
    SCOPED_TRACE(mode);
    ops::ImageAugment a = augment(K::kFlip);
    a.flip_horizontal = std::string(mode) != "vertical";
    a.flip_vertical = std::string(mode) != "horizontal";
    RandomAugment layer("random_flip", a);
    const std::int64_t n = 64, c = 2, h = 3, w = 4;
    built(layer, {c, h, w});
    std::vector<std::int64_t> ids;
    for (std::int64_t i = 0; i < n; ++i) ids.push_back(1000 + 7 * i);
    ForwardContext ctx = training(ids);
    const Tensor x = random_tensor({n, c, h, w}, 5);
    const std::vector<double> xs = v(x), ys = v(layer.forward(x, ctx));
    int flipped = 0;
    for (std::int64_t s = 0; s < n; ++s) {
      bool same = true, mirrored = true;
      for (std::int64_t ch = 0; ch < c; ++ch)
        for (std::int64_t r = 0; r < h; ++r)
          for (std::int64_t col = 0; col < w; ++col) {
            const std::int64_t sr = a.flip_vertical ? h - 1 - r : r;
            const std::int64_t sc = a.flip_horizontal ? w - 1 - col : col;
            const double y = ys[((s * c + ch) * h + r) * w + col];
            same = same && y == xs[((s * c + ch) * h + r) * w + col];
            mirrored = mirrored && y == xs[((s * c + ch) * h + sr) * w + sc];
          }
      EXPECT_TRUE(same || mirrored) << "sample " << s;
      flipped += mirrored ? 1 : 0;
    }
    EXPECT_GT(flipped, 16);
    EXPECT_LT(flipped, 48);
  }
}

/// jax.scipy.ndimage's "reflect" (d c b a | a b c d | d c b a) for an index.
std::int64_t reflect(std::int64_t i, std::int64_t n) {
  while (i < 0 || i >= n) i = i < 0 ? -1 - i : 2 * n - 1 - i;
  return i;
}

TEST(RandomAugment, TranslatesByWholePixelsExactly) {
  // Equal bounds fix the draw: 0.25 of 8 rows down, 0.125 of 8 columns left.
  for (Fill fill : {Fill::kConstant, Fill::kReflect, Fill::kNearest, Fill::kWrap}) {
    for (bool nearest : {false, true}) {
      SCOPED_TRACE(static_cast<int>(fill) * 2 + nearest);
      ops::ImageAugment a = augment(K::kTranslation);
      a.lower[0] = a.upper[0] = 0.25;
      a.lower[1] = a.upper[1] = -0.125;
      a.fill = fill;
      a.fill_value = 3.5;
      a.nearest = nearest;
      RandomAugment layer("random_translation", a);
      built(layer, {2, 8, 8});
      ForwardContext ctx = training({4, 17});
      const Tensor x = random_tensor({2, 2, 8, 8}, 6);
      const std::vector<double> xs = v(x), ys = v(layer.forward(x, ctx));
      for (std::int64_t p = 0; p < 4; ++p)
        for (std::int64_t r = 0; r < 8; ++r)
          for (std::int64_t col = 0; col < 8; ++col) {
            std::int64_t sr = r - 2, sc = col + 1;
            double want;
            if (fill == Fill::kConstant && (sr < 0 || sc >= 8)) {
              want = 3.5;
            } else {
              if (fill == Fill::kReflect) sr = reflect(sr, 8), sc = reflect(sc, 8);
              if (fill == Fill::kNearest)
                sr = std::max<std::int64_t>(sr, 0), sc = std::min<std::int64_t>(sc, 7);
              if (fill == Fill::kWrap) sr = (sr + 8) % 8, sc = sc % 8;
              want = xs[(p * 8 + sr) * 8 + sc];
            }
            EXPECT_EQ(ys[(p * 8 + r) * 8 + col], want) << p << " " << r << " " << col;
          }
    }
  }
}

TEST(RandomAugment, ZoomAndRotationFollowKerassMatrices) {
  const Tensor x = random_tensor({1, 1, 6, 6}, 8);
  const std::vector<double> xs = v(x);
  ForwardContext ctx = training({3});
  {  // zoom factor 0: the identity matrix, exactly
    ops::ImageAugment a = augment(K::kZoom, 0, 0);
    RandomAugment layer("random_zoom", a);
    built(layer, {1, 6, 6});
    EXPECT_EQ(v(layer.forward(x, ctx)), xs);
  }
  {  // rotation by a quarter turn (factor 0.25 of 360 degrees), counter-clockwise as Keras's:
    // input x' = W - 1 - y, y' = x about the centre
    ops::ImageAugment a = augment(K::kRotation, 0.25, 0.25);
    RandomAugment layer("random_rotation", a);
    built(layer, {1, 6, 6});
    const std::vector<double> ys = v(layer.forward(x, ctx));
    for (std::int64_t r = 0; r < 6; ++r)
      for (std::int64_t c = 0; c < 6; ++c)
        EXPECT_NEAR(ys[r * 6 + c], xs[c * 6 + (5 - r)], 1e-5) << r << " " << c;
  }
  {  // zoom 1 + 1 = 2 about the centre: output (y, x) reads input (2 y - 2.5, 2 x - 2.5)
    ops::ImageAugment a = augment(K::kZoom, 1, 1);
    a.same_zoom = true;
    a.fill = Fill::kConstant;
    RandomAugment layer("random_zoom", a);
    built(layer, {1, 6, 6});
    const std::vector<double> ys = v(layer.forward(x, ctx));
    auto at = [&](std::int64_t r, std::int64_t c) {
      return r < 0 || r > 5 || c < 0 || c > 5 ? 0.0 : xs[r * 6 + c];
    };
    for (std::int64_t r = 0; r < 6; ++r)
      for (std::int64_t c = 0; c < 6; ++c) {
        const double sy = 2.0 * r - 2.5, sx = 2.0 * c - 2.5;
        const auto y0 = static_cast<std::int64_t>(std::floor(sy));
        const auto x0 = static_cast<std::int64_t>(std::floor(sx));
        const double want =
            0.25 * (at(y0, x0) + at(y0, x0 + 1) + at(y0 + 1, x0) + at(y0 + 1, x0 + 1));
        EXPECT_NEAR(ys[r * 6 + c], want, 1e-12) << r << " " << c;
      }
  }
}

TEST(RandomAugment, BrightnessAndContrastFollowKerassFormulas) {
  const Tensor x = random_tensor({2, 2, 3, 4}, 9, 0.0, 1.0);
  const std::vector<double> xs = v(x);
  ForwardContext ctx = training({1, 2});
  {  // delta = factor * (high - low) = 0.25 * 2; clipped to [0, 2]
    ops::ImageAugment a = augment(K::kBrightness, 0.25, 0.25);
    a.value_lo = 0;
    a.value_hi = 2;
    RandomAugment layer("random_brightness", a);
    built(layer, {2, 3, 4});
    const Tensor y = layer.forward(x, ctx);
    for (std::size_t i = 0; i < xs.size(); ++i)
      EXPECT_DOUBLE_EQ(v(y)[i], std::min(xs[i] + 0.5, 2.0));
  }
  {  // factor drawn in [1 - lower, 1 + upper] = [2.5, 2.5]; (x - mean) f + mean per channel,
     // clipped to [0.125, 0.875]
    ops::ImageAugment a = augment(K::kContrast, -1.5, 1.5);
    a.value_lo = 0.125;
    a.value_hi = 0.875;
    RandomAugment layer("random_contrast", a);
    built(layer, {2, 3, 4});
    const std::vector<double> ys = v(layer.forward(x, ctx));
    for (std::int64_t p = 0; p < 4; ++p) {
      double mean = 0;
      for (int i = 0; i < 12; ++i) mean += xs[p * 12 + i] / 12;
      for (int i = 0; i < 12; ++i) {
        const double want = std::clamp((xs[p * 12 + i] - mean) * 2.5 + mean, 0.125, 0.875);
        EXPECT_NEAR(ys[p * 12 + i], want, 1e-12);
      }
    }
  }
}

TEST(RandomAugment, BackwardMatchesCentralDifferences) {
  for (K k : kAll) {
    for (Fill fill : {Fill::kReflect, Fill::kConstant, Fill::kNearest, Fill::kWrap}) {
      if ((k == K::kContrast || k == K::kBrightness || k == K::kFlip) && fill != Fill::kReflect)
        continue;
      SCOPED_TRACE(std::string(kind_name(k)) + " fill " + std::to_string(static_cast<int>(fill)));
      ops::ImageAugment a = augment(k, -0.3, 0.4);
      a.fill = fill;
      a.fill_value = 0.7;
      a.value_lo = -0.8;  // some values clip
      a.value_hi = 0.8;
      RandomAugment layer(kind_name(k), a);
      built(layer, {2, 5, 6});
      ForwardContext ctx = training({21, 22, 23});
      const Tensor x = random_tensor({3, 2, 5, 6}, 10);
      expect_gradients_within(check_layer(layer, x, ctx), 1, 1e-7);
    }
  }
  // Nearest interpolation is linear in the input too.
  ops::ImageAugment a = augment(K::kRotation);
  a.nearest = true;
  RandomAugment layer("random_rotation", a);
  built(layer, {1, 6, 5});
  ForwardContext ctx = training({1, 2});
  expect_gradients_within(check_layer(layer, random_tensor({2, 1, 6, 5}, 11), ctx), 1, 1e-7);
}

TEST(RandomAugment, FirstLayerSkipsTheInputGradient) {
  RandomAugment layer("random_rotation", augment(K::kRotation));
  built(layer, {1, 4, 4});
  layer.set_input_grad_needed(false);
  ForwardContext ctx = training({1});
  const Tensor y = layer.forward(random_tensor({1, 1, 4, 4}, 12), ctx);
  EXPECT_FALSE(layer.backward(y).defined());
}

TEST(RandomAugment, RefusesWhatIsNotAnImage) {
  RandomAugment layer("random_flip", augment(K::kFlip));
  layer.set_name("flip");
  InitRng rng(1);
  EXPECT_THROW(layer.build({10}, DType::kFloat32, Device::cpu(), rng), InvalidArgument);
  EXPECT_THROW(RandomAugment("random_zoom", augment(K::kFlip)), InvalidArgument);
}

TEST(RandomCrop, CropsAWholeWindowPerSampleAndResizesOutsideTraining) {
  RandomCrop layer(3, 4);
  built(layer, {2, 5, 7});
  EXPECT_TRUE(layer.random());
  const std::int64_t n = 48;
  std::vector<std::int64_t> ids;
  for (std::int64_t i = 0; i < n; ++i) ids.push_back(500 + i);
  ForwardContext ctx = training(ids);
  const Tensor x = random_tensor({n, 2, 5, 7}, 15);
  const Tensor y = layer.forward(x, ctx);
  EXPECT_EQ(y.shape(), (Shape{n, 2, 3, 4}));
  const std::vector<double> xs = v(x), ys = v(y);
  std::set<std::pair<int, int>> offsets;
  for (std::int64_t s = 0; s < n; ++s) {
    bool found = false;
    for (int top = 0; top <= 2 && !found; ++top)
      for (int left = 0; left <= 3 && !found; ++left) {
        bool same = true;
        for (int ch = 0; ch < 2; ++ch)
          for (int r = 0; r < 3; ++r)
            for (int c = 0; c < 4; ++c)
              same = same && ys[((s * 2 + ch) * 3 + r) * 4 + c] ==
                                 xs[((s * 2 + ch) * 5 + r + top) * 7 + c + left];
        if (same) offsets.insert({top, left});
        found = same;
      }
    EXPECT_TRUE(found) << "sample " << s << " is no window of its image";
  }
  EXPECT_EQ(offsets.size(), 12u);  // every one of the 3 x 4 positions is drawn
  // Outside training: Resizing(3, 4, crop_to_aspect_ratio) (Keras's centred box, resized).
  Resizing resize(3, 4, Resizing::Interpolation::kBilinear, true);
  built(resize, {2, 5, 7});
  ForwardContext predict;
  EXPECT_EQ(v(layer.forward(x, predict)), v(resize.forward(x, predict)));
  // Gradients of both paths.
  ForwardContext few = training({1, 2, 3});
  const Tensor small = random_tensor({3, 2, 5, 7}, 16);
  expect_gradients_within(check_layer(layer, small, few), 1, 1e-7);
  expect_gradients_within(check_layer(layer, small, predict), 1, 1e-7);
  // An image not larger than the window in both dimensions takes the resize in training too.
  RandomCrop tall(5, 3);
  built(tall, {2, 5, 7});
  EXPECT_FALSE(tall.random());
  EXPECT_EQ(tall.forward(small, few).shape(), (Shape{3, 2, 5, 3}));
}

// ---------------------------------------------------------------- from Keras's to_json()
/// keras.io's "image classification from scratch" head, small: Keras 3.15's to_json() of
/// Sequential([Input((8, 8, 3)), RandomFlip("horizontal"), RandomRotation(0.1), RandomZoom(0.1),
/// RandomTranslation(0.1, 0.2), RandomContrast(0.2), RandomBrightness(0.1), Conv2D(4, 3),
/// GlobalAveragePooling2D(), Dense(3)]), layers' dtype policies trimmed.
nlohmann::json keras_model() {
  return nlohmann::json::parse(R"({"class_name": "Sequential", "config": {"name": "s", "layers": [
 {"class_name": "InputLayer", "config": {"batch_shape": [null, 8, 8, 3], "dtype": "float32",
   "sparse": false, "ragged": false, "name": "input_layer", "optional": false}},
 {"class_name": "RandomFlip", "config": {"name": "random_flip", "trainable": true,
   "data_format": "channels_last", "seed": null, "mode": "horizontal"}},
 {"class_name": "RandomRotation", "config": {"name": "random_rotation", "trainable": true,
   "data_format": "channels_last", "factor": [-0.1, 0.1], "fill_mode": "reflect",
   "fill_value": 0.0, "interpolation": "bilinear", "seed": null}},
 {"class_name": "RandomZoom", "config": {"name": "random_zoom", "trainable": true,
   "data_format": "channels_last", "height_factor": 0.1, "width_factor": null,
   "fill_mode": "reflect", "interpolation": "bilinear", "seed": null, "fill_value": 0.0}},
 {"class_name": "RandomTranslation", "config": {"name": "random_translation",
   "trainable": true, "data_format": "channels_last", "height_factor": 0.1,
   "width_factor": 0.2, "fill_mode": "constant", "interpolation": "nearest", "seed": null,
   "fill_value": 0.0}},
 {"class_name": "RandomContrast", "config": {"name": "random_contrast", "trainable": true,
   "data_format": "channels_last", "factor": [0, 0.2], "value_range": [0, 255], "seed": null}},
 {"class_name": "RandomBrightness", "config": {"name": "random_brightness", "trainable": true,
   "data_format": "channels_last", "factor": [-0.1, 0.1], "value_range": [0, 255],
   "seed": null}},
 {"class_name": "Conv2D", "config": {"name": "conv2d", "filters": 4, "kernel_size": [3, 3],
   "strides": [1, 1], "padding": "valid", "data_format": "channels_last",
   "dilation_rate": [1, 1], "groups": 1, "activation": "relu", "use_bias": true}},
 {"class_name": "GlobalAveragePooling2D", "config": {"name": "gap",
   "data_format": "channels_last", "keepdims": false}},
 {"class_name": "Dense", "config": {"name": "dense", "units": 3, "activation": "linear",
   "use_bias": true}}]}})");
}

TEST(RandomAugmentSpec, ReadsKerassLayersAndTrains) {
  const ModelSpec spec =
      ModelSpec::from_json(keras_model(), "keras").bind({{3, 8, 8}, DType::kFloat32, 3, 0});
  const nlohmann::json layers = spec.to_json()["layers"];
  EXPECT_EQ(layers[0]["type"], "random_flip");
  EXPECT_EQ(layers[0]["mode"], "horizontal");
  EXPECT_EQ(layers[1]["factor"], nlohmann::json::array({-0.1, 0.1}));
  EXPECT_EQ(layers[2]["height_factor"], nlohmann::json::array({-0.1, 0.1}));
  EXPECT_TRUE(layers[2]["width_factor"].is_null());
  EXPECT_EQ(layers[3]["interpolation"], "nearest");
  EXPECT_EQ(layers[4]["factor"], nlohmann::json::array({0.0, 0.2}));
  Sequential m = make_model(spec, DType::kFloat32, Device::cpu(), 1);
  const Tensor x = ops::cast(random_tensor({2, 3, 8, 8}, 13, 0.0, 255.0), DType::kFloat32);
  ForwardContext ctx = training({0, 1});
  const Tensor y = m.forward(x, ctx);
  EXPECT_EQ(y.shape(), (Shape{2, 3}));
  m.backward(ops::cast(random_tensor({2, 3}, 14), DType::kFloat32));
  // Predict: the augmentation layers pass the image through, so a batch gives the same outputs
  // whatever its ids.
  ForwardContext predict;
  const std::vector<double> p1 = v(m.forward(x, predict));
  ForwardContext again;
  again.sample_ids = Tensor::from_vector(std::vector<std::int64_t>{7, 8}, {2});
  EXPECT_EQ(v(m.forward(x, again)), p1);
}

TEST(RandomAugmentSpec, RefusesWhatItDoesNotSupportByName) {
  auto with = [](const std::string& cls, nlohmann::json config) {
    nlohmann::json model = keras_model();
    auto& layers = model["config"]["layers"];
    layers.erase(layers.begin() + 1, layers.begin() + 7);
    config["name"] = "aug";
    nlohmann::json entry = nlohmann::json::object();
    entry["class_name"] = cls;
    entry["config"] = config;
    layers.insert(layers.begin() + 1, entry);
    return model;
  };
  auto message = [&](const std::string& cls, const nlohmann::json& config) -> std::string {
    try {
      ModelSpec::from_json(with(cls, config), "keras").bind({{3, 8, 8}, DType::kFloat32, 3, 0});
    } catch (const InvalidArgument& e) {
      return e.what();
    }
    return "accepted";
  };
  EXPECT_EQ(message("RandomCrop", {{"height", 4}, {"width", 4}}), "accepted");
  EXPECT_NE(message("RandomCrop", {{"height", 4}}).find("'width'"), std::string::npos);
  EXPECT_NE(message("RandomRotation", {{"factor", 0.1}, {"fill_mode", "mirror"}}).find("fill_mode"),
            std::string::npos);
  EXPECT_NE(message("RandomZoom", {{"height_factor", 0.1}, {"interpolation", "bicubic"}})
                .find("interpolation"),
            std::string::npos);
  EXPECT_NE(message("RandomFlip", {{"mode", "diagonal"}}).find("mode"), std::string::npos);
  EXPECT_NE(message("RandomFlip", {{"mode", "horizontal"}, {"bounding_box_format", "xyxy"}})
                .find("bounding_box_format"),
            std::string::npos);
  EXPECT_NE(message("RandomRotation", {{"factor", 1.5}}).find("factor"), std::string::npos);
  EXPECT_NE(
      message("RandomContrast", {{"factor", 0.2}, {"value_range", {1, 0}}}).find("value_range"),
      std::string::npos);
  EXPECT_EQ(message("RandomTranslation",
                    {{"height_factor", 0.1}, {"width_factor", nlohmann::json::array({0.0, 0.1})}}),
            "accepted");
}

// ---------------------------------------------------------------- against Keras's pixels
/// tests/data/keras/make_augment.py's cases (the committed ones, or MIRROR_KERAS_AUGMENT's, which
/// tests/e2e/keras_augment.sh writes with the Keras it finds): each layer's draw pinned, Keras's
/// training output on one image.
nlohmann::json augment_cases() {
  const char* path = std::getenv("MIRROR_KERAS_AUGMENT");
  const std::string file =
      path != nullptr ? std::string(path)
                      : std::string(MIRROR_SOURCE_DIR) + "/tests/data/keras/reference/augment.json";
  std::ifstream in(file);
  if (!in) throw DataError("cannot open " + file);
  return nlohmann::json::parse(in);
}

TEST(RandomAugmentKeras, SamePixelsAsKerasForTheSameDraw) {
  const nlohmann::json cases = augment_cases();
  const std::int64_t h = cases["shape"][1], w = cases["shape"][2], c = cases["shape"][3];
  const std::vector<double> nhwc = cases["input"].get<std::vector<double>>();
  std::vector<double> nchw(nhwc.size());
  for (std::int64_t y = 0; y < h; ++y)
    for (std::int64_t x = 0; x < w; ++x)
      for (std::int64_t ch = 0; ch < c; ++ch)
        nchw[(ch * h + y) * w + x] = nhwc[(y * w + x) * c + ch];
  const Tensor image = ops::cast(Tensor::from_vector(nchw, {1, c, h, w}), DType::kFloat32);
  double worst = 0;
  for (const nlohmann::json& k : cases["cases"]) {
    const std::string cls = k["class_name"];
    SCOPED_TRACE(cls + " " + k["config"].dump());
    nlohmann::json model = {{"class_name", "Sequential"},
                            {"config",
                             {{"name", "m"},
                              {"layers",
                               {{{"class_name", "InputLayer"},
                                 {"config", {{"batch_shape", {nullptr, h, w, c}}, {"name", "in"}}}},
                                {{"class_name", cls}, {"config", k["config"]}}}}}}};
    // The canonical layer the parser reads, built as make_model builds it.
    const nlohmann::json canonical = ModelSpec::from_json(model, "keras").to_json();
    std::unique_ptr<Layer> layer = detail::make_augment_layer(canonical["layers"][0]);
    ASSERT_NE(layer, nullptr);
    layer->set_name(cls);
    InitRng rng(1);
    layer->build({c, h, w}, DType::kFloat32, Device::cpu(), rng);
    const std::vector<double> keras = k["output"].get<std::vector<double>>();
    // Mirror's output, NHWC like Keras's, for sample id `id`.
    auto mirror = [&](std::int64_t id) {
      ForwardContext ctx = training({id});
      const Tensor t = layer->forward(image, ctx);
      const std::int64_t oh = t.dim(2), ow = t.dim(3);
      const std::vector<double> y = v(t);
      std::vector<double> out(y.size());
      for (std::int64_t yy = 0; yy < oh; ++yy)
        for (std::int64_t x = 0; x < ow; ++x)
          for (std::int64_t ch = 0; ch < c; ++ch)
            out[(yy * ow + x) * c + ch] = y[(ch * oh + yy) * ow + x];
      return out;
    };
    if (k.value("search", false)) {  // Keras's crop at a given offset: a sample Mirror crops so
      bool found = false;
      for (std::int64_t id = 0; id < 64 && !found; ++id) {
        const std::vector<double> y = mirror(id);
        found = y.size() == keras.size() &&
                std::equal(y.begin(), y.end(), keras.begin(),
                           [](double a, double b) { return std::fabs(a - b) <= 1e-7; });
      }
      EXPECT_TRUE(found) << "no sample among 64 gets Keras's window";
      continue;
    }
    if (cls == "RandomFlip") {  // Keras's case is the flip forced: find a sample Mirror flips
      // (the fixture's outputs carry 8 significant digits)
      auto close = [](const std::vector<double>& a, const std::vector<double>& b) {
        for (std::size_t i = 0; i < a.size(); ++i)
          if (std::fabs(a[i] - b[i]) > 1e-7) return false;
        return a.size() == b.size();
      };
      int flipped = 0;
      for (std::int64_t id = 0; id < 16; ++id) {
        const std::vector<double> y = mirror(id);
        flipped += close(y, keras) ? 1 : 0;
        EXPECT_TRUE(close(y, keras) || y == nhwc) << "sample " << id;
      }
      EXPECT_GT(flipped, 0);
      continue;
    }
    const std::vector<double> y = mirror(3);
    ASSERT_EQ(y.size(), keras.size());
    for (std::size_t i = 0; i < y.size(); ++i) {
      EXPECT_NEAR(y[i], keras[i], 2e-6) << "element " << i;
      worst = std::max(worst, std::fabs(y[i] - keras[i]));
    }
  }
  std::cout << "largest difference from Keras " << cases["keras"].get<std::string>() << " ("
            << cases["backend"].get<std::string>() << "): " << worst << "\n";
}

}  // namespace
}  // namespace mirror::nn
