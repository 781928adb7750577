// defines: check_dataset, the invariants every fuzz target checks on a Dataset it built.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <vector>

#include "mirror/data/dataset.h"

namespace mirror::fuzz {

/// Decodes up to `limit` samples and aborts (a libFuzzer finding) when a label, id, length or
/// value breaks the Dataset contract.
inline void check_dataset(const data::Dataset& ds, std::int64_t limit = 64) {
  const Shape shape = ds.sample_shape();
  const std::int64_t per = shape_numel(shape);
  if (ds.size() <= 0 || per <= 0) std::abort();
  const bool tokens = ds.input_dtype() == DType::kInt32;
  const bool classes = ds.target_kind() == data::TargetKind::kClass;
  const std::int64_t target_numel = classes ? 0 : shape_numel(ds.target_shape());
  if (classes ? ds.num_classes() <= 0 : target_numel <= 0) std::abort();
  std::vector<float> x(tokens ? 0 : static_cast<std::size_t>(per));
  std::vector<std::int32_t> ids(tokens ? static_cast<std::size_t>(per) : 0);
  std::vector<float> t(static_cast<std::size_t>(target_numel));
  for (std::int64_t i = 0; i < std::min(ds.size(), limit); ++i) {
    if (classes) {
      const std::int32_t label = ds.label(i);
      if (label < 0 || label >= ds.num_classes()) std::abort();
    } else {
      ds.decode_target(i, t.data());
      for (float v : t)
        if (!std::isfinite(v)) std::abort();
    }
    if (tokens) {
      const std::int32_t n = ds.length(i);
      if (n < 1 || n > per) std::abort();
      ds.decode_tokens(i, ids.data(), static_cast<std::int32_t>(per));
      for (std::int32_t k = 0; k < per; ++k) {
        if (ids[k] < 0 || ids[k] >= ds.vocab_size() || (k >= n && ids[k] != 0)) std::abort();
      }
      if (ids[n - 1] == 0) std::abort();
    } else {
      ds.decode_float(i, x.data());
      for (float v : x)
        if (!std::isfinite(v)) std::abort();
    }
  }
}

}  // namespace mirror::fuzz
