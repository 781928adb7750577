// defines: DeviceContext, everything the CUDA backend keeps per GPU: the compute and the
// communication stream, the cuBLAS and cuDNN handles bound to the compute stream, the
// convolution-algorithm cache, a pinned staging pool for host->device uploads and a device
// error word for kernels that validate their input.
//
// Note [Streams and devices]: every kernel, library call and copy the backend issues for a
// tensor on cuda:i goes to context(i).compute(), so work on one device runs in issue order
// and the caching allocator may hand a freed block to the next request at once (the next use
// is ordered after the last one on the same stream). Collectives run on context(i).comm()
// after waiting on an event recorded on the compute stream, and the compute stream waits on
// their completion event before it touches their buffers again (distributed/communicator.h's
// stream contract); a collective's Work keeps its tensors alive until then. A KernelSet call
// makes its tensors' device current on the calling thread and leaves it so (see use_device).
#pragma once

#include <array>
#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "cuda/device_mutex.h"
#include "cuda/handles.h"

namespace mirror::cuda {

/// Makes `device` current on this thread, calling cudaSetDevice only when it is not current
/// already. Never "restores" a previous device: that would create a CUDA context (hundreds of
/// MiB) on a GPU this process may not use, e.g. another rank's.
void use_device(int device);

/// cudaEventQuery as a bool: true when complete; false (with CUDA's "last error" cleared, so a
/// later launch check does not report it) while pending; throws on a real error.
bool event_done(cudaEvent_t event);

/// Key of the convolution-algorithm cache: kind (0 fwd, 1 bwd data, 2 bwd filter) and the
/// problem geometry n, c, h, w, o, kh, kw, stride_h, stride_w, pad_h, pad_w.
using ConvKey = std::array<int, 12>;
/// A cached convolution choice: the graph-API execution plan (Note [Convolution plans],
/// conv_plan.h) or, without one, the legacy algorithm and the cuDNN math type it runs in (Note
/// [Algorithm choice], algo_choice.h); the workspace it needs once that has been asked (cuDNN 9
/// takes about 150 us of host time per legacy workspace query); and the problem's legacy
/// descriptors with that math type set (conv.cpp's ConvDescs: made once per shape and
/// direction, not per call).
struct ConvAlgo {
  int algo = 0;
  int math_type = 0;
  std::size_t workspace = 0;  // bytes, when `sized`
  bool sized = false;
  std::shared_ptr<void> descs;
  std::shared_ptr<void> plan;  // non-null: run through the graph API
};

class DeviceContext {
 public:
  explicit DeviceContext(int device);
  DeviceContext(const DeviceContext&) = delete;
  DeviceContext& operator=(const DeviceContext&) = delete;

  int device() const { return device_; }
  cudaStream_t compute() const { return compute_; }
  cudaStream_t comm() const { return comm_; }
  /// The stream of the express lane's collectives (Communicator::express()): small ones that
  /// must not queue behind the gradient buckets on comm().
  cudaStream_t express() const { return express_; }
  cublasHandle_t cublas() const { return cublas_; }
  cudnnHandle_t cudnn() const { return cudnn_; }
  /// Held by each KernelSet call for this device: cuBLAS/cuDNN handles and the caches below
  /// are not safe for concurrent use by several host threads. Never held across a wait for the
  /// device, nor together with another device's (Note [No device lock across a wait]).
  DeviceMutex& mutex() { return mutex_; }
  std::map<ConvKey, ConvAlgo>& conv_algos() { return conv_algos_; }

  /// Copies host memory to the device in compute-stream order. Small copies go through a
  /// pinned staging block and return at once (the caller may reuse `src` immediately);
  /// copies above the staging limit wait for completion.
  void upload(void* dst, const void* src, std::size_t bytes);
  /// Copies device memory to the host after all queued compute work; blocks until done, with
  /// this device's lock released meanwhile (Note [No device lock across a wait]).
  void download(void* dst, const void* src, std::size_t bytes);
  /// Waits for the compute and the communication stream.
  void synchronize();

  /// A device int that validating kernels set to a nonzero code; read_and_clear_error()
  /// waits for the compute stream, returns the code and zeroes it for the next call.
  int* error_word() const { return error_word_; }
  int read_and_clear_error();

 private:
  struct Staging {
    void* host = nullptr;
    std::size_t bytes = 0;
    Event done;  // recorded after the copy out of `host` was enqueued
  };
  Staging* staging_block(std::size_t bytes);

  int device_;
  Stream compute_, comm_, express_;
  CublasHandle cublas_;
  CudnnHandle cudnn_;
  DeviceMutex mutex_;
  std::map<ConvKey, ConvAlgo> conv_algos_;
  std::vector<std::unique_ptr<Staging>> staging_;
  std::size_t staging_bytes_ = 0;
  int* error_word_ = nullptr;
};

/// The context of cuda:`device`, created on first use (streams, handles; this creates the
/// device's CUDA context). Makes the device current. Throws InvalidArgument for an index
/// this process cannot see. Contexts live until the process exits (see context.cpp).
DeviceContext& context(int device);

}  // namespace mirror::cuda
