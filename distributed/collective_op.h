// defines: the collective operations' one table of names and the one argument check that every
// communicator (MPI, in-process, NCCL) runs before it moves any data.
//
// Note [One collective check]: as src/ops/dispatch.cpp checks an op's tensors once for every
// backend, check_collective states once what a collective accepts (defined tensors on the
// communicator's device, one dtype, matching element counts, a reducible dtype, no average of
// integers, no partial overlap, a root inside the group); communicators add only what their
// transport adds (MPI's int count limit).
#pragma once

#include <string>

#include "mirror/device.h"
#include "mirror/distributed/communicator.h"
#include "mirror/tensor.h"

namespace mirror::dist::detail {

enum class Collective { kAllReduce, kBroadcast, kAllGather, kBarrier };

/// "all_reduce", "broadcast", "all_gather", "barrier": the spelling in every message and trace.
const char* collective_name(Collective op);
/// "sum", "avg".
const char* reduce_op_name(ReduceOp op);

/// Where a communicator's tensors must be: any CPU device, or one GPU.
struct TensorHome {
  DeviceType type = DeviceType::kCpu;
  int index = -1;  // -1: any device of the type
  static TensorHome cpu() { return {DeviceType::kCpu, -1}; }
  static TensorHome gpu(int index) { return {DeviceType::kCuda, index}; }
  bool holds(Device d) const { return d.type == type && (index < 0 || d.index == index); }
};

/// One collective call's arguments, as the check sees them.
struct CollectiveCall {
  Collective op = Collective::kBarrier;
  const Tensor* in = nullptr;   // all_reduce / all_gather input; broadcast's tensor
  const Tensor* out = nullptr;  // all_reduce / all_gather output
  ReduceOp reduce = ReduceOp::kSum;
  int root = 0;  // broadcast
};

/// Throws InvalidArgument naming `who` (the communicator), the op and what to do, unless the
/// call is valid for a group of `size` replicas whose tensors live at `home`.
void check_collective(const std::string& who, const TensorHome& home, int size,
                      const CollectiveCall& call);

}  // namespace mirror::dist::detail
