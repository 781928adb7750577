// MetricsLog (JSON lines, flushed per record) and TraceRecorder (Chrome trace events, nesting,
// threads, per-rank merge, file output).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "mirror/error.h"
#include "mirror/train/metrics_log.h"
#include "mirror/train/trace.h"

namespace mirror::train {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

fs::path temp_path(const std::string& name) {
  return fs::temp_directory_path() / ("mirror-" + std::to_string(::getpid()) + "-" + name);
}

std::vector<std::string> lines_of(const fs::path& p) {
  std::ifstream in(p);
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

TEST(MetricsLog, WritesOneFlushedObjectPerLine) {
  const fs::path p = temp_path("log/metrics.jsonl");
  {
    MetricsLog log(p);
    EXPECT_TRUE(log.enabled());
    log.write({{"step", 1}, {"loss", 2.5}, {"phase", "train"}});
    // Flushed per line: visible before the log is closed.
    ASSERT_EQ(lines_of(p).size(), 1u);
    log.write({{"step", 2}, {"loss", 1.25}, {"accuracy", 0.5}});
    EXPECT_THROW(log.write(json::array({1, 2})), InvalidArgument);
  }
  const auto lines = lines_of(p);
  ASSERT_EQ(lines.size(), 2u);
  const json first = json::parse(lines[0]), second = json::parse(lines[1]);
  EXPECT_EQ(first["step"], 1);
  EXPECT_EQ(first["loss"], 2.5);
  EXPECT_EQ(first["phase"], "train");
  EXPECT_EQ(second["accuracy"], 0.5);
  EXPECT_EQ(lines[0], R"({"loss":2.5,"phase":"train","step":1})") << "deterministic bytes";

  MetricsLog append(p, LogMode::kAppend);
  append.write({{"step", 3}});
  EXPECT_EQ(lines_of(p).size(), 3u);
  fs::remove_all(p.parent_path());
}

TEST(MetricsLog, AnExistingFileIsRefusedUnlessOverwriteOrAppend) {
  const fs::path p = temp_path("existing.jsonl");
  { MetricsLog(p).write({{"run", 1}}); }
  try {
    MetricsLog again(p);
    FAIL() << "an existing log was opened without --overwrite";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("--overwrite"), std::string::npos) << e.what();
  }
  EXPECT_THROW(MetricsLog::check_mode(p, LogMode::kNew), InvalidArgument);
  EXPECT_EQ(lines_of(p).size(), 1u) << "the refused log is left as it was";
  MetricsLog::check_mode(p, LogMode::kOverwrite);
  { MetricsLog(p, LogMode::kAppend).write({{"run", 2}}); }
  EXPECT_EQ(lines_of(p).size(), 2u);
  { MetricsLog(p, LogMode::kOverwrite).write({{"run", 3}}); }
  ASSERT_EQ(lines_of(p).size(), 1u);
  EXPECT_EQ(json::parse(lines_of(p)[0])["run"], 3);
  fs::remove(p);
}

// Note [Resumed logs]: a run resumed from the checkpoint of step 4 after a crash at step 6 cuts
// the records of steps 5 and 6 (and everything written after them) before it logs them again.
TEST(MetricsLog, CutAfterStepDropsTheRecordsPastTheResumedStep) {
  const fs::path p = temp_path("resumed.jsonl");
  {
    MetricsLog log(p, LogMode::kOverwrite);
    for (int step = 1; step <= 6; ++step) {
      log.write({{"type", "step"}, {"step", step}});
      if (step == 3) log.write({{"type", "epoch"}, {"epoch", 1}, {"step", 3}});
    }
    log.write({{"type", "summary"}, {"final_step", 6}});
  }
  {
    MetricsLog log(p, LogMode::kAppend);
    EXPECT_EQ(log.cut_after_step(6), 0) << "nothing is past the last step";
    EXPECT_EQ(lines_of(p).size(), 8u);
    EXPECT_EQ(log.cut_after_step(4), 3) << "steps 5 and 6 and the summary of step 6";
    log.write({{"type", "step"}, {"step", 5}});
  }
  std::vector<std::int64_t> steps;
  for (const std::string& line : lines_of(p)) {
    const json j = json::parse(line);
    if (j["type"] == "step") steps.push_back(j["step"]);
  }
  EXPECT_EQ(steps, (std::vector<std::int64_t>{1, 2, 3, 4, 5})) << "each step once, in order";
  {
    MetricsLog log(p, LogMode::kAppend);
    EXPECT_EQ(log.cut_after_step(0), 6) << "a fresh start (--resume-or-start) keeps nothing";
  }
  EXPECT_TRUE(lines_of(p).empty());
  MetricsLog off;
  EXPECT_EQ(off.cut_after_step(0), 0);
  fs::remove(p);
}

TEST(MetricsLog, DisabledAndBadPaths) {
  MetricsLog off;
  EXPECT_FALSE(off.enabled());
  off.write({{"ignored", true}});  // no-op
  EXPECT_THROW(MetricsLog("/proc/definitely/not/writable.jsonl"), InvalidArgument);
  MetricsLog moved = MetricsLog(temp_path("moved.jsonl"));
  EXPECT_TRUE(moved.enabled());
  moved.write({{"a", 1}});
  EXPECT_EQ(lines_of(moved.path()).size(), 1u);
  fs::remove(moved.path());
}

void busy_wait_us(double us, const TraceRecorder& r) {
  const double until = r.now_us() + us;
  while (r.now_us() < until) {
  }
}

TEST(Trace, SpansNestAndHaveNonNegativeDurations) {
  TraceRecorder rec(/*rank=*/3);
  {
    Span step = rec.span("step", "train");
    step.arg("step", 7);
    busy_wait_us(50, rec);
    {
      Span fwd = rec.span("forward", "compute");
      busy_wait_us(100, rec);
    }
    Span bwd = rec.span("backward", "compute");
    busy_wait_us(20, rec);
    bwd.end();
    bwd.end();  // idempotent
  }
  const auto events = rec.events();
  ASSERT_EQ(events.size(), 3u);
  // Recorded when they end: forward, backward, then step.
  EXPECT_EQ(events[0].name, "forward");
  EXPECT_EQ(events[1].name, "backward");
  EXPECT_EQ(events[2].name, "step");
  const TraceEvent &fwd = events[0], &bwd = events[1], &step = events[2];
  for (const auto& e : events) {
    EXPECT_GE(e.ts_us, 0.0);
    EXPECT_GE(e.dur_us, 0.0);
    EXPECT_EQ(e.pid, 3);
    EXPECT_EQ(e.tid, 0);
  }
  EXPECT_GE(fwd.dur_us, 100.0);
  EXPECT_LE(step.ts_us, fwd.ts_us);
  EXPECT_GE(step.ts_us + step.dur_us, fwd.ts_us + fwd.dur_us);
  EXPECT_GE(bwd.ts_us, fwd.ts_us + fwd.dur_us);
  EXPECT_GE(step.ts_us + step.dur_us, bwd.ts_us + bwd.dur_us);
  EXPECT_EQ(step.args["step"], 7);

  const json arr = json::parse(rec.serialise());
  ASSERT_TRUE(arr.is_array());
  ASSERT_EQ(arr.size(), 3u);
  for (const auto& e : arr) {
    for (const char* key : {"name", "cat", "ph", "ts", "dur", "pid", "tid"}) {
      EXPECT_TRUE(e.contains(key)) << key << " missing in " << e.dump();
    }
    EXPECT_EQ(e["ph"], "X");
    EXPECT_EQ(e["pid"], 3);
  }
  EXPECT_EQ(arr[2]["cat"], "train");
  EXPECT_EQ(arr[2]["args"]["step"], 7);
  EXPECT_FALSE(arr[0].contains("args"));
}

TEST(Trace, ThreadsGetTheirOwnTidAndDisabledRecordsNothing) {
  TraceRecorder rec(0);
  { Span a = rec.span("main"); }
  std::thread([&] { Span b = rec.span("comm", "allreduce"); }).join();
  const auto events = rec.events();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].tid, 0);
  EXPECT_EQ(events[1].tid, 1);

  TraceRecorder off(0, /*enabled=*/false);
  { Span s = off.span("x"); }
  off.record("y", "c", 0, 1);
  EXPECT_TRUE(off.events().empty());
  EXPECT_EQ(off.serialise(), "[]");
}

TEST(Trace, NamedTracksGetTheirOwnTidAndName) {
  TraceRecorder rec(2);
  rec.record("forward", "step", 0, 10);
  const int comm = rec.track("all-reduce");
  EXPECT_EQ(rec.track("all-reduce"), comm) << "one tid per name";
  EXPECT_NE(comm, 0);
  rec.record("bucket 0", "comm", 5, 10, nullptr, comm);  // overlaps forward, on its own track
  const json merged = merge_traces({rec.serialise()});
  EXPECT_EQ(count_badly_nested(merged), 0u);
  bool named = false;
  for (const auto& e : merged["traceEvents"]) {
    named |= e["name"] == "thread_name" && e["tid"] == comm && e["args"]["name"] == "all-reduce" &&
             e["pid"] == 2;
  }
  EXPECT_TRUE(named) << merged.dump();
}

TEST(Trace, CountsBadlyNestedPairsPerTrack) {
  auto x = [](int tid, double ts, double dur) {
    return json{{"name", "s"}, {"ph", "X"}, {"pid", 0}, {"tid", tid}, {"ts", ts}, {"dur", dur}};
  };
  json trace = {{"traceEvents", json::array()}};
  auto& ev = trace["traceEvents"];
  ev.push_back(x(0, 0, 100));   // parent
  ev.push_back(x(0, 0, 40));    // child sharing its start
  ev.push_back(x(0, 40, 60));   // child sharing its end
  ev.push_back(x(0, 100, 5));   // after it, touching
  ev.push_back(x(1, 50, 100));  // overlaps, but on another track
  EXPECT_EQ(count_badly_nested(trace), 0u);
  ev.push_back(x(0, 90, 20));  // starts inside the parent and the second child, ends after both
  EXPECT_EQ(count_badly_nested(trace), 2u);
  ev.push_back(x(1, 120, 100));  // starts inside (1, 50, 100), ends after it
  EXPECT_EQ(count_badly_nested(trace), 3u);
}

TEST(Trace, MaxEventsDropsAndCounts) {
  TraceRecorder rec(0, true, 2);
  for (int i = 0; i < 5; ++i) rec.record("e" + std::to_string(i), "c", i, 1);
  EXPECT_EQ(rec.events().size(), 2u);
  EXPECT_EQ(rec.dropped(), 3u);
  rec.clear();
  EXPECT_TRUE(rec.events().empty());
  EXPECT_EQ(rec.dropped(), 0u);
}

TEST(Trace, MergeKeepsEveryRanksEvents) {
  std::vector<std::string> per_rank;
  for (int rank = 0; rank < 3; ++rank) {
    TraceRecorder rec(rank);
    for (int i = 0; i <= rank; ++i) rec.record("step", "train", 10.0 * i, 5.0);
    per_rank.push_back(rec.serialise());
  }
  const json merged = merge_traces(per_rank);
  ASSERT_TRUE(merged["traceEvents"].is_array());
  int complete[3] = {0, 0, 0}, names = 0;
  for (const auto& e : merged["traceEvents"]) {
    if (e["ph"] == "X") ++complete[e["pid"].get<int>()];
    if (e["ph"] == "M") {
      EXPECT_EQ(e["args"]["name"], "rank " + std::to_string(e["pid"].get<int>()));
      ++names;
    }
  }
  EXPECT_EQ(complete[0], 1);
  EXPECT_EQ(complete[1], 2);
  EXPECT_EQ(complete[2], 3);
  EXPECT_EQ(names, 3);

  EXPECT_THROW(merge_traces({"[]", "{not json"}), DataError);
  EXPECT_THROW(merge_traces({"{}"}), DataError);
  EXPECT_THROW(merge_traces({R"([{"name":"x"}])"}), DataError);
}

TEST(Trace, WritesAFileChromeCanLoad) {
  TraceRecorder rec(0);
  rec.record("step", "train", 1.0, 2.0, {{"bytes", 1024}});
  const fs::path p = temp_path("trace.json");
  write_trace_file(p, merge_traces({rec.serialise()}));
  std::ifstream in(p);
  const json back = json::parse(in);
  ASSERT_EQ(back["traceEvents"].size(), 2u);  // the event and the process name
  EXPECT_EQ(back["traceEvents"][0]["name"], "step");
  EXPECT_EQ(back["traceEvents"][0]["ts"], 1.0);
  EXPECT_EQ(back["traceEvents"][0]["dur"], 2.0);
  EXPECT_EQ(back["traceEvents"][0]["args"]["bytes"], 1024);
  fs::remove(p);
  EXPECT_THROW(write_trace_file("/proc/nope/trace.json", back), InvalidArgument);
}

TEST(Trace, AppendedRunFollowsTheEarlierOneAfterAMarker) {
  TraceRecorder first(0), second(0);
  first.record("step 1", "train", 0.0, 10.0);
  first.record("step 2", "train", 10.0, 15.0);  // the earlier run ends at 25 us
  second.record("step 3", "train", 0.0, 7.0);   // the resumed run's clock starts at 0 again
  const json earlier = merge_traces({first.serialise()});
  const json both = append_trace(earlier, merge_traces({second.serialise()}),
                                 "resumed after step 2", {{"step", 2}});
  std::vector<std::string> names;
  int process_names = 0;
  for (const json& e : both["traceEvents"]) {
    if (e["ph"] == "M") {
      ++process_names;
      continue;
    }
    names.push_back(e["name"]);
    if (e["name"] == "step 3") {
      EXPECT_DOUBLE_EQ(e["ts"].get<double>(), 25.0 + kAppendGapUs);
    }
    if (e["name"] == "resumed after step 2") {
      EXPECT_EQ(e["ph"], "i");
      EXPECT_DOUBLE_EQ(e["ts"].get<double>(), 25.0 + kAppendGapUs);
      EXPECT_EQ(e["args"]["step"], 2);
    }
  }
  EXPECT_EQ(names,
            (std::vector<std::string>{"step 1", "step 2", "resumed after step 2", "step 3"}));
  EXPECT_EQ(process_names, 1) << "rank 0's name is kept once";
  EXPECT_EQ(count_badly_nested(both), 0u);
}

TEST(Trace, ReadingAFileNamesItAndTheReason) {
  const fs::path p = temp_path("not-a-trace.json");
  std::ofstream(p) << R"([1, 2])";
  try {
    read_trace_file(p);
    ADD_FAILURE() << "a JSON array was read as a trace";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("is not a Chrome trace"), std::string::npos) << e.what();
  }
  fs::remove(p);
  try {
    read_trace_file(p);
    ADD_FAILURE() << "a missing file was read";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("No such file or directory"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace mirror::train
