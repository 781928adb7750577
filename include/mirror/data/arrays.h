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

/// The array files one --train-x / --train-y argument names, in natural name order (x-2 before
/// x-10): a file (itself); a folder (its `x-*.npy` files for role 'x', `y-*.npy` for role 'y');
/// or a glob pattern (`data/x-*.npy`; *, ? and [...] in the last path component). DataError
/// naming the argument when nothing matches.
std::vector<std::string> array_files(const std::string& spec, char role);

/// x and y each a NumPy .npy or an IDX file, or a folder or glob of .npy shards read as one
/// dataset in shard order (see array_files; shard k of x pairs with shard k of y, and every
/// shard must have the same dtype and sample shape). Files are chosen by content. Uncompressed
/// files are mapped, not read: a rank holds the pages it is reading (Note [Flat memory],
/// mapped_file.h), plus 4 bytes per sample for token data; .gz is accepted and read into memory.
/// x: uint8 / float32 / float64 [N, ...] (float data; int8/int16/uint16 are float data too,
/// unscaled), or int32/int64 [N, T] (token ids, 0 = padding, length = last non-zero + 1, vocab =
/// max id + 1). y: integer [N] (or [N, 1]) -> class labels; float [N] or [N, K...] -> float
/// targets ([1] or [K...] per sample). Samples of rank 2 ([T, F]) and token ids are sequences.
/// DataError naming the file and the problem for: unreadable or malformed files, a file named
/// .gz that is not gzip, x and y counts that differ, shards that disagree in dtype or shape,
/// NaN/inf in float targets or float x (the first bad index; float x above 256 MiB is checked
/// per sample as batches are decoded, a BadSample), negative labels or labels >= a stated
/// num_classes (sample, label, count), token ids that are negative or above int32, a token row
/// that is all padding.
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
