// A user's own model and data trained with Mirror as an installed library: a small MLP written
// with the public layer API learns to tell three interleaved spirals apart, the points served
// by an in-memory Dataset written here. Mirror's generic fit loop (train::Trainer with a Task)
// trains it data-parallel across the MPI ranks, evaluates it, and writes checkpoints and a
// JSON-lines log when given a folder. Run:  mpirun -np 2 ./spirals [epochs [output folder]]
// docs/cpp-api.md explains each part; this file is the example printed there.
//
// Each rank prints its weights fingerprint at the end: they are equal on every rank (every
// replica applies the same averaged update), and the loss falls epoch by epoch.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <mirror/data/dataset.h>
#include <mirror/distributed/runtime.h>
#include <mirror/error.h>
#include <mirror/nn/layers.h>
#include <mirror/nn/sequential.h>
#include <mirror/train/trainer.h>

namespace {

constexpr int kClasses = 3;

/// `size` 2-D points on kClasses spiral arms (with a little noise), labelled by arm. Generated
/// once from a seed, so every rank holds the same data; the loader gives each replica its shard.
class Spirals : public mirror::data::Dataset {
 public:
  Spirals(std::int64_t size, std::uint64_t seed) : labels_(size), points_(2 * size) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> noise(0.0f, 0.08f);
    for (std::int64_t i = 0; i < size; ++i) {
      const int arm = static_cast<int>(i % kClasses);
      const float t = static_cast<float>(i / kClasses) / static_cast<float>(size / kClasses);
      const float angle = 4.0f * t + 2.0944f * static_cast<float>(arm);
      labels_[i] = arm;
      points_[2 * i] = t * std::cos(angle) + noise(rng);
      points_[2 * i + 1] = t * std::sin(angle) + noise(rng);
    }
  }

  std::int64_t size() const override { return static_cast<std::int64_t>(labels_.size()); }
  int num_classes() const override { return kClasses; }
  mirror::DType input_dtype() const override { return mirror::DType::kFloat32; }
  mirror::Shape sample_shape() const override { return {2}; }
  bool is_sequence() const override { return false; }
  std::int32_t label(std::int64_t index) const override { return labels_.at(index); }
  void decode_float(std::int64_t index, float* dst) const override {
    dst[0] = points_.at(2 * index);
    dst[1] = points_.at(2 * index + 1);
  }
  std::string describe() const override {
    return "spirals: " + std::to_string(size()) + " points, " + std::to_string(kClasses) +
           " classes";
  }

 private:
  std::vector<std::int32_t> labels_;
  std::vector<float> points_;
};

/// The model: 2 -> 64 -> 64 -> 3, ReLU. Built identically on every device it is asked for, and
/// built (initialised) here: build() on the replica's device, with the run's seed.
mirror::nn::Sequential make_model(mirror::Device device, std::uint64_t seed) {
  using mirror::nn::Dense;
  using mirror::ops::Activation;
  mirror::nn::Sequential model;
  model.emplace<Dense>(64, Activation::kRelu);
  model.emplace<Dense>(64, Activation::kRelu);
  model.emplace<Dense>(kClasses);
  model.build({2}, seed, mirror::DType::kFloat32, device);
  return model;
}

int train(mirror::dist::Runtime& runtime, int epochs, const std::string& output) {
  using namespace mirror;
  train::TrainConfig config;  // schedule, optimizer, devices, outputs: as mirror-train's flags
  config.epochs = epochs;
  config.batch_size = 64;  // global: each of the R replicas gets 64 / R samples per step
  config.optimizer = "adam";
  config.lr = 0.01;
  config.devices = "cpu";
  config.seed = 5;
  config.progress = false;
  if (!output.empty()) {
    config.checkpoint_dir = output + "/checkpoints";
    config.log_jsonl = output + "/log.jsonl";
  }
  train::Task task;
  task.model = [seed = config.seed](Device device) { return make_model(device, seed); };
  task.model_description = "spirals MLP 2-64-64-3";
  task.train = std::make_shared<Spirals>(1536, /*seed=*/11);
  task.test = std::make_shared<Spirals>(384, /*seed=*/12);

  try {
    train::Trainer trainer(runtime, config, task);
    const train::FitSummary summary = trainer.fit();
    std::printf("rank %d weights fingerprint %016llx\n", runtime.world_rank(),
                static_cast<unsigned long long>(summary.weights_fingerprint));
    return 0;
  } catch (const train::JobStopped& e) {
    // A set-up error every rank agreed on (or a diverged run): one rank prints it, all exit.
    if (e.speaker()) std::fprintf(stderr, "spirals: %s\n", e.what());
    return e.exit_code();
  }
}

}  // namespace

int main(int argc, char** argv) {
  return mirror::dist::run_main(argc, argv, [&](mirror::dist::Runtime& runtime) {
    const int epochs = argc > 1 ? std::atoi(argv[1]) : 8;
    MIRROR_CHECK(
        epochs >= 1, mirror::InvalidArgument,
        std::string("usage: spirals [epochs >= 1 [output folder]], got '") + argv[1] + "'");
    return train(runtime, epochs, argc > 2 ? argv[2] : "");
  });
}
