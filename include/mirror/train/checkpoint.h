// defines: safetensors reading/writing (atomic, fully validated, checksummed) and
// CheckpointManager, which keeps the last K checkpoints of a run and finds the newest valid one.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "mirror/tensor.h"

namespace mirror::train {

/// Tensors by name ("conv2d_1/kernel", "optimizer/conv2d_1/kernel/adam_m"). A std::map so the
/// file layout is deterministic (sorted by name) on every rank and every run.
using NamedTensors = std::map<std::string, Tensor>;
/// The safetensors `__metadata__` object: strings only (the format allows nothing else).
using Metadata = std::map<std::string, std::string>;

/// Metadata key holding "crc32:<8 hex digits>": CRC-32 (zlib polynomial) over the canonical
/// header (the header JSON without this key, re-serialised compactly with sorted keys) followed
/// by the whole byte buffer. Written by write_safetensors, verified by read_safetensors.
inline constexpr const char* kChecksumKey = "mirror.checksum";
/// Largest accepted JSON header (the reference implementation's bound, too).
inline constexpr std::uint64_t kMaxHeaderBytes = 100ull << 20;

struct SafetensorsFile {
  NamedTensors tensors;  // CPU tensors
  Metadata metadata;     // includes kChecksumKey when the file had one
};

struct ReadOptions {
  /// Files written by other tools (PyTorch, Keras) have no Mirror checksum; pass false to load
  /// them. Every structural check still applies.
  bool require_checksum = true;
};

/// Writes `tensors` (any device; copied to the host) and `metadata` to `path` atomically: the
/// bytes go to "<path>.tmp.<pid>", which is fsync'ed, renamed over `path`, and the directory is
/// fsync'ed, so a crash at any point leaves either the old file or the complete new one.
/// `metadata` must not contain kChecksumKey (it is computed). Throws InvalidArgument for bad
/// names/keys and Error (naming the file and errno text) when the file system fails.
void write_safetensors(const std::filesystem::path& path, const NamedTensors& tensors,
                       const Metadata& metadata = {});

/// Reads a safetensors file into CPU tensors after validating every length, offset, dtype and
/// shape against the file size, and the checksum. Throws DataError "<path>: <problem>" for any
/// malformed, truncated or corrupted file, Error when it cannot be opened.
SafetensorsFile read_safetensors(const std::filesystem::path& path,
                                 const ReadOptions& options = {});

/// The same encoding as an in-memory byte string (tests, and sending weights over MPI).
std::string encode_safetensors(const NamedTensors& tensors, const Metadata& metadata = {});
/// Decodes and validates bytes produced by encode_safetensors (or any safetensors file);
/// `what` names the source in error messages.
SafetensorsFile decode_safetensors(std::string_view bytes, const std::string& what,
                                   const ReadOptions& options = {});

/// Index of the first NaN or infinity of a floating tensor (any device), or -1 (also for
/// integer tensors).
std::int64_t first_non_finite(const Tensor& t);

/// Safetensors dtype strings ("F32", "BF16", "I64", ...).
const char* safetensors_dtype_name(DType dtype);
/// Parses a safetensors dtype string; std::nullopt for one Mirror cannot hold.
std::optional<DType> parse_safetensors_dtype(std::string_view name);

struct LoadedCheckpoint {
  std::int64_t step = 0;
  std::filesystem::path path;
  SafetensorsFile file;
};

/// What a newest-first scan of a checkpoint folder found: the newest checkpoint that reads and
/// verifies (if any) and every newer one that did not, with the reason.
struct CheckpointScan {
  std::optional<LoadedCheckpoint> found;
  std::vector<std::pair<std::filesystem::path, std::string>> rejected;  // newest first
  std::size_t files = 0;                                                // checkpoint files present
};

/// Checkpoints of one run in one directory: "ckpt-<step, 12 digits>.safetensors". Only rank 0
/// should own a manager that saves; any rank may load.
class CheckpointManager {
 public:
  /// `keep_last_k` >= 1 keeps that many newest checkpoints; 0 keeps all. Creates `dir`.
  CheckpointManager(std::filesystem::path dir, int keep_last_k);

  /// Writes the checkpoint for `step` atomically, then deletes the oldest ones beyond K and
  /// temporary files left by writers that no longer run. Returns the path written.
  std::filesystem::path save(std::int64_t step, const NamedTensors& tensors,
                             const Metadata& metadata = {});

  /// The newest checkpoint that reads and verifies, newest step first. Corrupt files are
  /// skipped with one warning each on stderr naming the file and the problem (they are kept
  /// on disk for inspection). std::nullopt when there is none.
  std::optional<LoadedCheckpoint> latest_valid();
  /// The same scan without warnings: the caller reports the rejected files.
  CheckpointScan scan() const;

  /// Deletes every checkpoint file of the folder (a fresh run told to overwrite an old one);
  /// returns how many were deleted.
  std::size_t remove_all();

  /// Checkpoint files present (valid or not), oldest step first.
  std::vector<std::pair<std::int64_t, std::filesystem::path>> list() const;

  std::filesystem::path path_for(std::int64_t step) const;
  const std::filesystem::path& dir() const { return dir_; }

 private:
  void prune();
  void remove_stale_temporaries() const;

  std::filesystem::path dir_;
  int keep_last_k_;
  std::set<std::string> warned_;
};

namespace detail {
/// Test hook called at stages of write_safetensors: "opened", "header", "half-data", "data",
/// "synced", "renamed". A test may kill the process from it to simulate a crash mid-write.
using WriteHook = std::function<void(std::string_view stage)>;
void set_safetensors_write_hook(WriteHook hook);
}  // namespace detail

}  // namespace mirror::train
