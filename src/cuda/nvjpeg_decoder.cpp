// NvjpegDecoder (--decode gpu): JPEG files decoded by nvJPEG on one CUDA device, copied back to
// the host for the loader's batch. Compiled only when nvJPEG is found (src/CMakeLists.txt).
#include "cuda/nvjpeg_decoder.h"

#include <cuda_runtime.h>
#include <nvjpeg.h>

#include <cstring>

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
/// loader reports the sample); anything else is the library's or the device's (Error).
void check_nvjpeg(nvjpegStatus_t s, const char* call, const std::string& file) {
  if (s == NVJPEG_STATUS_SUCCESS) return;
  const std::string what = std::string(call) + " returned " + nvjpeg_status_name(s);
  if (s == NVJPEG_STATUS_BAD_JPEG || s == NVJPEG_STATUS_JPEG_NOT_SUPPORTED)
    throw DataError(file + ": corrupt or truncated JPEG (nvJPEG: " + what + ")");
  throw Error("nvJPEG failed" + (file.empty() ? std::string() : " on " + file) + ": " + what);
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

nvjpegHandle_t handle_of(void* h) { return static_cast<nvjpegHandle_t>(h); }

}  // namespace

struct NvjpegDecoder::Slot {
  nvjpegJpegState_t state = nullptr;
  cudaStream_t stream = nullptr;
  unsigned char* buffer = nullptr;  // device
  std::size_t capacity = 0;
};

std::unique_ptr<NvjpegDecoder> NvjpegDecoder::create() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  MIRROR_CHECK(status == cudaSuccess && count > 0, Unavailable,
               std::string("--decode gpu needs a CUDA device: ") +
                   (status == cudaSuccess ? "none is visible" : cudaGetErrorString(status)));
  std::unique_ptr<NvjpegDecoder> d(new NvjpegDecoder());
  MIRROR_CUDA_CHECK(cudaGetDevice(&d->device_));
  nvjpegHandle_t handle = nullptr;
  check_nvjpeg(nvjpegCreateSimple(&handle), "nvjpegCreateSimple", "");
  d->handle_ = handle;
  return d;
}

NvjpegDecoder::~NvjpegDecoder() {
  for (const auto& s : free_) {
    if (s->buffer) MIRROR_CUDA_WARN(cudaFree(s->buffer));
    if (s->stream) MIRROR_CUDA_WARN(cudaStreamDestroy(s->stream));
    if (s->state) nvjpegJpegStateDestroy(s->state);
  }
  if (handle_) nvjpegDestroy(handle_of(handle_));
}

std::shared_ptr<NvjpegDecoder::Slot> NvjpegDecoder::take() const {
  {
    std::lock_guard lock(mutex_);
    if (!free_.empty()) {
      auto s = std::move(free_.back());
      free_.pop_back();
      return s;
    }
  }
  auto s = std::make_shared<Slot>();
  check_nvjpeg(nvjpegJpegStateCreate(handle_of(handle_), &s->state), "nvjpegJpegStateCreate", "");
  MIRROR_CUDA_CHECK(cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking));
  return s;
}

void NvjpegDecoder::give_back(std::shared_ptr<Slot> slot) const {
  std::lock_guard lock(mutex_);
  free_.push_back(std::move(slot));
}

JpegPixels NvjpegDecoder::decode(std::span<const std::uint8_t> bytes, int channels,
                                 const std::string& name) const {
  MIRROR_CHECK(channels == 1 || channels == 3, InvalidArgument,
               "NvjpegDecoder::decode: channels must be 1 or 3");
  check_complete(bytes, name);
  MIRROR_CUDA_CHECK(cudaSetDevice(device_));
  auto slot = take();
  try {
    JpegPixels out = decode_with(*slot, bytes, channels, name);
    give_back(std::move(slot));
    return out;
  } catch (...) {
    give_back(std::move(slot));
    throw;
  }
}

JpegPixels NvjpegDecoder::decode_with(Slot& slot, std::span<const std::uint8_t> bytes,
                                      int channels, const std::string& name) const {
  int components = 0;
  nvjpegChromaSubsampling_t subsampling{};
  int widths[NVJPEG_MAX_COMPONENT] = {}, heights[NVJPEG_MAX_COMPONENT] = {};
  check_nvjpeg(nvjpegGetImageInfo(handle_of(handle_), bytes.data(), bytes.size(), &components,
                                  &subsampling, widths, heights),
               "nvjpegGetImageInfo", name);
  JpegPixels out;
  out.width = widths[0];
  out.height = heights[0];
  out.channels = channels;
  const std::size_t size = static_cast<std::size_t>(out.width) * out.height * channels;
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
  image.pitch[0] = static_cast<unsigned int>(out.width * channels);
  // Greyscale decodes to the luma plane; colour to interleaved RGB, as the CPU decoder gives it.
  const nvjpegOutputFormat_t format = channels == 1 ? NVJPEG_OUTPUT_Y : NVJPEG_OUTPUT_RGBI;
  check_nvjpeg(nvjpegDecode(handle_of(handle_), slot.state, bytes.data(), bytes.size(), format,
                            &image, slot.stream),
               "nvjpegDecode", name);
  out.pixels.resize(size);
  MIRROR_CUDA_CHECK(cudaMemcpyAsync(out.pixels.data(), slot.buffer, size, cudaMemcpyDeviceToHost,
                                    slot.stream));
  MIRROR_CUDA_CHECK(cudaStreamSynchronize(slot.stream));
  return out;
}

}  // namespace mirror::cuda
