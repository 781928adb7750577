// defines: Dataset, the interface every data source implements, and the Split / Layout enums.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "mirror/dtype.h"
#include "mirror/error.h"
#include "mirror/tensor.h"

namespace mirror::data {

enum class Split { kTrain, kTest };
const char* split_name(Split split);

/// How an image is served: NCHW [1,H,W] for the CNN, or H rows of W features ([H,W]) for the
/// row-by-row GRU (a fixed-length sequence).
enum class Layout { kNCHW, kRows };

/// Note [Dense labels]: class labels may be one per sample (label_shape() == []), one per step of
/// a sequence ([T], a tagger) or one per pixel ([H, W], a segmentation). The loss and accuracy are
/// then averaged over the labelled positions of the GLOBAL batch, padding steps excluded
/// (label_count()): each replica divides its sum by that global count (Batch::global_label_count),
/// so the all-reduced gradient is the exact mean at any replica count.
///
/// What a sample is labelled with, and so which losses apply: a class index (label(), int32
/// labels in a Batch; softmax cross-entropy) or a vector of float targets (decode_target(),
/// float32 [n, target_shape...] in a Batch; binary cross-entropy or mean squared error).
enum class TargetKind { kClass, kFloat };

/// A sample that cannot be decoded (a corrupt image, a NaN in mapped float data): the message
/// names the file and the sample index. The Loader may replace such a sample by the next good
/// one (LoaderOptions::skip_bad_samples); any other DataError always stops the run.
class BadSample : public DataError {
 public:
  BadSample(const std::string& message, std::int64_t index) : DataError(message), index_(index) {}
  std::int64_t index() const { return index_; }

 private:
  std::int64_t index_;
};

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
  /// Class index in [0, num_classes()); class-labelled data with one label per sample only.
  virtual std::int32_t label(std::int64_t index) const = 0;
  /// Note [Dense labels]: the shape of one sample's class labels: [] for one label per sample,
  /// [T] for one per step of a sequence (a tagger's [T, K] output), [H, W] for one per pixel (a
  /// segmentation's [K, H, W] output). Class-labelled data only.
  virtual Shape label_shape() const { return {}; }
  /// Writes shape_numel(label_shape()) class indices to dst (label(index) when the shape is []).
  virtual void decode_labels(std::int64_t index, std::int32_t* dst) const { *dst = label(index); }
  /// How many of sample `index`'s labels count in the loss: a sequence's per-step labels up to
  /// its length (padding steps are masked out, as Keras masks them), every label otherwise.
  virtual std::int64_t label_count(std::int64_t index) const;
  /// Float targets: writes shape_numel(target_shape()) values to dst.
  virtual void decode_target(std::int64_t index, float* dst) const;

  /// Float data: writes shape_numel(sample_shape()) values to dst.
  virtual void decode_float(std::int64_t index, float* dst) const;
  /// decode_float as epoch `epoch` of a run seeded `seed` sees the sample: data whose transform
  /// is drawn per sample (image folders with --crop random-resized or --flip) draws it here
  /// (Note [Augmentation draws], augment.h); other data ignores seed and epoch.
  virtual void decode_float_drawn(std::int64_t index, std::uint64_t seed, int epoch,
                                  float* dst) const {
    (void)seed;
    (void)epoch;
    decode_float(index, dst);
  }
  /// Token data: writes `steps` ids to dst (steps >= length(index)); ids past the length are 0
  /// (the padding id).
  virtual void decode_tokens(std::int64_t index, std::int32_t* dst, std::int32_t steps) const;

  /// One line for logs: name, split, size, classes, shape.
  virtual std::string describe() const = 0;

  /// What the user should hear once about how the data is held (e.g. "x.npy.gz is gzip: read
  /// into memory whole"); the trainer prints them on rank 0.
  virtual std::vector<std::string> notes() const { return {}; }
  /// The largest |value| decode_float can produce, when the storage bounds it (uint8 scaled to
  /// [0, 1]: 1); nullopt for float data, whose values only a scan can tell.
  virtual std::optional<double> input_bound() const { return std::nullopt; }
  /// True when the per-sample value checks (NaN, infinity) run as batches are decoded instead of
  /// in a scan at load: data read from disk per batch that is too large to read twice.
  virtual bool checks_at_batch() const { return false; }
  /// Throws DataError naming the file when a file the data is read from changed since it was
  /// opened; the Loader calls it when it prepares each epoch's order (at the epoch's start, or a
  /// few batches before it while prefetching). In-memory data never changes.
  virtual void check_unchanged() const {}
  /// Names of the classes (label order) when the data has them (image folders); else empty.
  virtual std::vector<std::string> class_names() const { return {}; }
};

}  // namespace mirror::data
