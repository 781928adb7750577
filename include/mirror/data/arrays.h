// defines: load_arrays, a Dataset from the user's own x / y array files (.npy or IDX).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mirror/data/dataset.h"
#include "mirror/data/numeric_array.h"

namespace mirror::data {

struct ArrayOptions {
  int num_classes = 0;      // 0: max label + 1
  Shape sample_shape;       // empty: as stored; else reshape (numel must match)
  bool scale_uint8 = true;  // uint8 x -> x / 255
};

/// x and y each a NumPy .npy or an IDX file (chosen by content; .gz accepted). x: uint8 /
/// float32 / float64 [N, ...] (float data; int8/int16/uint16 are float data too, unscaled), or
/// int32/int64 [N, T] (token ids, 0 = padding, length = last non-zero + 1, vocab = max id + 1).
/// y: integer [N] (or [N, 1]) -> class labels; float [N] or [N, K...] -> float targets ([1] or
/// [K...] per sample). Samples of rank 2 ([T, F]) and token ids are sequences.
/// DataError naming the file and the problem for: unreadable or malformed files, a file named
/// .gz that is not gzip, x and y counts that differ, NaN/inf in float x or float targets (the
/// first bad index), negative labels or labels >= a stated num_classes (sample, label, count),
/// token ids that are negative or above int32, a token row that is all padding.
std::shared_ptr<const Dataset> load_arrays(const std::string& x_path, const std::string& y_path,
                                           const ArrayOptions& options = {});

/// Reads one array file by content: .npy (versions 1-3) or IDX (any element type, rank up to
/// 16), either of them gzip-compressed. `name` is used in errors; a name ending in .gz that
/// does not hold gzip data is a DataError.
NumericArray parse_array_file(std::vector<std::uint8_t> bytes, const std::string& name,
                              std::uint64_t max_bytes = 1ull << 36);

/// load_arrays on arrays already in memory (same checks); the names are used in errors.
std::shared_ptr<const Dataset> arrays_dataset(NumericArray x, NumericArray y,
                                              const ArrayOptions& options,
                                              const std::string& x_name = "x",
                                              const std::string& y_name = "y");

}  // namespace mirror::data
