// defines: ShardSpec, LoaderOptions, epoch_order (the global sample order) and Loader, which
// turns a Dataset into this replica's batches with background prefetch.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "mirror/data/augment.h"
#include "mirror/data/batch.h"
#include "mirror/data/dataset.h"
#include "mirror/data/sample_pool.h"

namespace mirror::data {

/// Which slice of every global batch this loader serves. `replica` counts replicas world-wide
/// (rank-major over each rank's local replicas); a rank driving several local devices makes one
/// Loader per replica, all sharing one Dataset.
struct ShardSpec {
  int replica = 0;
  int num_replicas = 1;
};

enum class LastBatch {
  kDrop,  // steps_per_epoch = floor(N / B): the tail of each epoch's order is skipped
  kPad,   // steps_per_epoch = ceil(N / B): the last global batch is filled with weight-0 samples
};

struct LoaderOptions {
  std::int64_t global_batch = 64;  // must be a multiple of num_replicas
  std::uint64_t seed = 0;
  bool shuffle = true;
  LastBatch last_batch = LastBatch::kPad;
  /// Sort windows of `bucket_window` global batches by length, then shuffle the batch order:
  /// less padding for variable-length data, same batches on every rank.
  bool bucket_by_length = false;
  int bucket_window = 32;
  int prefetch_depth = 3;  // batches prepared ahead of the consumer; 0 = no thread, synchronous
  int num_workers = 1;     // threads assembling batches (when prefetch_depth > 0)
  /// Decodes the samples of each batch in parallel (Note [Sample pool]); shared by the loaders
  /// of one rank. Null: each batch is decoded by the thread assembling it.
  std::shared_ptr<SamplePool> sample_pool;
  /// Random crops and flips of image samples (Note [Augmentation draws], augment.h); the
  /// Loader refuses them for data that is not [C, H, W] images.
  ImageAugment augment;
  /// Note [Bad samples]: a sample whose decoding fails with BadSample (a corrupt image, a NaN
  /// found at the batch) stops the run with that error, unless this is set: then it is replaced
  /// by the next good sample in dataset order (index + 1, + 2, ..., wrapping around), with that
  /// sample's label. The replacement is a function of the dataset alone, so every rank count and
  /// every resumed run still sees the same global batches (Note [Exact sharding]).
  bool skip_bad_samples = false;
  /// Runs on the worker thread after a batch is assembled, before it is queued. This is where
  /// the GPU path stages the batch: copy into pinned memory and start the async host-to-device
  /// copy on a copy stream, recording an event the compute stream waits on.
  std::function<void(Batch&)> on_ready;
};

/// Note [Exact sharding]: the order of samples in an epoch, and so every global batch, is a
/// function of (dataset size, lengths when bucketing, global_batch, seed, epoch) only, never of
/// the number of replicas. Global batch g is order[g*B, g*B+B); replica r of R receives the
/// contiguous slice [r*b, r*b+b) of it with b = B/R. Replicas with R = 1 and batch B, or with R
/// replicas of batch b, therefore see exactly the same global batches, and every replica issues
/// the same number of steps (padding keeps the last one full-sized), so the collectives match.
///
/// The permutation is Fisher-Yates driven by std::mt19937_64 seeded with
/// splitmix64(seed ^ splitmix64(epoch)), drawing with rejection sampling: identical across
/// compilers and standard libraries (std::shuffle is not).
std::vector<std::int64_t> epoch_order(const Dataset& dataset, const LoaderOptions& options,
                                      int epoch);

/// epoch_order as the Loader keeps it: 4 bytes a sample when the dataset has fewer than 2^32
/// samples (the same permutation: the shuffle's draws do not depend on the element type), so a
/// dataset of 10^7 images costs 40 MB of order, not 80.
class EpochOrder {
 public:
  EpochOrder(const Dataset& dataset, const LoaderOptions& options, int epoch);
  std::int64_t size() const { return size_; }
  std::int64_t operator[](std::int64_t k) const {
    return compact_.empty() ? wide_[static_cast<std::size_t>(k)]
                            : compact_[static_cast<std::size_t>(k)];
  }

 private:
  std::vector<std::uint32_t> compact_;
  std::vector<std::int64_t> wide_;  // bucketed orders and datasets of 2^32 samples or more
  std::int64_t size_ = 0;
};

class Loader {
 public:
  /// Throws InvalidArgument for a bad shard, a global batch that is not a positive multiple of
  /// num_replicas, or drop_last with a global batch larger than the dataset.
  Loader(std::shared_ptr<const Dataset> dataset, ShardSpec shard, LoaderOptions options);
  /// Stops and joins the workers, whether or not the batches were consumed or a worker failed.
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  std::int64_t steps_per_epoch() const { return steps_per_epoch_; }
  std::int64_t local_batch() const { return local_batch_; }
  const Dataset& dataset() const { return *dataset_; }
  const ShardSpec& shard() const { return shard_; }
  const LoaderOptions& options() const { return options_; }

  /// This replica's batch at (epoch, step): a pure function, safe from any thread.
  /// Batch.step = epoch * steps_per_epoch + step.
  Batch make_batch(int epoch, std::int64_t step) const;

  /// Starts serving from (first_epoch, first_step) through the end of epoch
  /// first_epoch + num_epochs - 1 (resume: pass the saved position). Prefetching starts at once
  /// and runs across epoch boundaries. Restarting discards batches not yet consumed.
  void start(int first_epoch, int num_epochs = 1, std::int64_t first_step = 0);
  /// The next batch, or nullopt after the last one. A worker's exception is rethrown here, in
  /// step order (batches before the failing one are still delivered); later calls rethrow it
  /// again until start() is called.
  std::optional<Batch> next();

  /// Total seconds next() spent blocked waiting for a batch (the trainer's data-wait time);
  /// with prefetch_depth 0 this is the time spent assembling batches.
  double wait_seconds() const { return wait_ns_.load() * 1e-9; }
  std::int64_t batches_served() const { return served_.load(); }
  /// Samples replaced so far under skip_bad_samples (a bad sample met in two epochs counts
  /// twice), and the distinct bad ones with the first error each gave (Note [Bad samples]).
  std::int64_t bad_samples_replaced() const { return replaced_.load(); }
  std::map<std::int64_t, std::string> bad_samples() const;

 private:
  struct Ready {
    std::optional<Batch> batch;
    std::exception_ptr error;
  };
  std::shared_ptr<const EpochOrder> order_for(int epoch) const;
  void fill_samples(Batch& batch, const EpochOrder& order, std::int64_t step) const;
  /// Decodes sample ids[j] into dst, replacing it (and ids[j]) by the next good sample when it
  /// is bad and skip_bad_samples is set. Random transforms are drawn for `epoch`.
  void decode_or_replace(std::int64_t& id, int epoch, float* dst) const;
  void worker_loop();
  void stop_workers();

  std::shared_ptr<const Dataset> dataset_;
  ShardSpec shard_;
  LoaderOptions options_;
  std::int64_t local_batch_ = 0;
  std::int64_t steps_per_epoch_ = 0;

  mutable std::mutex order_mutex_;
  mutable std::map<int, std::shared_future<std::shared_ptr<const EpochOrder>>> orders_;

  std::mutex mutex_;
  std::condition_variable work_cv_, ready_cv_;
  std::vector<std::thread> workers_;
  bool stop_ = false;
  bool started_ = false;
  std::int64_t end_ = 0;         // one past the last linear step (epoch * S + step)
  std::int64_t next_claim_ = 0;  // next linear step a worker takes
  std::int64_t next_serve_ = 0;  // next linear step next() returns
  int prepared_epoch_ = 0;       // highest epoch whose order is computed or being computed
  std::map<std::int64_t, Ready> ready_;
  std::exception_ptr failed_;
  std::atomic<std::int64_t> wait_ns_{0};
  std::atomic<std::int64_t> served_{0};
  mutable std::atomic<std::int64_t> replaced_{0};
  mutable std::mutex bad_mutex_;
  mutable std::map<std::int64_t, std::string> bad_;  // distinct bad samples (the first 1000)
};

}  // namespace mirror::data
