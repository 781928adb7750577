// defines: ImageSamples, what image folders and tar shards share: labelled encoded images read
// one sample at a time, their header check at load and their decode (plain, or the photograph
// recipe) at the batch. A subclass only says where a sample's bytes are (read_sample) and what
// to call it in errors (sample_name).
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "mirror/data/dataset.h"
#include "mirror/data/image_decode.h"
#include "mirror/data/image_folder.h"

namespace mirror::data::detail {

/// Note [Image samples]: image folders (one file a sample) and tar shards (one member a sample)
/// differ only in where the encoded bytes lie. Both read each image's first bytes at load to
/// settle the size and mode and to find bad samples, and read the whole image again when a
/// batch needs it, so a rank holds names, labels and offsets, never pixels (Invariant 10);
/// every transform (size, --color, the photograph recipe, the reduced JPEG decode) and the
/// bad-sample policy (Note [Bad samples], loader.h) are written once, here, and a folder and
/// the shards made from it decode to the same floats.
class ImageSamples : public Dataset {
 public:
  static constexpr std::size_t kWhole = std::numeric_limits<std::size_t>::max();

  ImageSamples(std::string root, std::vector<std::string> classes, const ImageFolderOptions& o);

  /// Reads every header, settles the size and mode, and finds the samples that are bad
  /// (options.skip_bad_samples) or throws DataError naming the first. Call once, after the
  /// subclass has added every sample's label.
  void check_headers();
  void set_notes(std::vector<std::string> notes) { notes_ = std::move(notes); }
  /// The name errors give sample `index`: its file, or its shard and member.
  virtual std::string sample_name(std::int64_t index) const = 0;

  std::int64_t size() const override { return static_cast<std::int64_t>(labels_.size()); }
  int num_classes() const override { return static_cast<int>(classes_.size()); }
  DType input_dtype() const override { return DType::kFloat32; }
  Shape sample_shape() const override { return {channels_, height_, width_}; }
  bool is_sequence() const override { return false; }
  std::int32_t label(std::int64_t index) const override {
    check_index(index);
    return labels_[static_cast<std::size_t>(index)];
  }
  void decode_float(std::int64_t index, float* dst) const override {
    decode_float_drawn(index, 0, 0, dst);
  }
  void decode_float_drawn(std::int64_t index, std::uint64_t seed, int epoch,
                          float* dst) const override;
  std::string describe() const override { return description_; }
  std::vector<std::string> notes() const override { return notes_; }
  std::optional<double> input_bound() const override;
  bool checks_at_batch() const override { return true; }
  std::vector<std::string> class_names() const override { return classes_; }

 protected:
  /// The first `limit` bytes of sample `index`'s encoded image (all of it when shorter, or
  /// for kWhole); DataError naming it when it cannot be read. Called from several threads.
  virtual std::vector<std::uint8_t> read_sample(std::int64_t index, std::size_t limit) const = 0;
  /// What describe() calls the samples after root ("1000 images" by default).
  virtual std::string what_it_holds() const;
  void add_label(std::int32_t label) { labels_.push_back(label); }
  void check_index(std::int64_t index) const;
  const std::string& root() const { return root_; }

 private:
  ImageHeader header_of(std::int64_t index) const;
  /// The decoded image, or BadSample naming it.
  DecodedImage decode_bytes(std::int64_t index, const std::string& name,
                            std::span<const std::uint8_t> bytes, int denominator) const;
  /// BadSample when --color auto meets an image of the other mode.
  void check_mode(std::int64_t index, const std::string& name, const DecodedImage& image) const;
  void check_not_bad(std::int64_t index) const {
    if (auto it = bad_.find(index); it != bad_.end())
      throw BadSample(it->second + " (sample " + std::to_string(index) + ")", index);
  }
  void decode_photo(std::int64_t index, std::uint64_t seed, int epoch, float* dst) const;

  std::string root_;
  std::vector<std::string> classes_;
  ImageFolderOptions options_;
  std::vector<std::int32_t> labels_;
  std::map<std::int64_t, std::string> bad_;  // failed the header check (skip_bad_samples)
  std::int64_t channels_ = 0, height_ = 0, width_ = 0;
  int source_channels_ = 0;  // --color auto: the mode every image must have
  std::string description_;
  std::vector<std::string> notes_;
};

}  // namespace mirror::data::detail
