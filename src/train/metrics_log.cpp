// MetricsLog: JSON lines through stdio, flushed per record.
#include "mirror/train/metrics_log.h"

#include <cerrno>
#include <cstring>
#include <utility>

#include "mirror/error.h"

namespace mirror::train {

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
  // "wx" (exclusive) so a file that appears after check_mode is not truncated either.
  const char* how = mode == LogMode::kAppend ? "a" : mode == LogMode::kOverwrite ? "w" : "wx";
  file_ = std::fopen(path.c_str(), how);
  MIRROR_CHECK(file_ != nullptr, InvalidArgument,
               "cannot open the metrics log '" + path.string() +
                   "' for writing: " + std::strerror(errno) + " (check --log-jsonl)");
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
  const bool ok =
      std::fwrite(line.data(), 1, line.size(), file_) == line.size() && std::fflush(file_) == 0;
  MIRROR_CHECK(ok, Error,
               "cannot write the metrics log '" + path_.string() + "': " + std::strerror(errno));
}

}  // namespace mirror::train
