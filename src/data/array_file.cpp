// ArrayFile: the header of an array file is checked at open; its payload is read one sample at a
// time, where it lies (a mapping) or from memory (gzip).
#include "data/array_file.h"

#include <algorithm>
#include <cstring>

#include "mirror/data/arrays.h"
#include "mirror/data/idx.h"
#include "mirror/data/npy.h"
#include "mirror/error.h"

namespace mirror::data::detail {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

template <class T>
T load(const std::uint8_t* p, bool big_endian) {
  std::uint8_t b[sizeof(T)];
  std::memcpy(b, p, sizeof(T));
  if (big_endian) std::reverse(b, b + sizeof(T));
  T v;
  std::memcpy(&v, b, sizeof(T));
  return v;
}

template <class T>
void widen(const std::uint8_t* src, std::int64_t n, float divisor, bool big_endian, float* dst) {
  if (divisor == 1.0f) {
    for (std::int64_t i = 0; i < n; ++i)
      dst[i] = static_cast<float>(load<T>(src + i * sizeof(T), big_endian));
    return;
  }
  for (std::int64_t i = 0; i < n; ++i)
    dst[i] = static_cast<float>(load<T>(src + i * sizeof(T), big_endian)) / divisor;
}

}  // namespace

ArrayFile ArrayFile::open(const std::string& path, std::uint64_t max_bytes) {
  ArrayFile a;
  a.name_ = path;
  auto file = MappedFile::open(path);
  const std::span<const std::uint8_t> bytes = file->bytes();
  if (ends_with(path, ".gz") || is_gzip(bytes)) {
    // Compressed data cannot be read in place: it is inflated once, into this rank's memory.
    NumericArray inflated =
        parse_array_file(std::vector<std::uint8_t>(bytes.begin(), bytes.end()), path, max_bytes);
    a = in_memory(std::move(inflated), path);
    a.gzip_ = true;
    return a;
  }
  if (is_npy(bytes)) {
    NpyLimits limits;
    limits.max_bytes = max_bytes;
    const NpyHeader h = parse_npy_header(bytes, path, limits);
    a.type_ = h.type;
    a.shape_ = h.shape;
    a.offset_ = h.data_offset;
    a.size_ = h.data_bytes;
  } else if (is_idx(bytes)) {
    IdxLimits limits;
    limits.max_bytes = max_bytes;
    limits.max_rank = 16;
    limits.any_type = true;
    const IdxHeader h = parse_idx_header(bytes, path, limits);
    a.type_ = idx_element_type(h.type);
    a.shape_ = h.dims;
    a.offset_ = h.data_offset;
    a.size_ = h.data_bytes;
    a.big_endian_ = element_size(a.type_) > 1;
  } else {
    // Neither magic: the in-memory parser's message (it names the first bytes) on a prefix.
    parse_array_file(std::vector<std::uint8_t>(bytes.begin(),
                                                bytes.begin() + std::min<std::size_t>(
                                                                    bytes.size(), 64)),
                     path, max_bytes);
    throw DataError(path + ": not an array file");  // not reached: the parser threw
  }
  a.data_ = bytes.data() + a.offset_;
  a.mapping_ = std::move(file);
  return a;
}

ArrayFile ArrayFile::in_memory(NumericArray array, std::string name) {
  ArrayFile a;
  a.name_ = std::move(name);
  a.type_ = array.type;
  if (array.borrowed != nullptr) {  // Note [Borrowed elements] (numeric_array.h): no copy
    a.size_ = static_cast<std::uint64_t>(array.numel()) * element_size(array.type);
    a.shape_ = std::move(array.shape);
    a.data_ = array.borrowed;
    a.borrowed_owner_ = std::move(array.owner);
    return a;
  }
  a.shape_ = std::move(array.shape);
  a.size_ = array.bytes.size();
  auto owned = std::make_shared<const std::vector<std::uint8_t>>(std::move(array.bytes));
  a.data_ = owned->data();
  a.owned_ = std::move(owned);
  return a;
}

std::int64_t ArrayFile::row_numel() const {
  std::int64_t n = 1;
  for (std::size_t i = 1; i < shape_.size(); ++i) n *= shape_[i];
  return n;
}

double ArrayFile::value(std::int64_t i) const {
  const std::uint8_t* p = element(i);
  switch (type_) {
    case ElementType::kUInt8:
      return *p;
    case ElementType::kInt8:
      return static_cast<std::int8_t>(*p);
    case ElementType::kInt16:
      return load<std::int16_t>(p, big_endian_);
    case ElementType::kUInt16:
      return load<std::uint16_t>(p, big_endian_);
    case ElementType::kInt32:
      return load<std::int32_t>(p, big_endian_);
    case ElementType::kInt64:
      return static_cast<double>(load<std::int64_t>(p, big_endian_));
    case ElementType::kFloat32:
      return load<float>(p, big_endian_);
    case ElementType::kFloat64:
      return load<double>(p, big_endian_);
  }
  return 0;
}

std::int64_t ArrayFile::integer(std::int64_t i) const {
  MIRROR_CHECK(!is_floating(type_), InvalidArgument,
               std::string("ArrayFile::integer on a ") + element_type_name(type_) + " array");
  if (type_ == ElementType::kInt64) return load<std::int64_t>(element(i), big_endian_);
  return static_cast<std::int64_t>(value(i));  // exact: every other integer type fits a double
}

void ArrayFile::to_float(std::int64_t first, std::int64_t n, float divisor, float* dst) const {
  const std::uint8_t* src = element(first);
  const bool be = big_endian_;
  switch (type_) {
    case ElementType::kUInt8:
      return widen<std::uint8_t>(src, n, divisor, false, dst);
    case ElementType::kInt8:
      return widen<std::int8_t>(src, n, divisor, false, dst);
    case ElementType::kInt16:
      return widen<std::int16_t>(src, n, divisor, be, dst);
    case ElementType::kUInt16:
      return widen<std::uint16_t>(src, n, divisor, be, dst);
    case ElementType::kInt32:
      return widen<std::int32_t>(src, n, divisor, be, dst);
    case ElementType::kInt64:
      return widen<std::int64_t>(src, n, divisor, be, dst);
    case ElementType::kFloat32:
      return widen<float>(src, n, divisor, be, dst);
    case ElementType::kFloat64:
      return widen<double>(src, n, divisor, be, dst);
  }
}

}  // namespace mirror::data::detail
