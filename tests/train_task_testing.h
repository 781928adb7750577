// defines: what the generic-Trainer tests train: Blobs (a seeded in-memory Dataset of noisy
// points around one centre per class, optionally sorted by class), a small Sequential built with
// the public layer API, a Task of both, and a quiet CPU TrainConfig.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "mirror/data/dataset.h"
#include "mirror/error.h"
#include "mirror/nn/layers.h"
#include "mirror/nn/sequential.h"
#include "mirror/train/trainer.h"

namespace mirror::testing_util {

class Blobs final : public data::Dataset {
 public:
  static constexpr int kFeatures = 6;

  /// `size` samples of `classes` classes; labels cycle 0,1,2,... unless `sorted_by_class`
  /// (all of class 0 first, like many files on disk).
  Blobs(std::int64_t size, int classes, std::uint64_t seed, bool sorted_by_class = false)
      : classes_(classes) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> noise(0.0f, 0.6f);
    for (std::int64_t i = 0; i < size; ++i) {
      const int label =
          sorted_by_class ? static_cast<int>(i * classes / size) : static_cast<int>(i % classes);
      labels_.push_back(label);
      for (int f = 0; f < kFeatures; ++f) {
        const float centre = (f % classes == label) ? 1.5f : -0.5f;
        x_.push_back(centre + noise(rng));
      }
    }
  }
  std::int64_t size() const override { return static_cast<std::int64_t>(labels_.size()); }
  int num_classes() const override { return classes_; }
  DType input_dtype() const override { return DType::kFloat32; }
  Shape sample_shape() const override { return {kFeatures}; }
  bool is_sequence() const override { return false; }
  std::int32_t label(std::int64_t i) const override {
    check(i);
    return labels_[static_cast<std::size_t>(i)];
  }
  void decode_float(std::int64_t i, float* dst) const override {
    check(i);
    const float* src = x_.data() + i * kFeatures;
    std::copy(src, src + kFeatures, dst);
  }
  std::string describe() const override {
    return "blobs: " + std::to_string(size()) + " samples, " + std::to_string(classes_) +
           " classes";
  }

 private:
  void check(std::int64_t i) const {
    MIRROR_CHECK(i >= 0 && i < size(), InvalidArgument, "blob " + std::to_string(i));
  }
  int classes_;
  std::vector<std::int32_t> labels_;
  std::vector<float> x_;
};

/// Regression: y = sum of w_f x_f + noise over kFeatures features (float target [1]).
class Line final : public data::Dataset {
 public:
  Line(std::int64_t size, std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (std::int64_t i = 0; i < size; ++i) {
      float y = 0;
      for (int f = 0; f < Blobs::kFeatures; ++f) {
        x_.push_back(normal(rng));
        y += (f % 2 ? 0.5f : -0.25f) * x_.back();
      }
      y_.push_back(y + 0.05f * normal(rng));
    }
  }
  std::int64_t size() const override { return static_cast<std::int64_t>(y_.size()); }
  int num_classes() const override { return 0; }
  data::TargetKind target_kind() const override { return data::TargetKind::kFloat; }
  Shape target_shape() const override { return {1}; }
  DType input_dtype() const override { return DType::kFloat32; }
  Shape sample_shape() const override { return {Blobs::kFeatures}; }
  bool is_sequence() const override { return false; }
  std::int32_t label(std::int64_t) const override {
    throw InvalidArgument("Line has float targets, not labels");
  }
  void decode_target(std::int64_t i, float* dst) const override {
    *dst = y_.at(static_cast<std::size_t>(i));
  }
  void decode_float(std::int64_t i, float* dst) const override {
    const float* src = x_.data() + i * Blobs::kFeatures;
    std::copy(src, src + Blobs::kFeatures, dst);
  }
  std::string describe() const override { return "line: " + std::to_string(size()) + " samples"; }

 private:
  std::vector<float> x_, y_;
};

/// Dense(8, relu) -> Dense(classes) over [kFeatures].
inline nn::Sequential blob_model(Device device, std::uint64_t seed, int classes, int hidden = 8) {
  nn::Sequential m;
  m.emplace<nn::Dense>(hidden, ops::Activation::kRelu);
  m.emplace<nn::Dense>(classes);
  m.build({Blobs::kFeatures}, seed, DType::kFloat32, device);
  return m;
}

inline train::Task blob_task(bool with_test = true, int hidden = 8, std::int64_t train_size = 96) {
  constexpr int kClasses = 3;
  train::Task t;
  t.model = [hidden](Device d) { return blob_model(d, 5, kClasses, hidden); };
  t.model_description = "blob mlp hidden " + std::to_string(hidden);
  t.train = std::make_shared<Blobs>(train_size, kClasses, 1);
  if (with_test) t.test = std::make_shared<Blobs>(30, kClasses, 2);
  return t;
}

/// A regression task on Line data; `outputs` is the model's last width (1 fits the data).
inline train::Task line_task(int outputs = 1) {
  train::Task t;
  t.model = [outputs](Device d) { return blob_model(d, 5, outputs); };
  t.model_description = "line mlp";
  t.train = std::make_shared<Line>(96, 1);
  t.test = std::make_shared<Line>(48, 2);
  return t;
}

inline train::TrainConfig quiet_cpu_config(const std::string& devices = "cpu") {
  train::TrainConfig c;
  c.devices = devices;
  c.threads = 1;
  c.progress = false;
  c.batch_size = 12;
  c.epochs = 2;
  c.lr = 0.01;
  c.seed = 3;
  return c;
}

}  // namespace mirror::testing_util
