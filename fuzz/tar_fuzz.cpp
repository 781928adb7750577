// libFuzzer target: list_tar_members on arbitrary bytes (written to an anonymous memory file,
// since the reader takes a path and reads with pread). Checks: only DataError escapes, and an
// accepted archive lists members whose data lies inside the file, in increasing order, with
// names no longer than the 64 KiB a GNU long name or pax path may have.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#include "mirror/data/tar_shards.h"
#include "mirror/error.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const int fd = ::memfd_create("tar_fuzz", MFD_CLOEXEC);
  if (fd < 0) std::abort();
  if (size > 0 && ::write(fd, data, size) != static_cast<ssize_t>(size)) std::abort();
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  try {
    std::uint64_t previous_end = 0;
    for (const auto& m : mirror::data::list_tar_members(path)) {
      if (m.offset < previous_end || m.offset % 512 != 0) std::abort();
      if (m.size > size || m.offset > size - m.size) std::abort();
      if (m.name.size() > (1u << 20)) std::abort();
      previous_end = m.offset + m.size;
    }
  } catch (const mirror::DataError&) {
    // expected for malformed input
  }
  ::close(fd);
  return 0;
}
