// IDX / gzip parsing and FashionMnist loading from fixture files, including every kind of bad
// input the loader must reject with a DataError.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <numeric>
#include <string>

#include "data_test_util.h"
#include "mirror/data/arrays.h"
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

// ---------------------------------------------------------------- IDX through load_arrays

/// Big-endian bytes of 32-bit values, as IDX stores int32 / float32 elements.
template <class T>
Bytes big_endian(const std::vector<T>& values) {
  Bytes out;
  for (T v : values) {
    std::uint32_t u;
    std::memcpy(&u, &v, 4);
    for (int shift = 24; shift >= 0; shift -= 8)
      out.push_back(static_cast<std::uint8_t>(u >> shift));
  }
  return out;
}

class IdxArrays : public ::testing::Test {
 protected:
  std::string save(const std::string& name, const Bytes& bytes) {
    return test::write_bytes(tmp_.path() / name, bytes);
  }
  testing_util::TempDir tmp_{"mirror-idx"};
};

TEST_F(IdxArrays, AnyShapeAndAnyNumberOfClasses) {
  // 6 samples of 2x3x2 (rank 4), labels up to 11: more than Fashion-MNIST's 10 classes.
  const Bytes pixels = payload(6 * 12, 5);
  const auto xp = save("x-idx4-ubyte.gz", gzip_compress(encode_idx({6, 2, 3, 2}, pixels)));
  const auto yp = save("y-idx1-ubyte", encode_idx({6}, Bytes{11, 0, 3, 10, 2, 1}));
  const auto ds = load_arrays(xp, yp);
  EXPECT_EQ(ds->num_classes(), 12);
  EXPECT_EQ(ds->sample_shape(), (Shape{2, 3, 2}));
  EXPECT_EQ(ds->label(0), 11);
  EXPECT_EQ(ds->label(3), 10);
  float s[12];
  ds->decode_float(5, s);
  for (int i = 0; i < 12; ++i) EXPECT_EQ(s[i], pixels[60 + i] / 255.0f);
  ArrayOptions o;
  o.num_classes = 20;
  EXPECT_EQ(load_arrays(xp, yp, o)->num_classes(), 20);
  o.num_classes = 11;
  expect_data_error([&] { load_arrays(xp, yp, o); },
                    {"y-idx1-ubyte", "label 11 of sample 0", "11 classes"});
  const auto y5 = save("y5", encode_idx({5}, Bytes{0, 1, 2, 3, 4}));
  expect_data_error([&] { load_arrays(xp, y5); }, {"6 samples in", "but 5 in", "y5"});
  const auto fake = save("fake.gz", encode_idx({6}, Bytes{0, 1, 2, 3, 4, 5}));
  expect_data_error([&] { load_arrays(xp, fake); }, {"fake.gz", "not gzip"});
}

TEST_F(IdxArrays, TypedElementsAreReadBigEndian) {
  const std::vector<float> x = {0.5f, -1.25f, 3e7f, 4.0f, -0.0f, 6.5f};
  const auto xp = save("x-f32", encode_idx({3, 2}, big_endian(x), 0x0D));
  const auto yp = save("y-i32", encode_idx({3}, big_endian<std::int32_t>({70000, 2, 5}), 0x0C));
  const auto ds = load_arrays(xp, yp);
  EXPECT_EQ(ds->num_classes(), 70001);
  EXPECT_EQ(ds->label(0), 70000);
  float s[2];
  ds->decode_float(1, s);
  EXPECT_EQ(s[0], 3e7f);
  EXPECT_EQ(s[1], 4.0f);
  // float32 y: float targets; int32 x: token ids.
  const Bytes targets = big_endian<float>({0.5f, 1.0f, -2.0f});
  const auto ft = load_arrays(xp, save("t-f32", encode_idx({3}, targets, 0x0D)));
  EXPECT_EQ(ft->target_kind(), TargetKind::kFloat);
  float t;
  ft->decode_target(2, &t);
  EXPECT_EQ(t, -2.0f);
  const Bytes ids = big_endian<std::int32_t>({1, 0, 2, 3, 300, 0});
  const auto tok = load_arrays(save("x-i32", encode_idx({3, 2}, ids, 0x0C)), yp);
  EXPECT_EQ(tok->vocab_size(), 301);
  EXPECT_EQ(tok->length(0), 1);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const Bytes bad = big_endian<float>({0, 0, 0, 0, nan, 0});
  expect_data_error(
      [&] {
        load_arrays(save("nan-f32", encode_idx({3, 2}, bad, 0x0D)), yp);
      },
      {"nan-f32", "flat index 4", "sample 2"});
  Bytes cut = encode_idx({3, 2}, big_endian(x), 0x0D);
  cut.pop_back();
  expect_data_error([&] { load_arrays(save("cut-f32", cut), yp); },
                    {"cut-f32", "expected 24 bytes, found 23"});
}

TEST(IdxArraysReal, FashionMnistTestSplitMatchesFashionMnist) {
  const std::string dir = kFashionMnistDir;
  if (!std::filesystem::exists(dir + "/t10k-labels-idx1-ubyte.gz"))
    GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  const auto fm = FashionMnist::load(dir, Split::kTest);
  const auto ds =
      load_arrays(dir + "/t10k-images-idx3-ubyte.gz", dir + "/t10k-labels-idx1-ubyte.gz");
  ASSERT_EQ(ds->size(), fm->size());
  EXPECT_EQ(ds->num_classes(), 10);
  EXPECT_EQ(ds->sample_shape(), (Shape{28, 28}));
  std::vector<float> a(784), b(784);
  for (std::int64_t i : {std::int64_t{0}, std::int64_t{4321}, fm->size() - 1}) {
    EXPECT_EQ(ds->label(i), fm->label(i));
    ds->decode_float(i, a.data());
    fm->decode_float(i, b.data());
    EXPECT_EQ(a, b);
  }
}

}  // namespace
}  // namespace mirror::data
