// defines: the CUDA backend's entry points, used only by the factory file (backend_registry.cpp).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "mirror/gpu.h"
#include "mirror/memory.h"
#include "ops/kernel_set.h"

namespace mirror {

KernelSet& cuda_kernels();
std::unique_ptr<RawMemory> make_cuda_raw_memory(int device_index);
/// Fills a GpuReport (never throws, never creates a context).
GpuReport cuda_discover_gpus();
/// The backend's named extras (Backend::proc): "device_sleep", a
/// void(int device_index, std::int64_t microseconds, bool on_comm_stream) that spins a kernel
/// on the device's compute (or communication) stream: a test aid (tests/gpu/device_sleep.h).
void* cuda_backend_proc(const std::string& name);

}  // namespace mirror
