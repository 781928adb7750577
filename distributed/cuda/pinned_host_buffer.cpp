// Pinned host buffers (dist::HostBuffer): page-locked memory for asynchronous transfers
// between host and one GPU, with the event of its last transfer.
#include <cuda_runtime.h>

#include <string>

#include "cuda/check.h"
#include "cuda/context.h"
#include "distributed/cuda/nccl_collectives.h"
#include "distributed/host_transfer_check.h"
#include "mirror/error.h"
#include "mirror/gpu.h"

namespace mirror::dist {
namespace {

/// cudaHostAlloc'd memory plus the event of its last transfer.
class PinnedHostBuffer final : public HostBuffer {
 public:
  PinnedHostBuffer(std::size_t bytes, int device) : bytes_(bytes), home_(Device::cuda(device)) {
    cuda::use_device(device);  // page-locked memory is registered with this device's context
    MIRROR_CUDA_CHECK(cudaHostAlloc(&data_, bytes ? bytes : 1, cudaHostAllocPortable));
    done_ = cuda::make_event();
  }
  ~PinnedHostBuffer() override {
    if (done_) MIRROR_CUDA_WARN(cudaEventSynchronize(done_));  // no DMA into freed memory
    const cudaError_t status = cudaFreeHost(data_);
    if (status != cudaErrorCudartUnloading) MIRROR_CUDA_WARN(status);
  }
  void* data() const override { return data_; }
  std::size_t bytes() const override { return bytes_; }
  bool pinned() const override { return true; }

  void copy_to(Tensor& dst) override {
    check(dst, "copy_to");
    cuda::DeviceContext& ctx = cuda::context(dst.device().index);
    std::lock_guard<cuda::DeviceMutex> lock(ctx.mutex());
    MIRROR_CUDA_CHECK(cudaMemcpyAsync(dst.raw_data(), data_, dst.nbytes(), cudaMemcpyHostToDevice,
                                      ctx.compute()));
    MIRROR_CUDA_CHECK(cudaEventRecord(done_, ctx.compute()));
  }

  void copy_from(const Tensor& src) override {
    check(src, "copy_from");
    cuda::DeviceContext& ctx = cuda::context(src.device().index);
    std::lock_guard<cuda::DeviceMutex> lock(ctx.mutex());
    MIRROR_CUDA_CHECK(cudaMemcpyAsync(data_, src.raw_data(), src.nbytes(), cudaMemcpyDeviceToHost,
                                      ctx.compute()));
    MIRROR_CUDA_CHECK(cudaEventRecord(done_, ctx.compute()));
  }

  bool ready() override { return cuda::event_done(done_); }

  void wait() override { MIRROR_CUDA_CHECK(cudaEventSynchronize(done_)); }

 private:
  /// The tensor must be on this buffer's device: done_ belongs to it (Note in
  /// host_transfer_check.h), and its stream is the one the copy is ordered on.
  void check(const Tensor& t, const char* op) const {
    detail::check_pinned_transfer(op, t.str(), t.device(), t.nbytes(), home_, bytes_);
  }

  void* data_ = nullptr;
  std::size_t bytes_;
  Device home_;
  cuda::Event done_;
};

}  // namespace

std::unique_ptr<HostBuffer> make_pinned_host_buffer(std::size_t bytes, int device_index) {
  const GpuReport& report = discover_gpus();
  if (!report.usable()) return nullptr;  // ordinary memory then (make_host_buffer)
  MIRROR_CHECK(device_index >= 0 && device_index < static_cast<int>(report.devices.size()),
               InvalidArgument,
               "pinned host memory: device cuda:" + std::to_string(device_index) +
                   " does not exist; this process sees " + std::to_string(report.devices.size()) +
                   " GPU(s) (check CUDA_VISIBLE_DEVICES)");
  return std::make_unique<PinnedHostBuffer>(bytes, device_index);
}

}  // namespace mirror::dist
