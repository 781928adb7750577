// The one factory file (Note [Backend choice]): the only file compiled with MIRROR_WITH_CUDA.
// It registers the backends this binary was built with into the core's table (src/backend.h,
// Note [Backend table]) and their collectives into the distributed layer's table
// (distributed/device_collectives.h), and answers GPU discovery. Everything else is
// backend-neutral: adding a backend means one more block here (and its CMake sources).
#include "backend.h"
#include "cpu/cpu_backend.h"
#include "distributed/device_collectives.h"
#include "mirror/error.h"
#include "mirror/gpu.h"
#include "mirror/data/image_decode.h"
#if MIRROR_WITH_CUDA
#include "cuda/cuda_backend.h"
#include "distributed/cuda/nccl_collectives.h"
#endif
#if MIRROR_WITH_NVJPEG
#include "cuda/nvjpeg_decoder.h"
#endif

namespace mirror {

#if MIRROR_WITH_NVJPEG
namespace {
/// The data layer's view of nvJPEG: JPEG on the GPU with the CPU decoder's header checks (so both
/// refuse the same files), PNG on the CPU.
class GpuImageDecoder final : public data::ImageDecoder {
 public:
  GpuImageDecoder() : nvjpeg_(cuda::NvjpegDecoder::create()) {}
  std::string name() const override {
    return "gpu (nvJPEG on cuda:" + std::to_string(nvjpeg_->device()) + "; PNG on the CPU)";
  }
  data::DecodedImage decode(std::span<const std::uint8_t> bytes,
                            const std::string& name) const override {
    if (data::sniff_image(bytes) != data::ImageFormat::kJpeg)
      return data::cpu_image_decoder()->decode(bytes, name);
    const data::ImageHeader header = data::read_image_header(bytes, name);
    cuda::JpegPixels p = nvjpeg_->decode(bytes, header.channels, name);
    return {p.height, p.width, p.channels, std::move(p.pixels)};
  }

 private:
  std::unique_ptr<cuda::NvjpegDecoder> nvjpeg_;
};

std::shared_ptr<const data::ImageDecoder> make_gpu_image_decoder() {
  return std::make_shared<const GpuImageDecoder>();
}
}  // namespace
#endif

void register_builtin_backends() {
  Backend cpu;
  cpu.name = "cpu";
  cpu.kernels = &cpu_kernels;
  cpu.raw_memory = [](int) { return make_cpu_raw_memory(); };
  register_backend(DeviceType::kCpu, std::move(cpu));

  Backend cuda;
  cuda.name = "cuda";
#if MIRROR_WITH_CUDA
  cuda.kernels = &cuda_kernels;
  cuda.raw_memory = &make_cuda_raw_memory;
  cuda.proc = &cuda_backend_proc;
  dist::register_device_collectives(DeviceType::kCuda, dist::nccl_collectives());
#else
  cuda.unavailable =
      "this Mirror was built without CUDA (rebuild with -DMIRROR_CUDA=ON on a machine with the "
      "CUDA toolkit)";
#endif
  register_backend(DeviceType::kCuda, std::move(cuda));

  // --decode gpu (mirror/data/image_decode.h).
#if MIRROR_WITH_NVJPEG
  data::register_gpu_image_decoder(&make_gpu_image_decoder, "");
#elif MIRROR_WITH_CUDA
  data::register_gpu_image_decoder(
      nullptr, "this Mirror was built without nvJPEG (scripts/install_nvjpeg.sh installs it; "
               "then build again); decode with --decode cpu");
#else
  data::register_gpu_image_decoder(
      nullptr, "this Mirror was built without CUDA, so without nvJPEG; decode with --decode cpu");
#endif
}

const GpuReport& discover_gpus() {
  static const GpuReport report = [] {
#if MIRROR_WITH_CUDA
    return cuda_discover_gpus();
#else
    GpuReport r;
    r.unavailable_reason =
        "this Mirror was built without CUDA (no nvcc/CUDA toolkit at build time, or "
        "-DMIRROR_CUDA=OFF)";
    return r;
#endif
  }();
  return report;
}

}  // namespace mirror
