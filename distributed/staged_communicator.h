// defines: StagedCommunicator, collectives on one device's tensors carried out by a host
// communicator (MPI, in-process) over host copies, and the transport choice of GPU replicas
// (DeviceComm, `--comm`).
//
// Note [Staged collectives]: NCCL cannot always connect the replicas: a machine without NCCL, or
// several ranks on one GPU, which NCCL before 2.30 refuses ("Duplicate GPU"). `--comm mpi` then
// runs every collective of a GPU replica through the host: the tensor is copied into page-locked
// host memory (asynchronously, ordered after the work queued on the device), a staging thread
// waits for that copy, hands a host copy to the host communicator (MpiCommunicator between
// ranks, the in-process group between a rank's replicas) and waits for it; Work::wait() then
// copies the result back, ordered before every later op on the device. So the replica thread
// never blocks on the device while launching (backward keeps queueing kernels while a bucket is
// reduced), the collectives run one at a time in issue order (the order every replica issues
// them in), and results are the host communicator's: the same bytes on every replica.
// Host buffers are pooled by dtype and size and reused once their copy back has completed: the
// steady state allocates nothing. The host communicator is only ever called from the staging
// thread. Failures of the host communicator come back from wait() and settle() as CommError;
// timeouts are the host communicator's (it is given this communicator's timeout()).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "distributed/device_collectives.h"
#include "mirror/distributed/communicator.h"
#include "mirror/distributed/strategy.h"

namespace mirror::dist {

class StagedCommunicator final : public Communicator {
 public:
  /// Makes the host buffer of one staged tensor: `bytes` for transfers with `device`.
  using BufferFactory = std::function<std::unique_ptr<HostBuffer>(std::size_t bytes, Device)>;

  /// Collectives on `device`'s tensors through `host` (which takes CPU tensors). `make_buffer`:
  /// page-locked memory for a GPU (make_host_buffer), ordinary memory for a CPU device.
  StagedCommunicator(std::unique_ptr<Communicator> host, Device device,
                     BufferFactory make_buffer = make_host_buffer);
  /// Finishes what was issued, then stops the staging thread.
  ~StagedCommunicator() override;
  StagedCommunicator(const StagedCommunicator&) = delete;
  StagedCommunicator& operator=(const StagedCommunicator&) = delete;

  int rank() const override;
  int size() const override;
  std::string name() const override;  // "<host>+staged"
  std::shared_ptr<Work> all_reduce(const Tensor& in, Tensor& out, ReduceOp op,
                                   const std::string& tag = "") override;
  std::shared_ptr<Work> broadcast(Tensor& t, int root, const std::string& tag = "") override;
  std::shared_ptr<Work> all_gather(const Tensor& in, Tensor& out,
                                   const std::string& tag = "") override;
  void barrier() override;
  /// Waits until every collective issued so far has finished; throws CommError if one failed.
  void settle() override;

  /// Host buffers made so far (the pool's size; steady state: constant).
  int buffers_made() const;

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace mirror::dist
