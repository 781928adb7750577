// Mapped arrays: .npy and uncompressed IDX are read in place (and a gzip file says it is read into
// memory), uint8 stays one byte a value until the batch, and a rank's memory does not grow with
// the data: an epoch over a 256 MiB file raises the resident set by far less than the file
// (Note [Flat memory], mapped_file.h). A file changed between epochs is an error naming it.
#include <gtest/gtest.h>

#include <fstream>
#include <thread>

#include "data_test_util.h"
#include "mirror/data/arrays.h"
#include "mirror/data/idx.h"
#include "mirror/data/loader.h"
#include "mirror/data/mapped_file.h"
#include "mirror/data/npy.h"
#include "temp_dir.h"

namespace mirror::data {
namespace {

using test::make_array;
using test::write_bytes;

/// A field of /proc/self/status in KiB (VmRSS, VmHWM); -1 when unavailable.
std::int64_t status_kib(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::stoll(line.substr(field.size() + 1));
  }
  return -1;
}

class MappedTest : public ::testing::Test {
 protected:
  std::string save(const std::string& name, const NumericArray& a) {
    return write_bytes(tmp_.path() / name, encode_npy(a));
  }
  testing_util::TempDir tmp_{"mirror-mapped"};
};

TEST_F(MappedTest, NpyAndIdxAreMappedGzipIsReadAndSaysSo) {
  const auto y = save("y.npy", make_array<std::int64_t>({0, 1, 2}, {3}));
  const auto ds = load_arrays(save("x.npy", make_array<std::uint8_t>({0, 51, 255, 0, 5, 6}, {3, 2})), y);
  EXPECT_NE(ds->describe().find(", mapped"), std::string::npos) << ds->describe();
  EXPECT_TRUE(ds->notes().empty());
  ASSERT_TRUE(ds->input_bound().has_value());
  EXPECT_EQ(*ds->input_bound(), 1.0);
  float s[2];
  ds->decode_float(0, s);
  EXPECT_EQ(s[1], 51.0f / 255.0f);
  EXPECT_EQ(s[0], 0.0f);

  // IDX float32 is big-endian in the file: converted per sample, in place.
  const std::vector<float> values = {1.5f, -2.0f, 3.25f, 4.0f, 0.5f, -0.125f};
  test::Bytes be;
  for (float v : values) {
    std::uint32_t bits;
    std::memcpy(&bits, &v, 4);
    for (int shift = 24; shift >= 0; shift -= 8) be.push_back(static_cast<std::uint8_t>(bits >> shift));
  }
  const auto idx = load_arrays(write_bytes(tmp_.path() / "x.idx", encode_idx({3, 2}, be, 0x0D)), y);
  EXPECT_NE(idx->describe().find(", mapped"), std::string::npos);
  idx->decode_float(2, s);
  EXPECT_EQ(s[0], 0.5f);
  EXPECT_EQ(s[1], -0.125f);

  const auto npy = encode_npy(make_array<std::uint8_t>({0, 51, 255, 0, 5, 6}, {3, 2}));
  const auto gz = load_arrays(write_bytes(tmp_.path() / "x.npy.gz", gzip_compress(npy)), y);
  EXPECT_NE(gz->describe().find(", in memory"), std::string::npos) << gz->describe();
  ASSERT_EQ(gz->notes().size(), 1u);
  EXPECT_NE(gz->notes()[0].find("x.npy.gz is gzip-compressed: read into this rank's memory"),
            std::string::npos)
      << gz->notes()[0];
  gz->decode_float(0, s);
  EXPECT_EQ(s[1], 51.0f / 255.0f);
}

TEST_F(MappedTest, AFileChangedBetweenEpochsIsAnErrorNamingIt) {
  const auto x = save("x.npy", make_array<float>({1, 2, 3, 4, 5, 6, 7, 8}, {4, 2}));
  const auto y = save("y.npy", make_array<std::int64_t>({0, 1, 0, 1}, {4}));
  LoaderOptions o;
  o.global_batch = 2;
  o.prefetch_depth = 0;  // synchronous: the next epoch's order is computed when asked for
  Loader loader(load_arrays(x, y), {0, 1}, o);
  loader.start(0, 2);
  ASSERT_TRUE(loader.next().has_value());
  ASSERT_TRUE(loader.next().has_value());
  // Rewritten in place with one more sample: the mapping would read the old size.
  save("y.npy", make_array<std::int64_t>({0, 1, 0, 1, 1}, {5}));
  test::expect_data_error([&] { loader.next(); },
                          {"y.npy", "changed size", "must not change while it trains"});
}

/// Note [Flat memory]: one shuffled epoch over 256 MiB of mapped uint8 samples. A rank that
/// copied the data, or kept every page it read mapped, would grow by about 256 MiB; the page
/// budget keeps the growth near its 32 MiB limit plus the batches in flight.
TEST_F(MappedTest, AnEpochOverDataLargerThanTheBoundKeepsTheResidentSetFlat) {
  if (status_kib("VmRSS") < 0) GTEST_SKIP() << "no /proc/self/status here: cannot measure RSS";
  constexpr std::int64_t kSample = 4096, kSamples = 65536;  // 256 MiB
  const std::string x = (tmp_.path() / "big.npy").string();
  {
    NumericArray header;
    header.shape = {kSamples, 1, 64, 64};
    std::vector<std::uint8_t> bytes = encode_npy(header);  // an empty payload: the header only
    std::ofstream out(x, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    std::vector<char> chunk(1 << 20);
    for (std::int64_t written = 0; written < kSample * kSamples; written += chunk.size()) {
      for (std::size_t i = 0; i < chunk.size(); ++i) chunk[i] = static_cast<char>((written + i) * 7);
      out.write(chunk.data(), static_cast<std::streamsize>(chunk.size()));
    }
  }
  std::vector<std::int64_t> labels(kSamples);
  for (std::int64_t i = 0; i < kSamples; ++i) labels[static_cast<std::size_t>(i)] = i % 10;
  const auto y = save("labels.npy", make_array(labels, {kSamples}));
  const auto ds = load_arrays(x, y);
  LoaderOptions o;
  o.global_batch = 64;
  o.prefetch_depth = 4;
  o.num_workers = 2;
  Loader loader(ds, {0, 1}, o);
  const std::int64_t base = status_kib("VmRSS");
  std::int64_t peak = base, batches = 0;
  double checksum = 0;
  loader.start(0, 1);
  while (auto b = loader.next()) {
    for (int k = 0; k < 64; ++k) checksum += b->inputs.data<float>()[k];
    peak = std::max(peak, status_kib("VmRSS"));
    ++batches;
  }
  EXPECT_EQ(batches, kSamples / 64);
  EXPECT_GT(checksum, 0);
  const std::int64_t growth_mib = (peak - base) >> 10;
  const std::int64_t data_mib = (kSample * kSamples) >> 20;
  std::cout << "resident set growth over one epoch of " << data_mib << " MiB: " << growth_mib
            << " MiB\n";
  EXPECT_LT(growth_mib, data_mib / 2)
      << "reading the mapped data grew the resident set by " << growth_mib << " MiB for "
      << data_mib << " MiB of data: the pages read are not released (Note [Flat memory])";
}

TEST(PageBudget, ReleasesEveryFileOnceTheLimitIsPassed) {
  testing_util::TempDir tmp("mirror-budget");
  const std::string path = (tmp.path() / "f.bin").string();
  {
    std::ofstream out(path, std::ios::binary);
    std::vector<char> zeros(8 << 20, 1);
    out.write(zeros.data(), static_cast<std::streamsize>(zeros.size()));
  }
  const auto file = MappedFile::open(path);
  PageBudget budget(1 << 20);
  budget.add(file);
  const std::int64_t before = status_kib("VmRSS");
  if (before < 0) GTEST_SKIP() << "no /proc/self/status here";
  volatile std::uint8_t sink = 0;
  const auto bytes = file->bytes();
  for (std::size_t at = 0; at < bytes.size(); at += 4096) {
    sink = sink + bytes[at];
    budget.touched(at, 1);
  }
  // 8 MiB read; at most the 1 MiB budget (and a page or two) still mapped.
  EXPECT_LT(status_kib("VmRSS") - before, 4 << 10);
  EXPECT_THROW(MappedFile::open((tmp.path() / "missing").string()), DataError);
  EXPECT_THROW(MappedFile::open(tmp.path().string()), DataError);
}

}  // namespace
}  // namespace mirror::data
