// Guards against bad input and runaway memory: error locations only in debug mode, TrainConfig
// validation (batch, lr, weight decay, integer keys), the step host-memory estimate, and the
// stop request flag.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "mirror/data/fashion_mnist.h"
#include "mirror/error.h"
#include "mirror/json_input.h"
#include "mirror/train/metrics_log.h"
#include "mirror/train/trainer.h"
#include "temp_dir.h"
#include "train/step_memory.h"
#include "train_task_testing.h"

namespace mirror {
namespace {

std::string message_of_check() {
  try {
    MIRROR_CHECK(false, InvalidArgument, "the message");
  } catch (const Error& e) {
    return message_for(e);
  }
  return "";
}

TEST(ErrorLocation, KeptBesideTheMessageAndShownOnlyInDebugMode) {
  try {
    MIRROR_CHECK(1 + 1 == 3, DataError, "arithmetic is off");
    FAIL() << "expected DataError";
  } catch (const DataError& e) {
    EXPECT_EQ(std::string(e.what()), "arithmetic is off");
    EXPECT_NE(e.where().find("guard_checks_test.cpp:"), std::string::npos) << e.where();
  }
  const bool before = debug_messages();
  set_debug_messages(false);
  EXPECT_EQ(message_of_check(), "the message");
  set_debug_messages(true);
  const std::string debug = message_of_check();
  EXPECT_EQ(debug.rfind("the message [tests/guard_checks_test.cpp:", 0), 0u) << debug;
  set_debug_messages(before);
  // Plain exceptions and directly thrown errors print as what() in both modes.
  EXPECT_EQ(message_for(std::runtime_error("plain")), "plain");
}

train::TrainConfig valid_config() {
  train::TrainConfig c;
  c.data = "synthetic";
  return c;
}

void expect_invalid(const train::TrainConfig& c, const std::string& part) {
  try {
    c.validate();
    FAIL() << "expected InvalidArgument naming '" << part << "'";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST(TrainConfigValidation, BatchLrAndWeightDecay) {
  EXPECT_NO_THROW(valid_config().validate());
  auto c = valid_config();
  c.batch_size = -5;
  expect_invalid(c, "--batch-size must be a positive number of samples, got -5");
  c = valid_config();
  c.batch_per_replica = -1;
  expect_invalid(c, "--batch-per-replica must be a positive");
  for (double lr : {std::numeric_limits<double>::infinity(), std::nan(""), -0.1, 0.0}) {
    c = valid_config();
    c.lr = lr;
    expect_invalid(c, "--lr must be a positive finite number");
  }
  c = valid_config();
  c.lr = 50;
  expect_invalid(c, "--force-lr");
  c.force_lr = true;
  EXPECT_NO_THROW(c.validate());
  c = valid_config();
  c.lr = 10;
  EXPECT_NO_THROW(c.validate());
  c = valid_config();
  c.weight_decay = -0.5;
  expect_invalid(c, "--weight-decay must be >= 0");
  c.weight_decay = std::numeric_limits<double>::infinity();
  expect_invalid(c, "--weight-decay must be >= 0");
  EXPECT_THROW(train::check_batch_flag("batch-size", 0), InvalidArgument);
  EXPECT_THROW(train::check_weight_decay_flag(-1), InvalidArgument);  // -1 given is not "default"
}

// Note [Saving where it resumed] (train_resume.cpp): --checkpoint-every needs a folder, which
// --resume DIR gives as well as --checkpoint-dir.
TEST(TrainConfigValidation, CheckpointEveryNeedsACheckpointDirOrAResumeFolder) {
  auto c = valid_config();
  c.checkpoint_every = 4;
  expect_invalid(c, "--checkpoint-every 4 needs a folder to save into: give --checkpoint-dir DIR "
                    "(or --resume DIR, which saves into DIR)");
  c.resume = "ck";
  EXPECT_NO_THROW(c.validate());
  c.resume.clear();
  c.checkpoint_dir = "ck";
  EXPECT_NO_THROW(c.validate());
}

TEST(TrainConfigValidation, ConfigKeysThatMustBeIntegersOrPositive) {
  auto expect_from_json_error = [](const char* text, const std::string& part) {
    try {
      train::TrainConfig::from_json(nlohmann::json::parse(text));
      FAIL() << "expected InvalidArgument for " << text;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  expect_from_json_error(R"({"epochs": 1.5})", "'epochs' must be an integer, got 1.5");
  expect_from_json_error(R"({"max-steps": 2.5})", "'max_steps' must be an integer, got 2.5");
  expect_from_json_error(R"({"batch_size": 0})", "--batch-size must be a positive");
  expect_from_json_error(R"({"weight_decay": -1})", "--weight-decay must be >= 0");
  EXPECT_EQ(train::TrainConfig::from_json(nlohmann::json::parse(R"({"epochs": 3})")).epochs, 3);
  EXPECT_DOUBLE_EQ(train::TrainConfig::from_json(nlohmann::json::parse(R"({"lr": 1})")).lr, 1.0);
}

TEST(TrainConfigValidation, ValuesAcceptedSilentlyBeforeAreRefusedWithTheValue) {
  auto c = valid_config();
  c.momentum = 5;
  expect_invalid(c, "--momentum must be in [0, 1) (0.9 is usual), got 5");
  c = valid_config();
  c.threads = 100000;
  expect_invalid(c, "--threads must be from 0 (automatic) to 1024, got 100000");
  for (double t : {std::numeric_limits<double>::infinity(), 1e300, std::nan("")}) {
    c = valid_config();
    c.comm_timeout_s = t;
    expect_invalid(c, "--comm-timeout must be positive seconds, at most 604800");
  }
  c = valid_config();
  c.startup_timeout_s = std::numeric_limits<double>::infinity();
  expect_invalid(c, "--startup-timeout must be >= 0 seconds (0 = no watchdog) and at most 604800");
  c = valid_config();
  c.max_skipped_steps = -1;
  expect_invalid(c, "--max-skipped-steps must be >= 0");
  EXPECT_EQ(train::parse_seed("18446744073709551615"), 18446744073709551615ull);
  for (const char* bad : {"-1", "1.5", "", "18446744073709551616", "7x"}) {
    try {
      train::parse_seed(bad);
      FAIL() << "expected InvalidArgument for --seed '" << bad << "'";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("got '") + bad + "'"), std::string::npos)
          << e.what();
    }
  }
}

TEST(TrainConfigValidation, ConfigKeysOfTheWrongTypeOrGivenTwice) {
  auto expect_from_json_error = [](const char* text, const std::string& part) {
    try {
      train::TrainConfig::from_json(nlohmann::json::parse(text));
      FAIL() << "expected InvalidArgument for " << text;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  expect_from_json_error(R"({"epochs": true})", "'epochs' must be an integer, got true");
  expect_from_json_error(R"({"seed": -1})", "'seed' must be a whole number >= 0, got -1");
  expect_from_json_error(R"({"lr": "0.1"})", "'lr' must be a number, got \"0.1\"");
  expect_from_json_error(R"({"progress": 1})", "'progress' must be true or false, got 1");
  expect_from_json_error(R"({"model": 3})", "'model' must be a string, got 3");
  expect_from_json_error(R"({"batch_size": 32, "batch-size": 64})",
                         "'batch_size' and 'batch-size' are the same setting");
}

TEST(JsonInput, DeepNestingIsRefusedWithTheLevelNotACrash) {
  for (int depth : {257, 70000, 100000}) {
    const std::string text = std::string(depth, '[') + std::string(depth, ']');
    try {
      parse_json_input(text, "deep.json");
      FAIL() << "expected DataError at depth " << depth;
    } catch (const DataError& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("deep.json: JSON nested more than 256 levels deep"), std::string::npos) << m;
      EXPECT_NE(m.find("at byte 256"), std::string::npos) << m;
      EXPECT_LT(m.size(), 400u);
    }
  }
  // Inside a string, brackets are not nesting; 256 levels are allowed.
  const std::string ok = std::string(256, '[') + "\"[[[\"" + std::string(256, ']');
  EXPECT_NO_THROW(parse_json_input(ok, "ok.json"));
  std::istringstream in(R"({"a": {"b": 1}, "c": [1, 2]})");
  EXPECT_EQ(parse_json_input(in, "small.json")["a"]["b"], 1);
}

TEST(JsonInput, RepeatedKeysAndLongBadInputAreQuotedShort) {
  try {
    parse_json_input(R"({"epochs": 1, "x": {"epochs": 1}, "epochs": 2})", "c.json");
    FAIL() << "expected DataError";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("the key 'epochs' appears twice"), std::string::npos);
  }
  EXPECT_NO_THROW(parse_json_input(R"([{"a": 1}, {"a": 2}])", "list.json"));
  const std::string junk = "{\"a\": \"" + std::string(1 << 20, 'x');  // unterminated string
  try {
    parse_json_input(junk, "junk.json");
    FAIL() << "expected DataError";
  } catch (const DataError& e) {
    EXPECT_LT(std::string(e.what()).size(), 600u);
    EXPECT_NE(std::string(e.what()).find("junk.json is not valid JSON"), std::string::npos);
  }
  EXPECT_EQ(quote_input("short"), "short");
  EXPECT_EQ(quote_input(std::string_view("a\0b", 3)), "a\\x00b");
  const std::string quoted = quote_input(std::string(1000000, '9'));
  EXPECT_EQ(quoted, std::string(200, '9') + "... (1000000 characters in all)");
}

TEST(MetricsLogFailures, AFullDiskThrowsNamingThePathAndReasonAndLeavesNoHalfLine) {
  if (!std::filesystem::exists("/dev/full")) GTEST_SKIP() << "no /dev/full on this system";
  train::MetricsLog log("/dev/full", train::LogMode::kOverwrite);
  try {
    log.write({{"type", "step"}, {"loss", 1.0}});
    FAIL() << "expected Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot write the metrics log '/dev/full': No space left "
                                         "on device"),
              std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(log.enabled());
}

TEST(MetricsLogFailures, AppendingCutsATornLastLine) {
  testing_util::TempDir dir;
  const auto path = dir.path() / "log.jsonl";
  {
    std::ofstream out(path, std::ios::binary);
    out << "{\"step\": 1}\n{\"step\": 2}\n{\"ste";
  }
  {
    train::MetricsLog log(path, train::LogMode::kAppend);
    log.write({{"step", 3}});
  }
  std::ifstream in(path);
  std::stringstream all;
  all << in.rdbuf();
  EXPECT_EQ(all.str(), "{\"step\": 1}\n{\"step\": 2}\n{\"step\":3}\n");
  // A file that is one torn line is emptied; a whole file is left alone.
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << "{\"ste";
  }
  { train::MetricsLog log(path, train::LogMode::kAppend); }
  EXPECT_EQ(std::filesystem::file_size(path), 0u);
}

TEST(StepMemory, ParameterFloorOfTheSpecsLayers) {
  const auto spec = nlohmann::json::parse(R"({"layers": [
      {"type": "embedding", "input_dim": 1000, "output_dim": 32},
      {"type": "gru", "units": 64},
      {"type": "dense", "units": 100, "activation": "relu"},
      {"type": "dropout", "rate": 0.5},
      {"type": "dense", "units": 10}]})");
  // 1000 x 32 + gru 3 x 64 x (32 + 64) + 100 x 64 + 10 x 100.
  EXPECT_EQ(train::parameter_floor(spec), 32000u + 3u * 64 * 96 + 6400u + 1000u);
  const auto convs = nlohmann::json::parse(R"({"layers": [
      {"type": "conv2d", "filters": 1073741824, "kernel": [3, 3]},
      {"type": "conv1d", "filters": 8, "kernel": 5},
      {"type": "bidirectional", "layer": {"type": "lstm", "units": 10}},
      {"type": "dense", "units": 7}]})");
  // conv2d 2^30 x 9 x 1 channel; conv1d 8 x 5 x 2^30 channels; bi-LSTM 2 x 4 x 10 x (8 + 10);
  // dense 7 x 20 (the concatenated directions).
  EXPECT_EQ(train::parameter_floor(convs),
            9ull * 1073741824 + 40ull * 1073741824 + 2 * 4 * 10 * 18 + 7 * 20);
  EXPECT_EQ(train::parameter_floor(nlohmann::json::parse(R"({"layers": "x"})")), 0u);
  const auto huge = nlohmann::json::parse(
      R"({"layers": [{"type": "dense", "units": 4000000000000000000},
                     {"type": "dense", "units": 4000000000000000000}]})");
  EXPECT_EQ(train::parameter_floor(huge), std::uint64_t{1} << 62);  // capped, no wrap-around
  const train::StepMemory m = train::parameter_memory(1000, 2, 2);
  EXPECT_EQ(m.total(), 2u * 1000u * 4u * 4u);  // 2 replicas x (value, gradient, 2 Adam slots)
  try {
    train::check_step_memory(m, 1000, "a budget", "Shrink the layers.");
    FAIL() << "expected OutOfMemory";
  } catch (const OutOfMemory& e) {
    EXPECT_NE(std::string(e.what()).find("the model needs at least"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("Shrink the layers."), std::string::npos);
  }
}

TEST(StepMemory, AddsBatchActivationsAndOptimizerState) {
  testing_util::Blobs data(100, 3, 1);  // 6 float features, class labels
  nn::Sequential model = testing_util::blob_model(Device::cpu(), 1, 3, 8);  // 6 -> 8 -> 3
  const auto m = train::estimate_step_memory(model, data, 10, 2, 2, true);
  EXPECT_EQ(m.batch_bytes, 2u * 10 * (6 * 4 + 4 + 4 + 8));
  EXPECT_EQ(m.activation_bytes, 10u * (6 * 4 + 2 * 8 * 4 + 2 * 3 * 4));
  const std::uint64_t params = 6 * 8 + 8 + 8 * 3 + 3;
  EXPECT_EQ(m.state_bytes, params * 4 * (2 + 2));
  EXPECT_EQ(m.total(), 2 * (m.batch_bytes + m.activation_bytes + m.state_bytes));
  // On a GPU only the staged batch is host memory.
  const auto gpu = train::estimate_step_memory(model, data, 10, 1, 2, false);
  EXPECT_EQ(gpu.total(), gpu.batch_bytes);
}

TEST(StepMemory, RefusesAStepAboveTheBudgetNamingBothAndWhatToChange) {
  testing_util::Blobs data(100, 3, 1);
  nn::Sequential model = testing_util::blob_model(Device::cpu(), 1, 3, 8);
  // A million samples: about 0.3 GB, no allocation made by the estimate itself.
  const auto m = train::estimate_step_memory(model, data, 1'000'000, 1, 2, true);
  EXPECT_NO_THROW(train::check_step_memory(m, m.total(), "the budget"));
  try {
    train::check_step_memory(m, 64u << 20, "90% of MemAvailable 71 MiB");
    FAIL() << "expected OutOfMemory";
  } catch (const OutOfMemory& e) {
    const std::string msg = e.what();
    for (const char* part : {"needs at least", "1000000 samples", "90% of MemAvailable 71 MiB",
                             "64.0 MiB", "--batch-size", "--batch-per-replica", "--accumulation"})
      EXPECT_NE(msg.find(part), std::string::npos) << part << " in: " << msg;
  }
}

TEST(DataFiles, FashionMnistFileNamedGzThatIsNotGzipSaysNotGzip) {
  testing_util::TempDir dir("mirror-guard");
  for (const char* name : {"t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"}) {
    // An uncompressed IDX header: without the check it would parse as IDX or fail on its magic.
    std::ofstream(dir.path() / name, std::ios::binary) << std::string("\0\0\x08\x03", 4) << "abc";
  }
  try {
    data::FashionMnist::load(dir.path().string(), data::Split::kTest, data::Layout::kNCHW);
    FAIL() << "expected DataError";
  } catch (const DataError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("t10k-images-idx3-ubyte.gz: not gzip"), std::string::npos) << msg;
    EXPECT_EQ(msg.find("IDX magic"), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace mirror
