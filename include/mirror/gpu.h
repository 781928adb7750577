// defines: GpuReport, what this process can learn about its GPUs without using them, and the
// plain-words reason when none can be used (the doctor and the CPU fallback print it).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace mirror {

struct GpuDevice {
  int index = 0;  // as this process sees it (after CUDA_VISIBLE_DEVICES)
  std::string name;
  int cc_major = 0, cc_minor = 0;
  std::size_t total_bytes = 0;
  std::string pci_bus_id;
  std::string uuid;  // "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" (cudaDeviceProp::uuid)
};

struct GpuReport {
  bool built_with_cuda = false;
  int runtime_version_compiled = 0;  // CUDART_VERSION, e.g. 13000
  int runtime_version = 0;           // cudaRuntimeGetVersion
  int driver_version = 0;            // cudaDriverGetVersion; 0 = no driver
  int cudnn_compiled = 0, cudnn_loaded = 0;
  int nccl_compiled = 0, nccl_loaded = 0;
  int cublas_loaded = 0;
  bool cuda_visible_devices_set = false;
  std::string cuda_visible_devices;
  std::vector<GpuDevice> devices;
  /// Empty when at least one device is usable; otherwise the reason in words, e.g.
  /// "CUDA driver version is insufficient for CUDA runtime version (driver 0, runtime 13.0)".
  std::string unavailable_reason;

  bool usable() const { return unavailable_reason.empty() && !devices.empty(); }
};

/// Never throws and never creates a CUDA context (safe to call on every rank before device
/// selection). Cached after the first call.
const GpuReport& discover_gpus();

}  // namespace mirror
