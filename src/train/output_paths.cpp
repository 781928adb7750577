// The start-up checks of the output paths (output_paths.h).
#include "train/output_paths.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "mirror/error.h"

namespace mirror::train {

namespace fs = std::filesystem;

void check_writable_dir(const std::string& dir, const std::string& flag) {
  const fs::path probe = fs::path(dir) / (".mirror-write-test." + std::to_string(::getpid()));
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  int err = fd < 0 ? errno : 0;
  if (fd >= 0) {
    // One block: a full disk often still has room for an empty file.
    const std::string block(4096, '\0');
    errno = 0;
    if (::write(fd, block.data(), block.size()) != static_cast<ssize_t>(block.size()))
      err = errno != 0 ? errno : ENOSPC;
    ::close(fd);
    ::unlink(probe.c_str());
  }
  MIRROR_CHECK(err == 0, InvalidArgument,
               flag + " " + dir + " is not writable: cannot write a file in it (" +
                   std::strerror(err) + "); fix the folder or name another one");
}

void check_writable_file(const std::string& path, const std::string& flag) {
  const fs::path p(path);
  std::error_code ec;
  if (p.has_parent_path()) fs::create_directories(p.parent_path(), ec);
  const bool existed = fs::exists(p, ec);
  const int fd = ::open(p.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  const int err = fd < 0 ? errno : 0;
  if (fd >= 0) ::close(fd);
  if (fd >= 0 && !existed) ::unlink(p.c_str());
  MIRROR_CHECK(err == 0, InvalidArgument,
               flag + " " + path + " cannot be written: " + std::strerror(err) +
                   "; fix the path or name another file");
}

}  // namespace mirror::train
