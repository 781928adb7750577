// TFRecord framing (masked CRC32C) and the protobuf-free part of TensorBoardWriter; the events
// themselves are built in src/train/tensorboard/ (with protobuf, or a stub without it).
#include "mirror/train/tensorboard.h"

#include <array>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>

#include "mirror/error.h"

namespace mirror::train {
namespace {

constexpr std::uint32_t kCastagnoliReflected = 0x82f63b78u;

constexpr std::array<std::uint32_t, 256> crc_table() {
  std::array<std::uint32_t, 256> table{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int bit = 0; bit < 8; ++bit) c = (c & 1u) ? (c >> 1) ^ kCastagnoliReflected : c >> 1;
    table[i] = c;
  }
  return table;
}

void put_u32(std::string& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xffu));
}

std::uint64_t get_le(const std::string& bytes, std::size_t at, int width) {
  std::uint64_t v = 0;
  for (int i = width - 1; i >= 0; --i) {
    v = (v << 8) | static_cast<unsigned char>(bytes[at + static_cast<std::size_t>(i)]);
  }
  return v;
}

}  // namespace

std::uint32_t crc32c(std::string_view bytes) {
  static constexpr auto kTable = crc_table();
  std::uint32_t c = 0xffffffffu;
  for (unsigned char b : bytes) c = kTable[(c ^ b) & 0xffu] ^ (c >> 8);
  return c ^ 0xffffffffu;
}

std::uint32_t masked_crc32c(std::string_view bytes) {
  const std::uint32_t c = crc32c(bytes);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

std::string tfrecord(std::string_view payload) {
  std::string out;
  out.reserve(payload.size() + 16);
  const std::uint64_t n = payload.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xffu));
  put_u32(out, masked_crc32c(std::string_view(out.data(), 8)));
  out.append(payload);
  put_u32(out, masked_crc32c(payload));
  return out;
}

std::vector<std::string> read_tfrecords(const std::filesystem::path& path) {
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  MIRROR_CHECK(in.good(), DataError,
               "cannot open the event file '" + path.string() +
                   "': " + std::strerror(errno != 0 ? errno : EIO));
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> records;
  std::size_t at = 0;
  while (at < bytes.size()) {
    const std::string where =
        "record " + std::to_string(records.size()) + " of '" + path.string() + "'";
    MIRROR_CHECK(bytes.size() - at >= 12, DataError, where + " is cut short in its header");
    const std::uint64_t n = get_le(bytes, at, 8);
    MIRROR_CHECK(get_le(bytes, at + 8, 4) == masked_crc32c(std::string_view(bytes).substr(at, 8)),
                 DataError, where + ": the length's CRC does not match (a corrupt file)");
    MIRROR_CHECK(bytes.size() - at - 12 >= n + 4, DataError,
                 where + " is cut short: " + std::to_string(n) + " payload bytes announced");
    const std::string payload = bytes.substr(at + 12, n);
    MIRROR_CHECK(get_le(bytes, at + 12 + n, 4) == masked_crc32c(payload), DataError,
                 where + ": the payload's CRC does not match (a corrupt file)");
    records.push_back(payload);
    at += 12 + n + 4;
  }
  return records;
}

TensorBoardWriter::~TensorBoardWriter() {
  if (file_) std::fclose(file_);
}

TensorBoardWriter::TensorBoardWriter(TensorBoardWriter&& other) noexcept
    : path_(std::move(other.path_)), file_(std::exchange(other.file_, nullptr)) {}

TensorBoardWriter& TensorBoardWriter::operator=(TensorBoardWriter&& other) noexcept {
  if (this != &other) {
    if (file_) std::fclose(file_);
    path_ = std::move(other.path_);
    file_ = std::exchange(other.file_, nullptr);
  }
  return *this;
}

void TensorBoardWriter::write_record(const std::string& payload) {
  const std::string record = tfrecord(payload);
  const bool ok = std::fwrite(record.data(), 1, record.size(), file_) == record.size() &&
                  std::fflush(file_) == 0;
  MIRROR_CHECK(ok, Error,
               "cannot write the event file '" + path_.string() + "': " + std::strerror(errno));
}

}  // namespace mirror::train
