// defines: the per-thread state of an open NCCL group (CollectiveGroup): the collectives issued
// in it, launched by its end, and the gates it holds until then (Note [Comm gate], rule 4).
#pragma once

#include <memory>
#include <mutex>

#include "distributed/cuda/nccl_communicator.h"

namespace mirror::cuda {

/// Whether the calling thread has an open group.
bool nccl_group_open();
/// Locks `s`'s gate, or returns an empty lock when the calling thread's open group holds it
/// already (from an earlier collective of the group).
std::unique_lock<std::mutex> nccl_gate_lock(NcclState& s);
/// Keeps `lock` (of `s`'s gate) until the calling thread's group ends: NCCL reads the
/// communicator again in ncclGroupEnd, so no abort may take it meanwhile.
void nccl_group_hold(NcclState& s, std::unique_lock<std::mutex> lock);
/// A collective issued in the calling thread's open group, recorded when the group launched.
void nccl_group_add(std::shared_ptr<NcclWork> work);

}  // namespace mirror::cuda
