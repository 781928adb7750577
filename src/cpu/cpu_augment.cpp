// The CPU kernels of Keras's augmentation layers (ops_augment.h): loops over src/math's
// per-pixel and per-plane functions (Note [Shared math]), one OpenMP task per sample and
// channel plane.
#include <vector>

#include "cpu/cpu_kernels.h"
#include "ops/augment_args.h"

namespace mirror::cpu {

Tensor CpuKernels::augment_forward(const ops::ImageAugment& aug, const Tensor& x,
                                   std::uint64_t seed, const Tensor& sample_ids) {
  return with_float(x, "augment_forward", [&](auto t) -> Tensor {
    using T = decltype(t);
    const math::AugmentArgs a = ops::augment_args(aug, x, seed);
    Tensor y =
        Tensor::empty({x.dim(0), a.channels, a.out_height, a.out_width}, x.dtype(), x.device());
    const T* xp = x.data<T>();
    T* yp = y.data<T>();
    const std::int64_t* ids = sample_ids.data<std::int64_t>();
    const std::int64_t planes = x.dim(0) * a.channels, hw = a.height * a.width;
    const std::int64_t out_hw = a.out_height * a.out_width;
#pragma omp parallel for schedule(static) if (x.numel() > kParallelGrain)
    for (std::int64_t p = 0; p < planes; ++p) {
      const std::int64_t id = ids[p / a.channels];
      const T* in = xp + p * hw;
      T* out = yp + p * out_hw;
      if (math::augment_is_affine(a)) {
        // A copy the stores to `out` cannot alias, so its fields stay in registers.
        const math::AugmentArgs local = a;
        float m[6];
        math::augment_affine(local, id, m);
        for (std::int64_t oy = 0; oy < local.out_height; ++oy)
          for (std::int64_t ox = 0; ox < local.out_width; ++ox)
            out[oy * local.out_width + ox] = math::affine_pixel<T>(local, m, in, oy, ox);
      } else if (a.kind == math::kAugmentContrast) {
        math::contrast_plane_forward<T>(a, math::contrast_factor(a, id), in, out);
      } else {
        const T delta = static_cast<T>(math::brightness_delta(a, id));
        for (std::int64_t i = 0; i < hw; ++i) out[i] = math::augment_clip(a, in[i] + delta);
      }
    }
    return y;
  });
}

Tensor CpuKernels::augment_backward(const ops::ImageAugment& aug, const Tensor& x, const Tensor& dy,
                                    std::uint64_t seed, const Tensor& sample_ids) {
  return with_float(x, "augment_backward", [&](auto t) -> Tensor {
    using T = decltype(t);
    const math::AugmentArgs a = ops::augment_args(aug, x, seed);
    Tensor dx = Tensor::zeros(x.shape(), x.dtype(), x.device());
    const T* xp = x.data<T>();
    const T* g = dy.data<T>();
    T* out = dx.data<T>();
    const std::int64_t* ids = sample_ids.data<std::int64_t>();
    const std::int64_t planes = x.dim(0) * a.channels, hw = a.height * a.width;
    const std::int64_t out_hw = a.out_height * a.out_width;
#pragma omp parallel for schedule(static) if (x.numel() > kParallelGrain)
    for (std::int64_t p = 0; p < planes; ++p) {
      const std::int64_t id = ids[p / a.channels];
      if (math::augment_is_affine(a)) {
        float m[6];
        math::augment_affine(a, id, m);
        math::affine_plane_backward<T>(a, m, g + p * out_hw, out + p * hw);
      } else if (a.kind == math::kAugmentContrast) {
        math::contrast_plane_backward<T>(a, math::contrast_factor(a, id), xp + p * hw, g + p * hw,
                                         out + p * hw);
      } else {
        const T delta = static_cast<T>(math::brightness_delta(a, id));
        for (std::int64_t i = p * hw; i < (p + 1) * hw; ++i)
          out[i] = math::augment_inside(a, xp[i] + delta) ? g[i] : T(0);
      }
    }
    return dx;
  });
}

}  // namespace mirror::cpu
