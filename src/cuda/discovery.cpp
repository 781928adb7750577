// cuda_discover_gpus: versions, devices and, when none can be used, the reason in words.
// Uses only calls that create no CUDA context (cudaGetDeviceCount, cudaGetDeviceProperties,
// version queries), so it is safe on every rank before device selection.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <nccl.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "cuda/cuda_backend.h"

#ifndef MIRROR_CUDA_MIN_ARCH
#define MIRROR_CUDA_MIN_ARCH 0  // lowest compute capability * 10 this build has code for
#endif

// Note [Pinned CUDA headers] (cmake/MirrorImportedLibraries.cmake): the headers the compiler saw
// are the ones CMake found (the kit's pinned wheels), not another copy earlier on the path.
#if defined(MIRROR_CUDNN_HEADER_VERSION) && MIRROR_CUDNN_HEADER_VERSION > 0
static_assert(CUDNN_VERSION == MIRROR_CUDNN_HEADER_VERSION,
              "cudnn.h is not the one in MIRROR_cudnn_INCLUDE_DIR: another cuDNN's headers come "
              "first on the include path (Note [Pinned CUDA headers])");
#endif
#if defined(MIRROR_NCCL_HEADER_VERSION) && MIRROR_NCCL_HEADER_VERSION > 0
static_assert(NCCL_VERSION_CODE == MIRROR_NCCL_HEADER_VERSION,
              "nccl.h is not the one in MIRROR_nccl_INCLUDE_DIR: another NCCL's headers come "
              "first on the include path (Note [Pinned CUDA headers])");
#endif

namespace mirror {
namespace {

/// 13000 -> "13.0", 12040 -> "12.4" (CUDA's version encoding: 1000 * major + 10 * minor).
std::string cuda_version_str(int v) {
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

int cublas_version() {
  int major = 0, minor = 0, patch = 0;
  if (cublasGetProperty(MAJOR_VERSION, &major) != CUBLAS_STATUS_SUCCESS ||
      cublasGetProperty(MINOR_VERSION, &minor) != CUBLAS_STATUS_SUCCESS ||
      cublasGetProperty(PATCH_LEVEL, &patch) != CUBLAS_STATUS_SUCCESS) {
    return 0;
  }
  return major * 10000 + minor * 100 + patch;  // CUBLAS_VERSION's encoding
}

std::string no_device_reason(const GpuReport& r, const char* what) {
  std::string reason = what;
  if (r.cuda_visible_devices_set) {
    reason += r.cuda_visible_devices.empty()
                  ? " (CUDA_VISIBLE_DEVICES is set but empty, which hides every GPU)"
                  : " (CUDA_VISIBLE_DEVICES='" + r.cuda_visible_devices +
                        "' names no GPU that exists or is usable; unset it or list valid indices)";
  }
  return reason;
}

std::string reason_for(cudaError_t status, const GpuReport& r) {
  const std::string text = cudaGetErrorString(status);
  switch (status) {
    case cudaErrorInsufficientDriver:
      return text + " (driver " +
             (r.driver_version == 0 ? std::string("none found")
                                    : cuda_version_str(r.driver_version)) +
             ", runtime " + cuda_version_str(r.runtime_version_compiled) +
             "): install or update the NVIDIA driver to one that supports CUDA " +
             cuda_version_str(r.runtime_version_compiled);
    case cudaErrorNoDevice:
      return no_device_reason(r, text.c_str());
    default:
      return text + " (cudaGetDeviceCount returned status " + std::to_string(status) + ")";
  }
}

/// nvidia-smi's spelling of a GPU UUID, so the two can be compared by eye.
std::string uuid_text(const cudaUUID_t& id) {
  const auto* b = reinterpret_cast<const unsigned char*>(id.bytes);
  char text[48];
  std::snprintf(text, sizeof text,
                "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
                b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
                b[14], b[15]);
  return text;
}

void fill_devices(GpuReport& r, int count) {
  int too_old = 0;
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, i) != cudaSuccess) {
      (void)cudaGetLastError();
      continue;
    }
    GpuDevice d;
    d.index = i;
    d.name = p.name;
    d.cc_major = p.major;
    d.cc_minor = p.minor;
    d.total_bytes = p.totalGlobalMem;
    char bus[32];
    std::snprintf(bus, sizeof bus, "%04x:%02x:%02x.0", p.pciDomainID, p.pciBusID, p.pciDeviceID);
    d.pci_bus_id = bus;
    d.uuid = uuid_text(p.uuid);
    if (p.major * 10 + p.minor < MIRROR_CUDA_MIN_ARCH) ++too_old;
    r.devices.push_back(d);
  }
  if (r.devices.empty()) {
    r.unavailable_reason = "cudaGetDeviceProperties failed for every visible device";
  } else if (too_old == static_cast<int>(r.devices.size())) {
    const GpuDevice& d = r.devices.front();
    r.unavailable_reason =
        "GPU " + d.name + " has compute capability " + std::to_string(d.cc_major) + "." +
        std::to_string(d.cc_minor) + ", below this build's lowest architecture " +
        std::to_string(MIRROR_CUDA_MIN_ARCH / 10) + "." +
        std::to_string(MIRROR_CUDA_MIN_ARCH % 10) +
        "; rebuild with -DCMAKE_CUDA_ARCHITECTURES=" + std::to_string(d.cc_major) +
        std::to_string(d.cc_minor);
  }
}

}  // namespace

GpuReport cuda_discover_gpus() {
  GpuReport r;
  r.built_with_cuda = true;
  try {
    r.runtime_version_compiled = CUDART_VERSION;
    if (cudaRuntimeGetVersion(&r.runtime_version) != cudaSuccess) r.runtime_version = 0;
    if (cudaDriverGetVersion(&r.driver_version) != cudaSuccess) r.driver_version = 0;
    r.cudnn_compiled = CUDNN_VERSION;
    r.cudnn_loaded = static_cast<int>(cudnnGetVersion());
    r.nccl_compiled = NCCL_VERSION_CODE;
    if (ncclGetVersion(&r.nccl_loaded) != ncclSuccess) r.nccl_loaded = 0;
    r.cublas_loaded = cublas_version();
    if (const char* v = std::getenv("CUDA_VISIBLE_DEVICES")) {
      r.cuda_visible_devices_set = true;
      r.cuda_visible_devices = v;
    }
    int count = 0;
    const cudaError_t status = cudaGetDeviceCount(&count);
    (void)cudaGetLastError();
    if (status != cudaSuccess) {
      r.unavailable_reason = reason_for(status, r);
    } else if (count == 0) {
      r.unavailable_reason = no_device_reason(r, "no CUDA-capable device is detected");
    } else {
      fill_devices(r, count);
    }
  } catch (const std::exception& e) {
    r.unavailable_reason = std::string("GPU discovery failed: ") + e.what();
  }
  return r;
}

}  // namespace mirror
