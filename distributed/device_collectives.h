// defines: collectives between devices of one backend (NCCL for CUDA): the communicator
// factory and its bootstrap, CollectiveGroup, and HostBuffer (pinned host memory for transfers).
//
// Note [Device collectives]: these are the distributed layer's GPU services. The neutral half
// (this header, device_collectives.cpp) holds a table of DeviceCollectives per device type; a
// backend's communicator part (NCCL: the CUDA-only files under cuda/) fills it through the one
// factory file (src/backend_registry.cpp, Note [Backend table]). Without an entry the
// factory throws Unavailable, CollectiveGroup is a no-op and host buffers are ordinary memory.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

#include "mirror/device.h"
#include "mirror/distributed/communicator.h"
#include "mirror/tensor.h"

namespace mirror::dist {

/// Host memory for fast host<->device transfers: page-locked (cudaHostAlloc) when `device` is
/// a usable GPU, ordinary memory otherwise (pinned() says which).
class HostBuffer {
 public:
  virtual ~HostBuffer() = default;
  virtual void* data() const = 0;
  virtual std::size_t bytes() const = 0;
  virtual bool pinned() const = 0;
  /// Enqueues a copy of the buffer's first dst.nbytes() bytes into `dst`, ordered before every
  /// later op on dst's device. Returns at once when pinned: do not write the buffer again
  /// before ready() or wait().
  virtual void copy_to(Tensor& dst) = 0;
  /// Enqueues a copy of `src` into the buffer after all queued work on src's device; read the
  /// buffer only after ready() or wait().
  virtual void copy_from(const Tensor& src) = 0;
  /// Whether the last copy_to / copy_from has completed.
  virtual bool ready() = 0;
  /// Blocks until the last copy_to / copy_from has completed.
  virtual void wait() = 0;
};
/// A host buffer of `bytes` bytes for transfers to and from `device`.
std::unique_ptr<HostBuffer> make_host_buffer(std::size_t bytes, Device device);

/// How NCCL communicators of several processes find each other. The distributed runtime fills
/// it from MPI; NCCL code never sees MPI.
struct NcclBootstrap {
  int world_size = 1;  // replicas in the clique: every process's local GPUs together
  int first_rank = 0;  // replica index of this process's first device (the next get +1, ...)
  /// Broadcasts `n` bytes from the process holding replica 0 to every process (MPI_Bcast).
  /// May be empty when this process owns the whole clique.
  std::function<void(void* bytes, std::size_t n)> broadcast_from_root;
  /// How long creating the communicators may wait for every replica to join (--comm-timeout);
  /// also the communicators' first timeout().
  std::chrono::milliseconds timeout{600000};
};
/// One NCCL communicator per local device (replica ranks first_rank, first_rank + 1, ...),
/// created together (ncclGroupStart/End around ncclCommInitRankConfig), non-blocking (Note [Comm
/// gate], distributed/comm_gate.h); creation fails with CommError when some replica has not
/// joined within the bootstrap's timeout. Collective contract:
/// mirror/distributed/communicator.h (GPU stream semantics) and cuda/nccl_communicator.h.
/// Throws Unavailable without CUDA or a usable GPU, CommError when NCCL fails.
std::vector<std::unique_ptr<Communicator>> make_nccl_communicators(
    const std::vector<Device>& devices, const NcclBootstrap& bootstrap);

/// Groups the collectives one host thread issues for several local GPUs into one NCCL launch
/// (required by NCCL when a thread drives more than one device). Collectives started while a
/// group is open are enqueued by end() (or the destructor); their Work becomes waitable then.
/// A no-op without CUDA.
class CollectiveGroup {
 public:
  CollectiveGroup();
  ~CollectiveGroup();
  CollectiveGroup(const CollectiveGroup&) = delete;
  CollectiveGroup& operator=(const CollectiveGroup&) = delete;
  /// Closes the group; throws CommError if NCCL fails to launch it.
  void end();

 private:
  bool open_ = false;
};

/// A backend's collectives, as registered into the table (Note [Device collectives]).
struct DeviceCollectives {
  std::vector<std::unique_ptr<Communicator>> (*make_communicators)(
      const std::vector<Device>& devices, const NcclBootstrap& bootstrap) = nullptr;
  void (*group_start)() = nullptr;
  void (*group_end)() = nullptr;
  /// Page-locked memory for `device_index`, or nullptr to fall back to ordinary memory.
  std::unique_ptr<HostBuffer> (*pinned_host_buffer)(std::size_t bytes, int device_index) = nullptr;
};
/// Registers (or replaces) the collectives of `type`'s devices.
void register_device_collectives(DeviceType type, DeviceCollectives collectives);

}  // namespace mirror::dist
