// defines: MappedFile, a file mapped read-only into memory, and PageBudget, which keeps the
// pages a reader touches in mapped files from piling up in the process's resident set.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace mirror::data {

/// A whole file mapped read-only and shared (mmap PROT_READ, MAP_SHARED): the bytes are the
/// page cache's, so every local rank reading the same file shares one copy, and nothing is
/// read before it is touched. Immutable after open(); safe to read from any thread.
///
/// A mapped file must not be truncated while it is read: the kernel answers a read past the new
/// end with SIGBUS. check_unchanged() notices a change between epochs (the Loader asks at each
/// epoch's start), so a file rewritten between two epochs is an error naming it.
class MappedFile {
 public:
  /// DataError naming the path and the system's reason when it cannot be opened, is not a
  /// regular file, or cannot be mapped. An empty file maps to zero bytes.
  static std::shared_ptr<const MappedFile> open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  std::span<const std::uint8_t> bytes() const { return {data_, size_}; }
  const std::string& path() const { return path_; }

  /// Access hints for the kernel's read-ahead: sequential while a loader scans the file once at
  /// start-up, random for the shuffled reads of training (a 784-byte sample then costs one page
  /// read from disk, not the 128 KiB around it).
  void advise_sequential() const;
  void advise_random() const;
  /// Drops this process's mapping of every page (MADV_DONTNEED): its resident set shrinks, the
  /// pages stay in the page cache, and the next read maps them again. Safe while other threads
  /// read: a file-backed page is re-read, never lost.
  void release_pages() const;

  /// DataError naming the file when it was replaced, truncated, grown or modified since open().
  void check_unchanged() const;

 private:
  MappedFile() = default;
  std::string path_;
  const std::uint8_t* data_ = nullptr;
  std::size_t size_ = 0;
  std::uint64_t device_ = 0, inode_ = 0;
  std::int64_t mtime_ns_ = 0;
};

/// Note [Flat memory]: pages of a mapped file that a process reads count in its resident set
/// (RSS) until they are unmapped; under memory pressure the kernel drops them (never swaps them),
/// but a rank's RSS would still grow toward the dataset's size over an epoch. How much one read
/// maps is the kernel's choice: a fault maps the cached pages around it ("fault-around", 64 KiB)
/// or a whole large folio (up to 2 MiB on filesystems that cache files in large folios), so a
/// random 784-byte read can add 2 MiB. So the readers of mapped data report each read here, and
/// every kCheckEvery reads the budget looks at the process's resident shared memory
/// (/proc/self/statm); once it has grown by `limit` since the last release, every file of the
/// dataset drops its mapped pages (MADV_DONTNEED: the page cache keeps them). A rank's resident
/// memory for its data is then bounded by about `limit` (plus what its batches hold), whatever
/// the dataset's size (DESIGN invariant: memory does not grow with the data).
class PageBudget {
 public:
  static constexpr std::uint64_t kDefaultLimit = 32ull << 20;
  static constexpr std::uint64_t kCheckEvery = 8;
  explicit PageBudget(std::uint64_t limit = kDefaultLimit) : limit_(limit) {}

  /// The files whose pages are released together (call before any reader runs).
  void add(std::shared_ptr<const MappedFile> file);
  /// Records a read of bytes [offset, offset + n) of one of the files. Thread-safe; may release
  /// every file's pages.
  void touched(std::uint64_t offset, std::uint64_t n) const;
  /// Releases every file's pages now (after a start-up scan) and takes the new baseline.
  void release_all() const;
  const std::vector<std::shared_ptr<const MappedFile>>& files() const { return files_; }

 private:
  std::uint64_t limit_;
  std::vector<std::shared_ptr<const MappedFile>> files_;
  mutable std::atomic<std::uint64_t> touches_{0}, baseline_{0}, charged_{0};
};

}  // namespace mirror::data
