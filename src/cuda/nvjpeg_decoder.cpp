// --decode gpu: JPEG files decoded by nvJPEG on the rank's current CUDA device; PNG (which nvJPEG
// does not read) goes to the CPU decoder. Compiled only when nvJPEG is found (src/CMakeLists.txt)
// and registered by the factory file (Note [Backend choice], src/backend_registry.cpp).
//
// Note [GPU decode slots]: the loader's worker threads decode at the same time, and an nvJPEG
// decode state, its stream and its device buffer must not be shared by two decodes in flight. So
// each decode borrows a slot (state, stream, buffer) from a pool and returns it; the pool grows
// to the number of threads that decode at once and never shrinks while the decoder lives.
#include "cuda/nvjpeg_decoder.h"

#include <cuda_runtime.h>
#include <nvjpeg.h>

#include <cstring>
#include <mutex>
#include <vector>

#include "cuda/check.h"
#include "mirror/error.h"

namespace mirror::cuda {
namespace {

const char* nvjpeg_status_name(nvjpegStatus_t s) {
  switch (s) {
    case NVJPEG_STATUS_NOT_INITIALIZED:
      return "NVJPEG_STATUS_NOT_INITIALIZED";
    case NVJPEG_STATUS_INVALID_PARAMETER:
      return "NVJPEG_STATUS_INVALID_PARAMETER";
    case NVJPEG_STATUS_BAD_JPEG:
      return "NVJPEG_STATUS_BAD_JPEG";
    case NVJPEG_STATUS_JPEG_NOT_SUPPORTED:
      return "NVJPEG_STATUS_JPEG_NOT_SUPPORTED";
    case NVJPEG_STATUS_ALLOCATOR_FAILURE:
      return "NVJPEG_STATUS_ALLOCATOR_FAILURE";
    case NVJPEG_STATUS_EXECUTION_FAILED:
      return "NVJPEG_STATUS_EXECUTION_FAILED";
    case NVJPEG_STATUS_ARCH_MISMATCH:
      return "NVJPEG_STATUS_ARCH_MISMATCH";
    case NVJPEG_STATUS_INTERNAL_ERROR:
      return "NVJPEG_STATUS_INTERNAL_ERROR";
    case NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED:
      return "NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED";
    default:
      return "an unknown nvJPEG status";
  }
}

/// A failed call on a file: a corrupt or unsupported JPEG is the file's fault (DataError, so the
/// sample is a BadSample); anything else is the library's or the device's (Error).
void check_nvjpeg(nvjpegStatus_t s, const char* call, const std::string& file) {
  if (s == NVJPEG_STATUS_SUCCESS) return;
  const std::string what = std::string(call) + " returned " + nvjpeg_status_name(s);
  if (s == NVJPEG_STATUS_BAD_JPEG || s == NVJPEG_STATUS_JPEG_NOT_SUPPORTED)
    throw DataError(file + ": corrupt or unsupported JPEG (nvJPEG: " + what + ")");
  throw Error("nvJPEG failed on " + (file.empty() ? std::string("setup") : file) + ": " + what);
}

/// nvJPEG decodes a truncated file without an error (the missing rows come out grey), where
/// libjpeg-turbo warns and the CPU decoder refuses it. A complete JPEG ends with the EOI marker
/// FF D9, possibly followed by a little padding: look for it in the last 4 KiB.
void check_complete(std::span<const std::uint8_t> bytes, const std::string& name) {
  const std::size_t from = bytes.size() > 4096 ? bytes.size() - 4096 : 0;
  for (std::size_t i = bytes.size(); i >= from + 2; --i) {
    if (bytes[i - 2] == 0xFF && bytes[i - 1] == 0xD9) return;
  }
  throw DataError(name + ": corrupt or truncated JPEG (no end-of-image marker FF D9 at its end)");
}

struct Slot {
  nvjpegJpegState_t state = nullptr;
  cudaStream_t stream = nullptr;
  unsigned char* buffer = nullptr;  // device
  std::size_t capacity = 0;
};

class NvjpegDecoder final : public data::ImageDecoder {
 public:
  NvjpegDecoder() {
    MIRROR_CUDA_CHECK(cudaGetDevice(&device_));
    check_nvjpeg(nvjpegCreateSimple(&handle_), "nvjpegCreateSimple", "");
  }
  ~NvjpegDecoder() override {
    for (Slot& s : free_) {
      if (s.buffer) MIRROR_CUDA_WARN(cudaFree(s.buffer));
      if (s.stream) MIRROR_CUDA_WARN(cudaStreamDestroy(s.stream));
      if (s.state) nvjpegJpegStateDestroy(s.state);
    }
    if (handle_) nvjpegDestroy(handle_);
  }
  NvjpegDecoder(const NvjpegDecoder&) = delete;
  NvjpegDecoder& operator=(const NvjpegDecoder&) = delete;

  std::string name() const override {
    return "gpu (nvJPEG on cuda:" + std::to_string(device_) + "; PNG on the CPU)";
  }

  data::DecodedImage decode(std::span<const std::uint8_t> bytes,
                            const std::string& name) const override {
    if (data::sniff_image(bytes) != data::ImageFormat::kJpeg)
      return data::cpu_image_decoder()->decode(bytes, name);
    // The header checks (size, a CMYK image) are the CPU path's, so both refuse the same files.
    const data::ImageHeader header = data::read_image_header(bytes, name);
    check_complete(bytes, name);
    MIRROR_CUDA_CHECK(cudaSetDevice(device_));
    Slot slot = take();
    try {
      data::DecodedImage out = decode_with(slot, bytes, name, header);
      give_back(slot);
      return out;
    } catch (...) {
      give_back(slot);
      throw;
    }
  }

 private:
  Slot take() const {
    {
      std::lock_guard lock(mutex_);
      if (!free_.empty()) {
        Slot s = free_.back();
        free_.pop_back();
        return s;
      }
    }
    Slot s;
    check_nvjpeg(nvjpegJpegStateCreate(handle_, &s.state), "nvjpegJpegStateCreate", "");
    MIRROR_CUDA_CHECK(cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking));
    return s;
  }
  void give_back(const Slot& s) const {
    std::lock_guard lock(mutex_);
    free_.push_back(s);
  }

  data::DecodedImage decode_with(Slot& slot, std::span<const std::uint8_t> bytes,
                                 const std::string& name, const data::ImageHeader& header) const {
    int components = 0;
    nvjpegChromaSubsampling_t subsampling{};
    int widths[NVJPEG_MAX_COMPONENT] = {}, heights[NVJPEG_MAX_COMPONENT] = {};
    check_nvjpeg(nvjpegGetImageInfo(handle_, bytes.data(), bytes.size(), &components,
                                    &subsampling, widths, heights),
                 "nvjpegGetImageInfo", name);
    data::DecodedImage out;
    out.width = widths[0];
    out.height = heights[0];
    out.channels = header.channels;
    const std::size_t size = static_cast<std::size_t>(out.width) * out.height * out.channels;
    if (slot.capacity < size) {
      if (slot.buffer) MIRROR_CUDA_CHECK(cudaFree(slot.buffer));
      slot.buffer = nullptr;
      slot.capacity = 0;
      MIRROR_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&slot.buffer), size));
      slot.capacity = size;
    }
    nvjpegImage_t image;
    std::memset(&image, 0, sizeof image);
    image.channel[0] = slot.buffer;
    image.pitch[0] = static_cast<unsigned int>(out.width * out.channels);
    // Greyscale files decode to their luma plane; colour ones to interleaved RGB, as the CPU
    // decoder gives them.
    const nvjpegOutputFormat_t format = out.channels == 1 ? NVJPEG_OUTPUT_Y : NVJPEG_OUTPUT_RGBI;
    check_nvjpeg(nvjpegDecode(handle_, slot.state, bytes.data(), bytes.size(), format, &image,
                              slot.stream),
                 "nvjpegDecode", name);
    out.pixels.resize(size);
    MIRROR_CUDA_CHECK(cudaMemcpyAsync(out.pixels.data(), slot.buffer, size,
                                      cudaMemcpyDeviceToHost, slot.stream));
    MIRROR_CUDA_CHECK(cudaStreamSynchronize(slot.stream));
    return out;
  }

  int device_ = 0;
  nvjpegHandle_t handle_ = nullptr;
  mutable std::mutex mutex_;
  mutable std::vector<Slot> free_;  // Note [GPU decode slots]
};

}  // namespace

std::shared_ptr<const data::ImageDecoder> make_nvjpeg_decoder() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  MIRROR_CHECK(status == cudaSuccess && count > 0, Unavailable,
               std::string("--decode gpu needs a CUDA device: ") +
                   (status == cudaSuccess ? "none is visible" : cudaGetErrorString(status)));
  return std::make_shared<const NvjpegDecoder>();
}

}  // namespace mirror::cuda
