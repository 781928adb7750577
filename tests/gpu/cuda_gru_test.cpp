// The cuDNN GRU vs the CPU GRU (the reference checked against finite differences in
// tests/gru_op_test.cpp): mixed sequence lengths, outputs past each length, final states,
// input and weight gradients (accumulated), and the two gradient sources (dy, dh_last).
// Tolerances: forward rtol 1e-5 / atol 1e-6 (cuDNN's GEMMs sum in another order; FMA math, no
// TF32); backward rtol 1e-4 / atol 1e-5 (gradients sum over steps and samples).
// Without a usable GPU every test skips with discover_gpus()'s reason.
#include <gtest/gtest.h>

#include <vector>

#include "gpu/gpu_test_util.h"
#include "mirror/ops.h"

namespace mirror {
namespace {

using testing::expect_close;
using testing::random_tensor;

class CudaGru : public testing::GpuTest {};

// The suite's forward tolerance (see the header comment).
constexpr double kForwardRtol = 1e-5, kForwardAtol = 1e-6;

struct GruCase {
  std::int64_t n, t, f, h;
  std::vector<std::int32_t> lengths;
};

ops::GruWeights random_weights(const GruCase& c, std::uint64_t seed) {
  return {random_tensor({3 * c.h, c.f}, seed, 0.6f), random_tensor({3 * c.h, c.h}, seed + 1, 0.6f),
          random_tensor({3 * c.h}, seed + 2, 0.4f), random_tensor({3 * c.h}, seed + 3, 0.4f)};
}

ops::GruWeights to_gpu(const ops::GruWeights& w) {
  const Device d = Device::cuda(0);
  return {w.w_ih.to(d), w.w_hh.to(d), w.b_ih.to(d), w.b_hh.to(d)};
}

ops::GruWeights clone(const ops::GruWeights& w) {
  return {w.w_ih.clone(), w.w_hh.clone(), w.b_ih.clone(), w.b_hh.clone()};
}

void compare_weights(const ops::GruWeights& g, const ops::GruWeights& c, const std::string& what) {
  expect_close(g.w_ih, c.w_ih, 1e-4, 1e-5, what + " w_ih");
  expect_close(g.w_hh, c.w_hh, 1e-4, 1e-5, what + " w_hh");
  expect_close(g.b_ih, c.b_ih, 1e-4, 1e-5, what + " b_ih");
  expect_close(g.b_hh, c.b_hh, 1e-4, 1e-5, what + " b_hh");
}

/// Runs forward and backward on both backends with the chosen gradient sources.
void check_case(const GruCase& c, bool use_dy, bool use_dh, std::uint64_t seed) {
  const Device gpu = Device::cuda(0);
  const Tensor x = random_tensor({c.n, c.t, c.f}, seed);
  const ops::GruWeights w = random_weights(c, seed + 10);
  const ops::GruWeights wg = to_gpu(w);
  const ops::GruForwardResult r = ops::gru_forward(x, c.lengths, w, true);
  const ops::GruForwardResult rg = ops::gru_forward(x.to(gpu), c.lengths, wg, true);
  expect_close(rg.y, r.y, kForwardRtol, kForwardAtol, "y (zeros past each length)");
  expect_close(rg.h_last, r.h_last, kForwardRtol, kForwardAtol,
               "h_last (state at each last valid step)");

  // Nonzero dy past the lengths on purpose: it must be ignored by both backends.
  const Tensor dy = use_dy ? random_tensor({c.n, c.t, c.h}, seed + 20) : Tensor();
  const Tensor dh = use_dh ? random_tensor({c.n, c.h}, seed + 21) : Tensor();
  // Gradients accumulate into existing values (ops.h convention).
  ops::GruWeights dw = random_weights(c, seed + 30);
  ops::GruWeights dwg = to_gpu(clone(dw));
  const Tensor dx = ops::gru_backward(x, c.lengths, w, r, dy, dh, dw);
  const Tensor dxg = ops::gru_backward(x.to(gpu), c.lengths, wg, rg, use_dy ? dy.to(gpu) : Tensor(),
                                       use_dh ? dh.to(gpu) : Tensor(), dwg);
  expect_close(dxg, dx, 1e-4, 1e-5, "dx");
  compare_weights(dwg, dw, "dw");
}

TEST_F(CudaGru, MixedLengthsBothGradientSources) {
  check_case({5, 7, 6, 8, {7, 3, 1, 5, 7}}, true, true, 1);
}

TEST_F(CudaGru, OnlySequenceOutputGradient) {
  check_case({4, 6, 3, 5, {2, 6, 6, 4}}, true, false, 2);
}

TEST_F(CudaGru, OnlyFinalStateGradient) {
  check_case({6, 9, 4, 16, {9, 1, 2, 8, 5, 3}}, false, true, 3);
}

TEST_F(CudaGru, InferenceMatchesTraining) {
  const GruCase c{3, 5, 4, 6, {5, 2, 4}};
  const Tensor x = random_tensor({c.n, c.t, c.f}, 4).to(Device::cuda(0));
  const ops::GruWeights wg = to_gpu(random_weights(c, 5));
  const ops::GruForwardResult train = ops::gru_forward(x, c.lengths, wg, true);
  const ops::GruForwardResult infer = ops::gru_forward(x, c.lengths, wg, false);
  // Inference and training modes may run different cuDNN kernels: the forward tolerance.
  expect_close(infer.y, train.y.to(Device::cpu()), kForwardRtol, kForwardAtol, "inference y");
  expect_close(infer.h_last, train.h_last.to(Device::cpu()), kForwardRtol, kForwardAtol,
               "inference h_last");
  ops::GruWeights dw = to_gpu(random_weights(c, 6));
  EXPECT_THROW(ops::gru_backward(x, c.lengths, wg, infer, Tensor(), train.h_last, dw),
               InvalidArgument);
}

// Note [RNN empty sizes] in src/cuda/rnn.cpp: cuDNN rejects zero sizes; the GPU must give what
// the CPU gives (F = 0: the biases still drive the recurrence; H = 0: empty outputs, dx = 0).
TEST_F(CudaGru, ZeroFeaturesAndZeroUnitsMatchTheCpu) {
  for (const GruCase& c : {GruCase{3, 4, 0, 5, {4, 1, 2}}, GruCase{3, 4, 2, 0, {4, 1, 2}}}) {
    const std::string what = "F=" + std::to_string(c.f) + " H=" + std::to_string(c.h) + ": ";
    const Tensor x = random_tensor({c.n, c.t, c.f}, 7);
    const ops::GruWeights w = random_weights(c, 8);
    const ops::GruWeights wg = to_gpu(w);
    const auto r = ops::gru_forward(x, c.lengths, w, true);
    const auto rg = ops::gru_forward(x.to(gpu()), c.lengths, wg, true);
    expect_close(rg.y, r.y, kForwardRtol, kForwardAtol, what + "y");
    expect_close(rg.h_last, r.h_last, kForwardRtol, kForwardAtol, what + "h_last");
    const Tensor dh = random_tensor({c.n, c.h}, 9);
    ops::GruWeights dw = random_weights(c, 10);
    ops::GruWeights dwg = to_gpu(clone(dw));
    const Tensor dx = ops::gru_backward(x, c.lengths, w, r, Tensor(), dh, dw);
    const Tensor dxg =
        ops::gru_backward(x.to(gpu()), c.lengths, wg, rg, Tensor(), dh.to(gpu()), dwg);
    expect_close(dxg, dx, 1e-4, 1e-5, what + "dx");
    compare_weights(dwg, dw, what + "dw");
  }
}

}  // namespace
}  // namespace mirror
