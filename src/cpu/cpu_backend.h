// defines: the CPU backend's entry points, used only by the factory file (backend_registry.cpp).
#pragma once

#include <memory>

#include "mirror/memory.h"
#include "ops/kernel_set.h"

namespace mirror {

KernelSet& cpu_kernels();
std::unique_ptr<RawMemory> make_cpu_raw_memory();

}  // namespace mirror
