// Resume through the generic Trainer (an MPI singleton): --max-steps and --epochs resumes with
// the same command end where the uninterrupted run does, bitwise; --resume with no valid
// checkpoint is an error listing each file (--resume-or-start starts fresh); a checkpoint must
// be complete and well-typed for this run; a changed seed/optimizer/lr/global batch needs
// --allow-config-change; a fresh run refuses a folder holding another run's checkpoints; and
// --keep 0 keeps every checkpoint; BatchNormalization's moving statistics are saved under their
// layer names and restored bit-exactly. docs/checkpoint.md, "Resuming".
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <functional>
#include <limits>

#include "mirror/distributed/runtime.h"
#include "mirror/nn/cnn_layers.h"
#include "mirror/train/checkpoint.h"
#include "temp_dir.h"
#include "train_task_testing.h"

namespace mirror::testing_util {
namespace {

namespace fs = std::filesystem;

dist::Runtime& runtime() {
  static int argc = 1;
  static char name[] = "train_resume_test";
  static char* args[] = {name, nullptr};
  static char** argv = args;
  static dist::Runtime rt(argc, argv);
  return rt;
}

train::FitSummary fit(const train::TrainConfig& c) {
  return train::Trainer(runtime(), c, blob_task()).fit();
}

/// The message of the Error `c` throws on fit (fails the test when it does not throw).
template <class E = Error>
std::string fit_error(const train::TrainConfig& c) {
  try {
    fit(c);
  } catch (const E& e) {
    return e.what();
  }
  ADD_FAILURE() << "fit did not throw";
  return {};
}

void remove_checkpoints_after(const fs::path& dir, std::int64_t step) {
  for (const auto& [s, path] : train::CheckpointManager(dir, 0).list())
    if (s > step) fs::remove(path);
}

/// A run of quiet_cpu_config (8 steps per epoch, 2 epochs) that checkpoints every 2 steps and
/// keeps them all: a shared source of valid checkpoints.
class Resume : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = quiet_cpu_config();
    base_.checkpoint_dir = (dir_.path() / "ck").string();
    base_.checkpoint_every = 2;
    base_.keep = 0;
  }
  fs::path ck() const { return base_.checkpoint_dir; }
  train::TrainConfig resuming(const fs::path& from) const {
    train::TrainConfig c = base_;
    c.resume = from.string();
    c.checkpoint_dir = from.string();
    return c;
  }
  /// Copies checkpoint `step` of ck() into a new folder after `mutate` changed it.
  fs::path mutated(std::int64_t step, const std::function<void(train::SafetensorsFile&)>& mutate) {
    train::SafetensorsFile f =
        train::read_safetensors(train::CheckpointManager(ck(), 0).path_for(step));
    f.metadata.erase(train::kChecksumKey);
    mutate(f);
    const fs::path out = dir_.path() / ("m" + std::to_string(++copies_));
    train::write_safetensors(train::CheckpointManager(out, 0).path_for(step), f.tensors,
                             f.metadata);
    return out;
  }

  TempDir dir_{"mirror-resume"};
  train::TrainConfig base_;
  int copies_ = 0;
};

TEST_F(Resume, MaxStepsIsTheGlobalStepAndKeepZeroKeepsAll) {
  train::TrainConfig c = base_;
  c.max_steps = 11;
  EXPECT_NO_THROW(c.validate()) << "--keep 0 means keep all (docs/checkpoint.md)";
  const train::FitSummary whole = fit(c);
  EXPECT_EQ(whole.final_step, 11);
  EXPECT_EQ(train::CheckpointManager(ck(), 0).list().size(), 6u) << "steps 2,4,6,8,10,11 kept";

  remove_checkpoints_after(ck(), 4);  // as if killed at step 5
  train::TrainConfig again = resuming(ck());
  again.max_steps = 11;  // the same command, plus --resume
  const train::FitSummary resumed = fit(again);
  EXPECT_EQ(resumed.steps, 7);
  EXPECT_EQ(resumed.final_step, 11);
  EXPECT_EQ(resumed.weights_fingerprint, whole.weights_fingerprint);

  // Resuming a run that already reached --max-steps trains nothing and changes nothing.
  const train::FitSummary done = fit(again);
  EXPECT_EQ(done.steps, 0);
  EXPECT_EQ(done.final_step, 11);
  EXPECT_EQ(done.weights_fingerprint, whole.weights_fingerprint);
}

TEST_F(Resume, EpochsResumeWithTheSameCommandIsBitwise) {
  const train::FitSummary whole = fit(base_);
  EXPECT_EQ(whole.final_step, 16);
  remove_checkpoints_after(ck(), 10);  // killed in epoch 2
  const train::FitSummary resumed = fit(resuming(ck()));
  EXPECT_EQ(resumed.steps, 6);
  EXPECT_EQ(resumed.weights_fingerprint, whole.weights_fingerprint);
}

/// Dense(8) -> BatchNormalization -> relu -> Dense(3): a model with non-trained buffers.
train::Task batchnorm_task() {
  train::Task t = blob_task();
  t.model = [](Device d) {
    nn::Sequential m;
    m.emplace<nn::Dense>(8);
    m.emplace<nn::BatchNormalization>(0.9);
    m.emplace<nn::ActivationLayer>(ops::Activation::kRelu);
    m.emplace<nn::Dense>(3);
    m.build({Blobs::kFeatures}, 5, DType::kFloat32, d);
    return m;
  };
  t.model_description = "blob mlp with batchnorm";
  return t;
}

TEST_F(Resume, BatchNormMovingStatisticsAreCheckpointedAndRestoredBitwise) {
  train::TrainConfig c = base_;
  c.epochs = 1;
  const train::FitSummary whole = train::Trainer(runtime(), c, batchnorm_task()).fit();
  const auto file = train::read_safetensors(train::CheckpointManager(ck(), 0).path_for(4));
  ASSERT_TRUE(file.tensors.count("batch_normalization_1/moving_mean"));
  ASSERT_TRUE(file.tensors.count("batch_normalization_1/moving_variance"));
  const auto mean = file.tensors.at("batch_normalization_1/moving_mean").to_vector<float>();
  EXPECT_NE(mean, std::vector<float>(mean.size(), 0.0f)) << "the statistics moved";

  remove_checkpoints_after(ck(), 4);
  const train::FitSummary resumed = train::Trainer(
                                        runtime(),
                                        [&] {
                                          train::TrainConfig r = resuming(ck());
                                          r.epochs = 1;
                                          return r;
                                        }(),
                                        batchnorm_task())
                                        .fit();
  EXPECT_EQ(resumed.steps, 4);
  // The fingerprint covers the buffers: a resume that lost them would differ.
  EXPECT_EQ(resumed.weights_fingerprint, whole.weights_fingerprint);

  const fs::path lacking = mutated(4, [](train::SafetensorsFile& f) {
    f.tensors.erase("batch_normalization_1/moving_variance");
  });
  train::TrainConfig r = resuming(lacking);
  r.epochs = 1;
  try {
    train::Trainer(runtime(), r, batchnorm_task()).fit();
    ADD_FAILURE() << "a checkpoint without the moving variance was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("batch_normalization_1/moving_variance"),
              std::string::npos)
        << e.what();
  }
}

TEST_F(Resume, NoValidCheckpointIsAnErrorListingEachFile) {
  const fs::path bad = dir_.path() / "bad";
  fs::create_directories(bad);
  std::ofstream(bad / "ckpt-000000000004.safetensors") << "garbage";
  std::ofstream(bad / "ckpt-000000000008.safetensors") << std::string(64, '\0');
  const std::string what = fit_error<DataError>(resuming(bad));
  EXPECT_NE(what.find("holds no valid checkpoint"), std::string::npos) << what;
  EXPECT_NE(what.find("ckpt-000000000004.safetensors"), std::string::npos) << what;
  EXPECT_NE(what.find("ckpt-000000000008.safetensors"), std::string::npos) << what;
  EXPECT_NE(what.find("--resume-or-start"), std::string::npos) << what;

  train::TrainConfig or_start = resuming(bad);
  or_start.resume_or_start = true;
  EXPECT_EQ(fit(or_start).final_step, 16) << "--resume-or-start starts fresh";

  const fs::path empty = dir_.path() / "empty";
  fs::create_directories(empty);
  EXPECT_NE(fit_error<DataError>(resuming(empty)).find("holds no checkpoint"), std::string::npos);
  train::TrainConfig missing = base_;
  missing.resume = (dir_.path() / "nowhere").string();
  EXPECT_NE(fit_error<InvalidArgument>(missing).find("no such folder"), std::string::npos);
  missing.resume_or_start = true;
  EXPECT_EQ(fit(missing).final_step, 16);
}

TEST_F(Resume, AnIncompleteCheckpointIsRejectedNamingTheTensor) {
  train::TrainConfig c = base_;
  c.max_steps = 4;
  fit(c);
  struct Case {
    const char* expected;
    std::function<void(train::SafetensorsFile&)> mutate;
  };
  const std::vector<Case> cases = {
      {"missing tensor 'optimizer/dense_1/kernel/adam_m'",
       [](auto& f) { f.tensors.erase("optimizer/dense_1/kernel/adam_m"); }},
      {"missing tensor 'dense_2/bias'", [](auto& f) { f.tensors.erase("dense_2/bias"); }},
      {"unknown tensor 'extra/thing'",
       [](auto& f) { f.tensors["extra/thing"] = Tensor::zeros({2}); }},
      {"tensor 'dense_1/bias' is F32 [9], this run needs F32 [8]",
       [](auto& f) { f.tensors["dense_1/bias"] = Tensor::zeros({9}); }},
      {"tensor 'dense_1/bias' is F64 [8]",
       [](auto& f) { f.tensors["dense_1/bias"] = Tensor::zeros({8}, DType::kFloat64); }},
      {"tensor 'dense_2/kernel' holds a non-finite value",
       [](auto& f) {
         Tensor t = f.tensors["dense_2/kernel"].clone();
         t.data<float>()[3] = std::numeric_limits<float>::quiet_NaN();
         f.tensors["dense_2/kernel"] = t;
       }},
      {"metadata 'mirror.step' is 'abc'", [](auto& f) { f.metadata["mirror.step"] = "abc"; }},
      {"metadata 'mirror.global_batch' is '12x'",
       [](auto& f) { f.metadata["mirror.global_batch"] = "12x"; }},
      {"'optimizer/step'", [](auto& f) { f.tensors.erase("optimizer/step"); }},
  };
  for (const Case& k : cases) {
    const std::string what = fit_error(resuming(mutated(4, k.mutate)));
    EXPECT_NE(what.find(k.expected), std::string::npos)
        << "expected '" << k.expected << "' in: " << what;
    EXPECT_EQ(what.find("stoll"), std::string::npos) << what;
  }
}

TEST_F(Resume, ChangedConfigNeedsAllowConfigChange) {
  train::TrainConfig c = base_;
  c.max_steps = 4;
  fit(c);
  train::TrainConfig changed = resuming(ck());
  changed.seed = 4;
  changed.lr = 0.02;
  changed.optimizer = "sgd";
  const std::string what = fit_error<InvalidArgument>(changed);
  EXPECT_NE(what.find("seed 3 -> 4"), std::string::npos) << what;
  EXPECT_NE(what.find("lr 0.01 -> 0.02"), std::string::npos) << what;
  EXPECT_NE(what.find("optimizer adam -> sgd"), std::string::npos) << what;
  EXPECT_NE(what.find("--allow-config-change"), std::string::npos) << what;

  train::TrainConfig batch = resuming(ck());
  batch.batch_size = 24;
  EXPECT_NE(fit_error<InvalidArgument>(batch).find("global batch 12 -> 24"), std::string::npos);

  changed.allow_config_change = true;
  changed.checkpoint_dir = (dir_.path() / "out1").string();  // keep ck() as it is
  const train::FitSummary s = fit(changed);
  EXPECT_EQ(s.final_step, 16);
  EXPECT_EQ(s.steps, 12);
  batch.allow_config_change = true;
  batch.checkpoint_dir =
      (dir_.path() / "out2").string();  // 4 steps of 12 = 48 samples = 2 steps of 24
  EXPECT_EQ(fit(batch).steps, 2 + 4);
}

TEST_F(Resume, TheRateTheStepsUseAndTheScheduleMustStayTheSame) {
  // --lr-scale linear on 2 replicas, resumed on 1 (a lost-node restart): the same --lr, but
  // the steps would use half the rate. Before, that resumed silently.
  train::TrainConfig c = base_;
  c.max_steps = 4;
  c.devices = "cpu:2";
  c.lr_scale_by_replicas = true;
  fit(c);
  train::TrainConfig one = resuming(ck());
  one.devices = "cpu";
  one.lr_scale_by_replicas = true;
  EXPECT_NE(fit_error<InvalidArgument>(one).find(
                "lr 0.02 (--lr 0.01 x 2 replicas, --lr-scale linear) -> 0.01 (--lr 0.01 x 1 "
                "replica, --lr-scale linear)"),
            std::string::npos);
  train::TrainConfig same = resuming(ck());
  same.devices = "cpu:2";
  same.lr_scale_by_replicas = true;
  same.schedule = "cosine";
  same.warmup_steps = 2;
  const std::string what = fit_error<InvalidArgument>(same);
  EXPECT_NE(what.find("schedule \"constant\" -> \"cosine\""), std::string::npos) << what;
  EXPECT_NE(what.find("warmup steps 0 -> 2"), std::string::npos) << what;
  EXPECT_EQ(what.find("lr "), std::string::npos) << what;
}

// A spec file's checkpoints written while the log named it by its stem resume once the spec
// states a name of its own: the name is not the architecture (Trainer::Impl::same_model).
TEST(ResumeSpec, ASpecRenamedInItsFileStillResumes) {
  TempDir dir("mirror-resume-spec");
  const fs::path spec = dir.path() / "mlp.json";
  const std::string layers = R"("layers": [{"type": "flatten"}, {"type": "dense"}])";
  std::ofstream(spec) << "{" << layers << "}";
  train::TrainConfig c = quiet_cpu_config();
  c.model_spec = spec.string();
  c.data = "synthetic";
  c.train_limit = 48;
  c.test_limit = 12;
  c.max_steps = 2;
  c.checkpoint_dir = (dir.path() / "ck").string();
  EXPECT_EQ(train::Trainer(runtime(), c).fit().final_step, 2);
  std::ofstream(spec) << R"({"name": "renamed", )" << layers << "}";
  c.resume = c.checkpoint_dir;
  c.max_steps = 4;
  const train::FitSummary s = train::Trainer(runtime(), c).fit();
  EXPECT_EQ(s.final_step, 4);
  EXPECT_EQ(s.steps, 2);
}

TEST_F(Resume, AFreshRunRefusesAnotherRunsCheckpoints) {
  train::TrainConfig c = base_;
  c.max_steps = 4;
  fit(c);
  c.max_steps = 2;
  const std::string what = fit_error<InvalidArgument>(c);
  EXPECT_NE(what.find("already holds 2 checkpoint(s)"), std::string::npos) << what;
  EXPECT_NE(what.find("--resume " + ck().string()), std::string::npos) << what;
  EXPECT_NE(what.find("--overwrite-checkpoints"), std::string::npos) << what;
  EXPECT_EQ(train::CheckpointManager(ck(), 0).list().size(), 2u) << "nothing was deleted";

  c.overwrite_checkpoints = true;
  fit(c);
  const auto left = train::CheckpointManager(ck(), 0).list();
  ASSERT_EQ(left.size(), 1u) << "the old run's checkpoints were deleted";
  EXPECT_EQ(left[0].first, 2);
}

}  // namespace
}  // namespace mirror::testing_util
