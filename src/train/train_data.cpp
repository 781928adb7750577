// The datasets mirror-train uses: Fashion-MNIST (CNN and row GRU), Debian word lists (word GRU),
// or seeded synthetic data of the same shapes; optionally cut to their first N samples.
#include <cstdio>

#include "mirror/data/fashion_mnist.h"
#include "mirror/data/synthetic.h"
#include "mirror/data/words.h"
#include "train/trainer_impl.h"

namespace mirror::train {
namespace {

/// The first `limit` samples of a dataset (a deterministic slice for short runs and tests).
class Prefix final : public data::Dataset {
 public:
  Prefix(std::shared_ptr<const data::Dataset> base, std::int64_t limit)
      : base_(std::move(base)), size_(std::min(limit, base_->size())) {}
  std::int64_t size() const override { return size_; }
  int num_classes() const override { return base_->num_classes(); }
  DType input_dtype() const override { return base_->input_dtype(); }
  Shape sample_shape() const override { return base_->sample_shape(); }
  bool is_sequence() const override { return base_->is_sequence(); }
  bool variable_length() const override { return base_->variable_length(); }
  std::int32_t length(std::int64_t i) const override { return base_->length(check(i)); }
  std::int32_t label(std::int64_t i) const override { return base_->label(check(i)); }
  void decode_float(std::int64_t i, float* dst) const override {
    base_->decode_float(check(i), dst);
  }
  void decode_tokens(std::int64_t i, std::int32_t* dst, std::int32_t steps) const override {
    base_->decode_tokens(check(i), dst, steps);
  }
  std::string describe() const override {
    return base_->describe() + " (first " + std::to_string(size_) + ")";
  }

 private:
  std::int64_t check(std::int64_t i) const {
    MIRROR_CHECK(i >= 0 && i < size_, InvalidArgument,
                 "sample " + std::to_string(i) + " outside the slice");
    return i;
  }
  std::shared_ptr<const data::Dataset> base_;
  std::int64_t size_;
};

std::shared_ptr<const data::Dataset> limit(std::shared_ptr<const data::Dataset> ds,
                                           std::int64_t n) {
  if (n <= 0 || n >= ds->size()) return ds;
  return std::make_shared<Prefix>(std::move(ds), n);
}

std::string checksum_of(const data::Dataset& train, const data::Dataset& test) {
  std::uint64_t h = 1469598103934665603ull;
  auto mix = [&h](std::uint64_t v) {
    for (int b = 0; b < 8; ++b) {
      h ^= (v >> (8 * b)) & 0xff;
      h *= 1099511628211ull;
    }
  };
  for (const data::Dataset* ds : {&train, &test}) {
    mix(static_cast<std::uint64_t>(ds->size()));
    mix(static_cast<std::uint64_t>(ds->num_classes()));
    for (auto d : ds->sample_shape()) mix(static_cast<std::uint64_t>(d));
    for (std::int64_t i = 0; i < ds->size(); ++i) mix(static_cast<std::uint64_t>(ds->label(i)));
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

}  // namespace

Datasets load_datasets(const TrainConfig& c) {
  Datasets d;
  const bool synthetic = c.data == "synthetic";
  if (c.model == "cnn" || c.model == "gru-rows") {
    const auto layout = c.model == "cnn" ? data::Layout::kNCHW : data::Layout::kRows;
    if (synthetic) {
      const std::int64_t n = c.train_limit > 0 ? c.train_limit : 2048;
      const std::int64_t m = c.test_limit > 0 ? c.test_limit : 512;
      if (layout == data::Layout::kNCHW) {
        d.train = data::Synthetic::images(n, c.seed);
        d.test = data::Synthetic::images(m, c.seed + 1);
      } else {
        d.train = data::Synthetic::rows(n, c.seed);
        d.test = data::Synthetic::rows(m, c.seed + 1);
      }
    } else {
      const std::string dir = c.data_dir.empty() ? data::kFashionMnistDir : c.data_dir;
      d.train = data::FashionMnist::load(dir, data::Split::kTrain, layout);
      d.test = data::FashionMnist::load(dir, data::Split::kTest, layout);
    }
  } else {  // gru-words
    if (synthetic) {
      const std::int64_t n = c.train_limit > 0 ? c.train_limit : 4096;
      const std::int64_t m = c.test_limit > 0 ? c.test_limit : 1024;
      d.train = data::Synthetic::tokens(n, c.seed, 5, 64, 1, 24);
      d.test = data::Synthetic::tokens(m, c.seed + 1, 5, 64, 1, 24);
    } else {
      data::WordOptions options;
      if (!c.dict_dir.empty()) options.dict_dir = c.dict_dir;
      options.split = data::Split::kTrain;
      auto train = data::WordLanguages::load(options);
      options.split = data::Split::kTest;
      auto test = data::WordLanguages::load(options);
      d.train = train;
      d.test = test;
    }
  }
  d.model = nn::ModelSpec::builtin(c.model).bind({d.train->sample_shape(), d.train->input_dtype(),
                                                  d.train->num_classes(), d.train->vocab_size()});
  d.train = limit(d.train, c.train_limit);
  d.test = limit(d.test, c.test_limit);
  d.checksum = checksum_of(*d.train, *d.test);
  return d;
}

}  // namespace mirror::train
