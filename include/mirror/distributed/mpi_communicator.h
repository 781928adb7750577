// defines: MpiCommunicator, collectives on CPU tensors among the ranks of the job (one replica
// per rank), asynchronous through a dedicated communication thread.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "mirror/distributed/communicator.h"
#include "mirror/distributed/runtime.h"

namespace mirror::dist {

/// Note [Communication thread]: every collective is queued (FIFO) to one thread that owns this
/// communicator's MPI traffic. It starts the operation with non-blocking MPI
/// (MPI_Iallreduce / MPI_Ibcast / MPI_Iallgather / MPI_Ibarrier) and polls it with MPI_Test
/// until it completes, so an all-reduce proceeds while the caller computes (Open MPI makes
/// progress only inside MPI calls; the polling thread provides them). Operations run one after
/// the other in the order they were issued, which is the order every rank must issue them in.
///
/// Timeout: an operation that has not completed `timeout()` after it started (default: the
/// Runtime's default_timeout(), 600 s) prints
///   [mirror rank R] collective all_reduce 'step 12 bucket 3' did not complete within 600s;
///   peers: ...
/// and calls MPI_Abort on MPI_COMM_WORLD: a pending MPI collective cannot be cancelled, so the
/// only way not to hang is to end the job, and every rank exits non-zero.
/// An MPI error throws CommError from the Work's wait(); the communicator is unusable after that
/// (later collectives fail at once with the first error).
///
/// Data types: float32, float64, int32, int64 map to MPI types. float16 and bfloat16 have no MPI
/// type; they are summed by user-defined MPI operations that widen each pair to float, add and
/// round back to nearest even (each partial sum is rounded, as NCCL does). kAvg = sum, then
/// divide by size() (in float for the 16-bit types); kAvg on integer tensors is rejected.
/// broadcast and all_gather move bytes and accept every dtype.
///
/// Identical results: every rank receives the same bytes from Open MPI's non-blocking
/// all-reduce algorithms (ring, which the Runtime selects by default -- Note [Open MPI defaults]
/// in distributed/runtime.cpp --, reduce+broadcast and recursive doubling all hand each rank the
/// same partial sums, and IEEE addition is commutative); tests/mpi/collectives_test.cpp checks
/// it, and the strategy's weight fingerprint check would catch an MPI that did not.
///
/// Only CPU tensors. Size-0 tensors are no-ops that still keep their place in the order.
/// Counts beyond 2^30 elements are sent in chunks (all_gather: at most 2^30 bytes per rank).
/// Thread safety: the methods may be called from any one thread at a time (the in-process group
/// calls it from its worker; the strategy from its step). The buffers must stay untouched until
/// wait() returns.
class MpiCommunicator final : public Communicator {
 public:
  /// Duplicates MPI_COMM_WORLD: collective, so create communicators on every rank in the same
  /// order. The Runtime must outlive the communicator.
  explicit MpiCommunicator(Runtime& runtime);
  /// Finishes every queued operation, then stops the thread and frees the MPI handles.
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int rank() const override;
  int size() const override;
  std::string name() const override { return "mpi"; }

  std::shared_ptr<Work> all_reduce(const Tensor& in, Tensor& out, ReduceOp op,
                                   const std::string& tag = "") override;
  std::shared_ptr<Work> broadcast(Tensor& t, int root, const std::string& tag = "") override;
  /// `in` may be out's own block (out.view(rank() * in.numel(), ...)): MPI_IN_PLACE.
  std::shared_ptr<Work> all_gather(const Tensor& in, Tensor& out,
                                   const std::string& tag = "") override;
  /// Waits for everything issued before it, then for every rank.
  void barrier() override;
  /// Throws CommError when an operation has failed (a timeout already ended the job).
  void settle() override;

  /// Operations issued and not yet finished (queued or running).
  std::size_t pending() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace mirror::dist
