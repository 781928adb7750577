// defines: views of a dataset that the model decides (train_data.cpp): the same samples read
// with another sample shape (built-in data following the model), and class labels 0/1 served
// as one float target (a sigmoid head's binary cross-entropy).
#pragma once

#include <memory>

#include "mirror/data/dataset.h"

namespace mirror::train {

/// `base`'s samples read as `shape` (the same elements in the same order, e.g. Fashion-MNIST's
/// [1, 28, 28] images as [784]); InvalidArgument when the element counts differ. Float data only.
std::shared_ptr<const data::Dataset> reshaped(std::shared_ptr<const data::Dataset> base,
                                              const Shape& shape);

/// Note [Binary labels]: class labels 0 and 1 (num_classes() <= 2) served as a float target [1]
/// of value 0.0 or 1.0, so a one-output (sigmoid) head trains with binary cross-entropy and
/// reports its accuracy at threshold 0.5 (ops::binary_cross_entropy counts logit > 0 against
/// target > 0.5). InvalidArgument for more classes.
std::shared_ptr<const data::Dataset> binary_targets(std::shared_ptr<const data::Dataset> base);

/// Fashion-MNIST's pixels (stored as i / 255) read back as the bytes 0..255 they were (Note [Raw
/// values] in mirror/nn/models.h): for a model that rescales its input itself.
std::shared_ptr<const data::Dataset> raw_pixels(std::shared_ptr<const data::Dataset> base);

/// Token sequences all padded to `steps` (trailing zeros), as Keras's pad_sequences leaves them:
/// a model with Keras's masks (Note [Sequence masks]) that states its input length sees the
/// padding Keras sees. InvalidArgument when a sequence is longer.
std::shared_ptr<const data::Dataset> fixed_length(std::shared_ptr<const data::Dataset> base,
                                                  std::int64_t steps);

}  // namespace mirror::train
