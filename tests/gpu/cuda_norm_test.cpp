// The normalisation, average-pooling, block-copy and GELU ops and the graph layers built on them
// (BatchNormalization, LayerNormalization, Add, Concatenate, pooling, padding) on cuda:0 against
// the CPU backend. Tolerances, and why:
//   exact (0)     copies (concatenate, split, pad, crop) and channel_affine (+,-,* in float with
//                 --fmad=false, the CPU loop's order)
//   rtol 1e-12    channel_sums (double accumulation, a different grouping)
//   rtol 1e-6     average pooling (double sums, one float rounding each side; the backward
//                 divides per window in float), GELU (CUDA's erff vs glibc: a few ulp)
//   rtol 1e-4     whole layers and the ResNet spec (cuDNN convolutions, summation orders)
// Without a usable GPU every test skips with discover_gpus()'s reason.
#include <gtest/gtest.h>

#include "gpu/gpu_test_util.h"
#include "mirror/nn/cnn_layers.h"
#include "mirror/nn/models.h"
#include "mirror/ops.h"

namespace mirror {
namespace {

using testing::expect_close;
using testing::expect_equal;
using testing::GpuTest;
using testing::random_tensor;

class CudaNorm : public GpuTest {};

TEST_F(CudaNorm, ChannelSumsAndAffineMatchTheCpu) {
  const Tensor a = random_tensor({3, 5, 7}, 1), b = random_tensor({3, 5, 7}, 2);
  const ops::ChannelView v{3, 5, 7};
  const auto cpu = ops::channel_sums(a, b, v);
  const auto gpu_sums = ops::channel_sums(a.to(gpu()), b.to(gpu()), v);
  ASSERT_EQ(cpu.size(), gpu_sums.size());
  for (std::size_t i = 0; i < cpu.size(); ++i) EXPECT_NEAR(gpu_sums[i], cpu[i], 1e-12 * 35) << i;
  const ops::ChannelAffine k{.ka = {1, 2, 3, 4, 5},
                             .ca = {0.5, 0, -1, 2, 0.25},
                             .kb = {-1, 0.5, 2, 0, 1},
                             .cb = {0, 1, 0, 1, 0},
                             .k0 = {0.1, 0.2, 0.3, 0.4, 0.5}};
  expect_equal(ops::channel_affine(a.to(gpu()), b.to(gpu()), k, v), ops::channel_affine(a, b, k, v),
               "channel_affine with b");
  const ops::ChannelAffine only_a{.ka = {1, 2, 3, 4, 5}, .ca = {1, 1, 1, 1, 1}};
  expect_equal(ops::channel_affine(a.to(gpu()), {}, only_a, v),
               ops::channel_affine(a, {}, only_a, v), "channel_affine without b");
}

TEST_F(CudaNorm, AveragePoolingMatchesTheCpu) {
  ops::Pool2DGeometry g;
  g.k_h = g.k_w = 3;
  g.stride_h = g.stride_w = 2;
  g.pad_top = g.pad_left = 1;
  g.pad_bottom = g.pad_right = 1;
  const Tensor x = random_tensor({2, 3, 7, 7}, 3);
  const Tensor y = ops::avgpool2d_forward(x, g);
  expect_close(ops::avgpool2d_forward(x.to(gpu()), g), y, 1e-6, 1e-7, "avgpool forward");
  const Tensor dy = random_tensor(y.shape(), 4);
  expect_close(ops::avgpool2d_backward(dy.to(gpu()), x.shape(), g),
               ops::avgpool2d_backward(dy, x.shape(), g), 1e-6, 1e-7, "avgpool backward");
}

TEST_F(CudaNorm, ConcatSplitPadCropAreExact) {
  const Tensor a = random_tensor({2, 3, 4, 5}, 5), b = random_tensor({2, 2, 4, 5}, 6);
  const Tensor cat = ops::concat_channels({a, b});
  const Tensor gcat = ops::concat_channels({a.to(gpu()), b.to(gpu())});
  expect_equal(gcat, cat, "concat");
  const auto parts = ops::split_channels(gcat, {3, 2});
  expect_equal(parts[0], a, "split 0");
  expect_equal(parts[1], b, "split 1");
  const Tensor pad = ops::zero_pad2d(a, 1, 2, 0, 3);
  expect_equal(ops::zero_pad2d(a.to(gpu()), 1, 2, 0, 3), pad, "pad");
  expect_equal(ops::crop2d(pad.to(gpu()), 1, 2, 0, 3), a, "crop");
}

TEST_F(CudaNorm, GeluMatchesTheCpu) {
  const Tensor x = random_tensor({1000}, 7, 4.0f), dy = random_tensor({1000}, 8);
  expect_close(ops::gelu_forward(x.to(gpu())), ops::gelu_forward(x), 1e-6, 1e-7, "gelu");
  expect_close(ops::gelu_backward(x.to(gpu()), dy.to(gpu())), ops::gelu_backward(x, dy), 1e-6, 1e-7,
               "gelu backward");
}

TEST_F(CudaNorm, ResNetStepMatchesTheCpu) {
  // The shipped ResNet (BatchNorm, Add, no-bias and 1x1 convolutions, global average pooling):
  // one training forward and backward on each backend from the same weights.
  const nn::DataShape data{{1, 28, 28}, DType::kFloat32, 10};
  const nn::ModelSpec spec = nn::ModelSpec::builtin("resnet").bind(data);
  nn::Sequential cpu = nn::make_model(spec, DType::kFloat32, Device::cpu(), 3);
  nn::Sequential gpu_model = nn::make_model(spec, DType::kFloat32, gpu(), 3);
  const Tensor x = random_tensor({4, 1, 28, 28}, 9);
  nn::ForwardContext ctx;
  ctx.training = true;
  const Tensor y = cpu.forward(x, ctx);
  expect_close(gpu_model.forward(x.to(gpu()), ctx), y, 1e-4, 1e-5, "resnet logits");
  const Tensor dy = random_tensor(y.shape(), 10);
  cpu.backward(dy);
  gpu_model.backward(dy.to(gpu()));
  const auto pc = cpu.parameters(), pg = gpu_model.parameters();
  for (std::size_t i = 0; i < pc.size(); ++i) {
    expect_close(pg[i]->grad, pc[i]->grad, 1e-3, 1e-5, pc[i]->name);
  }
  const auto bc = cpu.buffers(), bg = gpu_model.buffers();
  for (std::size_t i = 0; i < bc.size(); ++i) {
    expect_close(bg[i]->value, bc[i]->value, 1e-4, 1e-6, bc[i]->name);
  }
}

}  // namespace
}  // namespace mirror
