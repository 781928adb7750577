// defines: Batch, one replica's share of one global batch, as the loaders produce it.
#pragma once

#include <cstdint>
#include <vector>

#include "mirror/tensor.h"

namespace mirror::data {

struct Batch {
  Tensor inputs;      // float32 [n, ...] (images, rows) or int32 ids [n, T] (words)
  Tensor labels;      // int32 class ids [n] (or [n, T] / [n, H, W]: Note [Dense labels] in
                      // dataset.h), or float32 targets [n, target...] (TargetKind)
  Tensor weights;     // float32 [n]: 1 for real samples, 0 for padding samples
  Tensor sample_ids;  // int64 [n]: dataset index of each sample (-1 - k for padding)
  std::vector<std::int32_t> lengths;  // valid steps per sequence; empty for images
  std::int64_t global_count = 0;      // real samples in the GLOBAL batch (all replicas)
  // Per-step / per-pixel labels: the labelled positions of the real samples of the GLOBAL batch
  // (a sequence's steps up to its length), the loss's divisor; 0 for one label per sample.
  std::int64_t global_label_count = 0;
  std::vector<std::int32_t> label_counts;  // per sample: its labels that count (0 for padding)
  std::int64_t step = 0;              // global step index within the run
  int epoch = 0;

  std::int64_t size() const { return labels.defined() ? labels.dim(0) : 0; }
};

}  // namespace mirror::data
