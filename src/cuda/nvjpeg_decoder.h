// defines: make_nvjpeg_decoder, the --decode gpu image decoder (nvJPEG), for the factory file.
#pragma once

#include <memory>

#include "mirror/data/image_decode.h"

namespace mirror::cuda {

/// nvJPEG on the calling thread's current CUDA device (PNG files go to the CPU decoder);
/// Unavailable with the reason when no CUDA device is visible.
std::shared_ptr<const data::ImageDecoder> make_nvjpeg_decoder();

}  // namespace mirror::cuda
