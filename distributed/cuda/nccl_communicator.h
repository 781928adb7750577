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
// down (docs/architecture.md invariant 6). The failure is recorded before the kernels are ended,
// so whoever waited on the device and then asks settle() (the step, before it applies anything)
// sees it even when its Work::wait() had returned (Note [Failed step], strategy_step.cpp).
// The communicators are non-blocking and every NCCL call holds the communicator's gate, so an
// abort never frees a communicator another thread is inside a call on (Note [Comm gate],
// distributed/comm_gate.h).
//
// Note [NCCL express lane]: synchronized BatchNorm's sums are small and a replica needs them at
// once, while the gradient buckets launched before them may still be running; on the same
// communicator and stream they would wait for every one of them. So each replica also has an
// express communicator (ncclCommSplit of its main one, same ranks) on the device's express
// stream: Communicator::express(). Both lanes see the collectives in the same host order on
// every rank, which keeps two communicators on one GPU deadlock-free.
//
// Note [NCCL clique]: the communicators one make_nccl_communicators call creates (one per local
// GPU and lane, driven by one host thread) form a clique, NcclClique. They are aborted together, in one
// ncclGroupStart/End: a stalled collective aborted on one of them would otherwise hang its
// siblings; and they are finalized and destroyed together when the last of them is destroyed,
// since finalize is an intra-node collective that one thread can only make for all its ranks in
// one group (Note [Grouped teardown], distributed/comm_teardown.h).
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
#include "distributed/comm_gate.h"
#include "mirror/distributed/communicator.h"

namespace mirror::cuda {

struct NcclClique;

/// What a communicator and its Work objects share (a Work may outlive the communicator).
struct NcclState {
  dist::detail::CommGate<ncclComm_t> gate;  // the comm and the lock of every NCCL call on it
  int device = 0, rank = 0, size = 0;
  int index = 0;                     // position in the clique
  bool express = false;              // the express lane's communicator (its own stream)
  std::weak_ptr<NcclClique> clique;  // expires when its last communicator is destroyed
  std::mutex mutex;                  // guards everything below; taken after gate.calls()
  bool failed = false;
  std::string error;  // the CommError message once failed
  /// The latest timeout() of the communicator; read by the watchdog and by group ends.
  std::atomic<std::int64_t> timeout_ms{600000};
  struct Pending {
    std::shared_ptr<Event> done;
    std::chrono::steady_clock::time_point deadline;  // launch + the timeout at launch
    std::string what;                                // "all_reduce 'step 12 bucket 3'"
  };
  std::deque<Pending> outstanding;  // launched, not yet seen complete (for the watchdog)

  /// Throws CommError if the communicator failed.
  void throw_if_failed();
  /// Aborts this communicator and its whole clique (idempotent). The caller holds neither
  /// `mutex` nor the gate.
  void abort(const std::string& why);
  /// Marks the communicator failed with `message` unless it already is; true if it was not.
  /// Caller holds `mutex`.
  bool fail_locked(const std::string& message);
  /// Why this communicator must be aborted ("" if it need not): an asynchronous NCCL error or
  /// an outstanding collective past its deadline. Forgets completed collectives; `idle` (when
  /// given) tells whether none is left.
  std::string review(bool* idle = nullptr);
};

/// The communicators created together (Note [NCCL clique]).
struct NcclClique {
  std::mutex mutex;  // taken before any member's NcclState::mutex
  std::vector<std::shared_ptr<NcclState>> members;

  /// Marks every member failed, takes their comms through their gates and aborts them in one
  /// group; member `origin` reports `why`, the others name it. Idempotent.
  void abort(int origin, const std::string& why);
  /// Runs when the last communicator of the clique is destroyed: waits (bounded) for pending
  /// collectives, then finalizes and destroys every member together, or aborts them together
  /// when some did not complete.
  ~NcclClique();
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
  /// Records the completion event on the communication stream (at launch, or at group end)
  /// and hands the collective to the watchdog.
  void record();
  // The group holding this collective failed to launch (Note [Failed group launch],
  // distributed/comm_teardown.h; called in this order by finish_group):
  /// Aborts this collective's communicator with its whole clique, failing them with `why`.
  void abort_comms(const std::string& why);
  /// Records the completion event after the aborted kernels: "" or the CUDA error.
  std::string record_after_abort() noexcept;
  /// Makes the compute stream wait for that record, then gives the tensors back: "" or the CUDA
  /// error (then the tensors are still held).
  std::string release() noexcept;
  /// Holds the tensors until the process ends (their reuse cannot be ordered after NCCL).
  void keep_forever(const std::string& why) noexcept;

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
  /// Drives member `index` of `clique` (whose NcclState holds an initialised ncclComm_t), with
  /// member `express` as its express lane (-1: none; Note [NCCL express lane]).
  NcclCommunicator(std::shared_ptr<NcclClique> clique, int index, int express = -1);
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
  /// Waits on the host for every collective launched so far, polling NCCL's asynchronous error
  /// and aborting at the timeout; throws CommError if this communicator failed or was aborted,
  /// also after a Work::wait() had returned (Note [NCCL watchdog]).
  void settle() override;
  /// Note [NCCL express lane]; *this when it has none.
  Communicator& express() override;

 private:
  template <class Call>
  std::shared_ptr<NcclWork> launch(const char* op, const std::string& tag, std::vector<Tensor> keep,
                                   Call&& call);
  void watchdog();

  std::shared_ptr<NcclClique> clique_;  // the last communicator of a clique tears it down
  std::shared_ptr<NcclState> state_;
  Event ready_;  // recorded on the compute stream before each collective
  Tensor barrier_buf_;
  std::mutex stop_mutex_;
  std::condition_variable stop_cv_;
  bool stop_ = false;
  std::thread watchdog_;
  std::unique_ptr<NcclCommunicator> express_;
};

/// The stream `s`'s collectives run on: the device's comm() or express() stream.
cudaStream_t lane_stream(const NcclState& s);

}  // namespace mirror::cuda
