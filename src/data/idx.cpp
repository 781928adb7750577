// IDX parsing with gzip inflated on the fly. The header is read and validated before the payload
// buffer is allocated, so absurd dimensions never turn into a huge allocation.
#include "mirror/data/idx.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <memory>

#include "mirror/error.h"

namespace mirror::data {
namespace {

std::string hex2(unsigned v) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%02x", v & 0xffu);
  return buf;
}

/// Sequential access to the (possibly compressed) IDX bytes.
class ByteSource {
 public:
  virtual ~ByteSource() = default;
  /// Reads up to n bytes; fewer only at the end of the data.
  virtual std::size_t read(std::uint8_t* dst, std::size_t n) = 0;
  /// Throws DataError unless the data ended exactly where the header said.
  virtual void expect_end() = 0;
  /// Whether the container says `n` more bytes follow (raw: the file size; gzip: the length
  /// trailer, mod 2^32). Only a hint: it decides whether the payload is allocated at once.
  virtual bool promises(std::uint64_t n) const = 0;
};

class RawSource : public ByteSource {
 public:
  RawSource(std::span<const std::uint8_t> file, const std::string& name)
      : file_(file), name_(name) {}
  std::size_t read(std::uint8_t* dst, std::size_t n) override {
    const std::size_t k = std::min(n, file_.size() - pos_);
    if (k) std::memcpy(dst, file_.data() + pos_, k);
    pos_ += k;
    return k;
  }
  bool promises(std::uint64_t n) const override { return file_.size() - pos_ == n; }
  void expect_end() override {
    MIRROR_CHECK(pos_ == file_.size(), DataError,
                 name_ + ": " + std::to_string(file_.size() - pos_) +
                     " bytes after the data the IDX header describes; the file is corrupt or not "
                     "the IDX file expected");
  }

 private:
  std::span<const std::uint8_t> file_;
  std::string name_;
  std::size_t pos_ = 0;
};

/// Note [gzip checks]: inflate with a gzip wrapper verifies the CRC-32 and the length trailer
/// when it reaches the end of the stream, so requiring Z_STREAM_END catches corruption and
/// truncation even when the IDX payload itself happens to be complete.
class GzipSource : public ByteSource {
 public:
  GzipSource(std::span<const std::uint8_t> file, const std::string& name) : name_(name) {
    MIRROR_CHECK(file.size() <= UINT_MAX, DataError,
                 name + ": compressed file of " + std::to_string(file.size()) +
                     " bytes is larger than supported (4 GiB)");
    std::memset(&zs_, 0, sizeof zs_);
    MIRROR_CHECK(inflateInit2(&zs_, 15 + 16) == Z_OK, DataError, name + ": zlib init failed");
    zs_.next_in = const_cast<Bytef*>(file.data());
    zs_.avail_in = static_cast<uInt>(file.size());
    if (file.size() >= 18) {  // 10-byte header + 8-byte trailer at least
      const std::uint8_t* t = file.data() + file.size() - 4;
      isize_ = std::uint32_t{t[0]} | std::uint32_t{t[1]} << 8 | std::uint32_t{t[2]} << 16 |
               std::uint32_t{t[3]} << 24;
    }
  }
  ~GzipSource() override { inflateEnd(&zs_); }
  GzipSource(const GzipSource&) = delete;
  GzipSource& operator=(const GzipSource&) = delete;

  std::size_t read(std::uint8_t* dst, std::size_t n) override {
    std::size_t done = 0;
    while (done < n && !ended_) {
      const std::size_t chunk = std::min<std::size_t>(n - done, 1u << 30);
      zs_.next_out = dst + done;
      zs_.avail_out = static_cast<uInt>(chunk);
      const int rc = inflate(&zs_, Z_NO_FLUSH);
      done += chunk - zs_.avail_out;
      if (rc == Z_STREAM_END) {
        ended_ = true;
      } else if (rc == Z_BUF_ERROR || (rc == Z_OK && zs_.avail_in == 0 && zs_.avail_out > 0)) {
        truncated_ = true;  // input exhausted before the end of the stream
        break;
      } else if (rc != Z_OK) {
        throw DataError(name_ + ": corrupt gzip data (zlib: " +
                        (zs_.msg ? zs_.msg : "error " + std::to_string(rc)) +
                        "); re-install the file (e.g. apt-get install --reinstall <package>)");
      }
    }
    return done;
  }

  bool promises(std::uint64_t n) const override {
    return static_cast<std::uint32_t>(zs_.total_out + n) == isize_;
  }
  void expect_end() override {
    std::uint8_t extra = 0;
    const std::size_t k = read(&extra, 1);
    MIRROR_CHECK(k == 0, DataError,
                 name_ +
                     ": the decompressed data is longer than the IDX header describes; the "
                     "file is corrupt or not the IDX file expected");
    MIRROR_CHECK(!truncated_ && ended_, DataError,
                 name_ +
                     ": gzip stream is truncated (no end-of-stream / checksum trailer); the "
                     "download or copy was cut short, re-install the file");
    MIRROR_CHECK(zs_.avail_in == 0, DataError,
                 name_ + ": " + std::to_string(zs_.avail_in) +
                     " unexpected bytes after the end of the gzip stream");
  }
  bool truncated() const { return truncated_; }

 private:
  z_stream zs_;
  std::string name_;
  std::uint32_t isize_ = 0;
  bool ended_ = false;
  bool truncated_ = false;
};

[[noreturn]] void throw_short(ByteSource& src, const std::string& name, const std::string& what,
                              std::uint64_t expected, std::uint64_t found) {
  auto* gz = dynamic_cast<GzipSource*>(&src);
  throw DataError(name + ": file ends inside the " + what + ": expected " +
                  std::to_string(expected) + " bytes, found " + std::to_string(found) +
                  (gz && gz->truncated() ? " (the gzip stream is truncated)"
                                         : " (the header disagrees with the file size)") +
                  "; the file is truncated or corrupt");
}

void read_exact(ByteSource& src, std::uint8_t* dst, std::size_t n, const std::string& name,
                const std::string& what) {
  const std::size_t k = src.read(dst, n);
  if (k != n) throw_short(src, name, what, n, k);
}

/// Reads `total` payload bytes. When the container promises exactly that much the buffer is
/// allocated at once; otherwise it grows as data actually arrives, so a header that lies about
/// its size (within the limits) costs no more memory than the data really present.
void read_payload(ByteSource& src, std::vector<std::uint8_t>& out, std::uint64_t total,
                  const std::string& name, const std::string& what) {
  constexpr std::uint64_t kChunk = 4u << 20;
  if (src.promises(total)) out.reserve(total);
  std::uint64_t got = 0;
  while (got < total) {
    const std::uint64_t n = std::min(kChunk, total - got);
    out.resize(got + n);
    const std::size_t k = src.read(out.data() + got, n);
    got += k;
    if (k < n) throw_short(src, name, what, total, got);
  }
}

std::string type_name(unsigned t) {
  switch (t) {
    case 0x09:
      return "signed byte";
    case 0x0B:
      return "int16";
    case 0x0C:
      return "int32";
    case 0x0D:
      return "float32";
    case 0x0E:
      return "float64";
    default:
      return "";
  }
}

int idx_element_size(unsigned t) {
  switch (t) {
    case 0x0B:
      return 2;
    case 0x0C:
    case 0x0D:
      return 4;
    case 0x0E:
      return 8;
    default:
      return 1;
  }
}

}  // namespace

bool is_gzip(std::span<const std::uint8_t> file) {
  return file.size() >= 2 && file[0] == 0x1f && file[1] == 0x8b;
}

bool is_idx(std::span<const std::uint8_t> file) {
  return file.size() >= 4 && file[0] == 0 && file[1] == 0 &&
         (file[2] == 0x08 || !type_name(file[2]).empty());
}

std::vector<std::uint8_t> gunzip(std::span<const std::uint8_t> file, const std::string& name,
                                 std::uint64_t max_bytes) {
  MIRROR_CHECK(is_gzip(file), DataError,
               name +
                   ": not gzip (it does not start with the gzip magic 1f 8b); rename the "
                   "file without .gz if it is not compressed");
  GzipSource src(file, name);
  std::vector<std::uint8_t> out;
  // The buffer doubles from 64 KiB up to 64 MiB steps: small files stay cheap and the length
  // trailer is never trusted for an allocation.
  for (std::size_t chunk = 64u << 10;; chunk = std::min<std::size_t>(2 * chunk, 64u << 20)) {
    const std::size_t at = out.size();
    out.resize(at + chunk);
    const std::size_t k = src.read(out.data() + at, chunk);
    out.resize(at + k);
    MIRROR_CHECK(out.size() <= max_bytes, DataError,
                 name + ": inflates to more than " + std::to_string(max_bytes) + " bytes");
    if (k < chunk) break;
  }
  src.expect_end();
  return out;
}

ElementType idx_element_type(std::uint8_t type) {
  switch (type) {
    case 0x09:
      return ElementType::kInt8;
    case 0x0B:
      return ElementType::kInt16;
    case 0x0C:
      return ElementType::kInt32;
    case 0x0D:
      return ElementType::kFloat32;
    case 0x0E:
      return ElementType::kFloat64;
    default:
      return ElementType::kUInt8;
  }
}

NumericArray idx_to_numeric(IdxArray array) {
  NumericArray out;
  out.shape = std::move(array.dims);
  out.type = idx_element_type(array.type);
  const int size = element_size(out.type);
  for (std::size_t i = 0; size > 1 && i + size <= array.bytes.size(); i += size)
    std::reverse(array.bytes.begin() + static_cast<std::ptrdiff_t>(i),
                 array.bytes.begin() + static_cast<std::ptrdiff_t>(i + size));
  out.bytes = std::move(array.bytes);
  return out;
}

namespace {

/// Reads and checks the magic and the dimensions; returns the payload's byte count.
std::uint64_t read_idx_header(ByteSource& src, const std::string& name, const IdxLimits& limits,
                              IdxArray& out, std::string& dims_text) {
  std::uint8_t magic[4];
  read_exact(src, magic, 4, name, "IDX magic number");
  const std::string found =
      "0x" + hex2(magic[0]) + hex2(magic[1]) + hex2(magic[2]) + hex2(magic[3]);
  MIRROR_CHECK(
      magic[0] == 0 && magic[1] == 0, DataError,
      name + ": wrong IDX magic " + found + " (expected 0x000008NN, NN = rank); not an IDX file");
  MIRROR_CHECK(magic[2] == 0x08 || !type_name(magic[2]).empty(), DataError,
               name + ": wrong IDX magic " + found + " (unknown element type 0x" + hex2(magic[2]) +
                   "); not an IDX file");
  MIRROR_CHECK(magic[2] == 0x08 || limits.any_type, DataError,
               name + ": IDX element type " + type_name(magic[2]) + " (0x" + hex2(magic[2]) +
                   ") is not supported; expected unsigned bytes (0x08)");
  const int rank = magic[3];
  MIRROR_CHECK(rank >= 1 && rank <= limits.max_rank, DataError,
               name + ": IDX rank " + std::to_string(rank) + " outside [1, " +
                   std::to_string(limits.max_rank) + "]; the header is corrupt");

  std::uint8_t raw_dims[4 * 255];
  read_exact(src, raw_dims, 4 * static_cast<std::size_t>(rank), name, "IDX dimensions");
  out.type = magic[2];
  std::uint64_t total = idx_element_size(out.type);
  for (int i = 0; i < rank; ++i) {
    const std::uint8_t* p = raw_dims + 4 * i;
    const std::uint64_t d = (std::uint64_t{p[0]} << 24) | (std::uint64_t{p[1]} << 16) |
                            (std::uint64_t{p[2]} << 8) | std::uint64_t{p[3]};
    out.dims.push_back(static_cast<std::int64_t>(d));
    dims_text += (i ? "x" : "") + std::to_string(d);
    MIRROR_CHECK(
        d > 0, DataError,
        name + ": IDX dimension " + std::to_string(i) + " is zero; the file holds no data");
    // total <= max_bytes before the multiplication; the division guards the 64-bit product.
    MIRROR_CHECK(d <= UINT64_MAX / total && total * d <= limits.max_bytes, DataError,
                 name + ": IDX header dimensions " + dims_text + "... describe more than " +
                     std::to_string(limits.max_bytes) + " bytes; the header is corrupt");
    total *= d;
  }
  return total;
}

}  // namespace

IdxArray parse_idx(std::span<const std::uint8_t> file, const std::string& name,
                   const IdxLimits& limits) {
  const bool gzip = is_gzip(file);
  std::unique_ptr<ByteSource> src;
  if (gzip)
    src = std::make_unique<GzipSource>(file, name);
  else
    src = std::make_unique<RawSource>(file, name);
  IdxArray out;
  std::string dims_text;
  const std::uint64_t total = read_idx_header(*src, name, limits, out, dims_text);
  read_payload(*src, out.bytes, total, name, "IDX payload (dimensions " + dims_text + ")");
  src->expect_end();
  return out;
}

IdxHeader parse_idx_header(std::span<const std::uint8_t> file, const std::string& name,
                           const IdxLimits& limits) {
  RawSource src(file, name);
  IdxArray array;
  std::string dims_text;
  IdxHeader h;
  h.data_bytes = read_idx_header(src, name, limits, array, dims_text);
  h.dims = std::move(array.dims);
  h.type = array.type;
  h.data_offset = 4 + 4 * h.dims.size();
  const std::uint64_t present = file.size() - h.data_offset;
  MIRROR_CHECK(present >= h.data_bytes, DataError,
               name + ": file ends inside the IDX payload (dimensions " + dims_text +
                   "): expected " + std::to_string(h.data_bytes) + " bytes, found " +
                   std::to_string(present) +
                   " (the header disagrees with the file size); the file is truncated or corrupt");
  MIRROR_CHECK(present == h.data_bytes, DataError,
               name + ": " + std::to_string(present - h.data_bytes) +
                   " bytes after the data the IDX header describes; the file is corrupt or not "
                   "the IDX file expected");
  return h;
}

std::vector<std::uint8_t> read_file_bytes(const std::string& path, const std::string& hint) {
  // open(2) and read(2), so every failure has the system's reason: a folder opens as a stream
  // but reads as EISDIR (and an ifstream's tellg of it is garbage).
  const std::string advice = hint.empty() ? std::string() : "; " + hint;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  MIRROR_CHECK(fd >= 0, DataError, "cannot open " + path + ": " + std::strerror(errno) + advice);
  struct stat st {};
  const bool is_dir = ::fstat(fd, &st) == 0 && S_ISDIR(st.st_mode);
  // A device (/dev/zero, /dev/urandom) never ends: reading it would fill memory before any check.
  if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) || S_ISSOCK(st.st_mode)) {
    ::close(fd);
    throw DataError(path + " is a " + (S_ISSOCK(st.st_mode) ? "socket" : "device") +
                    ", not a data file; give a regular file (or a pipe)" + advice);
  }
  std::vector<std::uint8_t> bytes;
  if (!is_dir && S_ISREG(st.st_mode)) bytes.reserve(static_cast<std::size_t>(st.st_size));
  int err = is_dir ? EISDIR : 0;
  std::uint8_t chunk[1 << 16];
  while (err == 0) {
    const ssize_t n = ::read(fd, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) err = errno;
    if (n <= 0) break;
    bytes.insert(bytes.end(), chunk, chunk + n);
  }
  ::close(fd);
  MIRROR_CHECK(err == 0, DataError, "cannot read " + path + ": " + std::strerror(err) + advice);
  return bytes;
}

std::vector<std::uint8_t> encode_idx(const std::vector<std::int64_t>& dims,
                                     std::span<const std::uint8_t> payload, std::uint8_t type) {
  MIRROR_CHECK(!dims.empty() && dims.size() < 256, InvalidArgument,
               "encode_idx: rank must be 1..255");
  std::vector<std::uint8_t> out = {0, 0, type, static_cast<std::uint8_t>(dims.size())};
  for (auto d : dims) {
    MIRROR_CHECK(d >= 0 && d <= std::numeric_limits<std::uint32_t>::max(), InvalidArgument,
                 "encode_idx: dimension " + std::to_string(d) + " does not fit 32 bits");
    for (int shift = 24; shift >= 0; shift -= 8)
      out.push_back(static_cast<std::uint8_t>(d >> shift));
  }
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

std::vector<std::uint8_t> gzip_compress(std::span<const std::uint8_t> bytes) {
  MIRROR_CHECK(bytes.size() <= UINT_MAX, InvalidArgument, "gzip_compress: input above 4 GiB");
  z_stream zs;
  std::memset(&zs, 0, sizeof zs);
  MIRROR_CHECK(deflateInit2(&zs, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) == Z_OK, Error,
               "gzip_compress: zlib init failed");
  std::vector<std::uint8_t> out(deflateBound(&zs, static_cast<uLong>(bytes.size())) + 32);
  zs.next_in = const_cast<Bytef*>(bytes.data());
  zs.avail_in = static_cast<uInt>(bytes.size());
  zs.next_out = out.data();
  zs.avail_out = static_cast<uInt>(out.size());
  const int rc = deflate(&zs, Z_FINISH);
  const std::size_t produced = out.size() - zs.avail_out;
  deflateEnd(&zs);
  MIRROR_CHECK(rc == Z_STREAM_END, Error, "gzip_compress: deflate failed");
  out.resize(produced);
  return out;
}

}  // namespace mirror::data
