// defines: the private parts of MirroredStrategy shared by its source files: the per-device
// Replica (run lifetime) with its ReplicaStep (one step) and OomSplit, the worker threads that run
// local replicas concurrently, and small helpers.
#pragma once

#include <chrono>

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "mirror/distributed/bucket.h"
#include "mirror/distributed/communicator.h"
#include "mirror/distributed/strategy.h"

namespace mirror::dist {

/// The state of one step of one replica (of one attempt at it, Note [OOM split]): created
/// fresh when the attempt starts and dropped with it, so nothing leaks into the next step.
struct ReplicaStep {
  ReplicaStep(std::int64_t step, std::chrono::steady_clock::time_point start, std::int64_t count,
              const BucketPlan& plan);

  std::int64_t step = 0;  // tag of the collectives
  std::chrono::steady_clock::time_point start;
  std::int64_t count = 0;  // real samples of this replica's batch

  // ---- buckets in flight ----
  std::vector<int> pending;  // per bucket: gradients not yet final
  int next_launch = 0;       // buckets [0, next_launch) have been launched
  std::vector<std::shared_ptr<Work>> works;
  std::vector<double> launched_ms, done_ms;  // per bucket, from start; -1 = not yet
  int overlapped = 0;                        // buckets launched before backward returned

  // ---- metrics: loss, correct, count, target values, squared and absolute error sums,
  // reduced with the gradients (Note [Metrics first]) ----
  Tensor metrics;
  std::shared_ptr<Work> metrics_work;
  bool metrics_launched = false;
  double loss = 0;
  std::int64_t correct = 0;
  std::int64_t target_values = 0;           // float-target losses only
  double squared_error = 0, abs_error = 0;  // likewise

  StepTiming timing;
  bool skipped = false;
  int micro_batches = 1;
};

/// How one replica splits its batch after running out of memory (Note [OOM split]); lives as
/// long as the replica, since a split, once needed, stays.
struct OomSplit {
  int split = 1;         // micro-batches per accumulation step this replica needs
  bool settled = false;  // a step has completed with the current split
  int logged_split = 1;  // last split announced on stderr
};

/// Everything one model replica owns for the whole run: its model and optimizer on its device,
/// the flat bucket buffers its gradients are views of, and its communicator; plus the step in
/// flight (a fresh ReplicaStep per step) and its out-of-memory split.
struct MirroredStrategy::Replica {
  Device device;
  int local_index = 0;
  nn::Sequential model;
  std::unique_ptr<optim::Optimizer> optimizer;
  std::unique_ptr<Communicator> comm;  // null when the world has a single replica
  std::vector<nn::Parameter*> params;  // model order
  std::unordered_map<const nn::Parameter*, int> index_of;
  std::vector<Tensor> buffers;  // one flat gradient buffer per bucket
  std::vector<Tensor> wire;     // 16-bit copies of the buffers while compressing
  // Non-trained buffers each replica updates from its own shard (unsynchronized BatchNorm
  // moving statistics), averaged with every step's metrics (Note [Buffers across replicas]).
  std::vector<nn::Buffer*> local_buffers;

  // Sums over comm for synchronized BatchNorm (strategy_sync_bn.cpp); null with one replica.
  std::unique_ptr<nn::ReplicaSum> replica_sum;
  std::optional<ReplicaStep> now;  // the step in flight (the last one after it ends)
  OomSplit oom;
};

/// One thread per local replica beyond the first (which runs on the caller's thread). run(fn)
/// calls fn(i) for every local replica concurrently and returns when all are done, rethrowing
/// the most telling failure (see Workers::run).
class ReplicaWorkers {
 public:
  explicit ReplicaWorkers(int count);
  ~ReplicaWorkers();
  ReplicaWorkers(const ReplicaWorkers&) = delete;
  ReplicaWorkers& operator=(const ReplicaWorkers&) = delete;

  void run(const std::function<void(int)>& fn);

 private:
  void loop(int index);

  std::vector<std::thread> threads_;
  std::vector<std::exception_ptr> errors_;
  std::mutex mutex_;
  std::condition_variable start_cv_, done_cv_;
  const std::function<void(int)>* job_ = nullptr;
  std::uint64_t generation_ = 0;
  int remaining_ = 0;
  int compute_threads_ = 1;  // the caller's OpenMP thread count (Note [Replica threads])
  bool stop_ = false;
};

/// Whether some BatchNormalization of `model` is synchronized across replicas.
bool has_synchronized_batchnorm(nn::Sequential& model);
/// The buffers of `model` that each replica updates from its own shard: those of unsynchronized
/// BatchNormalizations and of any other layer with buffers (strategy_sync_bn.cpp).
std::vector<nn::Buffer*> replica_local_buffers(nn::Sequential& model);
/// Elements of `buffers` altogether.
std::int64_t total_numel(const std::vector<nn::Buffer*>& buffers);
/// The ReplicaSum of a replica: sums over `comm`, naming collectives after the step counter
/// `step` (strategy_sync_bn.cpp).
std::unique_ptr<nn::ReplicaSum> make_replica_sum(Communicator& comm, Device device,
                                                 const std::int64_t& step);

namespace detail {
/// Milliseconds since `start` (steady clock).
double ms_since(std::chrono::steady_clock::time_point start);
/// A batch's rows [begin, end) as views (no copy); lengths copied.
data::Batch slice_batch(const data::Batch& batch, std::int64_t begin, std::int64_t end);
/// The batch with its tensors on `device` (shared, not copied, when already there).
data::Batch to_device(const data::Batch& batch, Device device);
/// Number of samples with weight > 0.
std::int64_t real_count(const data::Batch& batch);
/// The fp16 overflow test hook, MIRROR_TEST_FP16_OVERFLOW="replica:step" (strategy_precision.cpp):
/// {world replica, strategy step}, or {-1, -1} when unset; InvalidArgument for bad text.
std::pair<int, std::int64_t> overflow_hook();
}  // namespace detail

}  // namespace mirror::dist
