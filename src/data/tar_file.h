// defines: the low-level reads tar shards need: exact preads with the system's reason in
// errors, and an RAII file descriptor.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mirror::data::detail {

/// A read-only file descriptor, closed with the object.
class ReadOnlyFile {
 public:
  /// DataError "cannot open PATH: <reason>".
  explicit ReadOnlyFile(const std::string& path);
  ~ReadOnlyFile();
  ReadOnlyFile(const ReadOnlyFile&) = delete;
  ReadOnlyFile& operator=(const ReadOnlyFile&) = delete;
  int fd() const { return fd_; }
  const std::string& path() const { return path_; }
  std::uint64_t size() const { return size_; }  // at open

  /// `count` bytes at `offset`, fewer only where the file ends sooner; DataError with the
  /// system's reason when the read fails.
  std::vector<std::uint8_t> read_at(std::uint64_t offset, std::size_t count) const;

 private:
  std::string path_;
  int fd_ = -1;
  std::uint64_t size_ = 0;
};

}  // namespace mirror::data::detail
