// CudaKernels' entry points for Keras's augmentation layers (augment.cu).
#include "cuda/augment_kernels.h"
#include "cuda/cuda_kernels.h"
#include "ops/augment_args.h"

namespace mirror::cuda {

Tensor CudaKernels::augment_forward(const ops::ImageAugment& aug, const Tensor& x,
                                    std::uint64_t seed, const Tensor& sample_ids) {
  OpScope op(x);
  const math::AugmentArgs args = ops::augment_args(aug, x, seed);
  Tensor y = Tensor::empty({x.dim(0), args.channels, args.out_height, args.out_width}, x.dtype(),
                           x.device());
  cuda::augment_forward(args, f32(x, "augment_forward"), f32(y, "augment_forward"),
                        sample_ids.data<std::int64_t>(), x.dim(0), op.stream());
  return y;
}

Tensor CudaKernels::augment_backward(const ops::ImageAugment& aug, const Tensor& x,
                                     const Tensor& dy, std::uint64_t seed,
                                     const Tensor& sample_ids) {
  OpScope op(x);
  Tensor dx = Tensor::zeros(x.shape(), x.dtype(), x.device());
  cuda::augment_backward(ops::augment_args(aug, x, seed), f32(x, "augment_backward"),
                         f32(dy, "augment_backward"), f32(dx, "augment_backward"),
                         sample_ids.data<std::int64_t>(), x.dim(0), op.stream());
  return dx;
}

}  // namespace mirror::cuda
