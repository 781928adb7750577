// defines: TraceRecorder and its RAII Span (Chrome trace "complete" events per rank), and the
// functions that serialise, merge and write the per-rank traces as one chrome://tracing file.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace mirror::train {

/// One Chrome trace "X" (complete) event. Times are microseconds since the recorder's epoch.
struct TraceEvent {
  std::string name;
  std::string cat;
  double ts_us = 0;
  double dur_us = 0;
  int pid = 0;          // the rank
  int tid = 0;          // the track: a recording thread or a named track (Note [Trace tracks])
  nlohmann::json args;  // null, or an object shown in the viewer
};

class TraceRecorder;

/// Times the scope it lives in; records one event when destroyed (or at end()).
class Span {
 public:
  Span() = default;
  Span(TraceRecorder* recorder, std::string name, std::string cat);
  ~Span() { end(); }
  Span(Span&& other) noexcept;
  Span& operator=(Span&& other) noexcept;
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;

  /// Extra fields shown with the event ("bucket": 3, "bytes": 1048576).
  Span& arg(const std::string& key, nlohmann::json value);
  /// Records the event now; later calls and the destructor do nothing.
  void end();

 private:
  TraceRecorder* recorder_ = nullptr;
  std::string name_, cat_;
  double start_us_ = 0;
  nlohmann::json args_;
};

/// Note [Trace tracks]
/// The viewer stacks the events of one (pid, tid) row by time and expects them to nest: an event
/// that starts inside another must end inside it. Work that overlaps the compute of the same
/// thread (each bucket's all-reduce runs while backward goes on) therefore goes on tracks of its
/// own: track("all-reduce") gives a tid shared by no thread, named in the viewer. Threads and
/// tracks are numbered in the order first seen (0, 1, ...), so the main thread is tid 0.

/// Collects this rank's events. Thread-safe (the communication thread records too). A disabled
/// recorder hands out inert spans, so call sites need no `if`.
class TraceRecorder {
 public:
  explicit TraceRecorder(int rank = 0, bool enabled = true, std::size_t max_events = 1'000'000);

  bool enabled() const { return enabled_; }
  int rank() const { return rank_; }
  /// Starts a span named `name` in category `cat` ("step", "forward", "allreduce", ...).
  Span span(std::string name, std::string cat = "mirror") {
    return enabled_ ? Span(this, std::move(name), std::move(cat)) : Span();
  }
  /// Records a finished event directly, on track `tid` (-1: the calling thread's number).
  void record(std::string name, std::string cat, double ts_us, double dur_us,
              nlohmann::json args = nullptr, int tid = -1);
  /// The tid of the track called `name`, made on first use (Note [Trace tracks]).
  int track(const std::string& name);
  /// Microseconds since the epoch (steady clock).
  double now_us() const;
  /// Moves the epoch to now. Call it right after a barrier on every rank so the ranks' rows
  /// line up in the viewer (to within the barrier's skew).
  void set_epoch_now();

  std::vector<TraceEvent> events() const;
  /// Events not kept because max_events was reached.
  std::size_t dropped() const;
  void clear();
  /// This rank's events as a JSON array string, with a "thread_name" entry per named track:
  /// what each rank sends to rank 0.
  std::string serialise() const;

 private:
  int thread_number();

  int rank_;
  bool enabled_;
  std::size_t max_events_;
  std::atomic<std::int64_t> epoch_ns_;  // steady clock; atomic so now_us() needs no lock
  mutable std::mutex mutex_;
  std::vector<TraceEvent> events_;
  std::size_t dropped_ = 0;
  std::unordered_map<std::thread::id, int> threads_;
  std::unordered_map<std::string, int> tracks_;
  int next_tid_ = 0;
};

nlohmann::json to_json(const TraceEvent& event);

/// Merges per-rank serialise() strings into one Chrome trace object
/// {"traceEvents": [...], "displayTimeUnit": "ms"}, with a "process_name" entry naming each
/// rank. Throws DataError naming the rank whose string is not a JSON array of events.
nlohmann::json merge_traces(const std::vector<std::string>& per_rank);

/// Pairs of "X" events on the same (pid, tid) that overlap without nesting (one starts inside
/// the other and ends after it): the viewer draws them wrongly. A correct trace has none.
std::size_t count_badly_nested(const nlohmann::json& trace);

/// Writes a merged trace (open it in chrome://tracing or https://ui.perfetto.dev). Throws
/// InvalidArgument naming the path when it cannot be written.
void write_trace_file(const std::filesystem::path& path, const nlohmann::json& trace);

/// Reads a trace file written by write_trace_file: DataError naming the path and the reason
/// when it cannot be read or is not a {"traceEvents": [...]} object.
nlohmann::json read_trace_file(const std::filesystem::path& path);

/// Note [Appended traces]: `earlier` (a trace file's content) followed by `later` (this run's
/// merged trace): later's events shifted to start kAppendGapUs after earlier's last event ends,
/// an instant event `marker` (args `args`) across all rows where it starts, and later's
/// metadata (track and process names) that earlier does not already hold.
inline constexpr double kAppendGapUs = 1e6;
nlohmann::json append_trace(nlohmann::json earlier, const nlohmann::json& later,
                            const std::string& marker, const nlohmann::json& args);

}  // namespace mirror::train
