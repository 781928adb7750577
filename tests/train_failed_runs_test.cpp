// Note [Failed runs] (src/train/trainer_fit.cpp): a run that no longer learns stops with an error
// naming the step instead of ending "successfully", and no checkpoint is ever written with a
// non-finite value, so the newest checkpoint always resumes. In one process (an MPI singleton)
// through the generic Trainer path, whose data is not checked at load (Note [Data magnitude]).
#include <gtest/gtest.h>

#include <cmath>
#include <iostream>
#include <string>

#include "mirror/distributed/runtime.h"
#include "mirror/train/checkpoint.h"
#include "temp_dir.h"
#include "train_task_testing.h"

namespace mirror::testing_util {
namespace {

dist::Runtime& runtime() {
  static int argc = 1;
  static char name[] = "train_failed_runs_test";
  static char* args[] = {name, nullptr};
  static char** argv = args;
  static dist::Runtime rt(argc, argv);
  return rt;
}

/// Blobs with every input multiplied by `scale` (1e38: float32 squares overflow).
class ScaledBlobs final : public data::Dataset {
 public:
  ScaledBlobs(std::int64_t size, float scale) : blobs_(size, 3, 1), scale_(scale) {}
  std::int64_t size() const override { return blobs_.size(); }
  int num_classes() const override { return blobs_.num_classes(); }
  DType input_dtype() const override { return DType::kFloat32; }
  Shape sample_shape() const override { return blobs_.sample_shape(); }
  bool is_sequence() const override { return false; }
  std::int32_t label(std::int64_t i) const override { return blobs_.label(i); }
  void decode_float(std::int64_t i, float* dst) const override {
    blobs_.decode_float(i, dst);
    for (int f = 0; f < Blobs::kFeatures; ++f) dst[f] *= scale_;
  }
  std::string describe() const override { return "scaled " + blobs_.describe(); }

 private:
  Blobs blobs_;
  float scale_;
};

/// Every checkpoint in `dir` reads back and holds only finite values (what --resume needs).
void expect_every_checkpoint_finite(const std::filesystem::path& dir) {
  train::CheckpointManager manager(dir, 0);
  for (const auto& [step, path] : manager.list()) {
    const auto file = train::read_safetensors(path);
    for (const auto& [name, t] : file.tensors) {
      const Tensor h = t.to(Device::cpu());
      for (std::int64_t i = 0; i < h.numel(); ++i) {
        ASSERT_TRUE(std::isfinite(h.data<float>()[i]))
            << path << ": " << name << "[" << i << "] = " << h.data<float>()[i];
      }
    }
  }
}

TEST(FailedRuns, OverflowingDataStopsTheRunAndLeavesOnlyFiniteCheckpoints) {
  TempDir dir("mirror-failed-runs");
  train::TrainConfig c = quiet_cpu_config();
  c.checkpoint_dir = (dir.path() / "ck").string();
  c.checkpoint_every = 1;
  c.keep = 0;
  train::Task task = blob_task(/*with_test=*/false);
  task.train = std::make_shared<ScaledBlobs>(96, 1e38f);
  train::Trainer trainer(runtime(), c, task);
  try {
    trainer.fit();
    FAIL() << "a run on data of magnitude 1e38 ended as if it had trained";
  } catch (const train::JobStopped& e) {
    EXPECT_EQ(e.exit_code(), 1);
    EXPECT_NE(std::string(e.what()).find("training stopped at step "), std::string::npos)
        << e.what();
    std::cout << "stopped: " << e.what() << "\n";
  }
  expect_every_checkpoint_finite(dir.path() / "ck");
}

TEST(FailedRuns, StepsSkippedKTimesInARowStopTheRunNamingTheStep) {
  train::TrainConfig c = quiet_cpu_config();
  c.lr = 1e30;
  c.force_lr = true;
  c.max_skipped_steps = 2;
  train::Task task = blob_task(/*with_test=*/false, /*hidden=*/8, /*train_size=*/240);
  task.train = std::make_shared<ScaledBlobs>(240, 1e6f);
  train::Trainer trainer(runtime(), c, task);
  try {
    trainer.fit();
    FAIL() << "a run whose steps are all skipped ended as if it had trained";
  } catch (const train::JobStopped& e) {
    EXPECT_EQ(e.exit_code(), 1);
    EXPECT_NE(std::string(e.what()).find("2 steps in a row were skipped"), std::string::npos)
        << e.what();
  }
}

TEST(FailedRuns, AHealthyRunTrainsAsBefore) {
  train::TrainConfig c = quiet_cpu_config();
  c.max_skipped_steps = 0;
  train::Trainer trainer(runtime(), c, blob_task());
  EXPECT_GT(trainer.fit().test_accuracy, 0.6);  // a healthy run is untouched
}

}  // namespace
}  // namespace mirror::testing_util
