// The CUDA 1-D window ops and Conv1D vs the CPU backend (checked against direct computations
// and finite differences in tests/conv1d_test.cpp). The window ops run the same per-element
// rules (src/math/window1d.h) in the same order on both backends, so they must agree bit for
// bit; the Conv1D layer adds a cuBLAS gemm (forward rtol 1e-5 / atol 1e-6, backward 1e-4 /
// 1e-5). Without a usable GPU every test skips with discover_gpus()'s reason.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "gpu/gpu_test_util.h"
#include "mirror/nn/conv1d.h"
#include "mirror/ops.h"

namespace mirror {
namespace {

using testing::expect_close;
using testing::expect_equal;
using testing::random_tensor;

class CudaConv1D : public testing::GpuTest {};

TEST_F(CudaConv1D, WindowOpsMatchTheCpuBitForBit) {
  const Tensor x = random_tensor({3, 9, 4}, 1);
  const std::vector<std::int32_t> lengths = {9, 4, 1};
  for (const char* padding : {"valid", "same", "causal"}) {
    const bool causal = std::string(padding) == "causal";
    const ops::Window1D g = ops::Window1D::make(padding, 9, 3, causal ? 1 : 2, causal ? 2 : 1);
    const Tensor cols = ops::im2col1d(x, g);
    expect_equal(ops::im2col1d(x.to(gpu()), g), cols, std::string(padding) + " im2col1d");
    expect_equal(ops::col2im1d(cols.to(gpu()), g, 9), ops::col2im1d(cols, g, 9),
                 std::string(padding) + " col2im1d");
  }
  for (ops::Pool1D mode : {ops::Pool1D::kMax, ops::Pool1D::kAverage}) {
    for (const char* padding : {"valid", "same"}) {
      const std::string what = std::string(mode == ops::Pool1D::kMax ? "max " : "avg ") + padding;
      const ops::Window1D g = ops::Window1D::make(padding, 9, 3, 2, 1);
      const Tensor y = ops::pool1d_forward(mode, x, lengths, g);
      expect_equal(ops::pool1d_forward(mode, x.to(gpu()), lengths, g), y, what + " forward");
      const Tensor dy = random_tensor(y.shape(), 2);
      expect_equal(ops::pool1d_backward(mode, x.to(gpu()), dy.to(gpu()), lengths, g),
                   ops::pool1d_backward(mode, x, dy, lengths, g), what + " backward");
    }
  }
  expect_equal(ops::zero_past_lengths(x.to(gpu()), lengths), ops::zero_past_lengths(x, lengths),
               "zero_past_lengths");
}

TEST_F(CudaConv1D, LayerMatchesTheCpuWithLengths) {
  nn::Conv1D cpu(5, 3, 1, "causal", 2, nn::Activation::kRelu);
  nn::Conv1D gpu_layer(5, 3, 1, "causal", 2, nn::Activation::kRelu);
  nn::InitRng r1(3), r2(3);
  cpu.set_name("conv1d_1");
  gpu_layer.set_name("conv1d_1");
  cpu.build({8, 4}, DType::kFloat32, Device::cpu(), r1);
  gpu_layer.build({8, 4}, DType::kFloat32, gpu(), r2);
  nn::ForwardContext c1, c2;
  c1.training = c2.training = true;
  c1.lengths = c2.lengths = {8, 3, 5};
  const Tensor x = random_tensor({3, 8, 4}, 4);
  const Tensor y = cpu.forward(x, c1);
  expect_close(gpu_layer.forward(x.to(gpu()), c2), y, 1e-5, 1e-6, "conv1d y");
  EXPECT_EQ(c1.lengths, c2.lengths);
  const Tensor dy = random_tensor(y.shape(), 5);
  expect_close(gpu_layer.backward(dy.to(gpu())), cpu.backward(dy), 1e-4, 1e-5, "conv1d dx");
  const auto pc = cpu.parameters(), pg = gpu_layer.parameters();
  for (std::size_t i = 0; i < pc.size(); ++i) {
    expect_close(pg[i]->grad, pc[i]->grad, 1e-4, 1e-5, pc[i]->name);
  }
}

}  // namespace
}  // namespace mirror
