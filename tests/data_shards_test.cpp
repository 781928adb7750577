// Sharded arrays: a folder or glob of x-NNNNN.npy / y-NNNNN.npy pairs is one dataset in shard
// order: every sample, the global permutation, exact sharding across replica counts and a
// resumed epoch are those of the same data in one file. Shards that disagree, a missing partner
// and a shard changed between epochs are errors naming the file. Also Note [Bad samples]:
// a replaced sample is the next good one for every replica count.
#include <gtest/gtest.h>

#include <filesystem>
#include <thread>

#include "data_test_util.h"
#include "loader_test_util.h"
#include "mirror/data/arrays.h"
#include "mirror/data/loader.h"
#include "mirror/data/npy.h"
#include "temp_dir.h"

namespace mirror::data {
namespace {

using test::make_array;
using test::write_bytes;
using test::Epochs;
using test::run_epochs;

class ShardsTest : public ::testing::Test {
 protected:
  ShardsTest() {
    // 21 samples of [2, 3] float32 in shards of 7, 5 and 9, and the same in one file.
    std::vector<float> all;
    std::vector<std::int64_t> labels;
    for (int i = 0; i < 21 * 6; ++i) all.push_back(static_cast<float>(i) * 0.5f - 3);
    for (int i = 0; i < 21; ++i) labels.push_back((i * 7) % 4);
    save("one/x.npy", make_array(all, {21, 2, 3}));
    save("one/y.npy", make_array(labels, {21}));
    std::int64_t at = 0, k = 0;
    for (std::int64_t n : {7, 5, 9}) {
      char name[32];
      std::snprintf(name, sizeof name, "%05lld.npy", static_cast<long long>(k++));
      save("shards/x-" + std::string(name),
           make_array(std::vector<float>(all.begin() + at * 6, all.begin() + (at + n) * 6), {n, 2, 3}));
      save("shards/y-" + std::string(name),
           make_array(std::vector<std::int64_t>(labels.begin() + at, labels.begin() + at + n), {n}));
      at += n;
    }
  }
  template <class T>
  std::string save(const std::string& rel, const std::vector<T>& values, std::vector<std::int64_t> shape) {
    return save(rel, make_array(values, std::move(shape)));
  }
  std::string save(const std::string& rel, const NumericArray& a) {
    const auto path = tmp_.path() / rel;
    std::filesystem::create_directories(path.parent_path());
    return write_bytes(path, encode_npy(a));
  }
  std::string p(const std::string& rel) const { return (tmp_.path() / rel).string(); }
  testing_util::TempDir tmp_{"mirror-shards"};
};

TEST_F(ShardsTest, AFolderOrGlobOfShardsIsTheDatasetOfOneFile) {
  const auto one = load_arrays(p("one/x.npy"), p("one/y.npy"));
  for (const auto& [x, y] : {std::pair{p("shards"), p("shards")},
                             std::pair{p("shards/x-*.npy"), p("shards/y-0000?.npy")}}) {
    const auto sharded = load_arrays(x, y);
    ASSERT_EQ(sharded->size(), 21);
    EXPECT_NE(sharded->describe().find("3 shards, mapped"), std::string::npos)
        << sharded->describe();
    EXPECT_EQ(sharded->num_classes(), one->num_classes());
    EXPECT_EQ(sharded->sample_shape(), one->sample_shape());
    for (std::int64_t i = 0; i < 21; ++i) {
      float a[6], b[6];
      one->decode_float(i, a);
      sharded->decode_float(i, b);
      EXPECT_EQ(0, std::memcmp(a, b, sizeof a)) << "sample " << i;
      EXPECT_EQ(one->label(i), sharded->label(i)) << "sample " << i;
    }
  }
}

TEST_F(ShardsTest, ExactShardingAndResumeAcrossShards) {
  const auto one = load_arrays(p("one/x.npy"), p("one/y.npy"));
  const auto sharded = load_arrays(p("shards"), p("shards"));
  LoaderOptions o;
  o.global_batch = 6;  // 4 steps an epoch, the last padded
  o.seed = 11;
  const Epochs reference = run_epochs(one, 1, o, 2);
  ASSERT_EQ(reference.ids.size(), 2u * 4 * 6);
  for (int replicas : {1, 2, 3}) {
    const Epochs e = run_epochs(sharded, replicas, o, 2);
    EXPECT_EQ(e.ids, reference.ids) << replicas << " replicas";
    EXPECT_EQ(e.labels, reference.labels) << replicas << " replicas";
    EXPECT_EQ(e.inputs, reference.inputs) << replicas << " replicas";
  }
  // Resumed at epoch 1, step 2 (as a checkpoint would): the rest of the run, bit for bit.
  for (int replicas : {1, 3}) {
    const Epochs resumed = run_epochs(sharded, replicas, o, 1, 1, 2);
    const std::size_t skip = (4 + 2) * 6;
    EXPECT_EQ(resumed.ids, std::vector<std::int64_t>(reference.ids.begin() + skip, reference.ids.end()));
    EXPECT_EQ(resumed.inputs,
              std::vector<float>(reference.inputs.begin() + skip * 6, reference.inputs.end()));
  }
}

TEST(EpochOrders, TheLoadersCompactOrderIsEpochOrder) {
  // 4 bytes a sample in the Loader, the same permutation as the 8-byte epoch_order.
  class Many : public Dataset {
   public:
    std::int64_t size() const override { return 100003; }
    int num_classes() const override { return 2; }
    DType input_dtype() const override { return DType::kFloat32; }
    Shape sample_shape() const override { return {1}; }
    bool is_sequence() const override { return false; }
    std::int32_t label(std::int64_t) const override { return 0; }
    std::string describe() const override { return "many"; }
  } many;
  for (bool shuffle : {true, false}) {
    LoaderOptions o;
    o.seed = 77;
    o.shuffle = shuffle;
    for (int epoch : {0, 3}) {
      const std::vector<std::int64_t> wide = epoch_order(many, o, epoch);
      const EpochOrder compact(many, o, epoch);
      ASSERT_EQ(compact.size(), static_cast<std::int64_t>(wide.size()));
      bool same = true;
      for (std::size_t k = 0; k < wide.size(); ++k) same = same && compact[static_cast<std::int64_t>(k)] == wide[k];
      EXPECT_TRUE(same) << "shuffle " << shuffle << ", epoch " << epoch;
    }
  }
}

TEST_F(ShardsTest, ShardsInNaturalOrder) {
  save("nat/x-2.npy", make_array<float>({2}, {1, 1}));
  save("nat/x-10.npy", make_array<float>({10}, {1, 1}));
  save("nat/x-1.npy", make_array<float>({1}, {1, 1}));
  const auto files = array_files(p("nat"), 'x');
  ASSERT_EQ(files.size(), 3u);
  EXPECT_EQ(std::filesystem::path(files[0]).filename(), "x-1.npy");
  EXPECT_EQ(std::filesystem::path(files[1]).filename(), "x-2.npy");
  EXPECT_EQ(std::filesystem::path(files[2]).filename(), "x-10.npy");
}

TEST_F(ShardsTest, ShardsThatDisagreeAreErrorsNamingTheFile) {
  using test::expect_data_error;
  // A missing partner.
  save("lone/x-00000.npy", make_array<float>({1, 2}, {2, 1}));
  save("lone/x-00001.npy", make_array<float>({1, 2}, {2, 1}));
  save("lone/y-00000.npy", make_array<std::int64_t>({0, 1}, {2}));
  expect_data_error([&] { load_arrays(p("lone"), p("lone")); },
                    {"2 x file(s)", "1 y file(s)", "x-00001.npy has no partner"});
  // Numbers that differ.
  save("skew/x-00000.npy", make_array<float>({1, 2}, {2, 1}));
  save("skew/y-00001.npy", make_array<std::int64_t>({0, 1}, {2}));
  expect_data_error([&] { load_arrays(p("skew"), p("skew")); },
                    {"x-00000.npy", "y-00001.npy", "numbers differ"});
  // x and y of a pair disagree in length.
  save("len/x-00000.npy", make_array<float>({1, 2}, {2, 1}));
  save("len/y-00000.npy", make_array<std::int64_t>({0, 1}, {2}));
  save("len/x-00001.npy", make_array<float>({1, 2, 3}, {3, 1}));
  save("len/y-00001.npy", make_array<std::int64_t>({0, 1}, {2}));
  expect_data_error([&] { load_arrays(p("len"), p("len")); },
                    {"3 samples in", "x-00001.npy", "but 2 in", "y-00001.npy"});
  // Another dtype, another sample shape.
  save("type/x-00000.npy", make_array<float>({1, 2}, {2, 1}));
  save("type/y-00000.npy", make_array<std::int64_t>({0, 1}, {2}));
  save("type/x-00001.npy", make_array<double>({1, 2}, {2, 1}));
  save("type/y-00001.npy", make_array<std::int64_t>({0, 1}, {2}));
  expect_data_error([&] { load_arrays(p("type"), p("type")); },
                    {"x-00001.npy holds float64", "x-00000.npy holds float32",
                     "same dtype and sample shape"});
  save("shape/x-00000.npy", make_array<float>({1, 2}, {2, 1}));
  save("shape/y-00000.npy", make_array<std::int64_t>({0, 1}, {2}));
  save("shape/x-00001.npy", make_array<float>({1, 2}, {1, 2}));
  save("shape/y-00001.npy", make_array<std::int32_t>({0}, {1}));
  expect_data_error([&] { load_arrays(p("shape"), p("shape")); }, {"x-00001.npy holds float32 samples (2,)"});
  // Nothing to read.
  std::filesystem::create_directories(p("empty"));
  expect_data_error([&] { load_arrays(p("empty"), p("empty")); },
                    {"holds no x-*.npy file", "x-00000.npy"});
  expect_data_error([&] { load_arrays(p("none/x-*.npy"), p("none/y-*.npy")); },
                    {"no file matches", "none/x-*.npy"});
}

TEST_F(ShardsTest, AShardChangedBetweenEpochsNamesIt) {
  LoaderOptions o;
  o.global_batch = 7;
  o.prefetch_depth = 0;  // synchronous: epoch 1's order (and its check) waits for the next()
  Loader loader(load_arrays(p("shards"), p("shards")), {0, 1}, o);
  loader.start(0, 2);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(loader.next().has_value());
  // Replaced by another file (as numpy.save does through a new file of the same name).
  std::filesystem::remove(p("shards/x-00001.npy"));
  save("shards/x-00001.npy", make_array<float>(std::vector<float>(30, 1.0f), {5, 2, 3}));
  test::expect_data_error([&] { while (loader.next()) {} },
                          {"x-00001.npy", "was replaced by another file"});
}

/// A dataset whose samples 3 and 4 cannot be decoded.
class Flaky : public Dataset {
 public:
  std::int64_t size() const override { return 10; }
  int num_classes() const override { return 10; }
  DType input_dtype() const override { return DType::kFloat32; }
  Shape sample_shape() const override { return {1}; }
  bool is_sequence() const override { return false; }
  std::int32_t label(std::int64_t i) const override { return static_cast<std::int32_t>(i); }
  void decode_float(std::int64_t i, float* dst) const override {
    if (i == 3 || i == 4) throw BadSample("flaky/" + std::to_string(i) + ".png: corrupt (sample " + std::to_string(i) + ")", i);
    dst[0] = static_cast<float>(i);
  }
  std::string describe() const override { return "flaky"; }
};

TEST(BadSamples, StopTheRunUnlessSkippedThenTheNextGoodOneServesEveryReplicaCount) {
  const auto ds = std::make_shared<Flaky>();
  LoaderOptions o;
  o.global_batch = 4;
  o.seed = 3;
  try {
    run_epochs(ds, 1, o, 1);
    ADD_FAILURE() << "a bad sample did not stop the run";
  } catch (const BadSample& e) {
    EXPECT_NE(std::string(e.what()).find("flaky/"), std::string::npos) << e.what();
    EXPECT_TRUE(e.index() == 3 || e.index() == 4);
  }
  o.skip_bad_samples = true;
  const Epochs one = run_epochs(ds, 1, o, 2);
  for (std::size_t k = 0; k < one.ids.size(); ++k) {
    if (one.ids[k] < 0) continue;
    EXPECT_NE(one.ids[k], 3);
    EXPECT_NE(one.ids[k], 4);
    EXPECT_EQ(one.labels[k], one.ids[k]) << "the label follows the sample used";
    EXPECT_EQ(one.inputs[k], static_cast<float>(one.ids[k]));
  }
  // 3 and 4 both became 5 (the next good one): 5 appears three times an epoch.
  EXPECT_EQ(std::count(one.ids.begin(), one.ids.end(), 5), 6);
  for (int replicas : {2, 4}) {
    const Epochs e = run_epochs(ds, replicas, o, 2);
    EXPECT_EQ(e.ids, one.ids) << replicas << " replicas";
    EXPECT_EQ(e.inputs, one.inputs) << replicas << " replicas";
  }
  Loader counted(ds, {0, 1}, o);
  counted.start(0, 1);
  while (counted.next()) {
  }
  EXPECT_EQ(counted.bad_samples_replaced(), 2);
  const auto bad = counted.bad_samples();
  ASSERT_EQ(bad.size(), 2u);
  EXPECT_NE(bad.at(3).find("flaky/3.png"), std::string::npos);
}

}  // namespace
}  // namespace mirror::data
