// The cuDNN LSTM and the sequence layout ops vs the CPU backend (the references checked against
// the equations and finite differences in tests/lstm_op_test.cpp and
// tests/recurrent_stack_test.cpp): mixed sequence lengths, outputs past each length, final
// hidden and cell states, input and weight gradients (accumulated), both gradient sources, the
// empty sizes, and a Bidirectional layer on the GPU. Tolerances as tests/gpu/cuda_gru_test.cpp:
// forward rtol 1e-5 / atol 1e-6, backward rtol 1e-4 / atol 1e-5. Without a usable GPU every
// test skips with discover_gpus()'s reason.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "gpu/gpu_test_util.h"
#include "mirror/nn/bidirectional.h"
#include "mirror/ops.h"

namespace mirror {
namespace {

using testing::expect_close;
using testing::random_tensor;

class CudaLstm : public testing::GpuTest {};

constexpr double kForwardRtol = 1e-5, kForwardAtol = 1e-6;
constexpr double kBackwardRtol = 1e-4, kBackwardAtol = 1e-5;

struct LstmCase {
  std::int64_t n, t, f, h;
  std::vector<std::int32_t> lengths;
};

ops::LstmWeights random_weights(const LstmCase& c, std::uint64_t seed) {
  return {random_tensor({4 * c.h, c.f}, seed, 0.6f), random_tensor({4 * c.h, c.h}, seed + 1, 0.6f),
          random_tensor({4 * c.h}, seed + 2, 0.4f), random_tensor({4 * c.h}, seed + 3, 0.4f)};
}

ops::LstmWeights to(const ops::LstmWeights& w, Device d) {
  return {w.w_ih.to(d), w.w_hh.to(d), w.b_ih.to(d), w.b_hh.to(d)};
}

void compare_weights(const ops::LstmWeights& g, const ops::LstmWeights& c,
                     const std::string& what) {
  expect_close(g.w_ih, c.w_ih, kBackwardRtol, kBackwardAtol, what + " w_ih");
  expect_close(g.w_hh, c.w_hh, kBackwardRtol, kBackwardAtol, what + " w_hh");
  expect_close(g.b_ih, c.b_ih, kBackwardRtol, kBackwardAtol, what + " b_ih");
  expect_close(g.b_hh, c.b_hh, kBackwardRtol, kBackwardAtol, what + " b_hh");
}

void check_case(const LstmCase& c, bool use_dy, bool use_dh, std::uint64_t seed) {
  const Device gpu = Device::cuda(0);
  const std::string what = "F=" + std::to_string(c.f) + " H=" + std::to_string(c.h) + ": ";
  const Tensor x = random_tensor({c.n, c.t, c.f}, seed);
  const ops::LstmWeights w = random_weights(c, seed + 10);
  const ops::LstmWeights wg = to(w, gpu);
  const auto r = ops::lstm_forward(x, c.lengths, w, true);
  const auto rg = ops::lstm_forward(x.to(gpu), c.lengths, wg, true);
  expect_close(rg.y, r.y, kForwardRtol, kForwardAtol, what + "y (zeros past each length)");
  expect_close(rg.h_last, r.h_last, kForwardRtol, kForwardAtol, what + "h_last");
  expect_close(rg.c_last, r.c_last, kForwardRtol, kForwardAtol, what + "c_last");
  // Inference may run other kernels: the forward tolerance against training mode.
  const auto infer = ops::lstm_forward(x.to(gpu), c.lengths, wg, false);
  expect_close(infer.h_last, r.h_last, kForwardRtol, kForwardAtol, what + "inference h_last");

  // Nonzero dy past the lengths on purpose: both backends must ignore it.
  const Tensor dy = use_dy ? random_tensor({c.n, c.t, c.h}, seed + 20) : Tensor();
  const Tensor dh = use_dh ? random_tensor({c.n, c.h}, seed + 21) : Tensor();
  ops::LstmWeights dw = random_weights(c, seed + 30);  // gradients accumulate
  ops::LstmWeights dwg = to(dw, gpu);
  const Tensor dx = ops::lstm_backward(x, c.lengths, w, r, dy, dh, dw);
  const Tensor dxg =
      ops::lstm_backward(x.to(gpu), c.lengths, wg, rg, use_dy ? dy.to(gpu) : Tensor(),
                         use_dh ? dh.to(gpu) : Tensor(), dwg);
  expect_close(dxg, dx, kBackwardRtol, kBackwardAtol, what + "dx");
  compare_weights(dwg, dw, what + "dw");
}

TEST_F(CudaLstm, MixedLengthsBothGradientSources) {
  check_case({5, 7, 6, 8, {7, 3, 1, 5, 7}}, true, true, 1);
}
TEST_F(CudaLstm, OnlySequenceOutputGradient) {
  check_case({4, 6, 3, 5, {2, 6, 6, 4}}, true, false, 2);
}
TEST_F(CudaLstm, OnlyFinalStateGradient) {
  check_case({6, 9, 4, 16, {9, 1, 2, 8, 5, 3}}, false, true, 3);
}
TEST_F(CudaLstm, ZeroFeaturesAndZeroUnits) {
  check_case({3, 4, 0, 5, {4, 1, 2}}, true, true, 4);
  check_case({3, 4, 2, 0, {4, 1, 2}}, true, true, 5);
}

TEST_F(CudaLstm, SequenceLayoutOpsMatchTheCpu) {
  const Tensor x = random_tensor({3, 5, 4}, 6);
  const std::vector<std::int32_t> lengths = {5, 2, 1};
  testing::expect_equal(ops::reverse_sequences(x.to(gpu()), lengths),
                        ops::reverse_sequences(x, lengths), "reverse_sequences");
  const Tensor b = random_tensor({3, 5, 2}, 7);
  const Tensor cat = ops::concat_features(x.to(gpu()), b.to(gpu()));
  testing::expect_equal(cat, ops::concat_features(x, b), "concat_features");
  testing::expect_equal(ops::slice_features(cat, 4, 2), b, "slice_features");
  testing::expect_equal(ops::multiply(x.to(gpu()), x.to(gpu())), ops::multiply(x, x), "multiply");
}

// The Bidirectional layer built from these ops: the same weights on both devices.
TEST_F(CudaLstm, BidirectionalLayerMatchesTheCpu) {
  for (nn::MergeMode mode : {nn::MergeMode::kConcat, nn::MergeMode::kMul}) {
    nn::Bidirectional cpu(std::make_unique<nn::LSTM>(4, true), mode);
    nn::Bidirectional gpu_layer(std::make_unique<nn::LSTM>(4, true), mode);
    nn::InitRng r1(3), r2(3);
    cpu.set_name("bidirectional_1");
    gpu_layer.set_name("bidirectional_1");
    cpu.build({6, 3}, DType::kFloat32, Device::cpu(), r1);
    gpu_layer.build({6, 3}, DType::kFloat32, gpu(), r2);
    nn::ForwardContext ctx;
    ctx.training = true;
    ctx.lengths = {6, 2, 4};
    const Tensor x = random_tensor({3, 6, 3}, 8);
    const Tensor y = cpu.forward(x, ctx);
    const Tensor yg = gpu_layer.forward(x.to(gpu()), ctx);
    expect_close(yg, y, kForwardRtol, kForwardAtol, "bidirectional y");
    const Tensor dy = random_tensor(y.shape(), 9);
    expect_close(gpu_layer.backward(dy.to(gpu())), cpu.backward(dy), kBackwardRtol, kBackwardAtol,
                 "bidirectional dx");
    const auto pc = cpu.parameters(), pg = gpu_layer.parameters();
    for (std::size_t i = 0; i < pc.size(); ++i) {
      expect_close(pg[i]->grad, pc[i]->grad, kBackwardRtol, kBackwardAtol, pc[i]->name);
    }
  }
}

}  // namespace
}  // namespace mirror
