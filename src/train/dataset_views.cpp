// The dataset views of dataset_views.h: each forwards every call to the base dataset and
// changes only what its name says.
#include "train/dataset_views.h"

#include <cmath>
#include <string>

#include "mirror/error.h"

namespace mirror::train {
namespace {

class Reshaped final : public DatasetView {
 public:
  Reshaped(std::shared_ptr<const data::Dataset> base, Shape shape)
      : DatasetView(std::move(base)), shape_(std::move(shape)) {}
  Shape sample_shape() const override { return shape_; }
  // A [T, F] view of images is a fixed-length sequence of T steps, as Layout::kRows serves it.
  bool is_sequence() const override { return shape_.size() == 2; }
  std::int32_t length(std::int64_t) const override {
    return static_cast<std::int32_t>(shape_.empty() ? 1 : shape_[0]);
  }
  std::string describe() const override {
    return base_->describe() + ", read as " + shape_str(shape_);
  }

 private:
  Shape shape_;
};

class BinaryTargets final : public DatasetView {
 public:
  using DatasetView::DatasetView;
  int num_classes() const override { return 0; }
  data::TargetKind target_kind() const override { return data::TargetKind::kFloat; }
  Shape target_shape() const override { return {1}; }
  void decode_target(std::int64_t i, float* dst) const override {
    dst[0] = base_->label(i) == 1 ? 1.0f : 0.0f;
  }
  std::string describe() const override {
    return base_->describe() + ", labels 0/1 as binary targets";
  }
};

class WiderClasses final : public DatasetView {
 public:
  WiderClasses(std::shared_ptr<const data::Dataset> base, int classes)
      : DatasetView(std::move(base)), classes_(classes) {}
  int num_classes() const override { return classes_; }
  std::vector<std::string> class_names() const override {
    std::vector<std::string> names = base_->class_names();
    if (names.empty()) return names;
    // The unused outputs keep their numbers, so mirror-predict still names every class.
    for (int k = static_cast<int>(names.size()); k < classes_; ++k)
      names.push_back(std::to_string(k));
    return names;
  }
  std::string describe() const override {
    return base_->describe() + ", read as " + std::to_string(classes_) + " classes";
  }

 private:
  int classes_;
};

class ChannelsFirst final : public DatasetView {
 public:
  explicit ChannelsFirst(std::shared_ptr<const data::Dataset> base)
      : DatasetView(std::move(base)), hwc_(base_->sample_shape()) {}
  Shape sample_shape() const override { return {hwc_[2], hwc_[0], hwc_[1]}; }
  void decode_float(std::int64_t i, float* dst) const override {
    transposed(dst, [&](float* hwc) { base_->decode_float(i, hwc); });
  }
  void decode_float_drawn(std::int64_t i, std::uint64_t seed, int epoch,
                          float* dst) const override {
    transposed(dst, [&](float* hwc) { base_->decode_float_drawn(i, seed, epoch, hwc); });
  }
  std::string describe() const override {
    return base_->describe() + ", [H, W, C] samples read as [C, H, W]";
  }

 private:
  template <class Decode>
  void transposed(float* dst, const Decode& decode) const {
    const std::int64_t h = hwc_[0], w = hwc_[1], c = hwc_[2];
    // Loader workers decode concurrently: one buffer per thread.
    thread_local std::vector<float> hwc;
    hwc.resize(static_cast<std::size_t>(h * w * c));
    decode(hwc.data());
    for (std::int64_t ch = 0; ch < c; ++ch) {
      for (std::int64_t p = 0; p < h * w; ++p) dst[ch * h * w + p] = hwc[p * c + ch];
    }
  }
  Shape hwc_;
};

/// Note [Keras's image layout] for float targets: an autoencoder's [H, W, C] targets as [C, H, W].
class TargetsChannelsFirst final : public DatasetView {
 public:
  explicit TargetsChannelsFirst(std::shared_ptr<const data::Dataset> base)
      : DatasetView(std::move(base)), hwc_(base_->target_shape()) {}
  Shape target_shape() const override { return {hwc_[2], hwc_[0], hwc_[1]}; }
  void decode_target(std::int64_t i, float* dst) const override {
    const std::int64_t h = hwc_[0], w = hwc_[1], c = hwc_[2];
    thread_local std::vector<float> hwc;  // loader workers decode concurrently
    hwc.resize(static_cast<std::size_t>(h * w * c));
    base_->decode_target(i, hwc.data());
    for (std::int64_t ch = 0; ch < c; ++ch) {
      for (std::int64_t p = 0; p < h * w; ++p)
        dst[ch * h * w + p] = hwc[static_cast<std::size_t>(p * c + ch)];
    }
  }
  std::string describe() const override {
    return base_->describe() + ", [H, W, C] targets read as [C, H, W]";
  }

 private:
  Shape hwc_;
};

/// Note [Dense labels]: every per-step label counts (a Keras model with no mask counts padding).
class EveryStepLabelled final : public DatasetView {
 public:
  using DatasetView::DatasetView;
  std::int64_t label_count(std::int64_t) const override {
    return shape_numel(base_->label_shape());
  }
};

class RawPixels final : public DatasetView {
 public:
  using DatasetView::DatasetView;
  void decode_float(std::int64_t i, float* dst) const override {
    base_->decode_float(i, dst);
    to_bytes(dst);
  }
  void decode_float_drawn(std::int64_t i, std::uint64_t seed, int epoch,
                          float* dst) const override {
    base_->decode_float_drawn(i, seed, epoch, dst);
    to_bytes(dst);
  }
  std::optional<double> input_bound() const override {
    const std::optional<double> bound = base_->input_bound();
    if (!bound) return std::nullopt;
    return *bound * 255.0;
  }
  std::string describe() const override { return base_->describe() + ", pixels 0..255"; }

 private:
  void to_bytes(float* dst) const {
    const std::int64_t n = shape_numel(base_->sample_shape());
    for (std::int64_t k = 0; k < n; ++k) dst[k] = std::nearbyint(dst[k] * 255.0f);
  }
};

class FixedLength final : public DatasetView {
 public:
  FixedLength(std::shared_ptr<const data::Dataset> base, std::int64_t steps)
      : DatasetView(std::move(base)), steps_(steps) {}
  Shape sample_shape() const override { return {steps_}; }
  bool variable_length() const override { return false; }
  std::int32_t length(std::int64_t) const override { return static_cast<std::int32_t>(steps_); }
  std::string describe() const override {
    return base_->describe() + ", padded to " + std::to_string(steps_) + " steps";
  }

 private:
  std::int64_t steps_;
};

}  // namespace

std::shared_ptr<const data::Dataset> targets_channels_first(
    std::shared_ptr<const data::Dataset> base) {
  MIRROR_CHECK(base->target_kind() == data::TargetKind::kFloat && base->target_shape().size() == 3,
               InvalidArgument,
               "targets_channels_first: [H, W, C] float targets only, got " + base->describe());
  return std::make_shared<TargetsChannelsFirst>(std::move(base));
}

std::shared_ptr<const data::Dataset> every_step_labelled(
    std::shared_ptr<const data::Dataset> base) {
  return std::make_shared<EveryStepLabelled>(std::move(base));
}

std::shared_ptr<const data::Dataset> raw_pixels(std::shared_ptr<const data::Dataset> base) {
  return std::make_shared<RawPixels>(std::move(base));
}

std::shared_ptr<const data::Dataset> fixed_length(std::shared_ptr<const data::Dataset> base,
                                                  std::int64_t steps) {
  const Shape s = base->sample_shape();
  MIRROR_CHECK(base->input_dtype() == DType::kInt32 && s.size() == 1, InvalidArgument,
               "fixed_length: token sequences only, got " + base->describe());
  if (s[0] == steps && !base->variable_length()) return base;
  MIRROR_CHECK(s[0] <= steps, InvalidArgument,
               "the model reads sequences of " + std::to_string(steps) +
                   " tokens (its input shape), " + "but " + base->describe() +
                   " has sequences of up to " + std::to_string(s[0]) + ": shorten them to " +
                   std::to_string(steps) +
                   " tokens, or state the input length as None (Input(shape=(None,)))");
  return std::make_shared<FixedLength>(std::move(base), steps);
}

std::shared_ptr<const data::Dataset> wider_classes(std::shared_ptr<const data::Dataset> base,
                                                   int classes) {
  MIRROR_CHECK(base->target_kind() == data::TargetKind::kClass && classes >= base->num_classes(),
               InvalidArgument,
               "wider_classes: class labels and at least " + std::to_string(base->num_classes()) +
                   " classes, got " + std::to_string(classes) + " for " + base->describe());
  if (classes == base->num_classes()) return base;
  return std::make_shared<WiderClasses>(std::move(base), classes);
}

std::shared_ptr<const data::Dataset> channels_first(std::shared_ptr<const data::Dataset> base) {
  MIRROR_CHECK(base->input_dtype() == DType::kFloat32 && base->sample_shape().size() == 3,
               InvalidArgument, "channels_first: [H, W, C] float samples only, got " +
                                    base->describe());
  return std::make_shared<ChannelsFirst>(std::move(base));
}

std::shared_ptr<const data::Dataset> reshaped(std::shared_ptr<const data::Dataset> base,
                                              const Shape& shape) {
  const Shape from = base->sample_shape();
  if (from == shape) return base;
  MIRROR_CHECK(base->input_dtype() == DType::kFloat32 && shape_numel(from) == shape_numel(shape),
               InvalidArgument,
               "cannot read the samples " + shape_str(from) + " of " + base->describe() + " as " +
                   shape_str(shape) + ": the element counts differ");
  return std::make_shared<Reshaped>(std::move(base), shape);
}

std::shared_ptr<const data::Dataset> binary_targets(std::shared_ptr<const data::Dataset> base) {
  MIRROR_CHECK(base->target_kind() == data::TargetKind::kClass && base->num_classes() <= 2,
               InvalidArgument,
               "binary targets need class labels 0 and 1, but " + base->describe() + " has " +
                   (base->target_kind() == data::TargetKind::kClass
                        ? std::to_string(base->num_classes()) + " classes"
                        : std::string("float targets")));
  return std::make_shared<BinaryTargets>(std::move(base));
}

}  // namespace mirror::train
