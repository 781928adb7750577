// Safetensors round trips, the reader's rejection of every kind of damaged file, the
// CheckpointManager's keep-K / skip-corrupt behaviour, and crash atomicity (SIGKILL mid-write).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "mirror/train/checkpoint.h"
#include "temp_dir.h"

namespace mirror::train {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

using testing_util::TempDir;

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

void write_all(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string le64(std::uint64_t n) {
  std::string s(8, '\0');
  std::memcpy(s.data(), &n, 8);
  return s;
}

/// A file from a hand-written header and buffer (no checksum unless the header has one).
std::string raw_file(const std::string& header, const std::string& buffer) {
  return le64(header.size()) + header + buffer;
}

template <class T>
std::string bytes_of(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

NamedTensors sample_tensors() {
  NamedTensors t;
  t["conv2d_1/kernel"] =
      Tensor::from_vector<float>({1.5f, -2.25f, 3.0f, 0.0f, 1e-30f, -7.0f}, {2, 1, 1, 3});
  t["conv2d_1/bias"] = Tensor::from_vector<float>({0.5f, -0.5f}, {2});
  t["f64"] = Tensor::from_vector<double>({3.141592653589793, -1e300}, {2});
  t["f16"] = Tensor::from_vector<Half>({Half{0x3c00}, Half{0xc000}, Half{0x7bff}}, {3});
  t["bf16"] = Tensor::from_vector<BFloat16>({BFloat16{0x3f80}, BFloat16{0xff80}}, {1, 2});
  t["i32"] = Tensor::from_vector<std::int32_t>({-2147483647 - 1, 2147483647, 0}, {3, 1});
  t["i64"] = Tensor::from_vector<std::int64_t>({-1, 1LL << 62}, {2});
  t["u8"] = Tensor::from_vector<std::uint8_t>({0, 255, 7}, {3});
  t["scalar"] = Tensor::from_vector<float>({42.0f}, {});
  t["empty"] = Tensor::empty({0, 4});
  t["optimizer/conv2d_1/kernel/adam_m"] =
      Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 1, 1, 3});
  return t;
}

Metadata sample_metadata() {
  return {{"step", "1200"},
          {"epoch", "3"},
          {"seed", "42"},
          {"world_size", "2"},
          {"mirror_version", "0.1.0"},
          {"model", R"({"layers":[{"kind":"dense","units":10}]})"},
          {"unicode", "grüße ✓"}};
}

std::string raw_bytes(const Tensor& t) {
  return t.nbytes() ? std::string(static_cast<const char*>(t.raw_data()), t.nbytes()) : "";
}

void expect_same(const NamedTensors& want, const NamedTensors& got) {
  ASSERT_EQ(want.size(), got.size());
  for (const auto& [name, t] : want) {
    ASSERT_TRUE(got.count(name)) << name;
    const Tensor& g = got.at(name);
    EXPECT_EQ(g.dtype(), t.dtype()) << name;
    EXPECT_EQ(g.shape(), t.shape()) << name;
    EXPECT_TRUE(g.device().is_cpu()) << name;
    EXPECT_EQ(raw_bytes(g), raw_bytes(t)) << name;
  }
}

TEST(Safetensors, RoundTripsEveryDtypeInMemoryAndOnDisk) {
  const auto tensors = sample_tensors();
  const auto meta = sample_metadata();
  const SafetensorsFile mem = decode_safetensors(encode_safetensors(tensors, meta), "mem");
  expect_same(tensors, mem.tensors);
  for (const auto& [k, v] : meta) EXPECT_EQ(mem.metadata.at(k), v) << k;
  EXPECT_EQ(mem.metadata.at(kChecksumKey).rfind("crc32:", 0), 0u);

  TempDir dir;
  const fs::path p = dir.path() / "model.safetensors";
  write_safetensors(p, tensors, meta);
  const SafetensorsFile disk = read_safetensors(p);
  expect_same(tensors, disk.tensors);
  EXPECT_EQ(disk.metadata, mem.metadata);
  // No temporary file is left behind.
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()), 1);
}

TEST(Safetensors, LayoutFollowsTheFormat) {
  NamedTensors t;
  t["a"] = Tensor::from_vector<float>({1.0f, 2.0f}, {2});
  t["b"] = Tensor::from_vector<std::int64_t>({-3}, {1, 1});
  const std::string bytes = encode_safetensors(t, {{"k", "v"}});
  std::uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  ASSERT_LE(8 + n, bytes.size());
  EXPECT_EQ((8 + n) % 8, 0u) << "buffer must start 8-byte aligned";
  EXPECT_EQ(bytes[8], '{');
  const json header = json::parse(bytes.substr(8, n));
  EXPECT_EQ(header["a"]["dtype"], "F32");
  EXPECT_EQ(header["a"]["shape"], json::array({2}));
  EXPECT_EQ(header["a"]["data_offsets"], json::array({0, 8}));
  EXPECT_EQ(header["b"]["dtype"], "I64");
  EXPECT_EQ(header["b"]["shape"], json::array({1, 1}));
  EXPECT_EQ(header["b"]["data_offsets"], json::array({8, 16}));
  EXPECT_EQ(header["__metadata__"]["k"], "v");
  EXPECT_EQ(bytes.size(), 8 + n + 16);
  float a1 = 0;
  std::memcpy(&a1, bytes.data() + 8 + n + 4, 4);
  EXPECT_EQ(a1, 2.0f);
}

TEST(Safetensors, WriterRejectsReservedKeysAndBadNames) {
  NamedTensors t{{"w", Tensor::zeros({2})}};
  EXPECT_THROW(encode_safetensors(t, {{kChecksumKey, "x"}}), InvalidArgument);
  EXPECT_THROW(encode_safetensors({{"", Tensor::zeros({1})}}), InvalidArgument);
  EXPECT_THROW(encode_safetensors({{"__metadata__", Tensor::zeros({1})}}), InvalidArgument);
  EXPECT_THROW(encode_safetensors({{"undefined", Tensor()}}), InvalidArgument);
  EXPECT_THROW(write_safetensors("/nonexistent-dir/x.safetensors", t), Error);
}

TEST(Safetensors, TensorsOnOtherDevicesAreCopiedToTheHost) {
  Tensor on_cpu1 = Tensor::from_vector<float>({1, 2, 3}, {3}).to(Device::cpu(1));
  const auto back = decode_safetensors(encode_safetensors({{"w", on_cpu1}}), "mem");
  EXPECT_EQ(back.tensors.at("w").to_vector<float>(), (std::vector<float>{1, 2, 3}));
}

// ---- rejection of damaged files ------------------------------------------------------------

void expect_rejected(const std::string& bytes, const std::string& problem,
                     ReadOptions options = {}) {
  try {
    decode_safetensors(bytes, "ckpt.safetensors", options);
    ADD_FAILURE() << "accepted a bad file; expected: " << problem;
  } catch (const DataError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("ckpt.safetensors"), std::string::npos) << msg;
    EXPECT_NE(msg.find(problem), std::string::npos) << "expected '" << problem << "' in: " << msg;
  }
}

std::string good_file() { return encode_safetensors(sample_tensors(), sample_metadata()); }

std::uint64_t header_len(const std::string& file) {
  std::uint64_t n = 0;
  std::memcpy(&n, file.data(), 8);
  return n;
}

TEST(SafetensorsRejects, TruncationAtEveryInterestingPoint) {
  const std::string good = good_file();
  const std::uint64_t n = header_len(good);
  expect_rejected(good.substr(0, 0), "shorter than the 8-byte header length");
  expect_rejected(good.substr(0, 4), "shorter than the 8-byte header length");
  expect_rejected(good.substr(0, 8), "but only 0 bytes follow");
  expect_rejected(good.substr(0, 8 + n / 2), "bytes follow (truncated)");
  expect_rejected(good.substr(0, 8 + n + (good.size() - 8 - n) / 2), "outside the");
  expect_rejected(good.substr(0, good.size() - 1), "outside the");
}

TEST(SafetensorsRejects, FlippedDataByteFailsTheChecksum) {
  std::string bad = good_file();
  bad[bad.size() - 20] ^= 0x01;
  expect_rejected(bad, "checksum mismatch");
  // A header edit that keeps the file well-formed (shape [2,1,1,3] -> [1,2,1,3]) is caught too.
  std::string header_edit = good_file();
  const auto at = header_edit.find("[2,1,1,3]");
  ASSERT_NE(at, std::string::npos);
  header_edit.replace(at, 9, "[1,2,1,3]");
  expect_rejected(header_edit, "checksum mismatch");
}

TEST(SafetensorsRejects, BadHeaderLengths) {
  const std::string good = good_file();
  expect_rejected(le64(~0ull) + good.substr(8), "exceeds the limit");
  expect_rejected(le64(kMaxHeaderBytes + 1) + good.substr(8), "exceeds the limit");
  expect_rejected(le64(good.size()) + good.substr(8), "bytes follow (truncated)");
}

TEST(SafetensorsRejects, MalformedJson) {
  const ReadOptions foreign{.require_checksum = false};
  expect_rejected(raw_file("{\"a\": ", ""), "not valid JSON", foreign);
  expect_rejected(raw_file("[1, 2]", ""), "does not start with '{'", foreign);
  expect_rejected(raw_file("   {}", ""), "does not start with '{'", foreign);
  expect_rejected(raw_file("{\"a\": [[[[[[[[[[[[[[1]]]]]]]]]]]]]]}", ""), "nested too deeply",
                  foreign);
  expect_rejected(raw_file(R"({"__metadata__": {"k": 1}})", ""), "is not a string", foreign);
  expect_rejected(raw_file(R"({"__metadata__": [1]})", ""), "__metadata__ is not an object",
                  foreign);
  expect_rejected(raw_file(R"({"a": 3})", ""), "entry is not an object", foreign);
}

TEST(SafetensorsRejects, BadTensorEntries) {
  const ReadOptions foreign{.require_checksum = false};
  const std::string buf = bytes_of(std::vector<float>{1, 2, 3, 4, 5});
  auto one = [&](const std::string& entry) { return raw_file("{\"t\": " + entry + "}", buf); };
  expect_rejected(one(R"({"dtype":"F8_E4M3","shape":[5],"data_offsets":[0,20]})"),
                  "unsupported dtype 'F8_E4M3'", foreign);
  expect_rejected(one(R"({"dtype":"F32","shape":[4],"data_offsets":[0,20]})"), "needs 16", foreign);
  expect_rejected(one(R"({"dtype":"F32","shape":[-5],"data_offsets":[0,20]})"),
                  "not a non-negative integer", foreign);
  expect_rejected(one(R"({"dtype":"F32","shape":[2.5],"data_offsets":[0,20]})"),
                  "not a non-negative integer", foreign);
  expect_rejected(
      one(R"({"dtype":"F32","shape":[4611686018427387904,4611686018427387904],"data_offsets":[0,20]})"),
      "too large", foreign);
  expect_rejected(one(R"({"dtype":"F32","shape":[5],"data_offsets":[0,24]})"), "outside the",
                  foreign);
  expect_rejected(one(R"({"dtype":"F32","shape":[5],"data_offsets":[20,0]})"), "outside the",
                  foreign);
  expect_rejected(one(R"({"dtype":"F32","shape":[5],"data_offsets":[0]})"),
                  "is not two non-negative integers", foreign);
  expect_rejected(one(R"({"dtype":"F32","shape":[5]})"), "missing data_offsets", foreign);
  expect_rejected(one(R"({"dtype":"F32","shape":[5],"data_offsets":[0,20],"x":1})"),
                  "unknown field 'x'", foreign);
}

TEST(SafetensorsRejects, OverlapsGapsAndTrailingBytes) {
  const ReadOptions foreign{.require_checksum = false};
  const std::string buf12(12, 'x'), buf20(20, 'x');
  expect_rejected(raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},
                               "b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                           buf12),
                  "tensor 'b' overlaps tensor 'a'", foreign);
  expect_rejected(raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},
                               "b":{"dtype":"F32","shape":[2],"data_offsets":[12,20]}})",
                           buf20),
                  "4 unused bytes between tensor 'a' and tensor 'b'", foreign);
  expect_rejected(raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", buf12),
                  "4 unused bytes between the start of the buffer", foreign);
  expect_rejected(good_file() + "xx", "2 trailing bytes");
  expect_rejected(raw_file("{}", "junk"), "4 trailing bytes", foreign);
}

TEST(SafetensorsRejects, MissingChecksumUnlessForeignFilesAreAllowed) {
  const std::string buf = bytes_of(std::vector<float>{1, 2});
  const std::string file =
      raw_file(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", buf);
  expect_rejected(file, "no 'mirror.checksum'");
  const auto loaded = decode_safetensors(file, "foreign", {.require_checksum = false});
  EXPECT_EQ(loaded.tensors.at("w").to_vector<float>(), (std::vector<float>{1, 2}));
  EXPECT_TRUE(loaded.metadata.empty());
}

TEST(SafetensorsRejects, FileErrorsNameThePath) {
  TempDir dir;
  const fs::path p = dir.path() / "cut.safetensors";
  write_safetensors(p, sample_tensors(), sample_metadata());
  fs::resize_file(p, fs::file_size(p) - 3);
  try {
    read_safetensors(p);
    FAIL() << "truncated file accepted";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find(p.string()), std::string::npos) << e.what();
  }
  EXPECT_THROW(read_safetensors(dir.path() / "missing.safetensors"), DataError);
  EXPECT_THROW(read_safetensors(dir.path()), DataError);  // a directory
}

// ---- CheckpointManager ---------------------------------------------------------------------

NamedTensors weights(float v) {
  return {{"dense_1/kernel", Tensor::from_vector<float>({v, v + 1}, {1, 2})}};
}

float first_weight(const LoadedCheckpoint& c) {
  return c.file.tensors.at("dense_1/kernel").to_vector<float>()[0];
}

TEST(CheckpointManager, KeepsTheLastK) {
  TempDir dir;
  CheckpointManager m(dir.path() / "run", 2);
  for (int step = 1; step <= 5; ++step) {
    m.save(step * 100, weights(static_cast<float>(step)), {{"step", std::to_string(step * 100)}});
  }
  EXPECT_EQ(m.path_for(500), dir.path() / "run" / "ckpt-000000000500.safetensors");
  const auto files = m.list();
  ASSERT_EQ(files.size(), 2u);
  EXPECT_EQ(files[0].first, 400);
  EXPECT_EQ(files[1].first, 500);
  const auto latest = m.latest_valid();
  ASSERT_TRUE(latest);
  EXPECT_EQ(latest->step, 500);
  EXPECT_EQ(latest->file.metadata.at("step"), "500");
  EXPECT_EQ(first_weight(*latest), 5.0f);
}

TEST(CheckpointManager, KeepZeroKeepsAllAndStepsSortNumerically) {
  TempDir dir;
  CheckpointManager m(dir.path(), 0);
  for (std::int64_t step : std::initializer_list<std::int64_t>{9, 10, 100000000000LL})
    m.save(step, weights(static_cast<float>(step % 1000)));
  ASSERT_EQ(m.list().size(), 3u);
  EXPECT_EQ(m.latest_valid()->step, 100000000000LL);
  EXPECT_THROW(CheckpointManager(dir.path(), -1), InvalidArgument);
  EXPECT_THROW(m.path_for(-1), InvalidArgument);
}

TEST(CheckpointManager, SkipsACorruptNewestFileAndWarnsOnce) {
  TempDir dir;
  CheckpointManager m(dir.path(), 3);
  m.save(1, weights(1));
  const fs::path newest = m.save(2, weights(2));
  std::string bytes = read_all(newest);
  bytes[bytes.size() - 2] ^= 0x40;
  write_all(newest, bytes);
  // Names that are not checkpoints are ignored.
  write_all(dir.path() / "ckpt-abc.safetensors", "junk");
  write_all(dir.path() / "notes.txt", "junk");

  testing::internal::CaptureStderr();
  auto latest = m.latest_valid();
  const std::string first_warning = testing::internal::GetCapturedStderr();
  ASSERT_TRUE(latest);
  EXPECT_EQ(latest->step, 1);
  EXPECT_EQ(first_weight(*latest), 1.0f);
  EXPECT_NE(first_warning.find(newest.string()), std::string::npos) << first_warning;
  EXPECT_NE(first_warning.find("checksum mismatch"), std::string::npos) << first_warning;

  testing::internal::CaptureStderr();
  latest = m.latest_valid();
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
  EXPECT_EQ(latest->step, 1);
  EXPECT_TRUE(fs::exists(newest)) << "corrupt files are kept for inspection";
}

TEST(CheckpointManager, ScanReturnsEachRejectedFileWithItsReason) {
  TempDir dir;
  CheckpointManager m(dir.path(), 0);
  m.save(1, weights(1));
  write_all(m.path_for(2), "short");
  write_all(m.path_for(3), std::string(64, 'x'));
  const CheckpointScan scan = m.scan();
  EXPECT_EQ(scan.files, 3u);
  ASSERT_TRUE(scan.found);
  EXPECT_EQ(scan.found->step, 1);
  ASSERT_EQ(scan.rejected.size(), 2u);
  EXPECT_EQ(scan.rejected[0].first, m.path_for(3)) << "newest first";
  EXPECT_EQ(scan.rejected[1].first, m.path_for(2));
  EXPECT_NE(scan.rejected[1].second.find("ckpt-000000000002"), std::string::npos);
  EXPECT_NE(scan.rejected[1].second.find("truncated"), std::string::npos)
      << scan.rejected[1].second;
  EXPECT_EQ(m.remove_all(), 3u);
  EXPECT_TRUE(m.list().empty());
  EXPECT_FALSE(m.scan().found);
}

TEST(CheckpointManager, NoValidCheckpointIsNullopt) {
  TempDir dir;
  CheckpointManager m(dir.path(), 2);
  EXPECT_FALSE(m.latest_valid());
  write_all(m.path_for(7), "not a checkpoint");
  testing::internal::CaptureStderr();
  EXPECT_FALSE(m.latest_valid());
  EXPECT_NE(testing::internal::GetCapturedStderr().find("ckpt-000000000007"), std::string::npos);
}

// ---- crash atomicity -----------------------------------------------------------------------

/// Forks a child that saves step 2 and SIGKILLs itself at `stage` of the write; returns its pid.
pid_t crash_while_saving(CheckpointManager& m, const char* stage) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    detail::set_safetensors_write_hook([stage](std::string_view s) {
      if (s == stage) ::raise(SIGKILL);
    });
    NamedTensors big = weights(2);
    big["big"] = Tensor::zeros({1 << 20});  // 4 MiB, so "half-data" is truly mid-buffer
    try {
      m.save(2, big);
    } catch (...) {
    }
    ::_exit(0);  // reached only if the hook did not fire
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "stage " << stage;
  return pid;
}

TEST(CheckpointAtomicity, KilledWriterLeavesThePreviousCheckpointValid) {
  for (const char* stage : {"opened", "header", "half-data", "data", "synced"}) {
    TempDir dir;
    CheckpointManager m(dir.path(), 2);
    m.save(1, weights(1));
    const pid_t child = crash_while_saving(m, stage);
    const fs::path tmp = m.path_for(2).string() + ".tmp." + std::to_string(child);
    EXPECT_TRUE(fs::exists(tmp)) << stage << ": the partial file stays under its temporary name";
    EXPECT_FALSE(fs::exists(m.path_for(2))) << stage;
    testing::internal::CaptureStderr();
    const auto latest = m.latest_valid();
    EXPECT_EQ(testing::internal::GetCapturedStderr(), "") << "temporaries are not candidates";
    ASSERT_TRUE(latest) << stage;
    EXPECT_EQ(latest->step, 1) << stage;
    EXPECT_EQ(first_weight(*latest), 1.0f) << stage;
    // The next save removes the dead writer's debris.
    m.save(3, weights(3));
    EXPECT_FALSE(fs::exists(tmp)) << stage;
    EXPECT_EQ(m.latest_valid()->step, 3);
  }
}

TEST(CheckpointAtomicity, KilledAfterRenameKeepsTheNewCheckpoint) {
  TempDir dir;
  CheckpointManager m(dir.path(), 2);
  m.save(1, weights(1));
  crash_while_saving(m, "renamed");
  const auto latest = m.latest_valid();
  ASSERT_TRUE(latest);
  EXPECT_EQ(latest->step, 2);
  EXPECT_EQ(latest->file.tensors.at("big").numel(), 1 << 20);
}

// ---- interoperability ----------------------------------------------------------------------

TEST(SafetensorsInterop, PythonSafetensorsReadsOurFile) {
  if (std::system("python3 -c 'import safetensors, numpy' >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "python3 with the safetensors and numpy packages is not installed";
  }
  TempDir dir;
  const fs::path p = dir.path() / "m.safetensors";
  write_safetensors(p, sample_tensors(), sample_metadata());
  const std::string script =
      "import sys, safetensors\n"
      "# safe_open validates the whole header; numpy has no bfloat16, so that one is skipped.\n"
      "with safetensors.safe_open(sys.argv[1], 'np') as f:\n"
      "    assert f.metadata()['step'] == '1200'\n"
      "    assert len(f.keys()) == 11, f.keys()\n"
      "    t = {k: f.get_tensor(k) for k in f.keys() if k != 'bf16'}\n"
      "assert t['conv2d_1/kernel'].shape == (2, 1, 1, 3)\n"
      "assert t['conv2d_1/kernel'][0, 0, 0, 1] == -2.25\n"
      "assert t['i64'][1] == 1 << 62 and t['u8'][1] == 255 and t['f64'][0] == 3.141592653589793\n"
      "assert t['f16'][1] == -2.0 and t['i32'][0, 0] == -2**31\n"
      "assert t['empty'].shape == (0, 4) and t['scalar'].shape == ()\n";
  write_all(dir.path() / "check.py", script);
  const std::string cmd = "python3 " + (dir.path() / "check.py").string() + " " + p.string();
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;

  // And the other way: a file written by Python loads (it has no Mirror checksum).
  const fs::path theirs = dir.path() / "theirs.safetensors";
  const std::string write_cmd =
      "python3 -c \"import sys, numpy as np, safetensors.numpy as s; "
      "s.save_file({'w': np.arange(6, dtype=np.float32).reshape(2, 3), "
      "'b': np.array([7, -8], dtype=np.int64)}, sys.argv[1], metadata={'format': 'np'})\" " +
      theirs.string();
  ASSERT_EQ(std::system(write_cmd.c_str()), 0) << write_cmd;
  EXPECT_THROW(read_safetensors(theirs), DataError);  // no checksum: refused by default
  const auto loaded = read_safetensors(theirs, {.require_checksum = false});
  EXPECT_EQ(loaded.tensors.at("w").shape(), (Shape{2, 3}));
  EXPECT_EQ(loaded.tensors.at("w").to_vector<float>(), (std::vector<float>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(loaded.tensors.at("b").to_vector<std::int64_t>(), (std::vector<std::int64_t>{7, -8}));
  EXPECT_EQ(loaded.metadata.at("format"), "np");
}

}  // namespace
}  // namespace mirror::train
