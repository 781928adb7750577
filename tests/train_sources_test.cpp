// The Trainer's hooks for front ends (the Python module): in-memory sources stand for the files
// they replace (Note [In-memory sources]: arrays owned or borrowed, and a spec's JSON, train the
// same weights as the .npy and .json files), and fit callbacks see Keras-named logs, stop every
// rank after the step or epoch they ask, and turn an exception into a JobStopped (Note [Fit
// callbacks]); the history holds each epoch's logs.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "data_test_util.h"
#include "mirror/data/npy.h"
#include "mirror/distributed/runtime.h"
#include "mirror/train/trainer.h"
#include "temp_dir.h"

namespace mirror::testing_util {
namespace {

dist::Runtime& runtime() {
  static int argc = 1;
  static char name[] = "train_sources_test";
  static char* args[] = {name, nullptr};
  static char** argv = args;
  static dist::Runtime rt(argc, argv);
  return rt;
}

constexpr const char* kSpec =
    R"({"name": "mlp", "layers": [{"type": "dense", "units": 8, "activation": "relu"},
                                   {"type": "dense"}]})";

struct Arrays {
  data::NumericArray x, y;
};

/// 96 points of 4 features in 3 classes (class c shifted along feature c).
Arrays blobs() {
  std::mt19937_64 rng(7);
  std::normal_distribution<float> noise(0.0f, 0.5f);
  std::vector<float> x;
  std::vector<std::int64_t> y;
  for (int i = 0; i < 96; ++i) {
    y.push_back(i % 3);
    for (int f = 0; f < 4; ++f) x.push_back(noise(rng) + (f == i % 3 ? 2.0f : 0.0f));
  }
  return {data::test::make_array(x, {96, 4}), data::test::make_array(y, {96})};
}

train::TrainConfig config() {
  train::TrainConfig c;
  c.devices = "cpu";
  c.threads = 1;
  c.progress = false;
  c.batch_size = 16;
  c.epochs = 2;
  c.lr = 0.01;
  return c;
}

/// The same elements, not owned: they live in a vector that `owner` keeps alive.
data::NumericArray borrowed(const data::NumericArray& a) {
  auto bytes = std::make_shared<std::vector<std::uint8_t>>(a.bytes);
  data::NumericArray out;
  out.type = a.type;
  out.shape = a.shape;
  out.borrowed = bytes->data();
  out.owner = bytes;
  return out;
}

train::Sources in_memory(const data::NumericArray& x, const data::NumericArray& y) {
  train::Sources s;
  s.train_x = x;
  s.train_y = y;
  s.model_spec = nlohmann::json::parse(kSpec);
  return s;
}

train::TrainConfig named(train::TrainConfig c) {
  c.train_x = "x";
  c.train_y = "y";
  c.model_spec = "model spec 'mlp'";
  return c;
}

TEST(TrainerSources, ArraysAndSpecInMemoryTrainLikeTheirFiles) {
  TempDir dir;
  const Arrays a = blobs();
  const auto write = [&](const std::string& name, const std::vector<std::uint8_t>& bytes) {
    std::ofstream((dir.path() / name).string(), std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()),
               static_cast<std::streamsize>(bytes.size()));
    return (dir.path() / name).string();
  };
  train::TrainConfig files = config();
  files.train_x = write("x.npy", data::encode_npy(a.x));
  files.train_y = write("y.npy", data::encode_npy(a.y));
  files.model_spec =
      write("mlp.json", std::vector<std::uint8_t>(kSpec, kSpec + std::strlen(kSpec)));
  const auto from_files = train::Trainer(runtime(), files).fit();

  const auto owned = train::Trainer(runtime(), named(config()), in_memory(a.x, a.y)).fit();
  const auto lent =
      train::Trainer(runtime(), named(config()), in_memory(borrowed(a.x), borrowed(a.y))).fit();
  EXPECT_EQ(owned.weights_fingerprint, from_files.weights_fingerprint);
  EXPECT_EQ(lent.weights_fingerprint, from_files.weights_fingerprint);
  ASSERT_EQ(owned.history.size(), 2u);
  EXPECT_EQ(owned.history[1], from_files.history[1]);
}

TEST(TrainerSources, EverySourceNeedsItsNameInTheConfig) {
  const Arrays a = blobs();
  train::TrainConfig c = named(config());
  c.model_spec.clear();
  try {
    train::Trainer(runtime(), c, in_memory(a.x, a.y));
    FAIL() << "a nameless in-memory spec was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("an in-memory model_spec needs a name"), std::string::npos)
        << e.what();
  }
}

TEST(TrainerCallbacks, LogsHistoryAndAStopAfterAnEpoch) {
  const Arrays a = blobs();
  train::TrainConfig c = named(config());
  c.epochs = 5;
  train::Trainer trainer(runtime(), c, in_memory(a.x, a.y));
  std::vector<std::int64_t> steps;
  std::vector<train::Logs> epochs;
  train::FitCallbacks callbacks;
  callbacks.on_step_end = [&](std::int64_t step, const train::Logs& logs) {
    steps.push_back(step);
    EXPECT_EQ(logs.at(0).first, "loss");
    EXPECT_EQ(logs.at(1).first, "accuracy");
    return false;
  };
  callbacks.on_epoch_end = [&](int epoch, const train::Logs& logs) {
    epochs.push_back(logs);
    return epoch == 1;  // stop after the second epoch
  };
  trainer.set_callbacks(callbacks);
  const train::FitSummary s = trainer.fit();
  EXPECT_TRUE(s.stopped_by_callback);
  EXPECT_EQ(s.steps, 12);  // 2 epochs of 96 / 16
  ASSERT_EQ(steps.size(), 12u);
  EXPECT_EQ(steps.front(), 1);
  EXPECT_EQ(steps.back(), 12);
  ASSERT_EQ(epochs.size(), 2u);
  EXPECT_EQ(s.history, epochs);
  EXPECT_EQ(s.train_loss, epochs[1].at(0).second);
}

TEST(TrainerCallbacks, AStopAtAStepEndsThatEpochAndAThrowStopsTheJob) {
  const Arrays a = blobs();
  train::TrainConfig c = named(config());
  c.epochs = 5;
  {
    train::Trainer trainer(runtime(), c, in_memory(a.x, a.y));
    train::FitCallbacks callbacks;
    callbacks.on_step_end = [](std::int64_t step, const train::Logs&) { return step == 3; };
    trainer.set_callbacks(callbacks);
    const train::FitSummary s = trainer.fit();
    EXPECT_TRUE(s.stopped_by_callback);
    EXPECT_EQ(s.steps, 3);
    EXPECT_EQ(s.history.size(), 1u);  // the epoch still ended with its logs
  }
  train::Trainer trainer(runtime(), c, in_memory(a.x, a.y));
  train::FitCallbacks callbacks;
  callbacks.on_epoch_end = [](int epoch, const train::Logs&) -> bool {
    if (epoch == 1) throw InvalidArgument("bad callback");
    return false;
  };
  trainer.set_callbacks(callbacks);
  try {
    trainer.fit();
    FAIL() << "the callback's exception did not stop the run";
  } catch (const train::JobStopped& e) {
    EXPECT_EQ(e.exit_code(), 1);
    EXPECT_TRUE(e.speaker());
    EXPECT_STREQ(e.what(),
                 "training stopped at the end of epoch 2: a callback failed on rank 0: bad "
                 "callback");
  }
}

}  // namespace
}  // namespace mirror::testing_util
