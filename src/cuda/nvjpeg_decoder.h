// defines: NvjpegDecoder, JPEG files decoded by nvJPEG on a CUDA device (--decode gpu). The
// backend knows nothing of datasets: the factory file (src/backend_registry.cpp) wraps it as the
// data layer's GPU image decoder.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

namespace mirror::cuda {

/// Pixels as decoded: height x width x channels bytes, interleaved.
struct JpegPixels {
  int height = 0, width = 0, channels = 0;
  std::vector<std::uint8_t> pixels;
};

/// Note [GPU decode slots]: the loader's worker threads decode at the same time, and an nvJPEG
/// decode state, its stream and its device buffer must not be shared by two decodes in flight;
/// each decode borrows a slot from a pool, which grows to the number of threads decoding at once.
class NvjpegDecoder {
 public:
  /// On the calling thread's current device; Unavailable with the reason when no CUDA device is
  /// visible.
  static std::unique_ptr<NvjpegDecoder> create();
  ~NvjpegDecoder();
  NvjpegDecoder(const NvjpegDecoder&) = delete;
  NvjpegDecoder& operator=(const NvjpegDecoder&) = delete;

  int device() const { return device_; }
  /// Decodes a JPEG to `channels` (1: its luma plane, 3: interleaved RGB). DataError naming
  /// `name` for a corrupt, truncated (no end-of-image marker) or unsupported file; Error for a
  /// failure of the library or the device. Thread-safe.
  JpegPixels decode(std::span<const std::uint8_t> bytes, int channels,
                    const std::string& name) const;

 private:
  struct Slot;
  NvjpegDecoder() = default;
  std::shared_ptr<Slot> take() const;
  void give_back(std::shared_ptr<Slot> slot) const;
  JpegPixels decode_with(Slot& slot, std::span<const std::uint8_t> bytes, int channels,
                         const std::string& name) const;

  int device_ = 0;
  void* handle_ = nullptr;  // nvjpegHandle_t, kept out of this header
  mutable std::mutex mutex_;
  mutable std::vector<std::shared_ptr<Slot>> free_;
};

}  // namespace mirror::cuda
