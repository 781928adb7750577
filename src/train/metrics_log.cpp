// MetricsLog: JSON lines, each written whole with one write(2) (or taken back).
#include "mirror/train/metrics_log.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>
#include <utility>

#include "mirror/error.h"

namespace mirror::train {
namespace {

/// The size of the open file, or -1 (errno set).
off_t file_size(int fd) {
  struct stat st {};
  return ::fstat(fd, &st) == 0 ? st.st_size : -1;
}

/// Cuts the last line of `fd` when it does not end with '\n' (a crash mid-write before lines
/// were written whole): a resumed run's records must not be glued to half a record. Returns the
/// bytes cut.
off_t cut_torn_last_line(int fd) {
  const off_t size = file_size(fd);
  if (size <= 0) return 0;
  char last = '\n';
  if (::pread(fd, &last, 1, size - 1) != 1 || last == '\n') return 0;
  off_t end = size - 1;  // the kept length: after the last '\n', 0 when there is none
  char buf[4096];
  while (end > 0) {
    const off_t from =
        end > static_cast<off_t>(sizeof buf) ? end - static_cast<off_t>(sizeof buf) : 0;
    const ssize_t n = ::pread(fd, buf, static_cast<std::size_t>(end - from), from);
    if (n <= 0) return 0;
    const void* nl = ::memrchr(buf, '\n', static_cast<std::size_t>(n));
    if (nl) {
      end = from + (static_cast<const char*>(nl) - buf) + 1;
      break;
    }
    end = from;
  }
  return ::ftruncate(fd, end) == 0 ? size - end : 0;
}

/// The step a record is about: "step" (step and epoch records), else "final_step" (summary);
/// -1 for a line that is no such record.
std::int64_t step_of(const std::string& line) {
  if (line.find("step") == std::string::npos) return -1;
  const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return -1;
  for (const char* key : {"step", "final_step"}) {
    const auto it = j.find(key);
    if (it != j.end() && it->is_number_integer()) return it->get<std::int64_t>();
  }
  return -1;
}

}  // namespace

void MetricsLog::check_mode(const std::filesystem::path& path, LogMode mode) {
  std::error_code ec;
  MIRROR_CHECK(mode != LogMode::kNew || !std::filesystem::exists(path, ec), InvalidArgument,
               "the metrics log '" + path.string() +
                   "' already exists; pass --overwrite to replace it, --resume to append to it, "
                   "or name another file with --log-jsonl");
}

MetricsLog::MetricsLog(const std::filesystem::path& path, LogMode mode) : path_(path) {
  check_mode(path, mode);
  std::error_code ec;
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path(), ec);
  // "wx" (exclusive) so a file that appears after check_mode is not truncated either; "a+" so a
  // torn last line can be read and cut.
  const char* how = mode == LogMode::kAppend ? "a+" : mode == LogMode::kOverwrite ? "w" : "wx";
  file_ = std::fopen(path.c_str(), how);
  MIRROR_CHECK(file_ != nullptr, InvalidArgument,
               "cannot open the metrics log '" + path.string() +
                   "' for writing: " + std::strerror(errno) + " (check --log-jsonl)");
  if (mode == LogMode::kAppend) {
    if (const off_t cut = cut_torn_last_line(::fileno(file_)); cut > 0) {
      std::cerr << "[mirror] warning: cut a torn last line (" << cut
                << " bytes) from the metrics log '" << path.string()
                << "': the run that wrote it stopped mid-write\n";
    }
  }
}

MetricsLog::~MetricsLog() {
  if (file_) std::fclose(file_);
}

MetricsLog::MetricsLog(MetricsLog&& other) noexcept
    : path_(std::move(other.path_)), file_(std::exchange(other.file_, nullptr)) {}

MetricsLog& MetricsLog::operator=(MetricsLog&& other) noexcept {
  if (this != &other) {
    if (file_) std::fclose(file_);
    path_ = std::move(other.path_);
    file_ = std::exchange(other.file_, nullptr);
  }
  return *this;
}

void MetricsLog::write(const nlohmann::json& record) {
  if (!file_) return;
  MIRROR_CHECK(record.is_object(), InvalidArgument,
               "metrics log records must be JSON objects, got " + std::string(record.type_name()));
  // Invalid UTF-8 in a string is replaced rather than aborting a long training run.
  const std::string line =
      record.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  // Straight to the file (stdio's buffer is never used), so nothing is left to flush later.
  const int fd = ::fileno(file_);
  const off_t before = file_size(fd);
  std::size_t done = 0;
  int err = before < 0 ? errno : 0;
  while (err == 0 && done < line.size()) {
    const ssize_t n = ::write(fd, line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) err = n < 0 ? errno : ENOSPC;
    if (n > 0) done += static_cast<std::size_t>(n);
  }
  if (err == 0) return;
  if (before >= 0 && done > 0 && ::ftruncate(fd, before) != 0) {
    // Cannot take the partial line back; the next --resume cuts it (cut_torn_last_line).
  }
  std::fclose(file_);
  file_ = nullptr;
  throw Error("cannot write the metrics log '" + path_.string() + "': " + std::strerror(err));
}

// Note [Resumed logs]: a run killed after step 30 whose newest checkpoint is step 24 has logged
// steps 25 to 30; resumed from step 24, it runs them again. Appending would log them twice, so
// the resumed run first cuts the log at its first record past step 24 (and a run that
// --resume-or-start begins afresh, at its first record past step 0). One ftruncate(2): the log
// holds either every old record or the cut one, never half a line, and the file stays the same
// file (a `tail -f` keeps following it). Records are written in step order, so everything from
// that record on is past the checkpoint; a log that repeats steps already (written by a build
// before this cut) keeps the repeats before its first record past the checkpoint.
std::int64_t MetricsLog::cut_after_step(std::int64_t step) {
  if (!file_) return 0;
  std::ifstream in(path_, std::ios::binary);
  MIRROR_CHECK(in.good(), Error,
               "cannot read the metrics log '" + path_.string() + "': " + std::strerror(errno));
  std::string line;
  off_t offset = 0, cut_at = -1;
  std::int64_t cut = 0;
  while (std::getline(in, line)) {
    if (cut_at < 0 && step_of(line) > step) cut_at = offset;
    if (cut_at >= 0) ++cut;
    offset += static_cast<off_t>(line.size()) + 1;
  }
  MIRROR_CHECK(!in.bad(), Error,
               "cannot read the metrics log '" + path_.string() + "': " + std::strerror(errno));
  if (cut_at < 0) return 0;
  MIRROR_CHECK(::ftruncate(::fileno(file_), cut_at) == 0, Error,
               "cannot cut the metrics log '" + path_.string() + "': " + std::strerror(errno));
  return cut;
}

}  // namespace mirror::train
