// TFRecord framing (masked CRC32C against known values, corrupt and cut files are DataError) and
// TensorBoardWriter's events read back with the same protobuf classes.
#include <gtest/gtest.h>

#include <fstream>

#include "mirror/error.h"
#include "mirror/train/tensorboard.h"
#include "temp_dir.h"
#ifdef MIRROR_WITH_TENSORBOARD
#include "tensorboard_event.pb.h"
#endif

namespace mirror::train {
namespace {

namespace fs = std::filesystem;

TEST(TfRecord, Crc32cKnownValues) {
  EXPECT_EQ(crc32c(""), 0x00000000u);
  EXPECT_EQ(crc32c("123456789"), 0xe3069283u);            // the standard CRC-32C check value
  EXPECT_EQ(crc32c(std::string(32, '\0')), 0x8a9136aau);  // RFC 3720 B.4: 32 zero bytes
  EXPECT_EQ(crc32c(std::string(32, '\xff')), 0x62a8ab43u);
  const std::uint32_t c = crc32c("123456789");
  EXPECT_EQ(masked_crc32c("123456789"), ((c >> 15) | (c << 17)) + 0xa282ead8u);
}

TEST(TfRecord, FramesAndReadsBackAndRefusesCorruptFiles) {
  testing_util::TempDir dir("mirror-tfrecord");
  const fs::path p = dir.path() / "records";
  {
    std::ofstream out(p, std::ios::binary);
    out << tfrecord("first") << tfrecord("") << tfrecord(std::string(300, 'x'));
  }
  const auto back = read_tfrecords(p);
  ASSERT_EQ(back.size(), 3u);
  EXPECT_EQ(back[0], "first");
  EXPECT_EQ(back[1], "");
  EXPECT_EQ(back[2], std::string(300, 'x'));
  EXPECT_EQ(tfrecord("first").size(), 5u + 16u);

  std::string bytes = tfrecord("first") + tfrecord("second");
  auto write = [&](const std::string& b) { std::ofstream(p, std::ios::binary) << b; };
  bytes[14] ^= 0x01;  // a payload byte of the first record
  write(bytes);
  EXPECT_THROW(read_tfrecords(p), DataError);
  bytes[14] ^= 0x01;
  bytes[2] ^= 0x01;  // its length
  write(bytes);
  EXPECT_THROW(read_tfrecords(p), DataError);
  bytes[2] ^= 0x01;
  write(bytes.substr(0, bytes.size() - 3));  // cut short
  EXPECT_THROW(read_tfrecords(p), DataError);
  EXPECT_THROW(read_tfrecords(dir.path() / "missing"), DataError);
}

TEST(TensorBoardWriter, EventsParseBackWithTheSameClasses) {
  testing_util::TempDir dir("mirror-tb");
#ifndef MIRROR_WITH_TENSORBOARD
  EXPECT_FALSE(TensorBoardWriter::available());
  EXPECT_THROW(TensorBoardWriter(dir.path() / "tb"), InvalidArgument);
  GTEST_SKIP() << "built without protobuf: no TensorBoard events";
#else
  fs::path file;
  {
    TensorBoardWriter w(dir.path() / "tb");
    ASSERT_TRUE(w.enabled());
    file = w.path();
    w.scalars(1, {{"train/loss", 2.5}, {"train/lr", 1e-3}});
    w.scalars(2, {{"train/loss", 1.25}});
  }
  EXPECT_EQ(file.parent_path(), dir.path() / "tb");
  const auto records = read_tfrecords(file);
  ASSERT_EQ(records.size(), 3u);
  tensorboard::Event e;
  ASSERT_TRUE(e.ParseFromString(records[0]));
  EXPECT_EQ(e.file_version(), "brain.Event:2");
  EXPECT_GT(e.wall_time(), 1.6e9);
  ASSERT_TRUE(e.ParseFromString(records[1]));
  EXPECT_EQ(e.step(), 1);
  ASSERT_EQ(e.summary().value_size(), 2);
  EXPECT_EQ(e.summary().value(0).tag(), "train/loss");
  EXPECT_EQ(e.summary().value(0).simple_value(), 2.5f);
  EXPECT_EQ(e.summary().value(1).simple_value(), 1e-3f);
  ASSERT_TRUE(e.ParseFromString(records[2]));
  EXPECT_EQ(e.step(), 2);
  EXPECT_EQ(e.summary().value(0).simple_value(), 1.25f);

  TensorBoardWriter off;
  EXPECT_FALSE(off.enabled());
  off.scalars(1, {{"x", 1}});  // no-op
  EXPECT_THROW(TensorBoardWriter("/proc/nope/tb"), InvalidArgument);
#endif
}

}  // namespace
}  // namespace mirror::train
