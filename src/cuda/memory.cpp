// CUDA memory: the RawMemory behind each GPU's CachingAllocator (cudaMalloc/cudaFree; the
// growth / preallocate / limit policies and the OutOfMemory message are the shared
// CachingAllocator's). Page-locked host buffers are the collectives' (pinned_host_buffer.cpp).
#include <cuda_runtime.h>

#include <string>

#include "cuda/context.h"
#include "cuda/cuda_backend.h"
#include "mirror/error.h"
#include "mirror/gpu.h"

namespace mirror {
namespace {

void require_usable(int device, const char* what) {
  const GpuReport& report = discover_gpus();
  MIRROR_CHECK(report.usable(), Unavailable,
               std::string(what) + " on cuda:" + std::to_string(device) +
                   " requested, but no GPU can be used: " + report.unavailable_reason);
  MIRROR_CHECK(device >= 0 && device < static_cast<int>(report.devices.size()), InvalidArgument,
               std::string(what) + ": device cuda:" + std::to_string(device) +
                   " does not exist; this process sees " + std::to_string(report.devices.size()) +
                   " GPU(s) (check CUDA_VISIBLE_DEVICES)");
}

class CudaRawMemory final : public RawMemory {
 public:
  explicit CudaRawMemory(int device)
      : device_(device), total_(discover_gpus().devices.at(device).total_bytes) {}

  void* allocate(std::size_t bytes) override {
    cuda::use_device(device_);
    void* p = nullptr;
    const cudaError_t status = cudaMalloc(&p, bytes);
    if (status == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();  // not sticky, but clear it so later checks stay accurate
      return nullptr;            // the CachingAllocator frees its cache, retries, then throws
    }
    MIRROR_CUDA_CHECK(status);
    return p;
  }

  void deallocate(void* ptr, std::size_t) noexcept override {
    int current = -1;
    if (cudaGetDevice(&current) == cudaSuccess && current != device_) (void)cudaSetDevice(device_);
    const cudaError_t status = cudaFree(ptr);
    // At process exit the runtime may already be unloading; the driver reclaims everything.
    if (status != cudaErrorCudartUnloading) MIRROR_CUDA_WARN(status);
    (void)cudaGetLastError();
  }

  std::size_t free_bytes() const override {
    cuda::use_device(device_);
    std::size_t free = 0, total = 0;
    MIRROR_CUDA_CHECK(cudaMemGetInfo(&free, &total));
    return free;
  }

  std::size_t total_bytes() const override { return total_; }

 private:
  int device_;
  std::size_t total_;
};

}  // namespace

std::unique_ptr<RawMemory> make_cuda_raw_memory(int device_index) {
  require_usable(device_index, "memory");
  return std::make_unique<CudaRawMemory>(device_index);
}

}  // namespace mirror
