// defines: the NCCL side of the device collectives, used only by the factory file
// (backend_registry.cpp), which registers it for CUDA devices (Note [Device collectives]).
#pragma once

#include <cstddef>
#include <memory>

#include "distributed/device_collectives.h"

namespace mirror::dist {

/// NCCL communicators, ncclGroupStart/End for CollectiveGroup, pinned host buffers.
DeviceCollectives nccl_collectives();
/// Page-locked host memory registered while `device_index` is current (pinned_host_buffer.cpp);
/// throws Unavailable when no GPU can be used.
std::unique_ptr<HostBuffer> make_pinned_host_buffer(std::size_t bytes, int device_index);

}  // namespace mirror::dist
