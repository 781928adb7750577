// Note [Dense labels]: a tagger (embedding -> GRU returning sequences -> dense per step) trained
// by MirroredStrategy on per-step labels with padding, its batches from the Loader, reaches the
// same losses and weights with 1, 2 and 3 in-process replicas: each replica divides its sum by
// the global count of labelled steps, so the summed gradient is the one-replica mean.
#include <gtest/gtest.h>

#include <cstring>

#include "mirror/data/arrays.h"
#include "mirror/data/loader.h"
#include "mirror/distributed/strategy.h"
#include "mirror/nn/models.h"
#include "mirror/optim/optimizer.h"
#include "mpi/strategy_testing.h"

namespace mirror::testing {
namespace {

data::NumericArray int_array(const std::vector<std::int32_t>& v, std::vector<std::int64_t> shape) {
  data::NumericArray a;
  a.type = data::ElementType::kInt32;
  a.shape = std::move(shape);
  a.bytes.resize(v.size() * 4);
  std::memcpy(a.bytes.data(), v.data(), a.bytes.size());
  return a;
}

/// 18 sequences of 1..6 tokens (ids 1..11, zeros after), each step tagged id % 4; the padding
/// steps carry tag 3, which no masked loss may see.
std::shared_ptr<const data::Dataset> tagged_sequences() {
  std::vector<std::int32_t> x(18 * 6, 0), y(18 * 6, 3);
  for (int i = 0; i < 18; ++i) {
    const int length = 1 + (i * 5) % 6;
    for (int t = 0; t < length; ++t) {
      x[static_cast<std::size_t>(i * 6 + t)] = 1 + (i * 7 + t * 3) % 11;
      y[static_cast<std::size_t>(i * 6 + t)] = x[static_cast<std::size_t>(i * 6 + t)] % 4;
    }
  }
  return data::arrays_dataset(int_array(x, {18, 6}), int_array(y, {18, 6}), {});
}

struct TaggerRun {
  std::vector<double> losses;
  std::vector<double> accuracy;
  std::unique_ptr<dist::MirroredStrategy> strategy;
};

TaggerRun train(int replicas) {
  const auto ds = tagged_sequences();
  const nn::ModelSpec spec = nn::ModelSpec::from_json(nlohmann::json::parse(R"({"input_shape": [6],
      "layers": [{"type": "embedding", "input_dim": 12, "output_dim": 6},
                 {"type": "gru", "units": 5, "return_sequences": true},
                 {"type": "dense", "units": 4}]})"));
  nn::DataShape shape{{6}, DType::kInt32, 4, 12};
  shape.label_shape = ds->label_shape();
  const nn::ModelSpec bound = spec.bind(shape);
  TaggerRun run;
  run.strategy = std::make_unique<dist::MirroredStrategy>(
      cpu_devices(0, replicas), [bound](Device d) { return nn::make_model(bound, DType::kFloat32, d, 7); },
      [] { return std::make_unique<optim::SGD>(0.9); });
  data::LoaderOptions o;
  o.global_batch = 6;
  o.prefetch_depth = 0;
  o.seed = 3;
  std::vector<std::unique_ptr<data::Loader>> loaders;
  for (int r = 0; r < replicas; ++r)
    loaders.push_back(std::make_unique<data::Loader>(ds, data::ShardSpec{r, replicas}, o));
  for (int epoch = 0; epoch < 2; ++epoch) {
    for (std::int64_t step = 0; step < 3; ++step) {
      std::vector<data::Batch> batches;
      for (auto& l : loaders) batches.push_back(l->make_batch(epoch, step));
      const dist::StepResult r = run.strategy->train_step(batches, 0.5);
      run.losses.push_back(r.loss);
      run.accuracy.push_back(static_cast<double>(r.correct) / static_cast<double>(r.target_values));
    }
  }
  return run;
}

TEST(StrategyDense, PerStepLossAndWeightsDoNotDependOnTheReplicaCount) {
  TaggerRun one = train(1);
  EXPECT_LT(one.losses.back(), one.losses.front());  // it learns the tags
  for (int replicas : {2, 3}) {
    TaggerRun many = train(replicas);
    ASSERT_EQ(many.losses.size(), one.losses.size());
    for (std::size_t i = 0; i < one.losses.size(); ++i) {
      EXPECT_NEAR(many.losses[i], one.losses[i], 1e-5 * std::max(1.0, one.losses[i]))
          << replicas << " replicas, step " << i;
      EXPECT_EQ(many.accuracy[i], one.accuracy[i]) << replicas << " replicas, step " << i;
    }
    EXPECT_LE(max_relative_difference(many.strategy->model(0), one.strategy->model(0)), 1e-5)
        << replicas << " replicas";
  }
}

}  // namespace
}  // namespace mirror::testing
