// defines: run_epochs, every batch a set of Loaders serves (replicas concatenated per step), for
// the exact-sharding and resume tests of the data sources.
#pragma once

#include <memory>
#include <vector>

#include "mirror/data/loader.h"

namespace mirror::data::test {

/// Every batch of `epochs` epochs, concatenated over `replicas` replicas per step (inputs,
/// labels, sample ids), as one replica with the same global batch would see it.
struct Epochs {
  std::vector<float> inputs;
  std::vector<std::int32_t> labels;
  std::vector<std::int64_t> ids;
};

inline Epochs run_epochs(const std::shared_ptr<const Dataset>& ds, int replicas, LoaderOptions o, int epochs,
           int first_epoch = 0, std::int64_t first_step = 0) {
  std::vector<std::unique_ptr<Loader>> loaders;
  for (int r = 0; r < replicas; ++r) {
    loaders.push_back(std::make_unique<Loader>(ds, ShardSpec{r, replicas}, o));
    loaders.back()->start(first_epoch, epochs, first_step);
  }
  Epochs out;
  for (;;) {
    for (auto& l : loaders) {
      auto b = l->next();
      if (!b) return out;
      const auto in = b->inputs.to_vector<float>();
      const auto lab = b->labels.to_vector<std::int32_t>();
      const auto id = b->sample_ids.to_vector<std::int64_t>();
      out.inputs.insert(out.inputs.end(), in.begin(), in.end());
      out.labels.insert(out.labels.end(), lab.begin(), lab.end());
      out.ids.insert(out.ids.end(), id.begin(), id.end());
    }
  }
}

}  // namespace mirror::data::test
