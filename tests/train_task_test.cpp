// The generic Trainer path in one process (an MPI singleton): a custom Sequential and an
// in-memory Dataset trained through Trainer(runtime, config, task); 1 vs 2 in-process replicas
// with the same global batch; interrupted + resumed == uninterrupted, bitwise; resume with
// another model description is a clear error; no test split means no evaluation; and the seeded
// random subsets behind --train-limit keep every class.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "mirror/distributed/runtime.h"
#include "mirror/precision.h"
#include "temp_dir.h"
#include "train/trainer_impl.h"
#include "train_task_testing.h"

namespace mirror::testing_util {
namespace {

dist::Runtime& runtime() {
  static int argc = 1;
  static char name[] = "train_task_test";
  static char* args[] = {name, nullptr};
  static char** argv = args;
  static dist::Runtime rt(argc, argv);
  return rt;
}

double max_relative_difference(nn::Sequential& a, nn::Sequential& b) {
  const auto pa = a.parameters();
  const auto pb = b.parameters();
  EXPECT_EQ(pa.size(), pb.size());
  double worst = 0;
  for (std::size_t i = 0; i < pa.size(); ++i) {
    const Tensor x = pa[i]->value.to(Device::cpu());
    const Tensor y = pb[i]->value.to(Device::cpu());
    const float* u = x.data<float>();
    const float* v = y.data<float>();
    for (std::int64_t k = 0; k < x.numel(); ++k) {
      worst =
          std::max(worst, std::fabs(double(u[k]) - v[k]) / std::max(1e-3, std::fabs(double(v[k]))));
    }
  }
  return worst;
}

TEST(TrainerTask, TrainsACustomModelAndEvaluates) {
  train::Trainer trainer(runtime(), quiet_cpu_config(), blob_task());
  const train::FitSummary s = trainer.fit();
  EXPECT_TRUE(s.evaluated);
  EXPECT_EQ(s.steps, 16);           // 96 samples / 12 = 8 steps x 2 epochs
  EXPECT_GT(s.test_accuracy, 0.6);  // three well-separated blobs
  EXPECT_EQ(trainer.model().parameters().size(), 4u);
}

TEST(TrainerTask, TheStartUpLineShowsTheTasksDescription) {
  ::testing::internal::CaptureStdout();
  train::Trainer trainer(runtime(), quiet_cpu_config(), blob_task());
  const std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_NE(out.find("[mirror] model \"blob mlp hidden 8\" (a C++ Task): "), std::string::npos)
      << out;
}

TEST(TrainerTask, NoTestSplitMeansNoEvaluation) {
  train::Trainer trainer(runtime(), quiet_cpu_config(), blob_task(/*with_test=*/false));
  const train::FitSummary s = trainer.fit();
  EXPECT_FALSE(s.evaluated);
  EXPECT_EQ(s.test_loss, 0);
  EXPECT_GT(s.train_loss, 0);
}

TEST(TrainerTask, TwoInProcessReplicasMatchOne) {
  train::Trainer one(runtime(), quiet_cpu_config("cpu"), blob_task());
  one.fit();
  train::Trainer two(runtime(), quiet_cpu_config("cpu:2"), blob_task());
  EXPECT_EQ(two.fit().world_replicas, 2);
  nn::Sequential initial = blob_model(Device::cpu(), 5, 3);
  EXPECT_GT(max_relative_difference(one.model(), initial), 1e-3);  // it trained
  EXPECT_LE(max_relative_difference(two.model(), one.model()), 1e-5);
}

TEST(TrainerTask, ResumeIsBitwiseAndChecksTheModel) {
  TempDir dir("mirror-task");
  const std::string ck = (dir.path() / "ck").string();
  const std::uint64_t uninterrupted =
      train::Trainer(runtime(), quiet_cpu_config(), blob_task()).fit().weights_fingerprint;

  train::TrainConfig first = quiet_cpu_config();
  first.max_steps = 5;  // stops mid-epoch 1
  first.checkpoint_dir = ck;
  EXPECT_EQ(train::Trainer(runtime(), first, blob_task()).fit().final_step, 5);

  train::TrainConfig second = quiet_cpu_config();
  second.resume = ck;
  const train::FitSummary resumed = train::Trainer(runtime(), second, blob_task()).fit();
  EXPECT_EQ(resumed.steps, 11);
  EXPECT_EQ(resumed.weights_fingerprint, uninterrupted);

  // Another architecture: the error names both descriptions.
  try {
    train::Trainer(runtime(), second, blob_task(true, /*hidden=*/9)).fit();
    FAIL() << "resume with another model did not fail";
  } catch (const InvalidArgument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("blob mlp hidden 8"), std::string::npos) << what;
    EXPECT_NE(what.find("blob mlp hidden 9"), std::string::npos) << what;
  }
}

TEST(TrainerTask, CheckpointTensorsAreTheSequentialsParameterNames) {
  TempDir dir("mirror-task");
  train::TrainConfig c = quiet_cpu_config();
  c.checkpoint_dir = (dir.path() / "ck").string();
  c.epochs = 1;
  train::Trainer trainer(runtime(), c, blob_task());
  trainer.fit();
  train::CheckpointManager manager(c.checkpoint_dir, 0);
  const auto loaded = manager.latest_valid();
  ASSERT_TRUE(loaded.has_value());
  for (nn::Parameter* p : trainer.model().parameters()) {
    EXPECT_TRUE(loaded->file.tensors.count(p->name)) << p->name;
  }
  EXPECT_EQ(loaded->file.metadata.at("mirror.model"), "blob mlp hidden 8");
}

TEST(TrainerTask, TheTf32SwitchFollowsTheConfig) {
  // Note [TF32]: the library's default is exact float32; a trainer sets the process-wide switch
  // from --tf32 (default on), which the CUDA kernels read; the CPU's results do not change.
  set_tf32(false);
  train::TrainConfig on = quiet_cpu_config();
  EXPECT_EQ(on.tf32, "on");
  train::Trainer with(runtime(), on, blob_task());
  EXPECT_TRUE(tf32());
  const train::FitSummary a = with.fit();
  train::TrainConfig off = quiet_cpu_config();
  off.tf32 = "off";
  train::Trainer without(runtime(), off, blob_task());
  EXPECT_FALSE(tf32());
  const train::FitSummary b = without.fit();
  EXPECT_EQ(a.train_loss, b.train_loss);
  EXPECT_EQ(max_relative_difference(with.model(), without.model()), 0.0);
  off.tf32 = "maybe";
  try {
    off.validate();
    FAIL() << "--tf32 maybe was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("--tf32 must be on or off, got 'maybe'"), std::string::npos)
        << e.what();
  }
  set_tf32(false);
}

TEST(TrainerTask, BadTasksAreClearErrors) {
  train::Task no_train = blob_task();
  no_train.train = nullptr;
  EXPECT_THROW(train::Trainer(runtime(), quiet_cpu_config(), no_train), InvalidArgument);
  train::Task mismatched = blob_task();
  mismatched.test = std::make_shared<Blobs>(30, 4, 2);
  try {
    train::Trainer(runtime(), quiet_cpu_config(), mismatched);
    FAIL() << "train and test with different classes were accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("train 3 classes"), std::string::npos) << e.what();
  }
}

TEST(TrainerTask, FloatTargetsTrainWithMseByDefault) {
  train::TrainConfig c = quiet_cpu_config();
  c.epochs = 1;
  const train::FitSummary before = train::Trainer(runtime(), c, line_task()).fit();
  c.epochs = 6;
  const train::FitSummary after = train::Trainer(runtime(), c, line_task()).fit();
  EXPECT_EQ(after.loss, "mse");
  EXPECT_TRUE(after.evaluated);
  EXPECT_GT(before.test_mse, 0);
  EXPECT_LT(after.test_mse, before.test_mse) << "more epochs fit the line better";
  EXPECT_NEAR(after.test_loss, after.test_mse, 1e-6) << "MSE loss is the mean squared error";
  EXPECT_GT(after.test_mae, 0);
}

TEST(TrainerTask, LossAndModelWidthMustSuitTheData) {
  train::TrainConfig c = quiet_cpu_config();
  c.loss = "softmax-cross-entropy";
  try {
    train::Trainer(runtime(), c, line_task());
    FAIL() << "cross-entropy on float targets was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("float targets [1]"), std::string::npos) << e.what();
  }
  try {
    train::Trainer(runtime(), quiet_cpu_config(), line_task(/*outputs=*/3));
    FAIL() << "a 3-wide model for 1 target was accepted";
  } catch (const InvalidArgument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("outputs [3]"), std::string::npos) << what;
    EXPECT_NE(what.find("float targets [1]"), std::string::npos) << what;
  }
  train::Task wide = blob_task();
  wide.model = [](Device d) { return blob_model(d, 5, 4); };
  try {
    train::Trainer(runtime(), quiet_cpu_config(), wide);
    FAIL() << "a 4-class model for 3 classes was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("3 classes"), std::string::npos) << e.what();
  }
}

// --- Note [Data limits] ---------------------------------------------------------------------

std::map<int, int> class_counts(const data::Dataset& ds) {
  std::map<int, int> counts;
  for (std::int64_t i = 0; i < ds.size(); ++i) ++counts[ds.label(i)];
  return counts;
}

TEST(RandomSubset, KeepsTheClassBalanceOfSortedData) {
  auto sorted = std::make_shared<Blobs>(5000, 5, 1, /*sorted_by_class=*/true);
  const auto subset = train::random_subset(sorted, 500, /*seed=*/0, /*salt=*/1);
  ASSERT_EQ(subset->size(), 500);
  const auto counts = class_counts(*subset);
  ASSERT_EQ(counts.size(), 5u) << "a prefix of sorted data would hold one class";
  for (auto [label, n] : counts) EXPECT_TRUE(n >= 60 && n <= 140) << label << ": " << n;
}

TEST(RandomSubset, SeededAndAllOrNothing) {
  auto data = std::make_shared<Blobs>(1000, 4, 1);
  auto a = train::random_subset(data, 100, 7, 1);
  auto b = train::random_subset(data, 100, 7, 1);
  auto c = train::random_subset(data, 100, 8, 1);
  std::vector<float> xa(Blobs::kFeatures), xb(Blobs::kFeatures), xc(Blobs::kFeatures);
  bool differs = false;
  for (std::int64_t i = 0; i < 100; ++i) {
    a->decode_float(i, xa.data());
    b->decode_float(i, xb.data());
    c->decode_float(i, xc.data());
    EXPECT_EQ(xa, xb);
    differs = differs || xa != xc;
  }
  EXPECT_TRUE(differs) << "another seed draws other samples";
  EXPECT_EQ(train::random_subset(data, 0, 7, 1), data);
  EXPECT_EQ(train::random_subset(data, 1000, 7, 1), data);
  EXPECT_THROW(a->label(100), InvalidArgument);
}

TEST(RandomSubset, LimitedWordListsHoldEveryLanguage) {
  train::TrainConfig c;
  c.model = "gru-words";
  c.train_limit = 4096;
  c.test_limit = 1024;
  train::ConfigTask t;
  try {
    t = train::task_from_config(c);
  } catch (const DataError& e) {
    GTEST_SKIP() << "word lists not installed: " << e.what();
  }
  const auto counts = class_counts(*t.task.train);
  ASSERT_EQ(counts.size(), 5u);
  for (auto [label, n] : counts) EXPECT_GT(n, 4096 / 5 / 3) << "language " << label;
  EXPECT_EQ(class_counts(*t.task.test).size(), 5u);
}

}  // namespace
}  // namespace mirror::testing_util
