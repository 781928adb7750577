// defines: rank_gpu, the one GPU a benchmark rank drives (GPU = local rank, chosen by
// Runtime::setup_devices as mirror-train chooses it). Shared by the all-reduce sweep and the
// training benchmark.
#pragma once

#include <string>

#include "mirror/device.h"
#include "mirror/distributed/runtime.h"

namespace mirror::dist {

/// This rank's GPU; throws Unavailable with the reason when there is none, InvalidArgument
/// (naming `program`) when the selection is not exactly one GPU.
Device rank_gpu(Runtime& runtime, bool allow_sharing, const std::string& program);

}  // namespace mirror::dist
