// defines: TensorBoardWriter (scalar summaries as TensorBoard event files) and the TFRecord
// framing those files use (length and payload, each followed by a masked CRC32C), with a
// reader that checks every CRC.
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mirror::train {

/// Writes `events.out.tfevents.<seconds>.<host>.<pid>` in a folder: a file_version event, then
/// one event of scalar summaries per scalars() call, each flushed as written. The events are
/// protobuf messages of the schema subset in src/train/proto/tensorboard_event.proto, so
/// `tensorboard --logdir DIR` plots them. Only rank 0 should write: the caller decides.
class TensorBoardWriter {
 public:
  /// A disabled writer: scalars() does nothing.
  TensorBoardWriter() = default;
  /// Creates `dir` when missing and a new event file in it. InvalidArgument naming the folder
  /// when it cannot be written, or when this build has no protobuf (available() is false).
  explicit TensorBoardWriter(const std::filesystem::path& dir);
  ~TensorBoardWriter();
  TensorBoardWriter(TensorBoardWriter&& other) noexcept;
  TensorBoardWriter& operator=(TensorBoardWriter&& other) noexcept;
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  /// Whether this build writes event files (it was built with protobuf).
  static bool available();
  bool enabled() const { return file_ != nullptr; }
  const std::filesystem::path& path() const { return path_; }
  /// One event at `step` holding a scalar per (tag, value). Error when the write fails.
  void scalars(std::int64_t step, const std::vector<std::pair<std::string, double>>& values);

 private:
  void write_record(const std::string& payload);

  std::filesystem::path path_;
  std::FILE* file_ = nullptr;
};

/// CRC-32C (Castagnoli polynomial, reflected), as TFRecord uses it.
std::uint32_t crc32c(std::string_view bytes);
/// The CRC as TFRecord stores it: rotated right by 15 bits plus 0xa282ead8.
std::uint32_t masked_crc32c(std::string_view bytes);
/// One TFRecord: payload length (uint64 little-endian), masked CRC of those 8 bytes, the payload,
/// masked CRC of the payload.
std::string tfrecord(std::string_view payload);
/// The payloads of a file of TFRecords. DataError naming the file and the record when a record
/// is cut short or a CRC does not match.
std::vector<std::string> read_tfrecords(const std::filesystem::path& path);

}  // namespace mirror::train
