// TraceRecorder, Span, and the Chrome trace JSON they produce.
#include "mirror/train/trace.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <utility>

#include "mirror/error.h"

namespace mirror::train {

using nlohmann::json;

namespace {
std::int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

Span::Span(TraceRecorder* recorder, std::string name, std::string cat)
    : recorder_(recorder),
      name_(std::move(name)),
      cat_(std::move(cat)),
      start_us_(recorder->now_us()) {}

Span::Span(Span&& other) noexcept
    : recorder_(std::exchange(other.recorder_, nullptr)),
      name_(std::move(other.name_)),
      cat_(std::move(other.cat_)),
      start_us_(other.start_us_),
      args_(std::move(other.args_)) {}

Span& Span::operator=(Span&& other) noexcept {
  if (this != &other) {
    end();
    recorder_ = std::exchange(other.recorder_, nullptr);
    name_ = std::move(other.name_);
    cat_ = std::move(other.cat_);
    start_us_ = other.start_us_;
    args_ = std::move(other.args_);
  }
  return *this;
}

Span& Span::arg(const std::string& key, json value) {
  if (recorder_) args_[key] = std::move(value);
  return *this;
}

void Span::end() {
  if (!recorder_) return;
  TraceRecorder* r = std::exchange(recorder_, nullptr);
  const double now = r->now_us();
  r->record(std::move(name_), std::move(cat_), start_us_, std::max(0.0, now - start_us_),
            std::move(args_));
}

TraceRecorder::TraceRecorder(int rank, bool enabled, std::size_t max_events)
    : rank_(rank), enabled_(enabled), max_events_(max_events), epoch_ns_(steady_ns()) {}

double TraceRecorder::now_us() const {
  const std::int64_t now = steady_ns();
  return static_cast<double>(now - epoch_ns_.load(std::memory_order_relaxed)) * 1e-3;
}

void TraceRecorder::set_epoch_now() { epoch_ns_.store(steady_ns(), std::memory_order_relaxed); }

int TraceRecorder::thread_number() {
  const auto [it, added] = threads_.try_emplace(std::this_thread::get_id(), next_tid_);
  if (added) ++next_tid_;
  return it->second;
}

int TraceRecorder::track(const std::string& name) {
  std::lock_guard lock(mutex_);
  const auto [it, added] = tracks_.try_emplace(name, next_tid_);
  if (added) ++next_tid_;
  return it->second;
}

void TraceRecorder::record(std::string name, std::string cat, double ts_us, double dur_us,
                           json args, int tid) {
  if (!enabled_) return;
  std::lock_guard lock(mutex_);
  if (events_.size() >= max_events_) {
    ++dropped_;
    return;
  }
  events_.push_back(TraceEvent{std::move(name), std::move(cat), ts_us, std::max(0.0, dur_us), rank_,
                               tid >= 0 ? tid : thread_number(), std::move(args)});
}

std::vector<TraceEvent> TraceRecorder::events() const {
  std::lock_guard lock(mutex_);
  return events_;
}

std::size_t TraceRecorder::dropped() const {
  std::lock_guard lock(mutex_);
  return dropped_;
}

void TraceRecorder::clear() {
  std::lock_guard lock(mutex_);
  events_.clear();
  dropped_ = 0;
}

json to_json(const TraceEvent& e) {
  json j = {{"name", e.name},  {"cat", e.cat}, {"ph", "X"},   {"ts", e.ts_us},
            {"dur", e.dur_us}, {"pid", e.pid}, {"tid", e.tid}};
  if (e.args.is_object() && !e.args.empty()) j["args"] = e.args;
  return j;
}

std::string TraceRecorder::serialise() const {
  json out = json::array();
  for (const TraceEvent& e : events()) out.push_back(to_json(e));
  std::lock_guard lock(mutex_);
  for (const auto& [name, tid] : tracks_) {
    out.push_back({{"name", "thread_name"},
                   {"ph", "M"},
                   {"pid", rank_},
                   {"tid", tid},
                   {"args", {{"name", name}}}});
  }
  return out.dump(-1, ' ', false, json::error_handler_t::replace);
}

json merge_traces(const std::vector<std::string>& per_rank) {
  json events = json::array();
  std::set<int> pids;
  for (std::size_t rank = 0; rank < per_rank.size(); ++rank) {
    json part;
    try {
      part = json::parse(per_rank[rank]);
    } catch (const json::exception& e) {
      throw DataError("trace of rank " + std::to_string(rank) + " is not valid JSON: " + e.what());
    }
    MIRROR_CHECK(part.is_array(), DataError,
                 "trace of rank " + std::to_string(rank) + " is not a JSON array of events");
    for (json& event : part) {
      MIRROR_CHECK(event.is_object() && event.contains("pid") && event["pid"].is_number_integer(),
                   DataError,
                   "trace of rank " + std::to_string(rank) + " has an event without pid");
      pids.insert(event["pid"].get<int>());
      events.push_back(std::move(event));
    }
  }
  for (int pid : pids) {
    events.push_back({{"name", "process_name"},
                      {"ph", "M"},
                      {"pid", pid},
                      {"tid", 0},
                      {"args", {{"name", "rank " + std::to_string(pid)}}}});
  }
  return {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}};
}

std::size_t count_badly_nested(const json& trace) {
  struct Interval {
    double begin, end;
  };
  std::map<std::pair<int, int>, std::vector<Interval>> rows;
  for (const json& e : trace.at("traceEvents")) {
    if (e.value("ph", "") != "X") continue;
    const double ts = e.at("ts").get<double>();
    rows[{e.at("pid").get<int>(), e.at("tid").get<int>()}].push_back(
        {ts, ts + e.at("dur").get<double>()});
  }
  std::size_t bad = 0;
  for (auto& [row, spans] : rows) {
    std::sort(spans.begin(), spans.end(), [](const Interval& a, const Interval& b) {
      return a.begin != b.begin ? a.begin < b.begin : a.end > b.end;
    });
    // 1 ns of slack: ts + dur is rounded, so a child ending exactly with its parent may come
    // out a rounding step later. The inner loop only visits spans starting inside span i.
    constexpr double kSlackUs = 1e-3;
    for (std::size_t i = 0; i < spans.size(); ++i) {
      for (std::size_t j = i + 1; j < spans.size() && spans[j].begin < spans[i].end - kSlackUs;
           ++j) {
        if (spans[j].end > spans[i].end + kSlackUs) ++bad;
      }
    }
  }
  return bad;
}

void write_trace_file(const std::filesystem::path& path, const json& trace) {
  errno = 0;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  MIRROR_CHECK(out.good(), InvalidArgument,
               "cannot open the trace file '" + path.string() +
                   "' for writing: " + std::strerror(errno) + " (check --trace)");
  out << trace.dump(-1, ' ', false, json::error_handler_t::replace) << "\n";
  out.flush();
  const int err = errno;
  out.close();
  MIRROR_CHECK(out.good() && !out.fail(), Error,
               "cannot write the trace file '" + path.string() +
                   "': " + std::strerror(err != 0 ? err : errno));
}

json read_trace_file(const std::filesystem::path& path) {
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  MIRROR_CHECK(in.good(), DataError,
               "cannot open the trace file '" + path.string() +
                   "': " + std::strerror(errno != 0 ? errno : EIO));
  json trace;
  try {
    trace = json::parse(in);
  } catch (const json::exception& e) {
    throw DataError("the trace file '" + path.string() + "' is not valid JSON: " + e.what());
  }
  MIRROR_CHECK(
      trace.is_object() && trace.contains("traceEvents") && trace["traceEvents"].is_array(),
      DataError,
      "the trace file '" + path.string() +
          "' is not a Chrome trace (an object with a \"traceEvents\" array)");
  return trace;
}

// Note [Appended traces]: a resumed run's trace continues the file instead of replacing it, as
// the JSON log does. Each run's clock starts at 0 when fit() starts, and the wall-clock time
// between the runs is unknown (another machine, days later), so the later run is placed a fixed
// gap after the earlier one's last event, and an instant event marks where it starts. Track and
// process names are keyed by (pid, tid), equal in both runs, so they are kept once.
json append_trace(json earlier, const json& later, const std::string& marker, const json& args) {
  json& events = earlier["traceEvents"];
  double end_us = 0;
  std::set<std::string> metadata;
  for (const json& e : events) {
    if (!e.is_object()) continue;
    if (e.value("ph", "") == "M") metadata.insert(e.dump());
    if (e.contains("ts") && e["ts"].is_number())
      end_us = std::max(end_us, e["ts"].get<double>() + e.value("dur", 0.0));
  }
  const double shift = end_us + kAppendGapUs;
  events.push_back({{"name", marker},
                    {"cat", "resume"},
                    {"ph", "i"},
                    {"s", "g"},
                    {"ts", shift},
                    {"pid", 0},
                    {"tid", 0},
                    {"args", args}});
  for (json e : later.at("traceEvents")) {
    if (e.value("ph", "") == "M") {
      if (metadata.insert(e.dump()).second) events.push_back(std::move(e));
      continue;
    }
    if (e.contains("ts") && e["ts"].is_number()) e["ts"] = e["ts"].get<double>() + shift;
    events.push_back(std::move(e));
  }
  return earlier;
}

}  // namespace mirror::train
