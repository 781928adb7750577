// defines: the models the benchmarks time (step-bench, mirror-bench train): a built-in name or a
// model spec file (--model-spec), bound to seeded synthetic data shaped like the model's input,
// and the batches the benchmarks cycle through.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "mirror/data/batch.h"
#include "mirror/data/dataset.h"
#include "mirror/nn/models.h"

namespace mirror::bench {

struct BenchModel {
  std::string label;  // "cnn", or "mlp (mine/mlp.json)" for a spec file
  nn::ModelSpec spec;  // bound to `data`
  std::shared_ptr<data::Dataset> data;
};

/// `spec_file` (a Mirror or Keras spec) when not empty, else the built-in `name` (mirror-train's
/// --model names, plus the bench twins bigru-rows and bilstm-rows). The data follow the model:
/// token ids when it starts with an Embedding (the spec's input length, else 24 steps; the
/// Embedding's input_dim, else 64 ids), rows for a [T, F] input, images or vectors otherwise
/// ([1, 28, 28] when the spec states no input shape); 10 classes, `samples` samples.
BenchModel bench_model(const std::string& name, const std::string& spec_file,
                       std::int64_t samples = 1024);

/// The batch of `per` samples of global step `step` for `rank` of `world` (every sample once
/// per pass over the data, seeded by its index); lengths for sequences.
data::Batch bench_batch(const data::Dataset& ds, int rank, int world, std::int64_t per,
                        std::int64_t step);

}  // namespace mirror::bench
