// CheckpointDirLock: Note [Checkpoint folder lock] (include/mirror/train/checkpoint_lock.h).
#include "mirror/train/checkpoint_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>

#include "mirror/error.h"

namespace mirror::train {

namespace {

std::string read_all(int fd) {
  std::string text;
  char buf[512];
  ::lseek(fd, 0, SEEK_SET);
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) break;
    text.append(buf, static_cast<std::size_t>(n));
    if (text.size() > 4096) break;  // a lock file is one short line
  }
  while (!text.empty() && (text.back() == '\n' || text.back() == '\0')) text.pop_back();
  return text;
}

std::string owner_line() {
  char host[256] = "unknown";
  ::gethostname(host, sizeof host - 1);
  char when[64] = "";
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&now, &tm);
  std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return "pid " + std::to_string(::getpid()) + " on host " + host + " since " + when;
}

}  // namespace

CheckpointDirLock::CheckpointDirLock(const std::filesystem::path& dir) {
  const std::string path = (dir / kFileName).string();
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  MIRROR_CHECK(fd_ >= 0, Error,
               "cannot create the lock file " + path + " of the checkpoint folder: " +
                   std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    const std::string owner = read_all(fd_);
    ::close(fd_);
    fd_ = -1;
    MIRROR_CHECK(err == EWOULDBLOCK, Error,
                 "cannot lock the checkpoint folder " + dir.string() + " (" + path +
                     "): " + std::strerror(err));
    throw InvalidArgument(
        "--checkpoint-dir " + dir.string() + " is in use by another run (" +
        (owner.empty() ? std::string("its owner has not written its name yet") : owner) +
        "); two runs saving into one folder would destroy each other's checkpoints. Wait for "
        "that run to end (or stop it), or give this run another --checkpoint-dir");
  }
  recovered_ = read_all(fd_);  // not empty: the lock of a run that ended without releasing it
  const std::string line = owner_line() + "\n";
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, line.data(), line.size(), 0) !=
                                      static_cast<ssize_t>(line.size())) {
    const int err = errno;
    ::close(fd_);
    fd_ = -1;
    throw Error("cannot write the lock file " + path + ": " + std::strerror(err));
  }
}

CheckpointDirLock::~CheckpointDirLock() {
  if (fd_ < 0) return;
  // An empty file says "no owner"; the file stays, so every run locks the same inode.
  if (::ftruncate(fd_, 0) != 0) {
    // Nothing to do: the next run takes over a named but unlocked file and says so.
  }
  ::close(fd_);  // releases the flock
}

}  // namespace mirror::train
