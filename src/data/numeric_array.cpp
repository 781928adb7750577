#include "mirror/data/numeric_array.h"

#include <bit>
#include <cstdint>
#include <cstring>

#include "mirror/error.h"

namespace mirror::data {

// The readers store elements little-endian and read them with memcpy.
static_assert(std::endian::native == std::endian::little,
              "Mirror's data readers assume a "
              "little-endian host");

int element_size(ElementType type) {
  switch (type) {
    case ElementType::kUInt8:
    case ElementType::kInt8:
      return 1;
    case ElementType::kInt16:
    case ElementType::kUInt16:
      return 2;
    case ElementType::kInt32:
    case ElementType::kFloat32:
      return 4;
    case ElementType::kInt64:
    case ElementType::kFloat64:
      return 8;
  }
  return 1;
}

const char* element_type_name(ElementType type) {
  switch (type) {
    case ElementType::kUInt8:
      return "uint8";
    case ElementType::kInt8:
      return "int8";
    case ElementType::kInt16:
      return "int16";
    case ElementType::kUInt16:
      return "uint16";
    case ElementType::kInt32:
      return "int32";
    case ElementType::kInt64:
      return "int64";
    case ElementType::kFloat32:
      return "float32";
    case ElementType::kFloat64:
      return "float64";
  }
  return "?";
}

bool is_floating(ElementType type) {
  return type == ElementType::kFloat32 || type == ElementType::kFloat64;
}

std::int64_t NumericArray::numel() const {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

namespace {
template <class T>
T load(const std::uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
}  // namespace

double NumericArray::value(std::int64_t i) const {
  const std::uint8_t* p = data() + i * element_size(type);
  switch (type) {
    case ElementType::kUInt8:
      return *p;
    case ElementType::kInt8:
      return load<std::int8_t>(p);
    case ElementType::kInt16:
      return load<std::int16_t>(p);
    case ElementType::kUInt16:
      return load<std::uint16_t>(p);
    case ElementType::kInt32:
      return load<std::int32_t>(p);
    case ElementType::kInt64:
      return static_cast<double>(load<std::int64_t>(p));
    case ElementType::kFloat32:
      return load<float>(p);
    case ElementType::kFloat64:
      return load<double>(p);
  }
  return 0;
}

std::int64_t NumericArray::integer(std::int64_t i) const {
  MIRROR_CHECK(!is_floating(type), InvalidArgument,
               std::string("NumericArray::integer on a ") + element_type_name(type) + " array");
  if (type == ElementType::kInt64) return load<std::int64_t>(data() + i * 8);
  return static_cast<std::int64_t>(value(i));  // exact: every other integer type fits a double
}

std::uint64_t checked_payload_bytes(const std::vector<std::int64_t>& shape, int element_bytes,
                                    std::uint64_t max_bytes, const std::string& name) {
  // `bytes` is the payload; `extent` the product of the non-zero dims, kept below 2^63 so
  // that numel of any sub-shape fits int64 even when a zero dim makes the payload empty.
  std::uint64_t bytes = static_cast<std::uint64_t>(element_bytes), extent = 1;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    MIRROR_CHECK(shape[i] >= 0, DataError,
                 name + ": dimension " + std::to_string(i) + " is negative (" +
                     std::to_string(shape[i]) + "); the header is corrupt");
    const auto d = static_cast<std::uint64_t>(shape[i]);
    if (d == 0) {
      bytes = 0;
      continue;
    }
    MIRROR_CHECK(d <= static_cast<std::uint64_t>(INT64_MAX) / extent &&
                     (bytes == 0 || (d <= UINT64_MAX / bytes && bytes * d <= max_bytes)),
                 DataError,
                 name + ": shape " + dims_str(shape) + " of " + std::to_string(element_bytes) +
                     "-byte elements describes more than " + std::to_string(max_bytes) +
                     " bytes; the header is corrupt or the array is too large");
    extent *= d;
    bytes *= d;
  }
  return bytes;
}

std::string dims_str(const std::vector<std::int64_t>& shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

}  // namespace mirror::data
