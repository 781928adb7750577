// libFuzzer target: parse_array_file (.npy / IDX, gzip or not) on arbitrary bytes, then
// arrays_dataset with the parsed array as x or as y. Checks: only DataError escapes, the payload
// size matches the shape, an accepted .npy file re-encodes to an equal array, and the dataset keeps
// its contract (dataset_check.h). InvalidArgument would be a finding: no option here is invalid for
// the data it meets.
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "dataset_check.h"
#include "mirror/data/arrays.h"
#include "mirror/data/npy.h"
#include "mirror/error.h"

using namespace mirror::data;

namespace {

void check_array(const NumericArray& a, bool npy) {
  if (static_cast<std::uint64_t>(a.numel()) * element_size(a.type) != a.bytes.size()) std::abort();
  if (!npy) return;
  const NumericArray b = parse_npy(encode_npy(a), "again");
  if (b.type != a.type || b.shape != a.shape || b.bytes != a.bytes) std::abort();
}

/// A y of n labels 0, 1, 0, 1, ... (int64 [n]).
NumericArray labels(std::int64_t n) {
  NumericArray y{ElementType::kInt64, {n}, {}};
  y.bytes.resize(static_cast<std::size_t>(n) * 8);
  for (std::int64_t i = 0; i < n; ++i) y.bytes[static_cast<std::size_t>(i) * 8] = i % 2;
  return y;
}

/// An x of n samples of one float (float32 [n, 1]), all zero.
NumericArray features(std::int64_t n) {
  NumericArray x{ElementType::kFloat32, {n, 1}, {}};
  x.bytes.resize(static_cast<std::size_t>(n) * 4);
  return x;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  // Byte 0: bit 0 names the file .gz, bit 1 scales uint8, bits 2-3 pick num_classes.
  const std::uint8_t mode = data[0];
  std::vector<std::uint8_t> bytes(data + 1, data + size);
  const bool npy = is_npy(bytes);
  try {
    NumericArray a = parse_array_file(bytes, (mode & 1) ? "fuzz.gz" : "fuzz", 1u << 24);
    check_array(a, npy);
    if (a.shape.empty() || a.shape[0] <= 0 || a.shape[0] > (1 << 16)) return 0;
    ArrayOptions options;
    options.scale_uint8 = mode & 2;
    options.num_classes = (mode >> 2) & 3;
    const std::int64_t n = a.shape[0];
    try {
      mirror::fuzz::check_dataset(*arrays_dataset(a, labels(n), options));
    } catch (const mirror::DataError&) {
      // bad x for a dataset (NaN, all-padding rows, ...): the y side is still worth trying
    }
    if (is_floating(a.type)) options.num_classes = 0;  // float targets take no num_classes
    mirror::fuzz::check_dataset(*arrays_dataset(features(n), std::move(a), options));
  } catch (const mirror::DataError&) {
    // expected for malformed input
  }
  return 0;
}
