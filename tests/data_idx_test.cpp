// IDX / gzip parsing and FashionMnist loading from fixture files, including every kind of bad
// input the loader must reject with a DataError.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <numeric>
#include <string>

#include "mirror/data/fashion_mnist.h"
#include "mirror/data/idx.h"
#include "mirror/error.h"
#include "temp_dir.h"

namespace mirror::data {
namespace {

using Bytes = std::vector<std::uint8_t>;

Bytes payload(std::size_t n, int mul = 7) {
  Bytes b(n);
  for (std::size_t i = 0; i < n; ++i) b[i] = static_cast<std::uint8_t>((i * mul + 3) % 256);
  return b;
}

/// Expects a DataError whose message contains every one of `parts`.
template <class F>
void expect_data_error(F&& f, std::initializer_list<const char*> parts) {
  try {
    f();
    FAIL() << "expected DataError";
  } catch (const DataError& e) {
    for (const char* p : parts)
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
}

TEST(DataIdx, RawAndGzipRoundTrip) {
  const Bytes data = payload(2 * 3 * 4);
  const Bytes file = encode_idx({2, 3, 4}, data);
  ASSERT_EQ(file.size(), 4u + 12u + 24u);
  EXPECT_EQ(file[2], 0x08);
  EXPECT_EQ(file[3], 3);
  for (const Bytes& f : {file, gzip_compress(file)}) {
    const IdxArray a = parse_idx(f, "fixture");
    EXPECT_EQ(a.dims, (std::vector<std::int64_t>{2, 3, 4}));
    EXPECT_EQ(a.bytes, data);
  }
}

TEST(DataIdx, TruncatedGzipIsDataError) {
  const Bytes gz = gzip_compress(encode_idx({100, 10}, payload(1000)));
  for (std::size_t keep : {gz.size() - 1, gz.size() - 8, gz.size() / 2, std::size_t{12}}) {
    const Bytes cut(gz.begin(), gz.begin() + static_cast<std::ptrdiff_t>(keep));
    expect_data_error([&] { parse_idx(cut, "cut.gz"); }, {"cut.gz", "truncated"});
  }
}

TEST(DataIdx, CorruptGzipIsDataError) {
  Bytes gz = gzip_compress(encode_idx({100, 10}, payload(1000)));
  Bytes crc = gz;
  crc[crc.size() - 6] ^= 0xFF;  // inside the CRC-32 trailer
  expect_data_error([&] { parse_idx(crc, "crc.gz"); }, {"crc.gz", "corrupt gzip"});
  Bytes body = gz;
  for (std::size_t i = 12; i < 40; ++i) body[i] ^= 0x5A;  // inside the deflate stream
  expect_data_error([&] { parse_idx(body, "body.gz"); }, {"body.gz"});
}

TEST(DataIdx, BytesAfterGzipStreamAreDataError) {
  Bytes gz = gzip_compress(encode_idx({4}, payload(4)));
  gz.push_back(0);
  expect_data_error([&] { parse_idx(gz, "tail.gz"); }, {"after the end of the gzip stream"});
}

TEST(DataIdx, WrongMagicIsDataError) {
  Bytes f = encode_idx({4}, payload(4));
  f[0] = 0x12;
  expect_data_error([&] { parse_idx(f, "m"); }, {"wrong IDX magic", "0x12000801"});
  f[0] = 0;
  f[2] = 0x42;
  expect_data_error([&] { parse_idx(f, "m"); }, {"wrong IDX magic"});
  f[2] = 0x0D;
  expect_data_error([&] { parse_idx(f, "m"); }, {"float32", "not supported"});
  f[2] = 0x08;
  f[3] = 0;
  expect_data_error([&] { parse_idx(f, "m"); }, {"rank 0"});
  expect_data_error([&] { parse_idx(Bytes{0, 0}, "short"); }, {"short", "magic"});
  expect_data_error([&] { parse_idx(Bytes{}, "empty"); }, {"empty"});
}

TEST(DataIdx, SizeDisagreeingWithHeaderIsDataError) {
  Bytes f = encode_idx({10, 10}, payload(100));
  Bytes short_file(f.begin(), f.end() - 1);
  expect_data_error([&] { parse_idx(short_file, "s"); },
                    {"expected 100 bytes", "found 99", "10x10"});
  expect_data_error([&] { parse_idx(gzip_compress(short_file), "s.gz"); }, {"found 99"});
  Bytes long_file = f;
  long_file.push_back(1);
  expect_data_error([&] { parse_idx(long_file, "l"); }, {"1 bytes after"});
  expect_data_error([&] { parse_idx(gzip_compress(long_file), "l.gz"); },
                    {"longer than the IDX header"});
  Bytes no_dims(f.begin(), f.begin() + 6);
  expect_data_error([&] { parse_idx(no_dims, "d"); }, {"IDX dimensions"});
}

TEST(DataIdx, AbsurdAndZeroDimensionsRejectedBeforeAllocation) {
  // 4 billion x 4 billion x 4 billion: would be 2^96 bytes; only the 16-byte header exists.
  Bytes f = {0, 0, 8, 3, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF};
  expect_data_error([&] { parse_idx(f, "huge"); }, {"huge", "describe more than"});
  expect_data_error([&] { parse_idx(gzip_compress(f), "huge.gz"); }, {"describe more than"});
  // Within 64 bits but above the limit.
  IdxLimits small;
  small.max_bytes = 1000;
  expect_data_error(
      [&] {
        parse_idx(encode_idx({40, 40}, payload(1600)), "lim", small);
      },
      {"describe more than 1000 bytes"});
  // Within the limit (1.6 GB) but only the header is present: the payload buffer grows with the
  // data actually read (one 4 MiB chunk here), it is not allocated from the header's claim.
  const Bytes header_only = encode_idx({40000, 40000}, {});
  expect_data_error([&] { parse_idx(header_only, "lie"); }, {"expected 1600000000 bytes, found 0"});
  expect_data_error([&] { parse_idx(gzip_compress(header_only), "lie.gz"); },
                    {"expected 1600000000 bytes, found 0"});
  expect_data_error([&] { parse_idx(encode_idx({3, 0}, {}), "zero"); }, {"dimension 1 is zero"});
  Bytes rank5 = encode_idx({1, 1, 1, 1, 1}, payload(1));
  expect_data_error([&] { parse_idx(rank5, "r5"); }, {"rank 5"});
}

TEST(DataIdx, MissingFileNamesPath) {
  expect_data_error([] { read_file_bytes("/nonexistent/x.gz", "install pkg-x"); },
                    {"/nonexistent/x.gz", "install pkg-x"});
}

// ---------------------------------------------------------------- FashionMnist fixtures

class FashionFixture : public ::testing::Test {
 protected:
  void write(const std::string& name, const Bytes& bytes) {
    std::ofstream out(dir_ / name, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
  }
  /// A 5-image, 3x4 train split with labels 0..4; `gz` picks compressed or raw names.
  void write_split(bool gz, Bytes labels = {0, 1, 2, 3, 4}) {
    const Bytes img = encode_idx({5, 3, 4}, payload(60, 11));
    const Bytes lab = encode_idx({static_cast<std::int64_t>(labels.size())}, labels);
    write(gz ? "train-images-idx3-ubyte.gz" : "train-images-idx3-ubyte",
          gz ? gzip_compress(img) : img);
    write(gz ? "train-labels-idx1-ubyte.gz" : "train-labels-idx1-ubyte",
          gz ? gzip_compress(lab) : lab);
  }
  testing_util::TempDir tmp_{"mirror-fmnist"};
  std::filesystem::path dir_ = tmp_.path();
};

TEST_F(FashionFixture, LoadsGzipAndRawInBothLayouts) {
  for (bool gz : {true, false}) {
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    write_split(gz);
    auto nchw = FashionMnist::load(dir_.string(), Split::kTrain, Layout::kNCHW);
    EXPECT_EQ(nchw->size(), 5);
    EXPECT_EQ(nchw->sample_shape(), (Shape{1, 3, 4}));
    EXPECT_FALSE(nchw->is_sequence());
    auto rows = FashionMnist::load(dir_.string(), Split::kTrain, Layout::kRows);
    EXPECT_EQ(rows->sample_shape(), (Shape{3, 4}));
    EXPECT_TRUE(rows->is_sequence());
    EXPECT_EQ(rows->length(2), 3);
    const Bytes raw = payload(60, 11);
    float px[12];
    for (std::int64_t i = 0; i < 5; ++i) {
      EXPECT_EQ(nchw->label(i), i);
      nchw->decode_float(i, px);
      for (int p = 0; p < 12; ++p) EXPECT_EQ(px[p], static_cast<float>(raw[i * 12 + p]) / 255.0f);
    }
  }
}

TEST_F(FashionFixture, MissingFilesNameTheDebianPackage) {
  expect_data_error([&] { FashionMnist::load(dir_.string(), Split::kTest); },
                    {"t10k-images-idx3-ubyte.gz", "dataset-fashion-mnist"});
}

TEST_F(FashionFixture, CountMismatchIsDataError) {
  write_split(true, {0, 1, 2, 3});
  expect_data_error([&] { FashionMnist::load(dir_.string(), Split::kTrain); },
                    {"5 images", "4 labels"});
}

TEST_F(FashionFixture, LabelOutOfRangeIsDataError) {
  write_split(true, {0, 1, 10, 3, 4});
  expect_data_error([&] { FashionMnist::load(dir_.string(), Split::kTrain); },
                    {"label 10 of sample 2", "outside [0, 10)"});
}

TEST_F(FashionFixture, SwappedFilesAreDataError) {
  const Bytes img = encode_idx({5, 3, 4}, payload(60));
  write("train-images-idx3-ubyte.gz", gzip_compress(encode_idx({5}, payload(5, 0))));
  write("train-labels-idx1-ubyte.gz", gzip_compress(img));
  expect_data_error([&] { FashionMnist::load(dir_.string(), Split::kTrain); },
                    {"expected a rank-3 IDX array"});
}

TEST_F(FashionFixture, TruncatedFileOnDiskIsDataError) {
  write_split(true);
  Bytes gz = gzip_compress(encode_idx({5, 3, 4}, payload(60, 11)));
  gz.resize(gz.size() / 2);
  write("train-images-idx3-ubyte.gz", gz);
  expect_data_error([&] { FashionMnist::load(dir_.string(), Split::kTrain); },
                    {"train-images-idx3-ubyte.gz", "truncated"});
}

}  // namespace
}  // namespace mirror::data
