// defines: the NumPy .npy reader (format versions 1.0, 2.0 and 3.0) and a writer for fixtures.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "mirror/data/numeric_array.h"

namespace mirror::data {

struct NpyLimits {
  std::uint64_t max_bytes = 1ull << 36;  // payload bytes (64 GiB); checked before allocating
  std::uint32_t max_header = 1u << 20;   // header dict bytes
};

/// What a .npy header says, once checked against the file.
struct NpyHeader {
  ElementType type = ElementType::kUInt8;
  std::vector<std::int64_t> shape;  // () for a scalar
  std::size_t data_offset = 0;      // where the payload starts in the file
  std::uint64_t data_bytes = 0;     // numel * element size == file size - data_offset
};

/// True when `file` starts with the .npy magic "\x93NUMPY".
bool is_npy(std::span<const std::uint8_t> file);

/// Parses and validates the header of a .npy file held in memory (uncompressed). Accepted
/// dtypes: '|u1', '|i1', '<i2', '<u2', '<i4', '<i8', '<f4', '<f8' ('<' and '|' both accepted
/// for the one-byte types); C order only. Throws DataError naming `name` and the problem for:
/// a wrong magic or version, a truncated or malformed header dict (missing or unknown keys,
/// bad quoting, a shape that is not a tuple of non-negative integers), Fortran order, object,
/// structured, big-endian or other unsupported dtypes, a shape whose byte count overflows or
/// exceeds limits.max_bytes, and a payload shorter or longer than the shape says.
NpyHeader parse_npy_header(std::span<const std::uint8_t> file, const std::string& name,
                           const NpyLimits& limits = {});

/// parse_npy_header, then a copy of the payload.
NumericArray parse_npy(std::span<const std::uint8_t> file, const std::string& name,
                       const NpyLimits& limits = {});

/// Serialises an array as a version 1.0 .npy file (header padded to 64 bytes, as NumPy does).
std::vector<std::uint8_t> encode_npy(const NumericArray& array);

}  // namespace mirror::data
