// The normalisation, average-pooling, block-copy and GELU ops and the graph layers built on them
// (BatchNormalization, LayerNormalization, Add, Concatenate, pooling, padding) on cuda:0 against
// the CPU backend. Tolerances, and why:
//   exact (0)     copies (concatenate, split, pad, crop) and channel_affine (+,-,* in float with
//                 --fmad=false, the CPU loop's order)
//   rtol 1e-12    channel_sums (double accumulation, a different grouping: slices of rows,
//                 Note [Channel reductions] in src/cuda/channel_reduce.cu)
//   rtol 1e-6     average pooling (double sums, one float rounding each side; the backward
//                 divides per window in float), GELU (CUDA's erfcf vs glibc's: a few ulp)
//   rtol 1e-4     whole layers and the ResNet spec (cuDNN convolutions, summation orders)
// Without a usable GPU every test skips with discover_gpus()'s reason.
#include <gtest/gtest.h>

#include "cuda/channel_reduce.h"
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

// Host arithmetic only: runs in every CUDA build, with or without a GPU.
TEST(ChannelSplit, CoversEveryRowOnceWithEnoughWorkPerSlice) {
  for (const ops::ChannelView v : {ops::ChannelView{64, 16, 784}, ops::ChannelView{64, 1024, 1},
                                   ops::ChannelView{5, 3, 1000}, ops::ChannelView{1000, 4, 3},
                                   ops::ChannelView{1, 8, 100}, ops::ChannelView{100000, 1, 1}}) {
    const cuda::ChannelSplit s = cuda::channel_split(v);
    const std::string what = std::to_string(v.outer) + "x" + std::to_string(v.channels) + "x" +
                             std::to_string(v.inner);
    ASSERT_GE(s.splits, 1) << what;
    EXPECT_GE(s.splits * s.per_split, v.outer) << what << ": rows left out";
    EXPECT_LT((s.splits - 1) * s.per_split, v.outer) << what << ": an empty slice";
    EXPECT_LE(s.splits * v.channels, 2048) << what << ": far more blocks than asked for";
    if (s.splits > 1) {
      EXPECT_GE(s.per_split * v.inner * 2, 4 * 256) << what << ": slices too thin";
    }
  }
  // The ResNet's BatchNorm at batch 64 on 28x28: many slices, not one block per channel.
  EXPECT_GE(cuda::channel_split({64, 16, 784}).splits, 16);
}

TEST_F(CudaNorm, ChannelSumsSplitOverSlicesMatchTheCpu) {
  // Shapes that give several slices per channel, a short last slice, an inner extent below and
  // above the block's 256 threads, and a single row.
  for (const Shape& shape : {Shape{64, 16, 784}, Shape{5, 3, 1000}, Shape{1000, 4, 3},
                             Shape{7, 2, 300}, Shape{1, 8, 100}}) {
    const ops::ChannelView v{shape[0], shape[1], shape[2]};
    const Tensor a = random_tensor(shape, 11), b = random_tensor(shape, 12);
    const auto cpu = ops::channel_sums(a, b, v);
    const auto gpu_sums = ops::channel_sums(a.to(gpu()), b.to(gpu()), v);
    ASSERT_EQ(cpu.size(), gpu_sums.size());
    for (std::size_t i = 0; i < cpu.size(); ++i) {
      EXPECT_NEAR(gpu_sums[i], cpu[i], 1e-12 * static_cast<double>(shape[0] * shape[2]))
          << shape_str(shape) << " sum " << i;
    }
    // Same inputs, same bits: the grouping depends on the shape only.
    EXPECT_EQ(ops::channel_sums(a.to(gpu()), b.to(gpu()), v), gpu_sums) << shape_str(shape);
  }
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

// Note [Device batch norm]: the device path's four ops on the GPU against the CPU, with padding.
TEST_F(CudaNorm, DeviceBatchNormOpsMatchTheCpu) {
  const Tensor x = random_tensor({4, 3, 5, 5}, 11, 2.0f), dy = random_tensor({4, 3, 5, 5}, 12);
  const Tensor w = Tensor::from_vector<float>({1, 1, 0, 1}, {4});
  const Tensor gamma = random_tensor({3}, 13), beta = random_tensor({3}, 14);
  const ops::ChannelView v{4, 3, 25};
  struct Run {
    Tensor stats, y, saved, sums, dx, gg, gb, mm, mv;
  };
  auto run = [&](Device d) {
    Run r;
    r.mm = Tensor::zeros({3}, DType::kFloat32, d);
    r.mv = Tensor::zeros({3}, DType::kFloat32, d);
    ops::fill(r.mv, 1.0);
    r.gg = Tensor::zeros({3}, DType::kFloat32, d);
    r.gb = Tensor::zeros({3}, DType::kFloat32, d);
    r.stats = ops::batchnorm_statistics(x.to(d), w.to(d), v);
    ops::BatchNormNormalized n = ops::batchnorm_normalize(x.to(d), r.stats, gamma.to(d),
                                                          beta.to(d), r.mm, r.mv, 0.9, 1e-3, v);
    r.y = n.y;
    r.saved = n.saved;
    r.sums = ops::batchnorm_gradient_sums(dy.to(d), x.to(d), r.saved, r.gg, r.gb, v);
    r.dx = ops::batchnorm_input_gradient(dy.to(d), x.to(d), r.saved, gamma.to(d), r.sums,
                                         w.to(d), v);
    return r;
  };
  const Run cpu = run(Device::cpu()), g = run(gpu());
  // The float64 results compared as float32 (the test helpers read floats).
  auto f32 = [](const Tensor& t) { return ops::cast(t.to(Device::cpu()), DType::kFloat32); };
  expect_close(f32(g.stats), f32(cpu.stats), 1e-6, 1e-6, "statistics");
  expect_close(f32(g.saved), f32(cpu.saved), 1e-6, 1e-6, "mean, invstd, count");
  expect_close(g.y, cpu.y, 1e-5, 1e-6, "normalised");
  expect_close(g.mm, cpu.mm, 1e-6, 1e-7, "moving mean");
  expect_close(g.mv, cpu.mv, 1e-6, 1e-7, "moving variance");
  expect_close(f32(g.sums), f32(cpu.sums), 1e-6, 1e-6, "gradient sums");
  expect_close(g.gg, cpu.gg, 1e-5, 1e-6, "gamma gradient");
  expect_close(g.gb, cpu.gb, 1e-5, 1e-6, "beta gradient");
  expect_close(g.dx, cpu.dx, 1e-5, 1e-6, "input gradient");
  const auto dx = g.dx.to(Device::cpu()).to_vector<float>();
  for (std::size_t i = 2 * 75; i < 3 * 75; ++i) ASSERT_EQ(dx[i], 0.0f) << "padding sample " << i;
}

// The statistics' rows of a sequence view ([N, T, F] seen as {N T, F, 1}) belong to sample
// o / T: a padding sample's T rows are left out (dispatch refuses a view whose rows are not
// whole samples). Also a batch large enough to split each channel's rows (Note [Channel
// reductions]).
TEST_F(CudaNorm, DeviceBatchNormStatisticsOfSequencesAndLargeBatches) {
  struct Case {
    Shape shape;
    ops::ChannelView v;
    std::vector<float> weights;
  };
  const std::vector<Case> cases = {
      {{3, 4, 5}, {12, 5, 1}, {1, 0, 1}},
      {{3, 4, 5}, {12, 5, 1}, {}},
      {{64, 16, 28, 28}, {64, 16, 784}, std::vector<float>(64, 1.0f)},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(shape_str(c.shape));
    const Tensor x = random_tensor(c.shape, 21, 2.0f);
    Tensor w;
    if (!c.weights.empty()) {
      w = Tensor::from_vector(c.weights, {static_cast<std::int64_t>(c.weights.size())});
    }
    auto stats = [&](Device d) {
      const Tensor s = ops::batchnorm_statistics(x.to(d), w.defined() ? w.to(d) : w, c.v);
      return ops::cast(s.to(Device::cpu()), DType::kFloat32);
    };
    expect_close(stats(gpu()), stats(Device::cpu()), 1e-6, 1e-6, "statistics");
  }
}

}  // namespace
}  // namespace mirror
