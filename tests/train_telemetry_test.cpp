// A short run with two in-process replicas (so all-reduces overlap backward) writing the JSON
// log, the trace and TensorBoard events: the trace has no badly nested spans, and all three
// number epochs and steps the same way (docs/metrics.md).
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "mirror/distributed/runtime.h"
#include "mirror/train/tensorboard.h"
#include "mirror/train/trace.h"
#include "temp_dir.h"
#include "train_task_testing.h"
#ifdef MIRROR_WITH_TENSORBOARD
#include "tensorboard_event.pb.h"
#endif

namespace mirror::testing_util {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

dist::Runtime& runtime() {
  static int argc = 1;
  static char name[] = "train_telemetry_test";
  static char* args[] = {name, nullptr};
  static char** argv = args;
  static dist::Runtime rt(argc, argv);
  return rt;
}

std::vector<json> read_log(const fs::path& p) {
  std::ifstream in(p);
  std::vector<json> rows;
  for (std::string line; std::getline(in, line);) rows.push_back(json::parse(line));
  return rows;
}

/// 96 samples / batch 12 = 8 steps per epoch, 2 epochs, two replicas, one bucket per tensor.
struct TracedRun {
  TracedRun() {
    train::TrainConfig c = quiet_cpu_config("cpu:2");
    c.bucket_mb = 1e-6;
    c.first_bucket_mb = 1e-6;
    c.log_jsonl = (dir.path() / "log.jsonl").string();
    c.trace = (dir.path() / "trace.json").string();
    events_dir = dir.path() / "tb";
    if (train::TensorBoardWriter::available()) c.tensorboard = events_dir.string();
    train::Trainer(runtime(), c, blob_task()).fit();
    log = read_log(c.log_jsonl);
    std::ifstream in(c.trace);
    trace = json::parse(in);
  }
  TempDir dir{"mirror-telemetry"};
  std::vector<json> log;
  json trace;
  fs::path events_dir;
};

const TracedRun& traced_run() {
  static const TracedRun run;
  return run;
}

TEST(Telemetry, TraceSpansNestOnEveryTrack) {
  const json& trace = traced_run().trace;
  EXPECT_EQ(train::count_badly_nested(trace), 0u);
  int buckets = 0, comm_tracks = 0;
  for (const auto& e : trace["traceEvents"]) {
    if (e["name"].get<std::string>().rfind("all-reduce bucket", 0) == 0) {
      ++buckets;
      EXPECT_NE(e["tid"], 0) << "all-reduce spans are off the main thread's track";
    }
    if (e["name"] == "thread_name") ++comm_tracks;
  }
  EXPECT_GE(buckets, 16 * 2) << "two or more buckets per step";
  EXPECT_GE(comm_tracks, 1);
}

TEST(Telemetry, LogAndTraceNumberStepsAndEpochsAlike) {
  const TracedRun& run = traced_run();
  std::vector<std::int64_t> log_steps;
  std::set<std::pair<int, std::int64_t>> log_where;
  std::vector<int> epochs;
  for (const json& r : run.log) {
    if (r["type"] == "step") {
      log_steps.push_back(r["step"]);
      log_where.insert({r["epoch"].get<int>(), r["step"].get<std::int64_t>()});
      EXPECT_EQ(r["step_in_epoch"], (r["step"].get<int>() - 1) % 8 + 1);
    }
    if (r["type"] == "epoch") epochs.push_back(r["epoch"]);
    for (const auto& [key, value] : r.items()) {
      EXPECT_FALSE(key.size() > 2 && key.substr(key.size() - 2) == "_s" && key != "samples_per_s")
          << "durations are in ms: " << key;
      EXPECT_NE(key, "seconds");
    }
  }
  ASSERT_EQ(log_steps.size(), 16u);
  for (std::size_t i = 0; i < log_steps.size(); ++i) EXPECT_EQ(log_steps[i], std::int64_t(i) + 1);
  EXPECT_EQ(epochs, (std::vector<int>{1, 2})) << "epochs from 1, as the console's 'epoch 1/2'";
  EXPECT_TRUE(log_where.count({1, 8}) && log_where.count({2, 9}));

  std::set<std::pair<int, std::int64_t>> trace_where;
  for (const auto& e : run.trace["traceEvents"]) {
    if (e["name"].get<std::string>().rfind("step ", 0) != 0) continue;
    const std::int64_t step = e["args"]["step"];
    EXPECT_EQ(e["name"], "step " + std::to_string(step));
    trace_where.insert({e["args"]["epoch"].get<int>(), step});
  }
  EXPECT_EQ(trace_where, log_where);
}

TEST(Telemetry, TensorBoardEventsMatchTheLog) {
#ifndef MIRROR_WITH_TENSORBOARD
  GTEST_SKIP() << "built without protobuf: no TensorBoard events";
#else
  const TracedRun& run = traced_run();
  std::vector<fs::path> files;
  for (const auto& f : fs::directory_iterator(run.events_dir)) files.push_back(f.path());
  ASSERT_EQ(files.size(), 1u);
  EXPECT_NE(files[0].filename().string().find("tfevents"), std::string::npos);
  const auto records = train::read_tfrecords(files[0]);  // checks every CRC
  ASSERT_FALSE(records.empty());
  mirror::tensorboard::Event first;
  ASSERT_TRUE(first.ParseFromString(records[0]));
  EXPECT_EQ(first.file_version(), "brain.Event:2");

  std::map<std::int64_t, double> loss_by_step;
  for (const json& r : run.log) {
    if (r["type"] == "step") loss_by_step[r["step"]] = r["loss"];
  }
  std::map<std::int64_t, float> tb_loss;
  std::set<std::string> tags;
  for (std::size_t i = 1; i < records.size(); ++i) {
    mirror::tensorboard::Event e;
    ASSERT_TRUE(e.ParseFromString(records[i]));
    ASSERT_TRUE(e.has_summary());
    for (const auto& v : e.summary().value()) {
      tags.insert(v.tag());
      if (v.tag() == "train/loss") tb_loss[e.step()] = v.simple_value();
    }
  }
  ASSERT_EQ(tb_loss.size(), loss_by_step.size());
  for (const auto& [step, loss] : loss_by_step) {
    EXPECT_FLOAT_EQ(tb_loss.at(step), static_cast<float>(loss)) << "step " << step;
  }
  for (const char* tag :
       {"train/accuracy", "train/lr", "train/samples_per_s", "train/exposed_comm_ms",
        "train/data_wait_ms", "epoch/loss", "test/accuracy"}) {
    EXPECT_TRUE(tags.count(tag)) << tag;
  }
#endif
}

}  // namespace
}  // namespace mirror::testing_util
