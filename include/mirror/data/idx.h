// defines: IdxArray and the IDX reader (gzip or raw, from memory or a file) behind FashionMnist
// and load_arrays, and the gzip helpers they share.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "mirror/data/numeric_array.h"

namespace mirror::data {

/// An IDX array: dims as in the header, payload in row-major order exactly as stored (so
/// big-endian for multi-byte element types). `bytes` holds exactly shape-product elements.
struct IdxArray {
  std::vector<std::int64_t> dims;
  std::vector<std::uint8_t> bytes;
  std::uint8_t type = 0x08;  // 08 ubyte, 09 int8, 0B int16, 0C int32, 0D float32, 0E float64
};

/// Limits checked against the header before any buffer of that size is allocated.
struct IdxLimits {
  std::uint64_t max_bytes = 1ull << 31;  // payload bytes (2 GiB; Fashion-MNIST train is 47 MB)
  int max_rank = 4;
  /// Accept every IDX element type; otherwise only unsigned bytes (Fashion-MNIST).
  bool any_type = false;
};

/// Parses an IDX file held in memory; gzip (magic 1f 8b) is inflated on the fly, anything else
/// is read as raw IDX. Throws DataError (naming `name`) for: truncated or corrupt gzip (CRC and
/// length trailer checked), bytes after the gzip stream, a wrong IDX magic, an element type
/// other than unsigned byte (unless limits.any_type), rank 0 or above limits.max_rank, a zero
/// dimension, a payload above limits.max_bytes (before allocating it), and a payload shorter or
/// longer than the header says.
IdxArray parse_idx(std::span<const std::uint8_t> file, const std::string& name,
                   const IdxLimits& limits = {});

/// Where an uncompressed IDX file's payload lies, once its header is checked against the file.
struct IdxHeader {
  std::vector<std::int64_t> dims;
  std::uint8_t type = 0x08;
  std::size_t data_offset = 0;   // 4 + 4 * rank
  std::uint64_t data_bytes = 0;  // == file size - data_offset
};
/// The header checks of parse_idx on a raw (not gzip) IDX file, without copying the payload:
/// the reader of a mapped file uses the payload where it lies (big-endian for multi-byte types).
IdxHeader parse_idx_header(std::span<const std::uint8_t> file, const std::string& name,
                           const IdxLimits& limits = {});

/// True when the file starts with the IDX magic (00 00 TT RR, TT a known element type).
bool is_idx(std::span<const std::uint8_t> file);

/// The ElementType of an IDX type byte (08 uint8 ... 0E float64).
ElementType idx_element_type(std::uint8_t type);

/// The IDX array as little-endian elements of the matching ElementType (int16, int32, float32
/// and float64 are byte-swapped from IDX's big-endian order).
NumericArray idx_to_numeric(IdxArray array);

/// True when the bytes start with the gzip magic 1f 8b.
bool is_gzip(std::span<const std::uint8_t> file);
/// Inflates a whole gzip file (CRC and length checked); DataError naming `name` when it is
/// corrupt, truncated, followed by other bytes, or inflates to more than max_bytes.
std::vector<std::uint8_t> gunzip(std::span<const std::uint8_t> file, const std::string& name,
                                 std::uint64_t max_bytes);

/// Reads the whole file; DataError naming the path (and `hint`, e.g. which package installs it)
/// when it cannot be opened or read.
std::vector<std::uint8_t> read_file_bytes(const std::string& path, const std::string& hint = "");

/// Serialises an IDX array (header + payload, the payload as stored: big-endian for
/// multi-byte types), e.g. to build test fixtures.
std::vector<std::uint8_t> encode_idx(const std::vector<std::int64_t>& dims,
                                     std::span<const std::uint8_t> payload,
                                     std::uint8_t type = 0x08);
/// gzip-compresses a buffer (zlib, gzip wrapper).
std::vector<std::uint8_t> gzip_compress(std::span<const std::uint8_t> bytes);

}  // namespace mirror::data
