// The CUDA backend under the mixed-precision math modes (Note [GPU mixed precision],
// src/cuda/dense.cpp): gemm through cublasGemmEx with 16-bit tensor-core compute types and the
// convolutions under cuDNN's tensor-op math agree with the CPU's float32 results within the
// 16-bit types' rounding; a mode the GPU lacks is refused with the reason. Skipped without a GPU.
#include <gtest/gtest.h>

#include "gpu/gpu_test_util.h"
#include "mirror/ops.h"
#include "mirror/precision.h"

namespace mirror::testing {
namespace {

class CudaMixedPrecision : public GpuTest {
 protected:
  /// The modes this GPU runs (float32 always); the others must be refused with a reason.
  std::vector<MathMode> modes() {
    std::vector<MathMode> out{MathMode::kFloat32};
    for (MathMode m : {MathMode::kBFloat16, MathMode::kFloat16}) {
      const ops::MathSupport s = ops::math_support(gpu(), m);
      if (s.missing.empty()) {
        out.push_back(m);
      } else {
        EXPECT_NE(s.missing.find("compute capability"), std::string::npos) << s.missing;
      }
    }
    return out;
  }
  /// Relative rounding of the mode's operands: the tolerance scales with it. bf16 convolutions
  /// run as TF32 (finer), so bf16's bound covers them.
  static double unit(MathMode m) {
    return m == MathMode::kBFloat16 ? 1.0 / 256 : m == MathMode::kFloat16 ? 1.0 / 2048 : 1e-6;
  }
};

TEST_F(CudaMixedPrecision, GemmAgreesWithFloat32WithinTheModesRounding) {
  for (MathMode mode : modes()) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        const std::int64_t m = 33, n = 40, k = 256;
        const Tensor a = random_tensor(ta ? Shape{k, m} : Shape{m, k}, 1);
        const Tensor b = random_tensor(tb ? Shape{n, k} : Shape{k, n}, 2);
        Tensor c = Tensor::zeros({m, n}), cg = Tensor::zeros({m, n}, DType::kFloat32, gpu());
        ops::gemm(ta, tb, 1.0, a, b, 0.0, c);
        {
          ScopedMathMode scoped(mode);
          ops::gemm(ta, tb, 1.0, a.to(gpu()), b.to(gpu()), 0.0, cg);
        }
        // Each of the k products carries up to 2 units of rounding; random signs add up like
        // sqrt(k), 4 standard deviations of margin.
        expect_close(cg, c, 0, 8.0 * unit(mode) * std::sqrt(double(k)) + 1e-5,
                     std::string(math_mode_name(mode)) + " gemm ta=" + std::to_string(ta) +
                         " tb=" + std::to_string(tb));
      }
    }
  }
}

TEST_F(CudaMixedPrecision, ConvolutionsAgreeWithFloat32WithinTheModesRounding) {
  const Tensor x = random_tensor({4, 16, 12, 12}, 3), w = random_tensor({32, 16, 3, 3}, 4);
  const Tensor bias = random_tensor({32}, 5);
  const auto g = ops::Conv2DGeometry::same(12, 12, 3, 3, 1, 1);
  const Tensor y = ops::conv2d_forward(x, w, bias, g);
  const Tensor dy = random_tensor(y.shape(), 6);
  const Tensor dx = ops::conv2d_backward_data(dy, w, x.shape(), g);
  Tensor dw = Tensor::zeros(w.shape()), db = Tensor::zeros(bias.shape());
  ops::conv2d_backward_weights(x, dy, dw, db, g);
  for (MathMode mode : modes()) {
    const ScopedMathMode scoped(mode);
    const std::string what = math_mode_name(mode);
    const double k = 16 * 9;  // products per output of forward (and of backward data: 32 * 9)
    const double tol = 8.0 * unit(mode) * std::sqrt(k * 2) + 1e-5;
    expect_close(ops::conv2d_forward(x.to(gpu()), w.to(gpu()), bias.to(gpu()), g), y, 0, tol,
                 what + " forward");
    expect_close(ops::conv2d_backward_data(dy.to(gpu()), w.to(gpu()), x.shape(), g), dx, 0, tol,
                 what + " backward data");
    Tensor dwg = Tensor::zeros(w.shape(), DType::kFloat32, gpu());
    Tensor dbg = Tensor::zeros(bias.shape(), DType::kFloat32, gpu());
    ops::conv2d_backward_weights(x.to(gpu()), dy.to(gpu()), dwg, dbg, g);
    const double products = 4 * 12 * 12;  // per weight gradient element
    expect_close(dwg, dw, 0, 8.0 * unit(mode) * std::sqrt(products) + 1e-4, what + " weights");
    expect_close(dbg, db, 1e-5, 1e-4, what + " bias (float32 sum)");
  }
}

}  // namespace
}  // namespace mirror::testing
