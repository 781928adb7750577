// defines: NcclCommunicator, the dist::Communicator between GPUs (one per local device), and
// NcclWork, the handle of one NCCL collective.
//
// Stream contract (distributed/communicator.h): a collective is enqueued on the device's
// communication stream after a cudaStreamWaitEvent on an event just recorded on its compute
// stream, so it sees every kernel queued before the call. Work::wait() makes the compute
// stream wait on the collective's completion event (no host block); Work::done() polls it.
// The Work keeps the collective's tensors alive until the compute stream has waited (also
// when the Work is dropped unwaited: its destructor enqueues the wait), so the caching
// allocator can never hand their memory out while NCCL still uses it. wait_host() blocks the
// host with the communicator's timeout.
//
// Note [NCCL watchdog]: a collective whose peers never arrive spins forever on the GPU, and
// every later host synchronisation with that device would hang. Each communicator runs a
// watchdog thread that polls its outstanding collectives (cudaEventQuery) and
// ncclCommGetAsyncError every 50 ms; on an asynchronous error, or when a collective is older
// than timeout(), it calls ncclCommAbort (which ends the stuck kernels), prints one line
// naming the operation and its tag, and marks the communicator failed: every later call and
// every Work::wait()/done() then throws CommError with that message, which takes the rank
// down (docs/architecture.md invariant 6).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cuda/handles.h"
#include "mirror/distributed/communicator.h"

namespace mirror::cuda {

/// What a communicator and its Work objects share (a Work may outlive the communicator).
struct NcclState {
  ncclComm_t comm = nullptr;
  int device = 0, rank = 0, size = 0;
  std::timed_mutex enqueue;  // held while NCCL calls are made on `comm`
  std::mutex mutex;          // guards everything below
  bool failed = false;
  std::string error;  // the CommError message once failed
  /// Upper bound on one enqueue (the latest timeout()); read by the watchdog.
  std::atomic<std::int64_t> enqueue_limit_ms{600000};
  struct Pending {
    std::shared_ptr<Event> done;
    std::chrono::steady_clock::time_point deadline;  // launch + the timeout at launch
    std::string what;                                // "all_reduce 'step 12 bucket 3'"
  };
  std::deque<Pending> outstanding;  // launched, not yet seen complete (for the watchdog)

  /// Throws CommError if the communicator failed.
  void throw_if_failed();
  /// Aborts the communicator (idempotent); caller holds `mutex`.
  void abort_locked(const std::string& why);
};

class NcclWork final : public dist::Work {
 public:
  NcclWork(std::shared_ptr<NcclState> state, std::string what, std::vector<Tensor> keep,
           std::chrono::milliseconds timeout);
  ~NcclWork() override;
  void wait() override;
  bool done() override;
  /// Blocks until the collective completed or `timeout` passed (then aborts and throws).
  void wait_host(std::chrono::milliseconds timeout);
  /// Records the completion event on the communication stream (at launch, or at group end).
  void record();

 private:
  std::shared_ptr<NcclState> state_;
  std::string what_;
  std::vector<Tensor> keep_;
  std::chrono::milliseconds timeout_;
  std::shared_ptr<Event> done_;
  bool recorded_ = false, waited_ = false;
};

class NcclCommunicator final : public dist::Communicator {
 public:
  /// Takes ownership of an initialised ncclComm_t for cuda:`device`.
  NcclCommunicator(ncclComm_t comm, int device, int rank, int size);
  ~NcclCommunicator() override;

  int rank() const override { return state_->rank; }
  int size() const override { return state_->size; }
  std::string name() const override { return "nccl"; }
  std::shared_ptr<dist::Work> all_reduce(const Tensor& in, Tensor& out, dist::ReduceOp op,
                                         const std::string& tag = "") override;
  std::shared_ptr<dist::Work> broadcast(Tensor& t, int root, const std::string& tag = "") override;
  std::shared_ptr<dist::Work> all_gather(const Tensor& in, Tensor& out,
                                         const std::string& tag = "") override;
  /// A one-element all-reduce waited on the host (with the timeout).
  void barrier() override;

 private:
  template <class Call>
  std::shared_ptr<NcclWork> launch(const char* op, const std::string& tag, std::vector<Tensor> keep,
                                   Call&& call);
  void watchdog();
  /// One watchdog round: async errors, completed and overdue collectives.
  void poll();

  std::shared_ptr<NcclState> state_;
  Event ready_;  // recorded on the compute stream before each collective
  Tensor barrier_buf_;
  std::mutex stop_mutex_;
  std::condition_variable stop_cv_;
  bool stop_ = false;
  std::thread watchdog_;
};

}  // namespace mirror::cuda
