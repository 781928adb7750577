// CheckpointManager: numbered safetensors files in one directory, keep-last-K pruning, and a
// newest-first scan that skips (and names) corrupt files.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <iostream>

#include "mirror/train/checkpoint.h"

namespace mirror::train {

namespace fs = std::filesystem;

namespace {

constexpr std::string_view kPrefix = "ckpt-";
constexpr std::string_view kSuffix = ".safetensors";
constexpr std::string_view kTmpMarker = ".safetensors.tmp.";

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

/// The step of "ckpt-<digits>.safetensors", or -1 for any other name.
std::int64_t step_of(const std::string& name) {
  if (name.size() <= kPrefix.size() + kSuffix.size() || !name.starts_with(kPrefix) ||
      !name.ends_with(kSuffix)) {
    return -1;
  }
  const std::string_view digits =
      std::string_view(name).substr(kPrefix.size(), name.size() - kPrefix.size() - kSuffix.size());
  if (!all_digits(digits)) return -1;
  std::int64_t step = -1;
  const auto [_, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), step);
  return ec == std::errc() ? step : -1;
}

}  // namespace

std::int64_t first_non_finite(const Tensor& t) {
  const Tensor h = t.to(Device::cpu());
  const auto* bytes = static_cast<const unsigned char*>(h.raw_data());
  for (std::int64_t i = 0; i < h.numel(); ++i) {
    switch (h.dtype()) {
      case DType::kFloat32:
        if (!std::isfinite(h.data<float>()[i])) return i;
        break;
      case DType::kFloat64:
        if (!std::isfinite(h.data<double>()[i])) return i;
        break;
      case DType::kFloat16:
      case DType::kBFloat16: {  // exponent all ones: infinity or NaN
        std::uint16_t bits;
        std::memcpy(&bits, bytes + 2 * i, 2);
        const std::uint16_t exponent = h.dtype() == DType::kFloat16 ? 0x7C00 : 0x7F80;
        if ((bits & exponent) == exponent) return i;
        break;
      }
      default:
        return -1;
    }
  }
  return -1;
}

CheckpointManager::CheckpointManager(fs::path dir, int keep_last_k)
    : dir_(std::move(dir)), keep_last_k_(keep_last_k) {
  MIRROR_CHECK(
      keep_last_k >= 0, InvalidArgument,
      "keep_last_k must be >= 0 (0 keeps every checkpoint), got " + std::to_string(keep_last_k));
  std::error_code ec;
  fs::create_directories(dir_, ec);
  MIRROR_CHECK(!ec && fs::is_directory(dir_), InvalidArgument,
               "checkpoint directory '" + dir_.string() + "' cannot be created: " + ec.message());
}

fs::path CheckpointManager::path_for(std::int64_t step) const {
  MIRROR_CHECK(step >= 0, InvalidArgument,
               "checkpoint step must be >= 0, got " + std::to_string(step));
  char name[64];
  std::snprintf(name, sizeof name, "ckpt-%012lld.safetensors", static_cast<long long>(step));
  return dir_ / name;
}

std::vector<std::pair<std::int64_t, fs::path>> CheckpointManager::list() const {
  std::vector<std::pair<std::int64_t, fs::path>> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir_, ec)) {
    const std::int64_t step = step_of(entry.path().filename().string());
    if (step >= 0 && entry.is_regular_file(ec)) out.emplace_back(step, entry.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

fs::path CheckpointManager::save(std::int64_t step, const NamedTensors& tensors,
                                 const Metadata& metadata) {
  const fs::path path = path_for(step);
  write_safetensors(path, tensors, metadata);
  prune();
  remove_stale_temporaries();
  return path;
}

void CheckpointManager::prune() {
  if (keep_last_k_ == 0) return;
  auto files = list();
  const std::size_t keep = static_cast<std::size_t>(keep_last_k_);
  for (std::size_t i = 0; i + keep < files.size(); ++i) {
    std::error_code ec;
    fs::remove(files[i].second, ec);
    if (ec) {
      std::cerr << "mirror: warning: could not delete old checkpoint " << files[i].second << ": "
                << ec.message() << "\n";
    }
  }
}

void CheckpointManager::remove_stale_temporaries() const {
  // "<ckpt>.safetensors.tmp.<pid>" whose writer is gone is the debris of a crash mid-write.
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir_, ec)) {
    const std::string name = entry.path().filename().string();
    const auto at = name.find(kTmpMarker);
    if (!name.starts_with(kPrefix) || at == std::string::npos) continue;
    const std::string pid_text = name.substr(at + kTmpMarker.size());
    if (!all_digits(pid_text) || pid_text.size() > 9) continue;
    const pid_t pid = static_cast<pid_t>(std::stol(pid_text));
    if (pid == ::getpid() || (::kill(pid, 0) == 0 || errno != ESRCH)) continue;
    std::error_code ignored;
    fs::remove(entry.path(), ignored);
  }
}

CheckpointScan CheckpointManager::scan() const {
  CheckpointScan out;
  const auto files = list();
  out.files = files.size();
  for (auto it = files.rbegin(); it != files.rend(); ++it) {
    try {
      LoadedCheckpoint loaded;
      loaded.step = it->first;
      loaded.path = it->second;
      loaded.file = read_safetensors(it->second);
      out.found = std::move(loaded);
      return out;
    } catch (const Error& e) {  // DataError (corrupt) or Error (unreadable)
      out.rejected.emplace_back(it->second, e.what());
    }
  }
  return out;
}

std::optional<LoadedCheckpoint> CheckpointManager::latest_valid() {
  CheckpointScan s = scan();
  for (const auto& [path, why] : s.rejected) {
    if (warned_.insert(path.string()).second) {
      std::cerr << "mirror: warning: skipping corrupt checkpoint: " << why << "\n";
    }
  }
  return std::move(s.found);
}

std::size_t CheckpointManager::remove_all() {
  std::size_t removed = 0;
  for (const auto& [step, path] : list()) {
    std::error_code ec;
    MIRROR_CHECK(fs::remove(path, ec) && !ec, Error,
                 "cannot delete old checkpoint " + path.string() + ": " + ec.message());
    ++removed;
  }
  return removed;
}

}  // namespace mirror::train
