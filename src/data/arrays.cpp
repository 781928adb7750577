// load_arrays: x / y array files (one pair, or a folder or glob of shard pairs) -> a Dataset.
// Uncompressed files are mapped and read one sample at a time where they lie (uint8 stays one
// byte a value until a batch is assembled); gzip files are inflated into memory. Labels, float
// targets and token ids are small next to the inputs and are checked by a scan at load, so their
// errors come before training; float inputs are scanned at load when they are small enough to
// read twice (kScanAtLoadBytes), else checked sample by sample as batches are decoded.
#include "mirror/data/arrays.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <limits>

#include "data/array_file.h"
#include "mirror/data/idx.h"
#include "mirror/data/npy.h"
#include "mirror/error.h"

namespace mirror::data {
namespace {

using detail::ArrayFile;

/// Float inputs up to this size are scanned for NaN/infinity at load; larger ones are checked
/// per sample at the batch (a second pass over gigabytes from disk would double start-up).
constexpr std::uint64_t kScanAtLoadBytes = 256ull << 20;

std::string first_bytes_hex(const std::vector<std::uint8_t>& bytes) {
  static const char* kHex = "0123456789abcdef";
  std::string s;
  for (std::size_t i = 0; i < std::min<std::size_t>(bytes.size(), 8); ++i) {
    s += kHex[bytes[i] >> 4];
    s += kHex[bytes[i] & 15];
    s += ' ';
  }
  return s.empty() ? "(empty file)" : s.substr(0, s.size() - 1);
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

/// Whether `shape` has positive dims whose product is `numel` (computed without overflow).
bool numel_is(const Shape& shape, std::int64_t numel) {
  std::int64_t n = 1;
  for (auto d : shape) {
    if (d <= 0 || d > numel / n) return false;
    n *= d;
  }
  return n == numel;
}

std::vector<std::int64_t> row_shape(const ArrayFile& a) {
  return {a.shape().begin() + (a.shape().empty() ? 0 : 1), a.shape().end()};
}

/// A NaN/inf or (float64) beyond-float32 message, or "" when v is fine.
std::string bad_value(double v) {
  constexpr double kMax = std::numeric_limits<float>::max();
  if (std::isfinite(v) && std::fabs(v) <= kMax) return "";
  return std::isfinite(v) ? "beyond the float32 range" : "not finite";
}

/// One x / y pair and the index of its first sample in the dataset.
struct Shard {
  ArrayFile x, y;
  std::int64_t first = 0;
};

class ArrayDataset : public Dataset {
 public:
  ArrayDataset(std::vector<std::pair<ArrayFile, ArrayFile>> pairs, const ArrayOptions& options,
               const std::string& x_name, const std::string& y_name);

  std::int64_t size() const override { return count_; }
  int num_classes() const override { return classes_; }
  TargetKind target_kind() const override {
    return float_targets_ ? TargetKind::kFloat : TargetKind::kClass;
  }
  Shape target_shape() const override { return target_shape_; }
  Shape label_shape() const override { return label_shape_; }
  std::int64_t vocab_size() const override { return vocab_; }
  DType input_dtype() const override { return tokens() ? DType::kInt32 : DType::kFloat32; }
  Shape sample_shape() const override { return sample_shape_; }
  bool is_sequence() const override { return tokens() || sample_shape_.size() == 2; }
  bool variable_length() const override { return tokens(); }
  std::int32_t length(std::int64_t index) const override;
  std::int32_t label(std::int64_t index) const override;
  void decode_labels(std::int64_t index, std::int32_t* dst) const override;
  void decode_target(std::int64_t index, float* dst) const override;
  void decode_float(std::int64_t index, float* dst) const override;
  void decode_tokens(std::int64_t index, std::int32_t* dst, std::int32_t steps) const override;
  std::string describe() const override { return description_; }
  std::vector<std::string> notes() const override { return notes_; }
  std::optional<double> input_bound() const override;
  bool checks_at_batch() const override { return check_at_batch_; }
  void check_unchanged() const override {
    for (const auto& f : budget_.files()) f->check_unchanged();
  }

 private:
  bool tokens() const { return vocab_ > 0; }
  /// The shard holding sample `index` and the row within it.
  std::pair<const Shard*, std::int64_t> locate(std::int64_t index) const;
  void touched(const ArrayFile& a, std::int64_t first, std::int64_t n) const {
    if (a.mapping()) budget_.touched(a.file_offset(first), n * element_size(a.type()));
  }
  void check_shards();
  void init_float_x(const ArrayOptions& options);
  void scan_float_x();
  void init_tokens(const ArrayOptions& options);
  void init_labels(int num_classes);
  void init_targets();
  std::string describe_storage() const;

  std::vector<Shard> shards_;
  std::int64_t count_ = 0;
  ElementType x_type_ = ElementType::kUInt8;
  float divisor_ = 1.0f;
  bool check_at_batch_ = false;
  std::vector<std::int32_t> lengths_;  // token data: valid steps per sample
  bool float_targets_ = false;
  Shape sample_shape_, target_shape_, label_shape_;
  int classes_ = 0;
  std::int64_t vocab_ = 0;
  std::string x_name_, y_name_, description_;
  std::vector<std::string> notes_;
  PageBudget budget_;
};

ArrayDataset::ArrayDataset(std::vector<std::pair<ArrayFile, ArrayFile>> pairs,
                           const ArrayOptions& options, const std::string& x_name,
                           const std::string& y_name)
    : x_name_(x_name), y_name_(y_name) {
  MIRROR_CHECK(!pairs.empty(), DataError, x_name + ": no array file");
  for (auto& [x, y] : pairs) {
    shards_.push_back({std::move(x), std::move(y), 0});
    for (const ArrayFile* a : {&shards_.back().x, &shards_.back().y})
      if (a->mapping()) budget_.add(a->mapping());
  }
  MIRROR_CHECK(
      options.num_classes >= 0, InvalidArgument,
      "num_classes must be >= 0 (0: max label + 1), got " + std::to_string(options.num_classes));
  check_shards();
  const ArrayFile& x0 = shards_.front().x;
  x_type_ = x0.type();
  for (const auto& f : budget_.files()) f->advise_sequential();  // the scans below
  if (x_type_ == ElementType::kInt32 || x_type_ == ElementType::kInt64)
    init_tokens(options);
  else
    init_float_x(options);
  const ArrayFile& y0 = shards_.front().y;
  if (is_floating(y0.type())) {
    MIRROR_CHECK(options.num_classes == 0, InvalidArgument,
                 y0.name() + " holds float targets (" + element_type_name(y0.type()) +
                     "), so num_classes (" + std::to_string(options.num_classes) +
                     ") does not apply; leave it 0, or save class labels as integers");
    init_targets();
  } else {
    init_labels(options.num_classes);
  }
  budget_.release_all();
  for (const auto& f : budget_.files()) f->advise_random();  // training reads samples at random
  for (const Shard& s : shards_) {
    if (s.x.gzip() || s.y.gzip()) {
      const std::string& gz = s.x.gzip() ? s.x.name() : s.y.name();
      notes_.push_back(gz + " is gzip-compressed: read into this rank's memory whole (" +
                       std::to_string((s.x.gzip() ? s.x : s.y).payload_bytes() >> 20) +
                       " MiB) instead of mapped; save it uncompressed (.npy) to map it");
    }
  }
  description_ =
      "arrays " + x_name + " / " + y_name + ": " + std::to_string(count_) + " samples, " +
      (float_targets_
           ? "float targets " + shape_str(target_shape_)
           : std::to_string(classes_) + " classes" +
                 (label_shape_.empty() ? ""
                                       : " (labels " + shape_str(label_shape_) + " per sample)")) +
      ", " +
      (tokens() ? "token ids " + shape_str(sample_shape_) + " vocab " + std::to_string(vocab_)
                : std::string(element_type_name(x_type_)) + " " + shape_str(sample_shape_)) +
      describe_storage();
}

std::string ArrayDataset::describe_storage() const {
  std::int64_t mapped = 0;
  for (const Shard& s : shards_) mapped += s.x.mapping() != nullptr;
  std::string out;
  if (shards_.size() > 1) out += ", " + std::to_string(shards_.size()) + " shards";
  if (mapped == static_cast<std::int64_t>(shards_.size())) return out + ", mapped";
  return out + (mapped == 0 ? ", in memory" : ", partly in memory");
}

/// x and y of every pair agree in count; every x shard has the first's dtype and sample shape,
/// every y shard the first's dtype and target shape.
void ArrayDataset::check_shards() {
  const ArrayFile &x0 = shards_.front().x, &y0 = shards_.front().y;
  for (Shard& s : shards_) {
    MIRROR_CHECK(!s.x.shape().empty() && s.x.shape()[0] > 0, DataError,
                 s.x.name() + ": x must be an array [N, ...] with N >= 1 samples, found shape " +
                     dims_str(s.x.shape()));
    MIRROR_CHECK(!s.y.shape().empty(), DataError,
                 s.y.name() + ": y must be an array [N] or [N, K], found a scalar");
    MIRROR_CHECK(s.y.rows() == s.x.rows(), DataError,
                 std::to_string(s.x.rows()) + " samples in " + s.x.name() + " (x) but " +
                     std::to_string(s.y.rows()) + " in " + s.y.name() +
                     " (y); the first dimensions must agree: do the files belong together?");
    MIRROR_CHECK(s.x.type() == x0.type() && row_shape(s.x) == row_shape(x0), DataError,
                 s.x.name() + " holds " + element_type_name(s.x.type()) + " samples " +
                     dims_str(row_shape(s.x)) + " but " + x0.name() + " holds " +
                     element_type_name(x0.type()) + " " + dims_str(row_shape(x0)) +
                     "; every x shard must have the same dtype and sample shape");
    MIRROR_CHECK(s.y.type() == y0.type() && row_shape(s.y) == row_shape(y0), DataError,
                 s.y.name() + " holds " + element_type_name(s.y.type()) + " " +
                     dims_str(row_shape(s.y)) + " per sample but " + y0.name() + " holds " +
                     element_type_name(y0.type()) + " " + dims_str(row_shape(y0)) +
                     "; every y shard must have the same dtype and shape");
    s.first = count_;
    MIRROR_CHECK(s.x.rows() <= INT64_MAX / 2 - count_, DataError,
                 s.x.name() + ": too many samples in all");
    count_ += s.x.rows();
  }
}

std::pair<const Shard*, std::int64_t> ArrayDataset::locate(std::int64_t index) const {
  MIRROR_CHECK(index >= 0 && index < count_, InvalidArgument,
               description_ + ": index " + std::to_string(index) + " outside [0, " +
                   std::to_string(count_) + ")");
  if (shards_.size() == 1) return {&shards_.front(), index};
  const auto it = std::upper_bound(shards_.begin(), shards_.end(), index,
                                   [](std::int64_t i, const Shard& s) { return i < s.first; });
  const Shard* s = &*(it - 1);
  return {s, index - s->first};
}

void ArrayDataset::init_float_x(const ArrayOptions& options) {
  const ArrayFile& x0 = shards_.front().x;
  const Shape stored = row_shape(x0);
  sample_shape_ = stored.empty() ? Shape{1} : stored;
  const std::int64_t per = shape_numel(sample_shape_);
  MIRROR_CHECK(per > 0, DataError,
               x0.name() + ": samples of shape " + shape_str(sample_shape_) + " hold no values");
  if (!options.sample_shape.empty()) {
    MIRROR_CHECK(numel_is(options.sample_shape, per), InvalidArgument,
                 "input shape " + shape_str(options.sample_shape) +
                     " does not fit the samples of " + x_name_ + " (shape " +
                     shape_str(sample_shape_) + ", " + std::to_string(per) +
                     " values); give a shape with " + std::to_string(per) +
                     " values, or none to keep the stored shape");
    sample_shape_ = options.sample_shape;
  }
  if (x_type_ == ElementType::kUInt8 && options.scale_uint8) divisor_ = 255.0f;
  if (!is_floating(x_type_)) return;
  std::uint64_t bytes = 0;
  for (const Shard& s : shards_) bytes += s.x.payload_bytes();
  check_at_batch_ = bytes > kScanAtLoadBytes;
  if (!check_at_batch_) scan_float_x();
}

/// DataError at the first value that is NaN/inf or (float64) beyond the float32 range.
void ArrayDataset::scan_float_x() {
  for (const Shard& s : shards_) {
    const std::int64_t n = s.x.rows() * s.x.row_numel(), per = s.x.row_numel();
    for (std::int64_t i = 0; i < n; ++i) {
      const double v = s.x.value(i);
      const std::string bad = bad_value(v);
      if (i % 4096 == 0) touched(s.x, i, 4096);
      if (bad.empty()) continue;
      throw DataError(s.x.name() + ": x value " + std::to_string(v) + " at flat index " +
                      std::to_string(i) + " (sample " + std::to_string(s.first + i / per) +
                      ") is " + bad + "; clean the data (e.g. numpy.nan_to_num) before training");
    }
  }
}

std::optional<double> ArrayDataset::input_bound() const {
  if (tokens()) return std::nullopt;
  switch (x_type_) {
    case ElementType::kUInt8:
      return 255.0 / divisor_;
    case ElementType::kInt8:
      return 128.0;
    case ElementType::kInt16:
      return 32768.0;
    case ElementType::kUInt16:
      return 65535.0;
    default:
      return std::nullopt;
  }
}

void ArrayDataset::init_tokens(const ArrayOptions& options) {
  const ArrayFile& x0 = shards_.front().x;
  MIRROR_CHECK(x0.shape().size() == 2 && x0.shape()[1] > 0, DataError,
               x0.name() + ": " + element_type_name(x_type_) +
                   " x is read as token ids and must be [N, T] with T >= 1, found shape " +
                   dims_str(x0.shape()) + "; save float data as float32");
  const std::int64_t steps = x0.shape()[1];
  MIRROR_CHECK(steps <= INT32_MAX, DataError,
               x0.name() + ": sequences of " + std::to_string(steps) + " steps are too long");
  MIRROR_CHECK(options.sample_shape.empty() || options.sample_shape == Shape{steps},
               InvalidArgument,
               "input shape " + shape_str(options.sample_shape) +
                   " does not apply to the token ids of " + x_name_ + " (sequences of " +
                   std::to_string(steps) + " steps); leave it empty");
  sample_shape_ = {steps};
  lengths_.resize(static_cast<std::size_t>(count_));
  std::int64_t max_id = 0;
  for (const Shard& s : shards_) {
    for (std::int64_t r = 0; r < s.x.rows(); ++r) {
      std::int32_t length = 0;
      touched(s.x, r * steps, steps);
      for (std::int64_t t = 0; t < steps; ++t) {
        const std::int64_t id = s.x.integer(r * steps + t);
        MIRROR_CHECK(id >= 0 && id < INT32_MAX, DataError,
                     s.x.name() + ": token id " + std::to_string(id) + " of sample " +
                         std::to_string(s.first + r) + ", step " + std::to_string(t) +
                         " is outside [0, 2^31 - 1); ids must be >= 0 (0 = padding)");
        if (id != 0) length = static_cast<std::int32_t>(t + 1);
        max_id = std::max(max_id, id);
      }
      MIRROR_CHECK(length > 0, DataError,
                   s.x.name() + ": sample " + std::to_string(s.first + r) +
                       " has no token (every id is 0, the padding id); remove the row");
      lengths_[static_cast<std::size_t>(s.first + r)] = length;
    }
  }
  vocab_ = max_id + 1;
}

void ArrayDataset::init_labels(int num_classes) {
  const ArrayFile& y0 = shards_.front().y;
  // Note [Dense labels]: [N] or [N, 1] is one label per sample; [N, T] one per step, [N, H, W]
  // one per pixel.
  const Shape rest = row_shape(y0);
  if (!rest.empty() && rest != Shape{1}) label_shape_ = rest;
  MIRROR_CHECK(label_shape_.size() <= 2, DataError,
               y0.name() +
                   ": integer y is read as class labels: [N] (one per sample), [N, T] (one per "
                   "step) or [N, H, W] (one per pixel), found shape " +
                   dims_str(y0.shape()) + "; save several targets per sample as float32");
  std::int64_t max_label = 0;
  for (const Shard& s : shards_) {
    const std::int64_t per = s.y.row_numel(), n = s.y.rows() * per;
    touched(s.y, 0, n);
    for (std::int64_t k = 0; k < n; ++k) {
      const std::int64_t label = s.y.integer(k), i = s.first + k / per;
      const std::string at = per == 1 ? "" : " (element " + std::to_string(k % per) + ")";
      MIRROR_CHECK(label >= 0 && label < INT32_MAX, DataError,
                   s.y.name() + ": label " + std::to_string(label) + " of sample " +
                       std::to_string(i) + at +
                       " is outside [0, 2^31 - 1); class labels are 0, 1, 2, ...");
      MIRROR_CHECK(num_classes == 0 || label < num_classes, DataError,
                   s.y.name() + ": label " + std::to_string(label) + " of sample " +
                       std::to_string(i) + at + " is >= the " + std::to_string(num_classes) +
                       " classes stated; labels must be in [0, " + std::to_string(num_classes) +
                       "): raise num_classes or fix the labels");
      max_label = std::max(max_label, label);
    }
  }
  classes_ = num_classes > 0 ? num_classes : static_cast<int>(max_label + 1);
}

void ArrayDataset::init_targets() {
  float_targets_ = true;
  const ArrayFile& y0 = shards_.front().y;
  const Shape rest = row_shape(y0);
  target_shape_ = rest.empty() ? Shape{1} : rest;
  MIRROR_CHECK(shape_numel(target_shape_) > 0, DataError,
               y0.name() + ": targets of shape " + shape_str(target_shape_) + " hold no values");
  for (const Shard& s : shards_) {
    const std::int64_t n = s.y.rows() * s.y.row_numel(), per = s.y.row_numel();
    touched(s.y, 0, n);
    for (std::int64_t i = 0; i < n; ++i) {
      const double v = s.y.value(i);
      const std::string bad = bad_value(v);
      if (bad.empty()) continue;
      throw DataError(s.y.name() + ": target value " + std::to_string(v) + " at flat index " +
                      std::to_string(i) + " (sample " + std::to_string(s.first + i / per) +
                      ") is " + bad + "; clean the data (e.g. numpy.nan_to_num) before training");
    }
  }
}

std::int32_t ArrayDataset::length(std::int64_t index) const {
  locate(index);  // range check
  if (tokens()) return lengths_[static_cast<std::size_t>(index)];
  return Dataset::length(index);
}

std::int32_t ArrayDataset::label(std::int64_t index) const {
  const auto [s, r] = locate(index);
  MIRROR_CHECK(!float_targets_, InvalidArgument,
               description_ + " holds float targets, not class labels: use decode_target");
  MIRROR_CHECK(label_shape_.empty(), InvalidArgument,
               description_ + " holds labels " + shape_str(label_shape_) +
                   " per sample (Note [Dense labels]): use decode_labels");
  touched(s->y, r, 1);
  return static_cast<std::int32_t>(s->y.integer(r));
}

void ArrayDataset::decode_labels(std::int64_t index, std::int32_t* dst) const {
  if (label_shape_.empty()) return Dataset::decode_labels(index, dst);
  const auto [s, r] = locate(index);
  MIRROR_CHECK(!float_targets_, InvalidArgument,
               description_ + " holds float targets, not class labels: use decode_target");
  const std::int64_t per = shape_numel(label_shape_);
  touched(s->y, r * per, per);
  for (std::int64_t k = 0; k < per; ++k)
    dst[k] = static_cast<std::int32_t>(s->y.integer(r * per + k));
}

void ArrayDataset::decode_target(std::int64_t index, float* dst) const {
  const auto [s, r] = locate(index);
  if (!float_targets_) return Dataset::decode_target(index, dst);
  const std::int64_t per = shape_numel(target_shape_);
  touched(s->y, r * per, per);
  s->y.to_float(r * per, per, 1.0f, dst);
}

void ArrayDataset::decode_float(std::int64_t index, float* dst) const {
  const auto [s, r] = locate(index);
  if (tokens()) return Dataset::decode_float(index, dst);
  const std::int64_t per = shape_numel(sample_shape_);
  touched(s->x, r * per, per);
  s->x.to_float(r * per, per, divisor_, dst);
  if (!check_at_batch_) return;
  for (std::int64_t k = 0; k < per; ++k) {
    // float64 beyond the float32 range became inf in the conversion.
    if (std::isfinite(dst[k])) continue;
    const double v = s->x.value(r * per + k);
    throw BadSample(s->x.name() + ": x value " + std::to_string(v) + " of sample " +
                        std::to_string(index) + " (row " + std::to_string(r) + ", element " +
                        std::to_string(k) + ") is " + bad_value(v) +
                        "; clean the data (e.g. numpy.nan_to_num) before training",
                    index);
  }
}

void ArrayDataset::decode_tokens(std::int64_t index, std::int32_t* dst, std::int32_t steps) const {
  const auto [s, r] = locate(index);
  if (!tokens()) return Dataset::decode_tokens(index, dst, steps);
  const std::int32_t length = lengths_[static_cast<std::size_t>(index)];
  MIRROR_CHECK(steps >= length, InvalidArgument,
               "decode_tokens: " + std::to_string(steps) + " steps for a sequence of " +
                   std::to_string(length));
  const std::int64_t row = r * sample_shape_[0];
  touched(s->x, row, length);
  for (std::int32_t t = 0; t < length; ++t)
    dst[t] = static_cast<std::int32_t>(s->x.integer(row + t));
  std::fill(dst + length, dst + steps, 0);
}

}  // namespace

NumericArray parse_array_file(std::vector<std::uint8_t> bytes, const std::string& name,
                              std::uint64_t max_bytes) {
  if (ends_with(name, ".gz") || is_gzip(bytes)) bytes = gunzip(bytes, name, max_bytes);
  if (is_npy(bytes)) {
    NpyLimits limits;
    limits.max_bytes = max_bytes;
    const NpyHeader h = parse_npy_header(bytes, name, limits);
    NumericArray out;
    out.type = h.type;
    out.shape = h.shape;
    // The payload moves to the front of the same buffer: no second copy of a large file.
    bytes.erase(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(h.data_offset));
    out.bytes = std::move(bytes);
    return out;
  }
  if (is_idx(bytes)) {
    IdxLimits limits;
    limits.max_bytes = max_bytes;
    limits.max_rank = 16;
    limits.any_type = true;
    return idx_to_numeric(parse_idx(bytes, name, limits));
  }
  throw DataError(name +
                  ": neither a NumPy .npy file (magic \\x93NUMPY) nor an IDX file (magic "
                  "00 00 TT RR), gzip-compressed or not; first bytes: " +
                  first_bytes_hex(bytes) + ". Save arrays with numpy.save");
}

std::shared_ptr<const Dataset> arrays_dataset(NumericArray x, NumericArray y,
                                              const ArrayOptions& options,
                                              const std::string& x_name,
                                              const std::string& y_name) {
  std::vector<std::pair<ArrayFile, ArrayFile>> pairs;
  pairs.emplace_back(ArrayFile::in_memory(std::move(x), x_name),
                     ArrayFile::in_memory(std::move(y), y_name));
  return std::make_shared<ArrayDataset>(std::move(pairs), options, x_name, y_name);
}

std::shared_ptr<const Dataset> load_arrays(const std::string& x_path, const std::string& y_path,
                                           const ArrayOptions& options) {
  std::vector<std::pair<ArrayFile, ArrayFile>> pairs;
  for (const auto& [x, y] : detail::shard_pairs(x_path, y_path))
    pairs.emplace_back(ArrayFile::open(x), ArrayFile::open(y));
  return std::make_shared<ArrayDataset>(std::move(pairs), options, x_path, y_path);
}

}  // namespace mirror::data
