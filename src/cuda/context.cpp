// DeviceContext: per-GPU streams, library handles, staging uploads and the error word.
#include "cuda/context.h"

#include <cstring>
#include <string>

#include "mirror/error.h"
#include "mirror/gpu.h"

namespace mirror::cuda {
namespace {

// Uploads up to this size are staged through pinned memory and return at once; the pool
// holds at most kStagingCap bytes (the steady state reuses the same few blocks).
constexpr std::size_t kMaxStaged = 16u << 20;
constexpr std::size_t kStagingCap = 64u << 20;
constexpr std::size_t kMinStagingBlock = 64u << 10;

std::size_t round_pow2(std::size_t n) {
  std::size_t p = kMinStagingBlock;
  while (p < n) p <<= 1;
  return p;
}

}  // namespace

void use_device(int device) {
  int current = -1;
  MIRROR_CUDA_CHECK(cudaGetDevice(&current));
  if (current != device) MIRROR_CUDA_CHECK(cudaSetDevice(device));
}

bool event_done(cudaEvent_t event) {
  const cudaError_t status = cudaEventQuery(event);
  if (status == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return false;
  }
  MIRROR_CUDA_CHECK(status);
  return true;
}

DeviceContext::DeviceContext(int device) : device_(device) {
  use_device(device);
  compute_ = make_stream();
  comm_ = make_stream();
  express_ = make_stream();
  cublasHandle_t blas = nullptr;
  MIRROR_CUBLAS_CHECK(cublasCreate(&blas));
  cublas_ = CublasHandle(blas);
  MIRROR_CUBLAS_CHECK(cublasSetStream(cublas_, compute_));
  // FP32 stays FP32: no TF32 tensor-core rounding, so results track the CPU backend.
  MIRROR_CUBLAS_CHECK(cublasSetMathMode(cublas_, CUBLAS_DEFAULT_MATH));
  cudnnHandle_t dnn = nullptr;
  MIRROR_CUDNN_CHECK(cudnnCreate(&dnn));
  cudnn_ = CudnnHandle(dnn);
  MIRROR_CUDNN_CHECK(cudnnSetStream(cudnn_, compute_));
  MIRROR_CUDA_CHECK(cudaMalloc(&error_word_, sizeof(int)));
  MIRROR_CUDA_CHECK(cudaMemsetAsync(error_word_, 0, sizeof(int), compute_));
}

DeviceContext::Staging* DeviceContext::staging_block(std::size_t bytes) {
  // A block whose last copy has completed (a never-recorded event also reports success).
  for (auto& s : staging_) {
    if (s->bytes >= bytes && event_done(s->done)) return s.get();
  }
  const std::size_t size = round_pow2(bytes);
  if (staging_bytes_ + size <= kStagingCap) {
    auto s = std::make_unique<Staging>();
    MIRROR_CUDA_CHECK(cudaHostAlloc(&s->host, size, cudaHostAllocDefault));
    s->bytes = size;
    s->done = make_event();
    staging_bytes_ += size;
    staging_.push_back(std::move(s));
    return staging_.back().get();
  }
  // Pool full: the copy goes unstaged. Waiting here for a block would block on the device with
  // the lock held (Note [No device lock across a wait]).
  return nullptr;
}

void DeviceContext::upload(void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0) return;
  use_device(device_);
  Event done;
  {
    std::lock_guard<DeviceMutex> lock(mutex_);  // the staging pool and the stream order
    if (Staging* s = bytes <= kMaxStaged ? staging_block(bytes) : nullptr) {
      std::memcpy(s->host, src, bytes);
      MIRROR_CUDA_CHECK(cudaMemcpyAsync(dst, s->host, bytes, cudaMemcpyHostToDevice, compute_));
      MIRROR_CUDA_CHECK(cudaEventRecord(s->done, compute_));
      return;
    }
    // Large (or unstageable) copy: the source must stay valid until the DMA has read it,
    // which only a wait guarantees for memory we do not own.
    done = make_event();
    MIRROR_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, compute_));
    MIRROR_CUDA_CHECK(cudaEventRecord(done, compute_));
  }
  wait_unlocked(mutex_, [&] { MIRROR_CUDA_CHECK(cudaEventSynchronize(done)); });
}

void DeviceContext::download(void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0) return;
  use_device(device_);
  Event done = make_event();
  {
    std::lock_guard<DeviceMutex> lock(mutex_);
    MIRROR_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, compute_));
    MIRROR_CUDA_CHECK(cudaEventRecord(done, compute_));
  }
  // Note [No device lock across a wait]: the copy may wait for a collective that another
  // thread's work on this device must first let through.
  wait_unlocked(mutex_, [&] { MIRROR_CUDA_CHECK(cudaEventSynchronize(done)); });
}

void DeviceContext::synchronize() {
  use_device(device_);
  MIRROR_CUDA_CHECK(cudaStreamSynchronize(compute_));
  MIRROR_CUDA_CHECK(cudaStreamSynchronize(comm_));
  MIRROR_CUDA_CHECK(cudaStreamSynchronize(express_));
}

int DeviceContext::read_and_clear_error() {
  // The download lets go of the lock while it waits; the error word is meant for one thread per
  // device (its replica's), which is the only one that runs validating kernels on it.
  int code = 0;
  download(&code, error_word_, sizeof code);
  if (code != 0) MIRROR_CUDA_CHECK(cudaMemsetAsync(error_word_, 0, sizeof(int), compute_));
  return code;
}

DeviceContext& context(int device) {
  // Note [Leaked contexts]: contexts are never destroyed. Static destructors run after the CUDA
  // runtime may have begun unloading, when destroying streams and handles fails noisily; the
  // driver releases everything at process exit anyway.
  constexpr int kMaxDevices = 64;
  static std::mutex mutex;
  static DeviceContext* contexts[kMaxDevices] = {};
  const GpuReport& report = discover_gpus();
  MIRROR_CHECK(report.usable(), Unavailable,
               "device cuda:" + std::to_string(device) +
                   " requested, but no GPU can be used: " + report.unavailable_reason);
  static const int count = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) n = 0;
    (void)cudaGetLastError();
    return n;
  }();
  MIRROR_CHECK(device >= 0 && device < count && device < kMaxDevices, InvalidArgument,
               "device cuda:" + std::to_string(device) + " does not exist: this process sees " +
                   std::to_string(count) +
                   " CUDA device(s) (check CUDA_VISIBLE_DEVICES and run mirror-doctor)");
  std::lock_guard<std::mutex> lock(mutex);
  if (contexts[device] == nullptr) contexts[device] = new DeviceContext(device);
  use_device(device);
  return *contexts[device];
}

}  // namespace mirror::cuda
