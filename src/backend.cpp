// The core's backend table (Note [Backend table] in backend.h).
#include "backend.h"

#include <array>
#include <mutex>

#include "mirror/error.h"

namespace mirror {
namespace {

constexpr std::size_t kTypes = 2;  // DeviceType::kCpu, DeviceType::kCuda

std::array<Backend, kTypes>& table() {
  static std::array<Backend, kTypes> entries;
  return entries;
}

std::size_t slot(DeviceType type) {
  const auto i = static_cast<std::size_t>(type);
  MIRROR_CHECK(i < kTypes, InvalidArgument,
               "backend table: device type " + std::to_string(i) + " is out of range");
  return i;
}

const Backend& entry(Device device) {
  ensure_builtin_backends();
  const Backend& b = table()[slot(device.type)];
  if (!b.kernels || !b.raw_memory) {
    throw Unavailable(
        "device " + device.str() + " requested, but " +
        (b.unavailable.empty() ? "this Mirror has no backend for it" : b.unavailable));
  }
  return b;
}

}  // namespace

void register_backend(DeviceType type, Backend backend) {
  table()[slot(type)] = std::move(backend);
}

void ensure_builtin_backends() {
  // A function-local static: thread-safe, runs once, and costs one load on the hot path.
  static const bool registered = (register_builtin_backends(), true);
  (void)registered;
}

KernelSet& kernels_for(Device device) { return entry(device).kernels(); }

std::unique_ptr<RawMemory> make_raw_memory(Device device) {
  return entry(device).raw_memory(device.index);
}

void* backend_proc(DeviceType type, const std::string& name) {
  ensure_builtin_backends();
  const Backend& b = table()[slot(type)];
  return b.proc ? b.proc(name) : nullptr;
}

}  // namespace mirror
