// defines: device_sleep, a test aid that spins a kernel on a GPU's compute (or communication)
// stream, so a missing stream dependency shows up as wrong data. Reached through the backend
// table's named extras (Backend::proc), so the library exports no test-only entry point.
#pragma once

#include <chrono>
#include <cstdint>

#include "backend.h"
#include "mirror/error.h"

namespace mirror::testing {

/// Enqueues a kernel that spins for `duration` on `device`'s compute stream (or its
/// communication stream). Throws Unavailable without the CUDA backend.
inline void device_sleep(Device device, std::chrono::microseconds duration,
                         bool on_comm_stream = false) {
  MIRROR_CHECK(device.is_cuda(), InvalidArgument,
               "device_sleep: " + device.str() + " is not a GPU");
  using Sleep = void (*)(int device_index, std::int64_t microseconds, bool on_comm_stream);
  auto sleep = reinterpret_cast<Sleep>(backend_proc(DeviceType::kCuda, "device_sleep"));
  if (sleep == nullptr) {
    throw Unavailable(
        "device_sleep needs the CUDA backend, but this Mirror was built without CUDA "
        "(rebuild with -DMIRROR_CUDA=ON on a machine with the CUDA toolkit)");
  }
  sleep(device.index, duration.count(), on_comm_stream);
}

}  // namespace mirror::testing
