// defines: Communicator, the one interface for collectives among replicas (MPI across ranks,
// threads inside a rank, NCCL between GPUs), and Work, the handle an async collective returns.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "mirror/tensor.h"

namespace mirror::dist {

enum class ReduceOp { kSum, kAvg };

/// Handle of an asynchronous collective.
/// Stream contract (GPU): wait() makes the caller's compute stream wait for the collective
/// (an event wait, no host block); on the CPU it blocks until the data is in place.
/// wait() throws CommError if the collective failed or did not finish within the
/// communicator's timeout; the message names the operation and its tag.
class Work {
 public:
  virtual ~Work() = default;
  virtual void wait() = 0;
  /// Non-blocking completion test.
  virtual bool done() = 0;
};

/// Collectives among `size()` replicas; this object is replica `rank()`. Every replica must
/// issue the same collectives in the same order (the strategy guarantees it). Count and
/// datatype come from the tensors; all participating tensors must have equal shapes and dtypes.
class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string name() const = 0;  // "mpi", "inproc", "inproc+mpi", "nccl"

  /// out = reduce(in over replicas); `out` may be `in` (in place). `tag` names the operation
  /// in timeout messages ("step 12 bucket 3").
  virtual std::shared_ptr<Work> all_reduce(const Tensor& in, Tensor& out, ReduceOp op,
                                           const std::string& tag = "") = 0;
  /// Replica `root`'s tensor is copied into every replica's `t`.
  virtual std::shared_ptr<Work> broadcast(Tensor& t, int root, const std::string& tag = "") = 0;
  /// out (shape [size * in.numel()]) receives every replica's `in` in replica order.
  virtual std::shared_ptr<Work> all_gather(const Tensor& in, Tensor& out,
                                           const std::string& tag = "") = 0;
  virtual void barrier() = 0;
  /// Note [Failed step]: returns once every collective issued so far on this communicator has
  /// completed, and throws CommError if any of them failed, timed out or was aborted -- also one
  /// whose Work::wait() had already returned (on a GPU, wait() only orders the streams, and a
  /// watchdog may abort the collective afterwards). The strategy calls it before a step reads
  /// the reduced gradients, so a failed collective never becomes an update
  /// (docs/architecture.md invariant 8). CPU communicators complete a collective by the end of
  /// wait(), so theirs only reports a failure recorded since.
  virtual void settle() {}
  /// The communicator for small collectives a replica waits for at once (synchronized
  /// BatchNorm's sums), which must not queue behind the large ones in flight (the gradient
  /// buckets). Same replicas, ranks and ordering rule; each lane keeps its own order. The NCCL
  /// communicator gives a second communicator on a stream of its own; others return *this.
  virtual Communicator& express() { return *this; }

  /// Convenience: in-place all-reduce, waited.
  void all_reduce_sync(Tensor& t, ReduceOp op, const std::string& tag = "") {
    all_reduce(t, t, op, tag)->wait();
  }

  void set_timeout(std::chrono::milliseconds timeout) { timeout_ = timeout; }
  std::chrono::milliseconds timeout() const { return timeout_; }

 protected:
  std::chrono::milliseconds timeout_{std::chrono::seconds(600)};
};

}  // namespace mirror::dist
