// MappedFile and PageBudget (Note [Flat memory] in mapped_file.h).
#include "mirror/data/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>

#include "mirror/error.h"

namespace mirror::data {
namespace {

std::int64_t mtime_ns(const struct stat& st) {
  return static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}


}  // namespace

std::shared_ptr<const MappedFile> MappedFile::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  MIRROR_CHECK(fd >= 0, DataError, "cannot open " + path + ": " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const int err = S_ISDIR(st.st_mode) ? EISDIR : errno;
    ::close(fd);
    throw DataError("cannot read " + path + ": " +
                    (err ? std::strerror(err) : std::string("not a regular file")));
  }
  std::shared_ptr<MappedFile> file(new MappedFile());
  file->path_ = path;
  file->size_ = static_cast<std::size_t>(st.st_size);
  file->device_ = st.st_dev;
  file->inode_ = st.st_ino;
  file->mtime_ns_ = mtime_ns(st);
  if (file->size_ > 0) {
    void* p = ::mmap(nullptr, file->size_, PROT_READ, MAP_SHARED, fd, 0);
    const int err = errno;
    if (p == MAP_FAILED) {
      ::close(fd);
      throw DataError("cannot map " + path + " into memory: " + std::strerror(err));
    }
    file->data_ = static_cast<const std::uint8_t*>(p);
  }
  ::close(fd);  // the mapping keeps the file open
  return file;
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<std::uint8_t*>(data_), size_);
}

void MappedFile::advise_sequential() const {
  if (data_) ::madvise(const_cast<std::uint8_t*>(data_), size_, MADV_SEQUENTIAL);
}

void MappedFile::advise_random() const {
  if (data_) ::madvise(const_cast<std::uint8_t*>(data_), size_, MADV_RANDOM);
}

void MappedFile::release_pages() const {
  if (data_) ::madvise(const_cast<std::uint8_t*>(data_), size_, MADV_DONTNEED);
}

void MappedFile::check_unchanged() const {
  struct stat st {};
  MIRROR_CHECK(::stat(path_.c_str(), &st) == 0, DataError,
               path_ + " is gone since training started (" + std::strerror(errno) +
                   "); the files of a dataset must stay in place while it trains");
  std::string what;
  if (st.st_dev != device_ || st.st_ino != inode_) {
    what = "was replaced by another file";
  } else if (static_cast<std::size_t>(st.st_size) != size_) {
    what = "changed size from " + std::to_string(size_) + " to " + std::to_string(st.st_size) +
           " bytes";
  } else if (mtime_ns(st) != mtime_ns_) {
    what = "was modified";
  }
  MIRROR_CHECK(what.empty(), DataError,
               path_ + " " + what +
                   " since training started; the files of a dataset must not change while it "
                   "trains (write new shards to a new folder and start a new run, or resume "
                   "from a checkpoint once the data is final)");
}

void PageBudget::add(std::shared_ptr<const MappedFile> file) { files_.push_back(std::move(file)); }

/// The process's resident file-backed and shared memory (/proc/self/statm's third field), or
/// nullopt where /proc is not there. The file stays open: re-reading it at offset 0 renews it.
std::optional<std::uint64_t> resident_shared_bytes() {
  static const int fd = ::open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  char text[128];
  const ssize_t n = ::pread(fd, text, sizeof text - 1, 0);
  if (n <= 0) return std::nullopt;
  text[n] = 0;
  unsigned long long size = 0, resident = 0, shared = 0;
  if (std::sscanf(text, "%llu %llu %llu", &size, &resident, &shared) != 3) return std::nullopt;
  return shared * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
}

void PageBudget::touched(std::uint64_t offset, std::uint64_t n) const {
  (void)offset;
  (void)n;
  if (touches_.fetch_add(1, std::memory_order_relaxed) % kCheckEvery != kCheckEvery - 1) return;
  const std::optional<std::uint64_t> now = resident_shared_bytes();
  // Without /proc: assume the worst, a 2 MiB folio mapped by every read since the last check.
  const std::uint64_t grown =
      now ? (*now > baseline_.load() ? *now - baseline_.load() : 0)
          : (charged_.fetch_add(kCheckEvery * (2ull << 20)) + kCheckEvery * (2ull << 20));
  if (grown < limit_) return;
  // Two threads may both pass the limit and both release: harmless, the second finds less.
  release_all();
}

void PageBudget::release_all() const {
  for (const auto& f : files_) f->release_pages();
  charged_.store(0, std::memory_order_relaxed);
  baseline_.store(resident_shared_bytes().value_or(0), std::memory_order_relaxed);
}

}  // namespace mirror::data
