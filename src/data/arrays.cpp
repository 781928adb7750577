// load_arrays: x / y array files -> a Dataset. Float x keeps its bytes as stored (uint8 stays
// one byte a value) and converts one sample at a time; token ids and labels are checked and
// converted to int32 once, at load, so every error is found before training starts.
#include "mirror/data/arrays.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <limits>

#include "mirror/data/idx.h"
#include "mirror/data/npy.h"
#include "mirror/error.h"

namespace mirror::data {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

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

template <class T>
void widen(const std::uint8_t* src, std::int64_t n, float divisor, float* dst) {
  for (std::int64_t i = 0; i < n; ++i) {
    T v;
    std::memcpy(&v, src + i * sizeof(T), sizeof v);
    dst[i] = static_cast<float>(v) / divisor;
  }
}

/// Converts n elements of `type` at src to float (divided by divisor: 255 scales uint8 to
/// [0, 1] with the same values as FashionMnist).
void to_float(ElementType type, const std::uint8_t* src, std::int64_t n, float divisor,
              float* dst) {
  switch (type) {
    case ElementType::kUInt8:
      return widen<std::uint8_t>(src, n, divisor, dst);
    case ElementType::kInt8:
      return widen<std::int8_t>(src, n, divisor, dst);
    case ElementType::kInt16:
      return widen<std::int16_t>(src, n, divisor, dst);
    case ElementType::kUInt16:
      return widen<std::uint16_t>(src, n, divisor, dst);
    case ElementType::kInt32:
      return widen<std::int32_t>(src, n, divisor, dst);
    case ElementType::kInt64:
      return widen<std::int64_t>(src, n, divisor, dst);
    case ElementType::kFloat32:
      return widen<float>(src, n, divisor, dst);
    case ElementType::kFloat64:
      return widen<double>(src, n, divisor, dst);
  }
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

/// DataError at the first value that is NaN/inf or (float64) beyond the float32 range.
void check_finite(const NumericArray& a, const std::string& name, const char* what) {
  if (!is_floating(a.type)) return;
  const std::int64_t n = a.numel(), per = a.shape.empty() || a.shape[0] == 0 ? 1 : n / a.shape[0];
  constexpr double kMax = std::numeric_limits<float>::max();
  for (std::int64_t i = 0; i < n; ++i) {
    const double v = a.value(i);
    if (std::isfinite(v) && std::fabs(v) <= kMax) continue;
    throw DataError(name + ": " + what + " value " + std::to_string(v) + " at flat index " +
                    std::to_string(i) + " (sample " + std::to_string(i / per) + ") is " +
                    (std::isfinite(v) ? "beyond the float32 range" : "not finite") +
                    "; clean the data (e.g. numpy.nan_to_num) before training");
  }
}

class ArrayDataset : public Dataset {
 public:
  ArrayDataset(NumericArray x, NumericArray y, const ArrayOptions& options,
               const std::string& x_name, const std::string& y_name);

  std::int64_t size() const override { return count_; }
  int num_classes() const override { return classes_; }
  TargetKind target_kind() const override {
    return targets_.empty() ? TargetKind::kClass : TargetKind::kFloat;
  }
  Shape target_shape() const override { return target_shape_; }
  std::int64_t vocab_size() const override { return vocab_; }
  DType input_dtype() const override { return tokens() ? DType::kInt32 : DType::kFloat32; }
  Shape sample_shape() const override { return sample_shape_; }
  bool is_sequence() const override { return tokens() || sample_shape_.size() == 2; }
  bool variable_length() const override { return tokens(); }
  std::int32_t length(std::int64_t index) const override;
  std::int32_t label(std::int64_t index) const override;
  void decode_target(std::int64_t index, float* dst) const override;
  void decode_float(std::int64_t index, float* dst) const override;
  void decode_tokens(std::int64_t index, std::int32_t* dst, std::int32_t steps) const override;
  std::string describe() const override { return description_; }

 private:
  bool tokens() const { return vocab_ > 0; }
  void check_index(std::int64_t index) const;
  void init_float_x(const ArrayOptions& options, const std::string& x_name);
  void init_tokens(const ArrayOptions& options, const std::string& x_name);
  void init_labels(const NumericArray& y, int num_classes, const std::string& y_name);
  void init_targets(const NumericArray& y, const std::string& y_name);

  std::int64_t count_ = 0;
  NumericArray x_;  // float data, as stored
  float divisor_ = 1.0f;
  std::vector<std::int32_t> ids_;  // token data [N, T]
  std::vector<std::int32_t> lengths_;
  std::vector<std::int32_t> labels_;
  std::vector<float> targets_;
  Shape sample_shape_, target_shape_;
  int classes_ = 0;
  std::int64_t vocab_ = 0;
  std::string description_;
};

ArrayDataset::ArrayDataset(NumericArray x, NumericArray y, const ArrayOptions& options,
                           const std::string& x_name, const std::string& y_name)
    : x_(std::move(x)) {
  MIRROR_CHECK(!x_.shape.empty() && x_.shape[0] > 0, DataError,
               x_name + ": x must be an array [N, ...] with N >= 1 samples, found shape " +
                   dims_str(x_.shape));
  MIRROR_CHECK(!y.shape.empty(), DataError,
               y_name + ": y must be an array [N] or [N, K], found a scalar");
  count_ = x_.shape[0];
  MIRROR_CHECK(y.shape[0] == count_, DataError,
               std::to_string(count_) + " samples in " + x_name + " (x) but " +
                   std::to_string(y.shape[0]) + " in " + y_name +
                   " (y); the first dimensions must agree: do the files belong together?");
  MIRROR_CHECK(
      options.num_classes >= 0, InvalidArgument,
      "num_classes must be >= 0 (0: max label + 1), got " + std::to_string(options.num_classes));
  const bool token_x = x_.type == ElementType::kInt32 || x_.type == ElementType::kInt64;
  if (token_x)
    init_tokens(options, x_name);
  else
    init_float_x(options, x_name);
  if (is_floating(y.type)) {
    MIRROR_CHECK(options.num_classes == 0, InvalidArgument,
                 y_name + " holds float targets (" + element_type_name(y.type) +
                     "), so num_classes (" + std::to_string(options.num_classes) +
                     ") does not apply; leave it 0, or save class labels as integers");
    init_targets(y, y_name);
  } else {
    init_labels(y, options.num_classes, y_name);
  }
  description_ =
      "arrays " + x_name + " / " + y_name + ": " + std::to_string(count_) + " samples, " +
      (targets_.empty() ? std::to_string(classes_) + " classes"
                        : "float targets " + shape_str(target_shape_)) +
      ", " +
      (tokens() ? "token ids " + shape_str(sample_shape_) + " vocab " + std::to_string(vocab_)
                : std::string(element_type_name(x_.type)) + " " + shape_str(sample_shape_));
}

void ArrayDataset::init_float_x(const ArrayOptions& options, const std::string& x_name) {
  check_finite(x_, x_name, "x");
  const Shape stored(x_.shape.begin() + 1, x_.shape.end());
  sample_shape_ = stored.empty() ? Shape{1} : stored;
  const std::int64_t per = shape_numel(sample_shape_);
  MIRROR_CHECK(per > 0, DataError,
               x_name + ": samples of shape " + shape_str(sample_shape_) + " hold no values");
  if (!options.sample_shape.empty()) {
    MIRROR_CHECK(numel_is(options.sample_shape, per), InvalidArgument,
                 "input shape " + shape_str(options.sample_shape) +
                     " does not fit the samples of " + x_name + " (shape " +
                     shape_str(sample_shape_) + ", " + std::to_string(per) +
                     " values); give a shape with " + std::to_string(per) +
                     " values, or none to keep the stored shape");
    sample_shape_ = options.sample_shape;
  }
  if (x_.type == ElementType::kUInt8 && options.scale_uint8) divisor_ = 255.0f;
}

void ArrayDataset::init_tokens(const ArrayOptions& options, const std::string& x_name) {
  MIRROR_CHECK(x_.shape.size() == 2 && x_.shape[1] > 0, DataError,
               x_name + ": " + element_type_name(x_.type) +
                   " x is read as token ids and must be [N, T] with T >= 1, found shape " +
                   dims_str(x_.shape) + "; save float data as float32");
  const std::int64_t steps = x_.shape[1];
  MIRROR_CHECK(steps <= INT32_MAX, DataError,
               x_name + ": sequences of " + std::to_string(steps) + " steps are too long");
  MIRROR_CHECK(options.sample_shape.empty() || options.sample_shape == Shape{steps},
               InvalidArgument,
               "input shape " + shape_str(options.sample_shape) +
                   " does not apply to the token "
                   "ids of " +
                   x_name + " (sequences of " + std::to_string(steps) + " steps); leave it empty");
  sample_shape_ = {steps};
  ids_.resize(static_cast<std::size_t>(count_ * steps));
  lengths_.resize(static_cast<std::size_t>(count_));
  std::int64_t max_id = 0;
  for (std::int64_t i = 0; i < count_; ++i) {
    std::int32_t length = 0;
    for (std::int64_t t = 0; t < steps; ++t) {
      const std::int64_t flat = i * steps + t;
      std::int64_t id = 0;
      if (x_.type == ElementType::kInt32) {
        std::int32_t v;
        std::memcpy(&v, x_.data() + flat * 4, 4);
        id = v;
      } else {
        std::memcpy(&id, x_.data() + flat * 8, 8);
      }
      MIRROR_CHECK(id >= 0 && id < INT32_MAX, DataError,
                   x_name + ": token id " + std::to_string(id) + " of sample " + std::to_string(i) +
                       ", step " + std::to_string(t) +
                       " is outside [0, 2^31 - 1); ids must be >= 0 (0 = padding)");
      ids_[static_cast<std::size_t>(flat)] = static_cast<std::int32_t>(id);
      if (id != 0) length = static_cast<std::int32_t>(t + 1);
      max_id = std::max(max_id, id);
    }
    MIRROR_CHECK(length > 0, DataError,
                 x_name + ": sample " + std::to_string(i) +
                     " has no token (every id is 0, the padding id); remove the row");
    lengths_[static_cast<std::size_t>(i)] = length;
  }
  vocab_ = max_id + 1;
  x_.bytes = {};  // the ids are in ids_ now
  x_.borrowed = nullptr;
  x_.owner.reset();
}

void ArrayDataset::init_labels(const NumericArray& y, int num_classes, const std::string& y_name) {
  MIRROR_CHECK(y.shape.size() == 1 || (y.shape.size() == 2 && y.shape[1] == 1), DataError,
               y_name +
                   ": integer y is read as class labels and must be [N] (or [N, 1]), found "
                   "shape " +
                   dims_str(y.shape) + "; save several targets per sample as float32 [N, K]");
  labels_.resize(static_cast<std::size_t>(count_));
  std::int64_t max_label = 0;
  for (std::int64_t i = 0; i < count_; ++i) {
    const std::int64_t label = y.integer(i);
    MIRROR_CHECK(label >= 0 && label < INT32_MAX, DataError,
                 y_name + ": label " + std::to_string(label) + " of sample " + std::to_string(i) +
                     " is outside [0, 2^31 - 1); class labels are 0, 1, 2, ...");
    MIRROR_CHECK(num_classes == 0 || label < num_classes, DataError,
                 y_name + ": label " + std::to_string(label) + " of sample " + std::to_string(i) +
                     " is >= the " + std::to_string(num_classes) +
                     " classes stated; labels must be in [0, " + std::to_string(num_classes) +
                     "): raise num_classes or fix the labels");
    labels_[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(label);
    max_label = std::max(max_label, label);
  }
  classes_ = num_classes > 0 ? num_classes : static_cast<int>(max_label + 1);
}

void ArrayDataset::init_targets(const NumericArray& y, const std::string& y_name) {
  check_finite(y, y_name, "target");
  const Shape rest(y.shape.begin() + 1, y.shape.end());
  target_shape_ = rest.empty() ? Shape{1} : rest;
  MIRROR_CHECK(shape_numel(target_shape_) > 0, DataError,
               y_name + ": targets of shape " + shape_str(target_shape_) + " hold no values");
  targets_.resize(static_cast<std::size_t>(y.numel()));
  to_float(y.type, y.data(), y.numel(), 1.0f, targets_.data());
}

void ArrayDataset::check_index(std::int64_t index) const {
  MIRROR_CHECK(index >= 0 && index < count_, InvalidArgument,
               description_ + ": index " + std::to_string(index) + " outside [0, " +
                   std::to_string(count_) + ")");
}

std::int32_t ArrayDataset::length(std::int64_t index) const {
  check_index(index);
  if (tokens()) return lengths_[static_cast<std::size_t>(index)];
  return Dataset::length(index);
}

std::int32_t ArrayDataset::label(std::int64_t index) const {
  check_index(index);
  MIRROR_CHECK(targets_.empty(), InvalidArgument,
               description_ + " holds float targets, not class labels: use decode_target");
  return labels_[static_cast<std::size_t>(index)];
}

void ArrayDataset::decode_target(std::int64_t index, float* dst) const {
  check_index(index);
  if (targets_.empty()) return Dataset::decode_target(index, dst);
  const std::int64_t per = shape_numel(target_shape_);
  std::copy_n(targets_.data() + index * per, per, dst);
}

void ArrayDataset::decode_float(std::int64_t index, float* dst) const {
  check_index(index);
  if (tokens()) return Dataset::decode_float(index, dst);
  const std::int64_t per = shape_numel(sample_shape_);
  to_float(x_.type, x_.data() + index * per * element_size(x_.type), per, divisor_, dst);
}

void ArrayDataset::decode_tokens(std::int64_t index, std::int32_t* dst, std::int32_t steps) const {
  check_index(index);
  if (!tokens()) return Dataset::decode_tokens(index, dst, steps);
  const std::int32_t length = lengths_[static_cast<std::size_t>(index)];
  MIRROR_CHECK(steps >= length, InvalidArgument,
               "decode_tokens: " + std::to_string(steps) + " steps for a sequence of " +
                   std::to_string(length));
  const std::int32_t* src = ids_.data() + index * sample_shape_[0];
  std::copy_n(src, length, dst);
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
  return std::make_shared<ArrayDataset>(std::move(x), std::move(y), options, x_name, y_name);
}

std::shared_ptr<const Dataset> load_arrays(const std::string& x_path, const std::string& y_path,
                                           const ArrayOptions& options) {
  NumericArray x = parse_array_file(read_file_bytes(x_path), x_path);
  NumericArray y = parse_array_file(read_file_bytes(y_path), y_path);
  return arrays_dataset(std::move(x), std::move(y), options, x_path, y_path);
}

}  // namespace mirror::data
