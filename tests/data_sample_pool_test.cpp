// SamplePool (Note [Sample pool]): every item runs once, the lowest failing item's error is the
// one raised, several loaders share it; and a Loader given a pool serves the batches it serves
// without one (augmentation, bad-sample replacement and errors included).
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "loader_test_util.h"
#include "mirror/data/loader.h"
#include "mirror/data/sample_pool.h"
#include "mirror/data/synthetic.h"
#include "mirror/error.h"

namespace mirror::data {
namespace {

TEST(SamplePool, RunsEveryItemExactlyOnce) {
  for (int threads : {0, 1, 3}) {
    SamplePool pool(threads);
    EXPECT_EQ(pool.threads(), threads);
    std::vector<std::atomic<int>> calls(1000);
    pool.run(1000, [&](std::int64_t i) { ++calls[static_cast<std::size_t>(i)]; });
    for (std::size_t i = 0; i < calls.size(); ++i) ASSERT_EQ(calls[i].load(), 1) << i;
    pool.run(0, [](std::int64_t) { FAIL() << "no item to run"; });
  }
}

TEST(SamplePool, OnlyItsThreadsDecode) {
  // --data-workers N means N decoding threads: the caller waits while the pool works, and a
  // pool of none runs the items on the caller.
  SamplePool pool(3);
  std::mutex m;
  std::set<std::thread::id> seen;
  pool.run(64, [&](std::int64_t) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));  // slow enough for all three
    std::lock_guard lock(m);
    seen.insert(std::this_thread::get_id());
  });
  EXPECT_EQ(seen.count(std::this_thread::get_id()), 0u);
  EXPECT_GT(seen.size(), 1u);
  EXPECT_LE(seen.size(), 3u);
  SamplePool none(0);
  seen.clear();
  none.run(5, [&](std::int64_t) { seen.insert(std::this_thread::get_id()); });
  EXPECT_EQ(seen, std::set<std::thread::id>{std::this_thread::get_id()});
}

TEST(SamplePool, RaisesTheLowestFailingItemsError) {
  SamplePool pool(3);
  for (int round = 0; round < 20; ++round) {
    try {
      pool.run(400, [](std::int64_t i) {
        if (i == 300) throw DataError("item 300");
        if (i == 7) throw DataError("item 7");
      });
      FAIL() << "expected DataError";
    } catch (const DataError& e) {
      EXPECT_STREQ(e.what(), "item 7");
    }
  }
  std::atomic<int> after{0};
  pool.run(10, [&](std::int64_t) { ++after; });  // a failed job leaves the pool usable
  EXPECT_EQ(after.load(), 10);
}

TEST(SamplePool, ServesSeveralCallersAtOnce) {
  SamplePool pool(2);
  std::vector<std::atomic<std::int64_t>> sums(4);
  std::vector<std::thread> callers;
  for (std::size_t c = 0; c < sums.size(); ++c) {
    callers.emplace_back([&, c] {
      for (int rep = 0; rep < 20; ++rep)
        pool.run(300, [&](std::int64_t i) { sums[c] += i; });
    });
  }
  for (auto& t : callers) t.join();
  for (auto& s : sums) EXPECT_EQ(s.load(), 20 * (299 * 300 / 2));
}

TEST(SamplePool, RefusesANegativeThreadCount) { EXPECT_THROW(SamplePool(-1), InvalidArgument); }

/// Samples whose index is in `bad` fail to decode with BadSample.
class WithBadSamples : public Dataset {
 public:
  WithBadSamples(std::shared_ptr<const Dataset> inner, std::set<std::int64_t> bad)
      : inner_(std::move(inner)), bad_(std::move(bad)) {}
  std::int64_t size() const override { return inner_->size(); }
  int num_classes() const override { return inner_->num_classes(); }
  DType input_dtype() const override { return inner_->input_dtype(); }
  Shape sample_shape() const override { return inner_->sample_shape(); }
  bool is_sequence() const override { return false; }
  std::int32_t label(std::int64_t i) const override { return inner_->label(i); }
  void decode_float(std::int64_t i, float* dst) const override {
    {
      std::lock_guard lock(mutex_);
      decoders_.insert(std::this_thread::get_id());
    }
    if (bad_.count(i)) throw BadSample("sample " + std::to_string(i) + " is corrupt", i);
    inner_->decode_float(i, dst);
  }
  std::string describe() const override { return "with bad samples"; }
  /// The threads that decoded a sample.
  std::set<std::thread::id> decoders() const {
    std::lock_guard lock(mutex_);
    return decoders_;
  }

 private:
  std::shared_ptr<const Dataset> inner_;
  std::set<std::int64_t> bad_;
  mutable std::mutex mutex_;
  mutable std::set<std::thread::id> decoders_;
};

LoaderOptions options(std::shared_ptr<SamplePool> pool) {
  LoaderOptions o;
  o.global_batch = 24;
  o.seed = 5;
  o.prefetch_depth = 3;
  o.num_workers = 2;
  o.augment = parse_image_augment("crop=2,flip");
  o.skip_bad_samples = true;
  o.sample_pool = std::move(pool);
  return o;
}

TEST(DataLoader, APoolServesTheSameBatchesToEveryReplica) {
  const auto ds =
      std::make_shared<WithBadSamples>(Synthetic::images(100, 3, {3, 6, 6}), std::set<std::int64_t>{4, 5, 61});
  const test::Epochs alone = test::run_epochs(ds, 1, options(nullptr), 2);
  ASSERT_EQ(alone.ids.size(), 2u * 5 * 24);  // two epochs of ceil(100/24) padded steps
  for (int threads : {0, 1, 3}) {
    for (int replicas : {1, 2, 3}) {
      // One pool for every replica's loader, as a rank's trainer makes it.
      const auto pool = std::make_shared<SamplePool>(threads);
      const test::Epochs pooled = test::run_epochs(ds, replicas, options(pool), 2);
      EXPECT_EQ(pooled.ids, alone.ids) << threads << " threads, " << replicas << " replicas";
      EXPECT_EQ(pooled.labels, alone.labels);
      EXPECT_EQ(pooled.inputs, alone.inputs);
    }
  }
  // The replacement happened: no bad sample was served.
  for (std::int64_t id : alone.ids) EXPECT_TRUE(id != 4 && id != 5 && id != 61) << id;
}

TEST(DataLoader, APoolsThreadsDecodeTheBatch) {
  // Synchronous (no prefetch): without a pool the caller decodes, with one only its threads do.
  const auto plain = std::make_shared<WithBadSamples>(Synthetic::images(32, 1, {1, 4, 4}),
                                                      std::set<std::int64_t>{});
  LoaderOptions o = options(nullptr);
  o.prefetch_depth = 0;
  Loader(plain, {0, 1}, o).make_batch(0, 0);
  EXPECT_EQ(plain->decoders(), std::set<std::thread::id>{std::this_thread::get_id()});
  const auto pooled = std::make_shared<WithBadSamples>(Synthetic::images(32, 1, {1, 4, 4}),
                                                       std::set<std::int64_t>{});
  o.sample_pool = std::make_shared<SamplePool>(2);
  Loader(pooled, {0, 1}, o).make_batch(0, 0);
  EXPECT_FALSE(pooled->decoders().empty());
  EXPECT_EQ(pooled->decoders().count(std::this_thread::get_id()), 0u);
}

TEST(DataLoader, APoolRaisesTheBatchsFirstBadSample) {
  const auto ds = std::make_shared<WithBadSamples>(Synthetic::images(64, 1, {1, 4, 4}),
                                                   std::set<std::int64_t>{3, 14});
  LoaderOptions o = options(std::make_shared<SamplePool>(3));
  o.skip_bad_samples = false;
  o.shuffle = false;  // samples 3 and 14 are in step 0, 3 first
  o.global_batch = 16;
  for (int round = 0; round < 10; ++round) {
    Loader l(ds, {0, 1}, o);
    l.start(0);
    try {
      l.next();
      FAIL() << "expected BadSample";
    } catch (const BadSample& e) {
      EXPECT_STREQ(e.what(), "sample 3 is corrupt");
    }
  }
}

}  // namespace
}  // namespace mirror::data
