// defines: CheckpointDirLock, the one-owner-at-a-time lock of a checkpoint folder.
//
// Note [Checkpoint folder lock]: two runs saving into one folder destroy each other's work (each
// prunes the other's files, a later --resume picks up the wrong run's newest checkpoint). A run
// that saves takes an exclusive flock(2) on "<dir>/.mirror-lock" for its whole life and writes
// its host, pid and start time into it. The kernel drops the lock when the process ends, however
// it ends (SIGKILL and a lost node's reboot included), so a lock can never outlive its owner; a
// file that still names an owner but is not locked was left by a run that died, and the next run
// takes it over and says whose it was. flock works on local file systems and on NFSv4 (Linux
// maps it to a byte-range lock there).
#pragma once

#include <filesystem>
#include <string>

namespace mirror::train {

class CheckpointDirLock {
 public:
  /// Locks `dir` (which must exist). Throws InvalidArgument naming the folder and the owner's
  /// host, pid and start time when another process holds the lock; Error when the lock file
  /// cannot be created. `recovered()` then tells whether a dead run's lock was taken over.
  explicit CheckpointDirLock(const std::filesystem::path& dir);
  ~CheckpointDirLock();  // empties the lock file and releases the lock
  CheckpointDirLock(const CheckpointDirLock&) = delete;
  CheckpointDirLock& operator=(const CheckpointDirLock&) = delete;

  /// The owner a stale lock file named ("pid 123 on host a since ..."), empty when the folder
  /// had no stale lock.
  const std::string& recovered() const { return recovered_; }
  static constexpr const char* kFileName = ".mirror-lock";

 private:
  int fd_ = -1;
  std::string recovered_;
};

}  // namespace mirror::train
