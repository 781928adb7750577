// The tar format as tar shards read it: list_tar_members walks the 512-byte headers (ustar, GNU
// long names, pax) and seeks past every member's data; ReadOnlyFile does the preads.
#include "data/tar_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>

#include "mirror/data/tar_shards.h"
#include "mirror/error.h"

namespace mirror::data {
namespace detail {

ReadOnlyFile::ReadOnlyFile(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  MIRROR_CHECK(fd_ >= 0, DataError, "cannot open " + path + ": " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    const std::string why = S_ISDIR(st.st_mode) ? "it is a folder" : "it is not a regular file";
    ::close(fd_);
    throw DataError("cannot read " + path + " as a tar shard: " + why);
  }
  size_ = static_cast<std::uint64_t>(st.st_size);
}

ReadOnlyFile::~ReadOnlyFile() {
  if (fd_ >= 0) ::close(fd_);
}

std::vector<std::uint8_t> ReadOnlyFile::read_at(std::uint64_t offset, std::size_t count) const {
  std::vector<std::uint8_t> out(count);
  std::size_t got = 0;
  while (got < count) {
    const ssize_t n = ::pread(fd_, out.data() + got, count - got, static_cast<off_t>(offset + got));
    if (n < 0 && errno == EINTR) continue;
    MIRROR_CHECK(n >= 0, DataError,
                 "cannot read " + path_ + " at byte " + std::to_string(offset + got) + ": " +
                     std::strerror(errno));
    if (n == 0) break;
    got += static_cast<std::size_t>(n);
  }
  out.resize(got);
  return out;
}

}  // namespace detail

namespace {

constexpr std::size_t kBlock = 512;
constexpr std::uint64_t kMaxLongName = 64 << 10;  // a GNU long name or a pax header, at most
constexpr std::uint64_t kMaxPax = 1 << 20;

/// A NUL-terminated (or full-width) header text field.
std::string field(const std::uint8_t* block, std::size_t at, std::size_t width) {
  const char* p = reinterpret_cast<const char*>(block + at);
  return std::string(p, strnlen(p, width));
}

/// A numeric header field: octal digits (leading spaces or NULs, ended by a space or NUL), or
/// GNU's base 256 (the first byte's high bit set) for values past 8 GiB; nullopt when malformed.
std::optional<std::uint64_t> number(const std::uint8_t* f, std::size_t width) {
  if (f[0] & 0x80) {
    if (f[0] == 0xff) return std::nullopt;  // negative
    std::uint64_t v = f[0] & 0x7f;
    for (std::size_t i = 1; i < width; ++i) {
      if (v >> 56) return std::nullopt;
      v = (v << 8) | f[i];
    }
    return v;
  }
  std::size_t i = 0;
  while (i < width && (f[i] == ' ' || f[i] == 0)) ++i;
  std::uint64_t v = 0;
  for (; i < width && f[i] != ' ' && f[i] != 0; ++i) {
    if (f[i] < '0' || f[i] > '7' || (v >> 60)) return std::nullopt;
    v = v * 8 + static_cast<std::uint64_t>(f[i] - '0');
  }
  for (; i < width; ++i)
    if (f[i] != ' ' && f[i] != 0) return std::nullopt;
  return v;
}

bool all_zero(const std::uint8_t* block) {
  return std::all_of(block, block + kBlock, [](std::uint8_t b) { return b == 0; });
}

/// The header checksum as POSIX defines it (the checksum field read as spaces), unsigned and
/// signed: old tars summed signed chars, and readers accept either.
bool checksum_matches(const std::uint8_t* block, std::uint64_t stored) {
  std::uint64_t unsigned_sum = 0;
  std::int64_t signed_sum = 0;
  for (std::size_t i = 0; i < kBlock; ++i) {
    const bool in_field = i >= 148 && i < 156;
    unsigned_sum += in_field ? ' ' : block[i];
    signed_sum += in_field ? ' ' : static_cast<std::int8_t>(block[i]);
  }
  return stored == unsigned_sum || static_cast<std::int64_t>(stored) == signed_sum;
}

/// Applies the records of a pax extended header ("LEN key=value\n" ...) that matter here.
void read_pax(const std::string& path, std::uint64_t at, const std::vector<std::uint8_t>& data,
              std::optional<std::string>& name, std::uint64_t& size, bool& has_size) {
  const std::string text(data.begin(), data.end());
  std::size_t pos = 0;
  while (pos < text.size() && text[pos] != '\0') {
    const std::size_t space = text.find(' ', pos);
    std::size_t len = 0;
    bool ok = space != std::string::npos && space > pos && space - pos <= 9;
    for (std::size_t i = pos; ok && i < space; ++i) {
      ok = text[i] >= '0' && text[i] <= '9';
      len = len * 10 + static_cast<std::size_t>(text[i] - '0');
    }
    ok = ok && len > space - pos + 1 && pos + len <= text.size() && text[pos + len - 1] == '\n';
    const std::string record = ok ? text.substr(space + 1, pos + len - space - 2) : "";
    const std::size_t eq = record.find('=');
    MIRROR_CHECK(ok && eq != std::string::npos, DataError,
                 path + ": the pax extended header at byte " + std::to_string(at) +
                     " has a malformed record at its byte " + std::to_string(pos) +
                     " (a record is \"LENGTH key=value\\n\"): the file is corrupt");
    const std::string key = record.substr(0, eq), value = record.substr(eq + 1);
    if (key == "path") name = value;
    if (key == "size") {
      const bool digits = !value.empty() && value.size() <= 19 &&
                          value.find_first_not_of("0123456789") == std::string::npos;
      MIRROR_CHECK(digits, DataError,
                   path + ": the pax extended header at byte " + std::to_string(at) +
                       " gives the size '" + value + "': not a byte count");
      size = std::stoull(value);
      has_size = true;
    }
    pos += len;
  }
}

std::string strip_dot_slash(std::string name) {
  while (name.rfind("./", 0) == 0) name.erase(0, 2);
  return name;
}

}  // namespace

std::vector<TarMember> list_tar_members(const std::string& path) {
  const detail::ReadOnlyFile file(path);
  const std::uint64_t end = file.size();
  std::vector<TarMember> out;
  std::optional<std::string> long_name;  // from a GNU 'L' or a pax 'x' header, for the next
  std::uint64_t pax_size = 0;            // member only
  bool has_pax_size = false;
  std::uint64_t at = 0;
  const auto after = [&] {
    return out.empty() ? std::string("at the start") : "after the member " + out.back().name;
  };
  for (;;) {
    MIRROR_CHECK(at + kBlock <= end, DataError,
                 path + " ends at byte " + std::to_string(end) + " " +
                     (at >= end ? "without the end-of-archive block" : "inside a 512-byte header") +
                     " (" + after() + "): the tar is truncated; copy or write it again");
    const std::vector<std::uint8_t> block = file.read_at(at, kBlock);
    MIRROR_CHECK(block.size() == kBlock, DataError, path + " shrank while it was read");
    const std::uint8_t* b = block.data();
    if (all_zero(b)) return out;
    const auto stored = number(b + 148, 8);
    MIRROR_CHECK(stored && checksum_matches(b, *stored), DataError,
                 path + ": the header at byte " + std::to_string(at) + " (" + after() +
                     ") has a bad checksum: the file is corrupt or not a tar archive");
    const auto header_size = number(b + 124, 12);
    MIRROR_CHECK(header_size.has_value(), DataError,
                 path + ": the header at byte " + std::to_string(at) +
                     " has a malformed size field: the file is corrupt");
    const char type = static_cast<char>(b[156]);
    const std::uint64_t size =
        type == 'x' || type == 'g' || type == 'L' || type == 'K' || !has_pax_size ? *header_size
                                                                                  : pax_size;
    std::string name = field(b, 0, 100);
    if (std::memcmp(b + 257, "ustar\0", 6) == 0 && b[345] != 0)
      name = field(b, 345, 155) + "/" + name;
    const std::uint64_t data = at + kBlock;
    MIRROR_CHECK(size <= end && data <= end - size, DataError,
                 path + ": the member " + strip_dot_slash(long_name.value_or(name)) +
                     " (header at byte " + std::to_string(at) + ") has " + std::to_string(size) +
                     " bytes but the file ends " + std::to_string(end - data) +
                     " bytes after its header: the tar is truncated; copy or write it again");
    if (type == 'L' || type == 'x') {
      MIRROR_CHECK(size <= (type == 'L' ? kMaxLongName : kMaxPax), DataError,
                   path + ": the " + (type == 'L' ? "GNU long name" : "pax header") + " at byte " +
                       std::to_string(at) + " is " + std::to_string(size) +
                       " bytes, more than a name needs: the file is corrupt");
      const std::vector<std::uint8_t> bytes = file.read_at(data, static_cast<std::size_t>(size));
      if (type == 'L') {
        const std::string text(bytes.begin(), bytes.end());
        long_name = text.substr(0, text.find('\0'));
      } else {
        read_pax(path, at, bytes, long_name, pax_size, has_pax_size);
      }
    } else if (type == 'g' || type == 'K') {
      // A pax global header or a GNU long link name: nothing a member's name or data needs.
    } else {
      if (type == '0' || type == '\0' || type == '7')  // regular (7: contiguous) files
        out.push_back({strip_dot_slash(long_name.value_or(name)), data, size});
      long_name.reset();
      has_pax_size = false;
    }
    at = data + (size + kBlock - 1) / kBlock * kBlock;
  }
}

}  // namespace mirror::data
