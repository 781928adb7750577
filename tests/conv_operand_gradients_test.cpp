// Note [Gradients as convolution operands] (mirror/ops.h): under mixed_bfloat16 a max pool or a
// BatchNormalization whose input gradient only a convolution's backward reads returns that
// gradient as conv2d_operand would make it, computed and rounded in one pass. These tests pin
// that it is the same bits as the two ops (window ties, ReLU masks, odd edges, rounding edges,
// NaN and -0), that Sequential asks for it exactly where the producer reads dy through
// conv2d_operand alone, and that a CNN's and the ResNet's gradients are the same bits with and
// without it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <vector>

#include "cpu/cpu_kernels.h"
#include "mirror/nn/models.h"
#include "mirror/nn/sequential.h"
#include "mirror/ops.h"
#include "mirror/precision.h"
#include "model_pass_util.h"
#include "ops_test_util.h"

namespace mirror {
namespace {

using ops_test::Pass;
using ops_test::random;
using ops_test::run_pass;
using ops_test::values;

/// The raw 16- or 32-bit words of a tensor (NaN payloads and -0 compare by their bits).
std::vector<std::uint32_t> bits(const Tensor& t) {
  const std::size_t n = static_cast<std::size_t>(t.numel());
  std::vector<std::uint32_t> out(n);
  if (t.dtype() == DType::kBFloat16) {
    const auto* p = static_cast<const std::uint16_t*>(t.raw_data());
    for (std::size_t i = 0; i < n; ++i) out[i] = p[i];
  } else {
    std::memcpy(out.data(), t.data<float>(), n * sizeof(float));
  }
  return out;
}

Tensor with_bits(Tensor t, const std::vector<std::uint32_t>& words, std::size_t stride) {
  auto v = t.to_vector<float>();
  for (std::size_t i = 0; i < words.size(); ++i) std::memcpy(&v[i * stride], &words[i], 4);
  return Tensor::from_vector(v, t.shape());
}

/// Values on a coarse grid in [-1, 1]: many windows hold ties, and many maxima are not positive.
Tensor coarse(const Shape& s, std::uint64_t seed) {
  auto v = random(s, seed, DType::kFloat32).to_vector<float>();
  for (float& x : v) x = std::round(x * 3.0f) / 4.0f;
  return Tensor::from_vector(v, s);
}

class ConvOperand : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cpu::cpu_has_bf16()) GTEST_SKIP() << "this CPU (or ONEDNN_MAX_CPU_ISA) lacks AVX-512 BF16";
  }
};

TEST_F(ConvOperand, PoolIsTheBitsOfRoundingTheFloat32Gradient) {
  // 9 x 7: an odd last row and column that no window covers (their gradient is +0).
  const Shape xs{3, 32, 9, 7};
  const Tensor x = coarse(xs, 61);
  // dy's rounding edges: ties to even down and up, a subnormal, a value rounding to the next
  // binade, a negative tie, -0, the largest float (rounds to inf), inf, a quiet NaN with a
  // payload and a signalling one.
  const Tensor dy = with_bits(random({3, 32, 4, 3}, 62, DType::kFloat32),
                              {0x3F808000u, 0x3F818000u, 0x00000123u, 0x3FFFFFFFu, 0xBF838000u,
                               0x80000000u, 0x7F7FFFFFu, 0x7F800000u, 0x7FC01234u, 0x7F800001u},
                              37);
  const ops::Pool2DGeometry g;  // 2x2, stride 2
  ScopedMathMode mode(MathMode::kBFloat16);
  for (std::int64_t x_block : {16, 0}) {
    for (bool blocked_dy : {false, true}) {
      for (bool relu : {false, true}) {
        SCOPED_TRACE("x block " + std::to_string(x_block) + (blocked_dy ? ", dy blocked" : "") +
                     (relu ? ", relu" : ""));
        const Tensor xi = ops::blocked_image(x, x_block);
        const Tensor y = ops::maxpool2d_forward(xi, g, blocked_dy);
        const Tensor dyi = blocked_dy ? ops::blocked_image(dy, ops::image_block(y)) : dy;
        const Tensor fused = ops::maxpool2d_backward(xi, y, dyi, g, relu, true);
        const Tensor apart = ops::conv2d_operand(ops::maxpool2d_backward(xi, y, dyi, g, relu));
        EXPECT_EQ(fused.dtype(), DType::kBFloat16);
        EXPECT_EQ(fused.shape(), (Shape{3, 2, 9, 7, 16}));
        EXPECT_EQ(bits(fused), bits(apart));
      }
    }
  }
}

TEST_F(ConvOperand, PoolElsewhereTheTwoOpsRun) {
  // Overlapping padded windows, and float32 math (where conv2d_operand keeps float32).
  const Tensor x = ops::blocked_image(coarse({2, 16, 8, 8}, 63), 16);
  ops::Pool2DGeometry g;
  g.k_h = g.k_w = 3;
  g.pad_bottom = g.pad_right = 1;
  const Tensor y = ops::maxpool2d_forward(x, g);
  const Tensor dy = random(y.shape(), 64, DType::kFloat32);
  {
    ScopedMathMode mode(MathMode::kBFloat16);
    EXPECT_EQ(bits(ops::maxpool2d_backward(x, y, dy, g, true, true)),
              bits(ops::conv2d_operand(ops::maxpool2d_backward(x, y, dy, g, true))));
  }
  const Tensor dx = ops::maxpool2d_backward(x, y, dy, g, true, true);
  EXPECT_EQ(dx.dtype(), DType::kFloat32);
  EXPECT_EQ(bits(dx), bits(ops::maxpool2d_backward(x, y, dy, g, true)));
}

nn::Sequential cnn() {
  // c1 (relu) -> p1: paired. c2 (tanh) -> p2: c2 runs tanh's backward on dy first. c3 (linear) is
  // read by p3 and by the Add: two readers. c4 (linear) -> p4: paired.
  return nn::make_model(
      nn::ModelSpec::from_json(nlohmann::json::parse(R"({"input_shape": [1, 16, 16], "layers": [
        {"type": "conv2d", "name": "c1", "inputs": ["input"], "filters": 16, "kernel": 3,
         "padding": "same", "activation": "relu"},
        {"type": "maxpool2d", "name": "p1", "inputs": ["c1"], "pool": 2},
        {"type": "conv2d", "name": "c2", "inputs": ["p1"], "filters": 16, "kernel": 3,
         "padding": "same", "activation": "tanh"},
        {"type": "maxpool2d", "name": "p2", "inputs": ["c2"], "pool": 2},
        {"type": "conv2d", "name": "c3", "inputs": ["p2"], "filters": 16, "kernel": 1},
        {"type": "maxpool2d", "name": "p3", "inputs": ["c3"], "pool": 1},
        {"type": "add", "name": "sum", "inputs": ["p3", "c3"]},
        {"type": "conv2d", "name": "c4", "inputs": ["sum"], "filters": 32, "kernel": 3,
         "padding": "same"},
        {"type": "maxpool2d", "name": "p4", "inputs": ["c4"], "pool": 2},
        {"type": "flatten", "name": "flat", "inputs": ["p4"]},
        {"type": "dense", "name": "out", "inputs": ["flat"], "units": 3}]})"))
          .bind({{1, 16, 16}, DType::kFloat32, 3}),
      DType::kFloat32, Device::cpu(), 7);
}

TEST(ConvOperandPairs, OnlyAPoolWhoseInputAConvolutionReadsThroughItsOperandAlone) {
  nn::Sequential m = cnn();
  std::vector<std::string> paired;
  for (auto& layer : m.layers()) {
    if (layer->input_grad_as_conv_operand()) paired.push_back(layer->name());
  }
  // Sequential names the pools max_pooling2d_1..4 in order: p1 and p4.
  EXPECT_EQ(paired, (std::vector<std::string>{"max_pooling2d_1", "max_pooling2d_4"}));
}

TEST_F(ConvOperand, TheCnnTrainsTheSameBitsWithAndWithoutThePairs) {
  const Tensor x = random({4, 1, 16, 16}, 65, DType::kFloat32, 0.0, 1.0);
  nn::Sequential paired = cnn(), apart = cnn();
  for (auto& layer : apart.layers()) layer->set_input_grad_as_conv_operand(false);
  ScopedMathMode mode(MathMode::kBFloat16);
  const Pass with = run_pass(paired, x), without = run_pass(apart, x);
  ops_test::expect_same_pass(with, without, paired);
  // The pair is live: p1 hands c1 a bfloat16 operand (apart's p1 a float32 gradient).
  for (nn::Sequential* m : {&paired, &apart}) {
    nn::ForwardContext ctx;
    ctx.training = true;
    nn::Layer& p1 = *m->layers()[1];
    ASSERT_EQ(p1.name(), "max_pooling2d_1");
    const Tensor y = p1.forward(m->layers()[0]->forward(x, ctx), ctx);
    EXPECT_EQ(p1.backward(random(y.shape(), 66, DType::kFloat32)).dtype(),
              m == &paired ? DType::kBFloat16 : DType::kFloat32);
  }
}

TEST_F(ConvOperand, ChannelAffineIsTheBitsOfRoundingItsResult) {
  // BatchNormalization's input gradient: ka dy + kb (x - cb) + k0, with and without its ReLU's
  // mask, on a blocked image (the kernel) and a plain one (the two ops).
  const Shape s{3, 32, 5, 7};
  const Tensor dy = with_bits(random(s, 71, DType::kFloat32),
                              {0x3F808000u, 0x3F818000u, 0x00000123u, 0x3FFFFFFFu, 0xBF838000u,
                               0x80000000u, 0x7F7FFFFFu, 0x7F800000u, 0x7FC01234u, 0x7F800001u},
                              101);
  const Tensor x = coarse(s, 72);
  const auto per_channel = [](std::uint64_t seed) { return values(random({32}, seed)); };
  ops::ChannelAffine k{
      .ka = per_channel(73), .kb = per_channel(74), .cb = per_channel(75), .k0 = per_channel(76)};
  const ops::ReluMask mask{per_channel(77), per_channel(78), per_channel(79)};
  ScopedMathMode mode(MathMode::kBFloat16);
  for (std::int64_t block : {16, 0}) {
    const ops::ChannelView v{3, 32, 35, block};
    const Tensor a = ops::blocked_image(dy, block), b = ops::blocked_image(x, block);
    for (bool masked : {false, true}) {
      SCOPED_TRACE("block " + std::to_string(block) + (masked ? ", masked" : ""));
      k.conv_operand = true;
      const Tensor fused =
          masked ? ops::channel_affine(a, b, k, v, mask) : ops::channel_affine(a, b, k, v);
      k.conv_operand = false;
      const Tensor apart = ops::conv2d_operand(masked ? ops::channel_affine(a, b, k, v, mask)
                                                      : ops::channel_affine(a, b, k, v));
      EXPECT_EQ(fused.dtype(), DType::kBFloat16);
      EXPECT_EQ(fused.shape(), (Shape{3, 2, 5, 7, 16}));
      EXPECT_EQ(bits(fused), bits(apart));
    }
  }
}

nn::Sequential resnet() {
  return nn::make_model(nn::ModelSpec::builtin("resnet").bind({{1, 28, 28}, DType::kFloat32, 10}),
                        DType::kFloat32, Device::cpu(), 5);
}

TEST_F(ConvOperand, TheResNetTrainsTheSameBitsWithAndWithoutThePairs) {
  const Tensor x = random({4, 1, 28, 28}, 81, DType::kFloat32, 0.0, 1.0);
  nn::Sequential paired = resnet(), apart = resnet();
  std::size_t pairs = 0, norms = 0;
  for (auto& layer : paired.layers()) {
    pairs += layer->input_grad_as_conv_operand();
    norms += layer->kind() == "batch_normalization";
  }
  // Every BatchNormalization of the ResNet reads a convolution alone.
  EXPECT_GT(norms, 0u);
  EXPECT_EQ(pairs, norms);
  for (auto& layer : apart.layers()) layer->set_input_grad_as_conv_operand(false);
  ScopedMathMode mode(MathMode::kBFloat16);
  for (const bool padded : {false, true}) {
    SCOPED_TRACE(padded ? "padded" : "full");
    ops_test::expect_same_pass(run_pass(paired, x, true, padded), run_pass(apart, x, true, padded),
                               paired);
  }
}

}  // namespace
}  // namespace mirror
