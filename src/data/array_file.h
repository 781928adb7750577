// defines: ArrayFile, one x or y array opened for per-sample reads: mapped in place (an
// uncompressed .npy or IDX file) or held in memory (a gzip file, or an array handed over in
// memory), and the element conversions the array datasets share.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "mirror/data/mapped_file.h"
#include "mirror/data/numeric_array.h"

namespace mirror::data::detail {

class ArrayFile {
 public:
  /// Opens `path` by content (.npy or IDX; gzip of either is inflated into memory). Uncompressed
  /// files are mapped, never read whole: only the header is checked here (its sizes against the
  /// file's). DataError naming the file as parse_array_file does.
  static ArrayFile open(const std::string& path, std::uint64_t max_bytes = 1ull << 40);
  /// An array already in memory (arrays_dataset), named `name` in errors.
  static ArrayFile in_memory(NumericArray array, std::string name);

  ElementType type() const { return type_; }
  const std::vector<std::int64_t>& shape() const { return shape_; }
  const std::string& name() const { return name_; }
  /// Multi-byte elements of an IDX file are big-endian in place.
  bool big_endian() const { return big_endian_; }
  /// The mapping, or null when the payload is held in memory.
  const std::shared_ptr<const MappedFile>& mapping() const { return mapping_; }
  bool gzip() const { return gzip_; }
  std::int64_t rows() const { return shape_.empty() ? 0 : shape_[0]; }
  /// Elements per row (first dimension); 1 for a rank-1 array.
  std::int64_t row_numel() const;
  std::uint64_t payload_bytes() const { return size_; }
  /// Byte offset of element `i` within the file (for PageBudget).
  std::uint64_t file_offset(std::int64_t i) const {
    return offset_ + static_cast<std::uint64_t>(i) * element_size(type_);
  }

  /// Element i as a double (int64 beyond 2^53 loses precision) or, for integer arrays, exactly.
  double value(std::int64_t i) const;
  std::int64_t integer(std::int64_t i) const;
  /// Elements [first, first + n) converted to float and divided by `divisor`.
  void to_float(std::int64_t first, std::int64_t n, float divisor, float* dst) const;

 private:
  const std::uint8_t* element(std::int64_t i) const { return data_ + i * element_size(type_); }

  ElementType type_ = ElementType::kUInt8;
  std::vector<std::int64_t> shape_;
  std::string name_;
  bool big_endian_ = false, gzip_ = false;
  std::shared_ptr<const MappedFile> mapping_;
  std::shared_ptr<const std::vector<std::uint8_t>> owned_;
  std::shared_ptr<const void> borrowed_owner_;  // keeps borrowed elements alive
  const std::uint8_t* data_ = nullptr;  // the payload, in the mapping or in owned_
  std::uint64_t size_ = 0, offset_ = 0;  // payload bytes; its offset in the file
};

/// The x / y file pairs that --train-x and --train-y name (array_files, arrays.h), matched in
/// order: DataError when the counts differ (naming the first file without a partner) or, for
/// folders, when a pair's names differ past the prefix (x-00003.npy with y-00004.npy).
std::vector<std::pair<std::string, std::string>> shard_pairs(const std::string& x_spec,
                                                             const std::string& y_spec);

}  // namespace mirror::data::detail
