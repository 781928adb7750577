// defines: the core's backend table: which kernels and raw memory serve each device type.
//
// Note [Backend table]: the core (tensors, memory, ops dispatch) knows backends only through
// this table, as ggml's backend registry and c10's dispatch do. Each backend fills a Backend
// entry and registers it; the core looks entries up by DeviceType and never includes a
// backend's header. The built-in backends are registered by register_builtin_backends(), which
// the one factory file (src/backend_registry.cpp, the only file compiled with MIRROR_WITH_CUDA)
// defines; the table calls it once, on first use, so no static-initialisation order or
// linker-dropped registrar objects matter in the static library.
#pragma once

#include <memory>
#include <string>

#include "mirror/device.h"
#include "mirror/memory.h"
#include "ops/kernel_set.h"

namespace mirror {

/// One backend's entry in the table.
struct Backend {
  std::string name;  // "cpu", "cuda"
  /// The backend's kernels (one KernelSet serves every device of the type).
  KernelSet& (*kernels)() = nullptr;
  /// A fresh RawMemory for device `index` (owned by that device's CachingAllocator).
  std::unique_ptr<RawMemory> (*raw_memory)(int index) = nullptr;
  /// Optional extras by name (as ggml_backend_reg_get_proc_address): a function pointer, or
  /// nullptr when the backend has no such entry. Used by layers above the core (collectives,
  /// test support) without the core knowing their signatures.
  void* (*proc)(const std::string& name) = nullptr;
  /// Non-empty when the type has no backend in this build: why, and what to do.
  std::string unavailable;
};

/// Registers (or replaces) the backend serving `type`.
void register_backend(DeviceType type, Backend backend);

/// The kernels of a device's backend; throws Unavailable with the entry's reason when this
/// build has none.
KernelSet& kernels_for(Device device);
/// A fresh RawMemory for a device (owned by its CachingAllocator); throws like kernels_for.
std::unique_ptr<RawMemory> make_raw_memory(Device device);
/// A backend's named extra (Backend::proc), or nullptr when the type has no backend or the
/// backend no such entry.
void* backend_proc(DeviceType type, const std::string& name);
/// Registers the built-in backends once (also called by every lookup above); for layers that
/// keep their own tables filled by the same factory file.
void ensure_builtin_backends();

/// Defined by the factory file (src/backend_registry.cpp): registers the backends this binary
/// was built with. Called once, by ensure_builtin_backends().
void register_builtin_backends();

}  // namespace mirror
