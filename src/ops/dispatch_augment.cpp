// ops.h augment_forward / augment_backward: check shapes, dtypes and devices once, then call the
// device's KernelSet (CPU: cpu_augment.cpp, CUDA: augment.cu).
#include "backend.h"
#include "mirror/ops.h"
#include "mirror/ops_augment.h"

namespace mirror::ops {
namespace {

void check(const char* op, const Tensor& x, const Tensor& sample_ids) {
  MIRROR_CHECK(x.defined() && x.rank() == 4, InvalidArgument,
               std::string(op) + ": expected images [N, C, H, W], got " +
                   (x.defined() ? x.str() : std::string("an undefined tensor")));
  MIRROR_CHECK(x.dtype() == DType::kFloat32 || x.dtype() == DType::kFloat64, InvalidArgument,
               std::string(op) + ": expected float32 or float64 images, got " + x.str());
  MIRROR_CHECK(sample_ids.defined() && sample_ids.dtype() == DType::kInt64 &&
                   sample_ids.rank() == 1 && sample_ids.dim(0) == x.dim(0) &&
                   sample_ids.device() == x.device(),
               InvalidArgument,
               std::string(op) + ": expected sample ids int64 [" + std::to_string(x.dim(0)) +
                   "] on " + x.device().str() + ", got " +
                   (sample_ids.defined() ? sample_ids.str() : std::string("none")));
}

/// The output's shape: x's, or the crop's window.
Shape output_shape(const ImageAugment& a, const Tensor& x) {
  if (a.kind != ImageAugment::Kind::kCrop) return x.shape();
  MIRROR_CHECK(a.crop_height >= 1 && a.crop_width >= 1 && a.crop_height <= x.dim(2) &&
                   a.crop_width <= x.dim(3),
               InvalidArgument,
               "augment: a crop of " + std::to_string(a.crop_height) + "x" +
                   std::to_string(a.crop_width) + " does not fit in " + x.str());
  return {x.dim(0), x.dim(1), a.crop_height, a.crop_width};
}

}  // namespace

Tensor augment_forward(const ImageAugment& a, const Tensor& x, std::uint64_t seed,
                       const Tensor& sample_ids) {
  check("augment_forward", x, sample_ids);
  const Shape out = output_shape(a, x);
  if (x.numel() == 0) return Tensor::zeros(out, x.dtype(), x.device());
  return kernels_for(x.device()).augment_forward(a, x, seed, sample_ids);
}

Tensor augment_backward(const ImageAugment& a, const Tensor& x, const Tensor& dy,
                        std::uint64_t seed, const Tensor& sample_ids) {
  check("augment_backward", x, sample_ids);
  const Shape out = output_shape(a, x);
  MIRROR_CHECK(
      dy.defined() && dy.shape() == out && dy.dtype() == x.dtype() && dy.device() == x.device(),
      InvalidArgument,
      "augment_backward: dy must have the output's shape " + shape_str(out) + ", got " +
          (dy.defined() ? dy.str() : std::string("an undefined tensor")));
  if (x.numel() == 0) return Tensor::zeros(x.shape(), x.dtype(), x.device());
  return kernels_for(x.device()).augment_backward(a, x, dy, seed, sample_ids);
}

}  // namespace mirror::ops
