// defines: Dataset, the interface every data source implements, and the Split / Layout enums.
#pragma once

#include <cstdint>
#include <string>

#include "mirror/dtype.h"
#include "mirror/tensor.h"

namespace mirror::data {

enum class Split { kTrain, kTest };
const char* split_name(Split split);

/// How an image is served: NCHW [1,H,W] for the CNN, or H rows of W features ([H,W]) for the
/// row-by-row GRU (a fixed-length sequence).
enum class Layout { kNCHW, kRows };

/// What a sample is labelled with, and so which losses apply: a class index (label(), int32
/// labels in a Batch; softmax cross-entropy) or a vector of float targets (decode_target(),
/// float32 [n, target_shape...] in a Batch; binary cross-entropy or mean squared error).
enum class TargetKind { kClass, kFloat };

/// A random-access, read-only collection of labelled samples. Implementations hold their raw
/// data (bytes, code-point ids) compactly and convert one sample at a time, so a replica only
/// decodes the samples of its own shard. All const methods are safe to call from several
/// threads at once (the loader's workers do).
class Dataset {
 public:
  virtual ~Dataset() = default;

  virtual std::int64_t size() const = 0;
  /// Classes of label(); 0 for float targets.
  virtual int num_classes() const = 0;
  virtual TargetKind target_kind() const { return TargetKind::kClass; }
  /// The shape of one sample's float target, e.g. [1] for one regression value or [K] for K
  /// binary labels; empty for class labels.
  virtual Shape target_shape() const { return {}; }
  /// Token data: ids are in [0, vocab_size()) with 0 the padding id; 0 for float data.
  virtual std::int64_t vocab_size() const { return 0; }
  /// float32 for images / rows, int32 for token ids.
  virtual DType input_dtype() const = 0;
  /// The shape of one sample: [C,H,W], [T,F], or [max_len] for variable-length token sequences.
  virtual Shape sample_shape() const = 0;
  /// True when batches carry per-sample lengths (rows for the GRU, words).
  virtual bool is_sequence() const = 0;
  /// True when samples have different lengths (token sequences padded per batch).
  virtual bool variable_length() const { return false; }
  /// Valid steps of sample `index`; sample_shape()[0] for fixed-length data.
  virtual std::int32_t length(std::int64_t index) const;
  /// Class index in [0, num_classes()); class-labelled data only.
  virtual std::int32_t label(std::int64_t index) const = 0;
  /// Float targets: writes shape_numel(target_shape()) values to dst.
  virtual void decode_target(std::int64_t index, float* dst) const;

  /// Float data: writes shape_numel(sample_shape()) values to dst.
  virtual void decode_float(std::int64_t index, float* dst) const;
  /// Token data: writes `steps` ids to dst (steps >= length(index)); ids past the length are 0
  /// (the padding id).
  virtual void decode_tokens(std::int64_t index, std::int32_t* dst, std::int32_t steps) const;

  /// One line for logs: name, split, size, classes, shape.
  virtual std::string describe() const = 0;
};

}  // namespace mirror::data
