// defines: MetricsLog, the JSON-lines training log (one object per line, flushed per line).
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

namespace mirror::train {

/// What opening a log does with a file already at its path.
enum class LogMode {
  kNew,        // refuse it (InvalidArgument): a finished run's log is not lost by mistake
  kOverwrite,  // truncate it (--overwrite)
  kAppend,     // add to it (--resume: the resumed run continues its log)
};

/// Appends one JSON object per line to a file (`--log-jsonl FILE`). Each line is written with
/// one write(2) and taken back (the file truncated to its previous end) when that fails, so
/// `tail -f`, a crash and a full disk all leave whole records; opening with kAppend cuts a torn
/// last line that an older crash left. Nothing is added to the records
/// (no wall-clock time), so two runs with the same seed write byte-identical logs; callers that
/// want time put it in the record themselves. Only rank 0 should write: the caller decides.
class MetricsLog {
 public:
  /// A disabled log: write() does nothing.
  MetricsLog() = default;
  /// Opens `path` as `mode` says, creating parent directories. Throws InvalidArgument naming the
  /// path and the system's reason when it cannot be opened (see check_mode for kNew).
  explicit MetricsLog(const std::filesystem::path& path, LogMode mode = LogMode::kNew);
  /// Throws InvalidArgument when `mode` is kNew and `path` exists, naming --overwrite and
  /// --resume; call it before a long set-up so the refusal comes at once.
  static void check_mode(const std::filesystem::path& path, LogMode mode);
  ~MetricsLog();
  MetricsLog(MetricsLog&& other) noexcept;
  MetricsLog& operator=(MetricsLog&& other) noexcept;
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;

  bool enabled() const { return file_ != nullptr; }
  const std::filesystem::path& path() const { return path_; }
  /// Writes `record` (must be a JSON object) as one whole line. Throws Error naming the path
  /// and the system's reason when the write fails (disk full): then the partial line is cut off
  /// and the log disabled. InvalidArgument when `record` is not an object.
  void write(const nlohmann::json& record);
  /// Note [Resumed logs]: cuts the file at its first record past `step` (a "step" or "epoch"
  /// record whose step, or a "summary" whose final_step, is greater), so that a run resumed from
  /// the checkpoint of `step` logs each step once. Returns the records cut (0 when none is past
  /// `step`). Throws Error naming the path and the system's reason when the file cannot be read
  /// or cut; the log is then left as it was.
  std::int64_t cut_after_step(std::int64_t step);

 private:
  std::filesystem::path path_;
  std::FILE* file_ = nullptr;
};

}  // namespace mirror::train
