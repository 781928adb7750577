// defines: DeviceRequest / DeviceSelection and select_devices, the pure function that decides
// which devices one rank drives (tested with fake GpuReports; Runtime::setup_devices calls it
// with the real one).
#pragma once

#include <string>
#include <vector>

#include "mirror/device.h"
#include "mirror/gpu.h"
#include "mirror/memory.h"

namespace mirror::dist {

/// What the user asked for (the programs' --devices, --memory, --require-gpu and
/// --allow-gpu-sharing flags).
///
/// `devices`:
///   "auto"            one GPU per local rank (GPU index = local rank, wrapping around what
///                     the rank sees); the CPU, with a loud warning naming the reason, when no
///                     GPU is usable
///   "gpu" / "cuda"    like auto, but no usable GPU is an error
///   "gpu:0,gpu:1"     these GPUs ("cuda:N" is the same); several GPUs make several in-process
///                     replicas
///   "cpu"             one CPU replica;  "cpu:N"  N in-process CPU replicas (cpu:0 .. cpu:N-1)
/// GPU indices are as this process sees them, i.e. AFTER CUDA_VISIBLE_DEVICES has been applied
/// by the CUDA runtime: with CUDA_VISIBLE_DEVICES=2,3, "gpu:0" is physical GPU 2.
struct DeviceRequest {
  std::string devices = "auto";
  std::string memory_policy = "growth";  // MemoryPolicy::parse syntax, applied to every device
  bool require_gpu = false;              // no usable GPU is an error instead of a CPU fallback
  bool allow_sharing = false;            // several local ranks may drive the same GPU
};

struct DeviceSelection {
  std::vector<Device> devices;  // the replicas this rank drives, in replica order
  MemoryPolicy memory_policy;
  /// Empty, or the multi-line CPU-fallback warning (the caller prints it on every rank).
  std::string warning;
  bool cpu_fallback = false;

  /// "cuda:0" or "cpu:0,cpu:1".
  std::string devices_str() const;
};

/// What each rank of this node sees of its GPUs, indexed by local rank: the gpu_identity of
/// every GPU that rank sees, in its own index order. Runtime::setup_devices gathers it from the
/// local ranks (an all-gather); empty when unknown.
using NodeGpuViews = std::vector<std::vector<std::string>>;

/// A GPU's identity across processes, independent of CUDA_VISIBLE_DEVICES: its UUID, else its
/// PCI bus id; "" when neither is known.
std::string gpu_identity(const GpuDevice& gpu);

/// Decides this rank's devices from the request, the rank's place on its node and what the
/// process sees of its GPUs. Pure: no I/O, no CUDA, no MPI.
///
/// Note [Per-rank GPU binding]: launchers such as `srun --gpus-per-task=1`, `--gpu-bind` or a
/// per-rank CUDA_VISIBLE_DEVICES wrapper show each local rank its own GPU(s), so a rank may see
/// fewer GPUs than there are ranks on the node without any GPU being shared. With `node` (what
/// every local rank sees) the rule is about physical GPUs: each rank picks its GPU(s) as usual
/// (auto: its local rank modulo the GPUs it sees, so its only GPU when it sees one; a list: the
/// listed indices), and only when two local ranks would drive the same GPU (equal identities),
/// or when that cannot be told (no `node`, or GPUs without identity), is --allow-gpu-sharing
/// required.
///
/// Throws InvalidArgument for malformed text, a GPU index that does not exist, duplicate or mixed
/// CPU/GPU devices, and a bad memory policy; Unavailable for an explicit GPU request (or
/// require_gpu) without a usable GPU (naming GpuReport::unavailable_reason) and for GPUs shared
/// by local ranks (naming the numbers, and the shared GPU when `node` shows it) unless
/// allow_sharing.
DeviceSelection select_devices(const DeviceRequest& request, int local_rank, int local_size,
                               const GpuReport& gpus, const NodeGpuViews& node = {});

}  // namespace mirror::dist
