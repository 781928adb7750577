// A user's own model and data trained with Mirror as an installed library: a small MLP written
// with the public layer API learns to tell three interleaved spirals apart, the points served
// by an in-memory Dataset written here, with data-parallel (mirrored) training across the MPI
// ranks. Run:  mpirun -np 2 ./spirals [epochs]
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
#include <mirror/data/loader.h>
#include <mirror/distributed/runtime.h>
#include <mirror/distributed/strategy.h>
#include <mirror/error.h>
#include <mirror/nn/layers.h>
#include <mirror/nn/sequential.h>
#include <mirror/optim/optimizer.h>

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

/// The model: 2 -> 64 -> 64 -> 3, ReLU. Built identically on every device it is asked for.
mirror::nn::Sequential make_model(mirror::Device device) {
  using mirror::nn::Dense;
  using mirror::ops::Activation;
  mirror::nn::Sequential model;
  model.emplace<Dense>(64, Activation::kRelu);
  model.emplace<Dense>(64, Activation::kRelu);
  model.emplace<Dense>(kClasses);
  model.build({2}, /*seed=*/7, mirror::DType::kFloat32, device);
  return model;
}

int train(mirror::dist::Runtime& runtime, int epochs) {
  using namespace mirror;
  dist::MirroredStrategy strategy(runtime, {Device::cpu()}, make_model,
                                  [] { return std::make_unique<optim::Adam>(); });
  auto dataset = std::make_shared<Spirals>(1536, /*seed=*/11);
  data::LoaderOptions options;
  options.global_batch = 64;
  options.seed = 5;
  data::Loader loader(dataset, {strategy.first_replica(), strategy.world_replicas()}, options);

  const bool chief = runtime.world_rank() == 0;
  if (chief) {
    std::printf("%s on %d replicas, %lld steps per epoch\n", dataset->describe().c_str(),
                strategy.world_replicas(), static_cast<long long>(loader.steps_per_epoch()));
  }
  std::vector<data::Batch> batches(1);
  for (int epoch = 0; epoch < epochs; ++epoch) {
    double loss_sum = 0;
    std::int64_t correct = 0, count = 0;
    loader.start(epoch);
    while (auto batch = loader.next()) {
      batches[0] = std::move(*batch);
      const dist::StepResult r = strategy.train_step(batches, /*lr=*/0.01);
      loss_sum += r.loss_sum;
      correct += r.correct;
      count += r.count;
    }
    if (chief) {
      std::printf("epoch %d loss %.4f accuracy %.3f\n", epoch + 1, loss_sum / count,
                  static_cast<double>(correct) / count);
    }
  }
  std::printf("rank %d weights fingerprint %016llx\n", runtime.world_rank(),
              static_cast<unsigned long long>(strategy.weights_fingerprint()));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return mirror::dist::run_main(argc, argv, [&](mirror::dist::Runtime& runtime) {
    const int epochs = argc > 1 ? std::atoi(argv[1]) : 8;
    MIRROR_CHECK(epochs >= 1, mirror::InvalidArgument,
                 std::string("usage: spirals [epochs >= 1], got '") + argv[1] + "'");
    return train(runtime, epochs);
  });
}
