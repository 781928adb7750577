// defines: DatasetView, the forwarding base of every view, and the views of a dataset that the
// model decides (train_data.cpp): the same samples read with another sample shape (built-in data
// following the model), and class labels 0/1 served as one float target (a sigmoid head's
// binary cross-entropy).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mirror/data/dataset.h"

namespace mirror::train {

/// A dataset that forwards every call to `base`; a view overrides only what it changes. Every
/// virtual of data::Dataset is forwarded, so a view keeps the base's class names (checkpoints),
/// its file checks (check_unchanged: a mapped file changed under the run) and its notes.
class DatasetView : public data::Dataset {
 public:
  explicit DatasetView(std::shared_ptr<const data::Dataset> base) : base_(std::move(base)) {}
  std::int64_t size() const override { return base_->size(); }
  int num_classes() const override { return base_->num_classes(); }
  data::TargetKind target_kind() const override { return base_->target_kind(); }
  Shape target_shape() const override { return base_->target_shape(); }
  std::int64_t vocab_size() const override { return base_->vocab_size(); }
  DType input_dtype() const override { return base_->input_dtype(); }
  Shape sample_shape() const override { return base_->sample_shape(); }
  bool is_sequence() const override { return base_->is_sequence(); }
  bool variable_length() const override { return base_->variable_length(); }
  std::int32_t length(std::int64_t i) const override { return base_->length(i); }
  std::int32_t label(std::int64_t i) const override { return base_->label(i); }
  Shape label_shape() const override { return base_->label_shape(); }
  void decode_labels(std::int64_t i, std::int32_t* dst) const override {
    base_->decode_labels(i, dst);
  }
  std::int64_t label_count(std::int64_t i) const override { return base_->label_count(i); }
  void decode_target(std::int64_t i, float* dst) const override { base_->decode_target(i, dst); }
  void decode_float(std::int64_t i, float* dst) const override { base_->decode_float(i, dst); }
  // A view that changes decode_float changes this alike: the loader reads training samples
  // through it (an image folder's photograph recipe draws its crop here).
  void decode_float_drawn(std::int64_t i, std::uint64_t seed, int epoch,
                          float* dst) const override {
    base_->decode_float_drawn(i, seed, epoch, dst);
  }
  void decode_tokens(std::int64_t i, std::int32_t* dst, std::int32_t steps) const override {
    base_->decode_tokens(i, dst, steps);
  }
  std::string describe() const override { return base_->describe(); }
  std::vector<std::string> notes() const override { return base_->notes(); }
  std::optional<double> input_bound() const override { return base_->input_bound(); }
  bool checks_at_batch() const override { return base_->checks_at_batch(); }
  void check_unchanged() const override { base_->check_unchanged(); }
  std::vector<std::string> class_names() const override { return base_->class_names(); }

 protected:
  std::shared_ptr<const data::Dataset> base_;
};

/// `base`'s samples read as `shape` (the same elements in the same order, e.g. Fashion-MNIST's
/// [1, 28, 28] images as [784]); InvalidArgument when the element counts differ. Float data only.
std::shared_ptr<const data::Dataset> reshaped(std::shared_ptr<const data::Dataset> base,
                                              const Shape& shape);

/// Note [Binary labels]: class labels 0 and 1 (num_classes() <= 2) served as a float target [1]
/// of value 0.0 or 1.0, so a one-output (sigmoid) head trains with binary cross-entropy and
/// reports its accuracy at threshold 0.5 (ops::binary_cross_entropy counts logit > 0 against
/// target > 0.5). InvalidArgument for more classes.
std::shared_ptr<const data::Dataset> binary_targets(std::shared_ptr<const data::Dataset> base);

/// Note [Spec's output width]: class labels read as `classes` classes (>= the data's own count),
/// for a model whose last layer has more units than the labels use: Keras trains such a head
/// (the unused classes only ever learn to be unlikely), so Mirror does too, and warns.
std::shared_ptr<const data::Dataset> wider_classes(std::shared_ptr<const data::Dataset> base,
                                                   int classes);

/// Note [Keras's image layout] (mirror/nn/models.h): `base`'s [H, W, C] samples read as
/// [C, H, W] (each sample transposed as it is decoded). InvalidArgument unless float [H, W, C].
std::shared_ptr<const data::Dataset> channels_first(std::shared_ptr<const data::Dataset> base);

/// Note [Keras's image layout] for an autoencoder's float targets: `base`'s [H, W, C] targets read
/// as [C, H, W], the layout of the model's output. InvalidArgument unless float [H, W, C] targets.
std::shared_ptr<const data::Dataset> targets_channels_first(
    std::shared_ptr<const data::Dataset> base);

/// Note [Dense labels]: per-step labels that all count in the loss, padding steps included: a
/// Keras model without a mask (no mask_zero Embedding, no Masking) computes its loss so.
std::shared_ptr<const data::Dataset> every_step_labelled(std::shared_ptr<const data::Dataset> base);

/// Fashion-MNIST's pixels (stored as i / 255) read back as the bytes 0..255 they were (Note [Raw
/// values] in mirror/nn/models.h): for a model that rescales its input itself.
std::shared_ptr<const data::Dataset> raw_pixels(std::shared_ptr<const data::Dataset> base);

/// Token sequences all padded to `steps` (trailing zeros), as Keras's pad_sequences leaves them:
/// a model with Keras's masks (Note [Sequence masks]) that states its input length sees the
/// padding Keras sees. InvalidArgument when a sequence is longer.
std::shared_ptr<const data::Dataset> fixed_length(std::shared_ptr<const data::Dataset> base,
                                                  std::int64_t steps);

}  // namespace mirror::train
