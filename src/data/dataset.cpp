#include "mirror/data/dataset.h"

#include <algorithm>

#include "mirror/error.h"

namespace mirror::data {

const char* split_name(Split split) { return split == Split::kTrain ? "train" : "test"; }

std::int32_t Dataset::length(std::int64_t) const {
  const Shape s = sample_shape();
  return s.empty() ? 1 : static_cast<std::int32_t>(s[0]);
}

std::int64_t Dataset::label_count(std::int64_t index) const {
  const Shape s = label_shape();
  std::int64_t n = 1;
  for (auto d : s) n *= d;
  // Note [Dense labels]: per-step labels of a sequence count up to its length.
  if (s.size() == 1 && is_sequence()) return std::min<std::int64_t>(n, length(index));
  return n;
}

void Dataset::decode_float(std::int64_t, float*) const {
  throw InvalidArgument(describe() + " holds int32 token ids, not float data: use decode_tokens");
}

void Dataset::decode_tokens(std::int64_t, std::int32_t*, std::int32_t) const {
  throw InvalidArgument(describe() + " holds float data, not token ids: use decode_float");
}

void Dataset::decode_target(std::int64_t, float*) const {
  throw InvalidArgument(describe() + " holds class labels, not float targets: use label");
}

}  // namespace mirror::data
