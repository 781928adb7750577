// defines: ElementType and NumericArray, an n-dimensional array as read from a .npy or IDX file.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace mirror::data {

/// The element types the array readers accept.
enum class ElementType { kUInt8, kInt8, kInt16, kUInt16, kInt32, kInt64, kFloat32, kFloat64 };

/// Bytes per element.
int element_size(ElementType type);
/// "uint8", "float32", ...
const char* element_type_name(ElementType type);
bool is_floating(ElementType type);

/// An array in row-major (C) order with little-endian elements (whatever the file's order
/// was): `bytes` holds exactly numel(shape) * element_size(type) bytes, unless the elements
/// are borrowed.
struct NumericArray {
  ElementType type = ElementType::kUInt8;
  std::vector<std::int64_t> shape;
  std::vector<std::uint8_t> bytes;
  /// Note [Borrowed elements]: elements that live elsewhere (a NumPy array the Python module
  /// passes without a copy): when set, `borrowed` points at the numel * element_size bytes,
  /// `bytes` is empty, and `owner` keeps that memory alive for as long as any copy of this
  /// array (or a Dataset made from it) exists. Nobody may write them meanwhile.
  const std::uint8_t* borrowed = nullptr;
  std::shared_ptr<const void> owner{};

  /// The elements: `borrowed` when set, else `bytes`.
  const std::uint8_t* data() const { return borrowed ? borrowed : bytes.data(); }

  std::int64_t numel() const;
  /// Element i converted to double (int64 values beyond 2^53 lose precision).
  double value(std::int64_t i) const;
  /// Element i of an integer array, exactly (InvalidArgument for float arrays).
  std::int64_t integer(std::int64_t i) const;
};

/// Product of the dims; DataError naming `name` when a dim is negative or the product of
/// elements times `element_bytes` would exceed `max_bytes` (checked without overflow).
std::uint64_t checked_payload_bytes(const std::vector<std::int64_t>& shape, int element_bytes,
                                    std::uint64_t max_bytes, const std::string& name);

std::string dims_str(const std::vector<std::int64_t>& shape);

}  // namespace mirror::data
