// The ops of Keras's layers (parametric activations, Maximum/Minimum, batched GEMM, the attention
// softmax, grouped convolutions) and the models of tests/data/keras/ that use every new layer, on
// cuda:0 against the CPU backend. Tolerances, and why:
//   exact (0)     the activations and extremum (the same src/math functions, --fmad=false)
//   rtol 1e-6     the attention softmax (double per row on both sides, one float rounding; CUDA's
//                 exp vs glibc's)
//   rtol 1e-5     batched GEMM (cuBLAS vs oneDNN summation orders)
//   rtol 1e-4     grouped convolutions and whole models (cuDNN algorithms, summation orders)
// Without a usable GPU every test skips with discover_gpus()'s reason.
#include <gtest/gtest.h>

#include "gpu/gpu_test_util.h"
#include "mirror/nn/models.h"
#include "mirror/ops.h"

namespace mirror {
namespace {

using testing::expect_close;
using testing::expect_equal;
using testing::GpuTest;
using testing::random_tensor;

class CudaKerasLayers : public GpuTest {};

TEST_F(CudaKerasLayers, ParametricActivationsAndExtremumMatchTheCpu) {
  const Tensor x = random_tensor({3, 50}, 1, 8.0f), dy = random_tensor({3, 50}, 2);
  ops::Eltwise relu6;
  relu6.max_value = 6;
  ops::Eltwise shifted;
  shifted.max_value = 2;
  shifted.negative_slope = 0.1;
  shifted.threshold = 0.3;
  ops::Eltwise leaky;
  leaky.kind = ops::Eltwise::Kind::kLeakyRelu;
  leaky.negative_slope = 0.2;
  ops::Eltwise elu;
  elu.kind = ops::Eltwise::Kind::kElu;
  elu.alpha = 0.7;
  for (const ops::Eltwise& f : {relu6, shifted, leaky, elu}) {
    expect_close(ops::eltwise_forward(f, x.to(gpu())), ops::eltwise_forward(f, x), 1e-6, 0,
                 "eltwise forward");
    expect_close(ops::eltwise_backward(f, x.to(gpu()), dy.to(gpu())),
                 ops::eltwise_backward(f, x, dy), 1e-6, 0, "eltwise backward");
  }
  const Tensor b = random_tensor({3, 50}, 3, 8.0f);
  for (const bool minimum : {false, true}) {
    Tensor mask_cpu, mask_gpu;
    expect_equal(ops::extremum(x.to(gpu()), b.to(gpu()), minimum, mask_gpu),
                 ops::extremum(x, b, minimum, mask_cpu), "extremum");
    expect_equal(mask_gpu, mask_cpu, "extremum mask");
  }
}

TEST_F(CudaKerasLayers, BatchedGemmMatchesTheCpu) {
  for (const bool ta : {false, true}) {
    for (const bool tb : {false, true}) {
      const Tensor a = random_tensor(ta ? Shape{4, 7, 5} : Shape{4, 5, 7}, 4);
      const Tensor b = random_tensor(tb ? Shape{4, 6, 7} : Shape{4, 7, 6}, 5);
      Tensor c = random_tensor({4, 5, 6}, 6);
      Tensor g = c.to(gpu());
      ops::batched_gemm(ta, tb, 0.5, a, b, 1.0, c);
      ops::batched_gemm(ta, tb, 0.5, a.to(gpu()), b.to(gpu()), 1.0, g);
      expect_close(g, c, 1e-5, 1e-6, "batched_gemm");
    }
  }
}

TEST_F(CudaKerasLayers, AttentionSoftmaxMatchesTheCpu) {
  const Tensor s = random_tensor({6, 5, 5}, 7, 4.0f), dp = random_tensor({6, 5, 5}, 8);
  ops::AttentionMask m;
  m.heads = 2;
  m.lengths = {5, 2, 3};
  m.mask_queries = true;
  m.causal = true;
  const Tensor p = ops::attention_softmax(s, m);
  expect_close(ops::attention_softmax(s.to(gpu()), m), p, 1e-6, 1e-7, "attention_softmax");
  expect_close(ops::attention_softmax_backward(p.to(gpu()), dp.to(gpu()), m),
               ops::attention_softmax_backward(p, dp, m), 1e-6, 1e-7, "attention_softmax_backward");
}

TEST_F(CudaKerasLayers, GroupedConvolutionsMatchTheCpu) {
  for (const int groups : {2, 6}) {
    const Tensor x = random_tensor({2, 6, 9, 8}, 9), w = random_tensor({12, 6 / groups, 3, 3}, 10);
    ops::Conv2DGeometry g = ops::Conv2DGeometry::same(9, 8, 3, 3, 2, 2);  // asymmetric padding
    g.groups = groups;
    const Tensor y = ops::conv2d_forward(x, w, Tensor(), g);
    expect_close(ops::conv2d_forward(x.to(gpu()), w.to(gpu()), Tensor(), g), y, 1e-4, 1e-5,
                 "grouped forward");
    const Tensor dy = random_tensor(y.shape(), 11);
    expect_close(ops::conv2d_backward_data(dy.to(gpu()), w.to(gpu()), x.shape(), g),
                 ops::conv2d_backward_data(dy, w, x.shape(), g), 1e-4, 1e-5,
                 "grouped backward data");
    Tensor dw_cpu = Tensor::zeros(w.shape()),
           dw_gpu = Tensor::zeros(w.shape(), DType::kFloat32, gpu());
    Tensor none;
    ops::conv2d_backward_weights(x, dy, dw_cpu, none, g);
    ops::conv2d_backward_weights(x.to(gpu()), dy.to(gpu()), dw_gpu, none, g);
    expect_close(dw_gpu, dw_cpu, 1e-4, 1e-5, "grouped backward weights");
  }
}

/// One training forward and backward of a fixture on each backend from the same weights.
void expect_model_matches(const std::string& name, const Shape& sample, int classes, Device gpu) {
  const nn::ModelSpec spec = nn::ModelSpec::from_file(testing::fixture_path("keras/" + name))
                                 .bind({sample, DType::kFloat32, classes, 0});
  nn::Sequential cpu = nn::make_model(spec, DType::kFloat32, Device::cpu(), 3);
  nn::Sequential on_gpu = nn::make_model(spec, DType::kFloat32, gpu, 3);
  Shape batch = {4};
  batch.insert(batch.end(), sample.begin(), sample.end());
  const Tensor x = random_tensor(batch, 12);
  nn::ForwardContext ctx;
  ctx.training = true;
  ctx.sample_ids = Tensor::from_vector(std::vector<std::int64_t>{0, 1, 2, 3}, {4});
  nn::ForwardContext gctx = ctx;
  gctx.sample_ids = ctx.sample_ids.to(gpu);
  const Tensor y = cpu.forward(x, ctx);
  expect_close(on_gpu.forward(x.to(gpu), gctx), y, 1e-4, 1e-5, name + " outputs");
  const Tensor dy = random_tensor(y.shape(), 13);
  cpu.backward(dy);
  on_gpu.backward(dy.to(gpu));
  const auto pc = cpu.parameters(), pg = on_gpu.parameters();
  for (std::size_t i = 0; i < pc.size(); ++i) {
    expect_close(pg[i]->grad, pc[i]->grad, 1e-3, 1e-4, name + " " + pc[i]->name);
  }
}

struct Fixture {
  const char* file;
  Shape sample;
  int classes;
};
const Fixture kFixtures[] = {{"unet.keras.json", {1, 16, 16}, 256},
                             {"mobilenet_block.keras.json", {3, 16, 16}, 5},
                             {"image_layers.keras.json", {3, 12, 12}, 4},
                             {"sequence_layers.keras.json", {8, 6}, 4},
                             {"seq2seq_repeat.keras.json", {10, 4}, 18}};

TEST_F(CudaKerasLayers, KerasFixturesMatchTheCpu) {
  for (const Fixture& f : kFixtures) expect_model_matches(f.file, f.sample, f.classes, gpu());
}

// Note [Kit fixtures] (gpu_test_util.h): no GPU needed.
TEST(KitFixtures, KerasModelsAreReadable) {
  std::vector<std::string> files;
  for (const Fixture& f : kFixtures) files.push_back(std::string("keras/") + f.file);
  testing::expect_fixtures_readable(files);
}

}  // namespace
}  // namespace mirror
