// defines: Synthetic, seeded stand-ins with the shapes of the real datasets (tests, benchmarks).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "mirror/data/dataset.h"

namespace mirror::data {

struct SyntheticSpec {
  enum class Kind { kImages, kRows, kTokens };
  Kind kind = Kind::kImages;
  std::int64_t size = 1024;
  int classes = 10;
  Shape shape = {1, 28, 28};  // kImages: [C,H,W]; kRows: [T,F]; kTokens: ignored
  std::int32_t vocab = 64;    // kTokens: ids in [2, vocab); 0 = padding, 1 = unknown
  std::int32_t min_len = 1;   // kTokens: lengths uniform in [min_len, max_len]
  std::int32_t max_len = 24;
  std::uint64_t seed = 0;
};

/// Samples computed on demand from (seed, index), nothing stored but the class prototypes.
/// They are learnable: an image is 0.6 * its class prototype + 0.4 * noise (values in [0,1]);
/// a token is drawn from its class's band of the vocabulary 3 times in 4.
class Synthetic : public Dataset {
 public:
  explicit Synthetic(const SyntheticSpec& spec);
  static std::shared_ptr<Synthetic> images(std::int64_t size, std::uint64_t seed = 0,
                                           Shape shape = {1, 28, 28}, int classes = 10);
  static std::shared_ptr<Synthetic> rows(std::int64_t size, std::uint64_t seed = 0,
                                         Shape shape = {28, 28}, int classes = 10);
  static std::shared_ptr<Synthetic> tokens(std::int64_t size, std::uint64_t seed = 0,
                                           int classes = 5, std::int32_t vocab = 64,
                                           std::int32_t min_len = 1, std::int32_t max_len = 24);

  std::int64_t size() const override { return spec_.size; }
  int num_classes() const override { return spec_.classes; }
  DType input_dtype() const override;
  Shape sample_shape() const override;
  bool is_sequence() const override { return spec_.kind != SyntheticSpec::Kind::kImages; }
  bool variable_length() const override { return spec_.kind == SyntheticSpec::Kind::kTokens; }
  std::int64_t vocab_size() const override {
    return spec_.kind == SyntheticSpec::Kind::kTokens ? spec_.vocab : 0;
  }
  std::int32_t length(std::int64_t index) const override;
  std::int32_t label(std::int64_t index) const override;
  void decode_float(std::int64_t index, float* dst) const override;
  void decode_tokens(std::int64_t index, std::int32_t* dst, std::int32_t steps) const override;
  std::string describe() const override;

 private:
  void check_index(std::int64_t index) const;
  std::uint64_t sample_key(std::int64_t index) const;

  SyntheticSpec spec_;
  std::vector<float> prototypes_;  // [classes, numel(shape)] for float kinds
};

}  // namespace mirror::data
