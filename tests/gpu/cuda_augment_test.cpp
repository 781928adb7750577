// Keras's augmentation layers' ops (ops_augment.h) on cuda:0 against the CPU backend: the same
// src/math functions on both sides (math/random_augment.h), so the draws and the taps agree;
// tolerances: rtol 1e-6 for the resampling (float products of the taps, CUDA's sinf/cosf vs
// glibc's in the rotation) and the colour layers, 1e-5 for the adjoint's scatter sums and the
// contrast's plane sums. Without a usable GPU every test skips with discover_gpus()'s reason.
#include <gtest/gtest.h>

#include <vector>

#include "gpu/gpu_test_util.h"
#include "mirror/ops_augment.h"

namespace mirror {
namespace {

using testing::expect_close;
using testing::GpuTest;
using testing::random_tensor;

class CudaAugment : public GpuTest {};

TEST_F(CudaAugment, EveryKindAndFillMatchesTheCpu) {
  using K = ops::ImageAugment::Kind;
  using Fill = ops::ImageAugment::Fill;
  const Tensor x = random_tensor({3, 2, 9, 11}, 1), dy = random_tensor({3, 2, 9, 11}, 2);
  const Tensor ids = Tensor::from_vector(std::vector<std::int64_t>{4, 70, 123}, {3});
  for (K kind : {K::kFlip, K::kTranslation, K::kZoom, K::kRotation, K::kContrast, K::kBrightness,
                 K::kCrop}) {
    for (Fill fill : {Fill::kReflect, Fill::kWrap, Fill::kConstant, Fill::kNearest}) {
      for (bool nearest : {false, true}) {
        SCOPED_TRACE(static_cast<int>(kind) * 8 + static_cast<int>(fill) * 2 + nearest);
        ops::ImageAugment a;
        a.kind = kind;
        a.flip_horizontal = a.flip_vertical = true;
        a.lower[0] = a.lower[1] = -0.3;
        a.upper[0] = a.upper[1] = 0.4;
        a.fill = fill;
        a.nearest = nearest;
        a.fill_value = 0.5;
        a.value_lo = -0.7;
        a.value_hi = 0.8;
        a.crop_height = 6;  // kCrop: a 6 x 8 window of the 9 x 11 image
        a.crop_width = 8;
        const Tensor g = kind == K::kCrop ? random_tensor({3, 2, 6, 8}, 3) : dy;
        expect_close(ops::augment_forward(a, x.to(gpu()), 17, ids.to(gpu())),
                     ops::augment_forward(a, x, 17, ids), 1e-6, 1e-6, "augment_forward");
        expect_close(ops::augment_backward(a, x.to(gpu()), g.to(gpu()), 17, ids.to(gpu())),
                     ops::augment_backward(a, x, g, 17, ids), 1e-5, 1e-6, "augment_backward");
      }
    }
  }
}

}  // namespace
}  // namespace mirror
