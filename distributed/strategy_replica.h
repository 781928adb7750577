// defines: the private parts of MirroredStrategy shared by its source files: the per-device
// Replica state, the worker threads that run local replicas concurrently, and small helpers.
#pragma once

#include <chrono>

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "mirror/distributed/communicator.h"
#include "mirror/distributed/strategy.h"

namespace mirror::dist {

/// Everything one model replica owns: its model and optimizer on its device, the flat bucket
/// buffers its gradients are views of, its communicator, and the state of the step in flight.
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

  // ---- the step in flight ----
  std::vector<int> pending;  // per bucket: gradients not yet final
  int next_launch = 0;       // buckets [0, next_launch) have been launched
  std::vector<std::shared_ptr<Work>> works;
  Tensor metrics;  // loss, correct, count, target values, squared and absolute error sums;
                   // reduced with the gradients (Note [Metrics first])
  std::shared_ptr<Work> metrics_work;
  bool metrics_launched = false;
  std::chrono::steady_clock::time_point step_start;
  std::vector<double> launched_ms, done_ms;  // per bucket, from step_start; -1 = not yet
  std::int64_t step = 0;                     // tag of the collectives
  StepTiming timing;
  double loss = 0;
  std::int64_t correct = 0, count = 0;
  std::int64_t target_values = 0;           // float-target losses only
  double squared_error = 0, abs_error = 0;  // likewise
  bool skipped = false;
  int micro_batches = 1;
  int overlapped = 0;  // buckets launched before backward returned

  // ---- out-of-memory split (Note [OOM split]) ----
  int split = 1;         // micro-batches per accumulation step this replica needs
  bool settled = false;  // a step has completed with the current split
  int logged_split = 1;  // last split announced on stderr
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
  bool stop_ = false;
};

namespace detail {
/// Milliseconds since `start` (steady clock).
double ms_since(std::chrono::steady_clock::time_point start);
/// A batch's rows [begin, end) as views (no copy); lengths copied.
data::Batch slice_batch(const data::Batch& batch, std::int64_t begin, std::int64_t end);
/// The batch with its tensors on `device` (shared, not copied, when already there).
data::Batch to_device(const data::Batch& batch, Device device);
/// Number of samples with weight > 0.
std::int64_t real_count(const data::Batch& batch);
}  // namespace detail

}  // namespace mirror::dist
