// Note [BatchNorm and ReLU] (mirror/ops.h): a BatchNormalization or an Add read only by a ReLU
// applies the ReLU in its own passes. The fused ops give the bits of the separate ones (plain and
// blocked images, float32 and float64, values where the ReLU's input is exactly 0), Sequential
// pairs only a layer whose one reader is a ReLU layer, and models train and predict the same
// with the pairs undone by hand (host and device BatchNorm paths, padded batches).
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mirror/nn/cnn_layers.h"
#include "mirror/nn/layers.h"
#include "mirror/nn/models.h"
#include "mirror/nn/sequential.h"
#include "mirror/ops.h"
#include "model_pass_util.h"
#include "ops_test_util.h"

namespace mirror {
namespace {

using ops_test::expect_same_pass;
using ops_test::Pass;
using ops_test::random;
using ops_test::run_pass;
using ops_test::values;

/// Per-channel maps with a zero offset on every third channel, so that an element equal to the
/// centre lands exactly on the ReLU's 0 (no gradient there).
ops::ReluMask mask_map(std::int64_t channels) {
  ops::ReluMask m;
  for (std::int64_t c = 0; c < channels; ++c) {
    m.ka.push_back(0.5 + 0.25 * static_cast<double>(c % 4));
    m.ca.push_back(0.125 * static_cast<double>(c % 5) - 0.25);
    m.k0.push_back(c % 3 == 0 ? 0.0 : 0.1 * static_cast<double>(c % 7) - 0.3);
  }
  return m;
}

/// b with some elements set to their channel's centre ca (the ReLU input there is k0, 0 for
/// every third channel).
Tensor with_centres(const Tensor& b, const ops::ReluMask& m, const ops::ChannelView& v) {
  std::vector<double> x = values(b);
  for (std::int64_t o = 0; o < v.outer; ++o) {
    for (std::int64_t c = 0; c < v.channels; ++c) {
      for (std::int64_t i = 0; i < v.inner; i += 3) {
        x[static_cast<std::size_t>((o * v.channels + c) * v.inner + i)] =
            m.ca[static_cast<std::size_t>(c)];
      }
    }
  }
  return ops::cast(Tensor::from_vector(x, b.shape()), b.dtype());
}

/// a read as (m(b) > 0 ? a : 0) by the separate ops: the map, then the ReLU's backward.
Tensor separately_masked(const Tensor& a, const Tensor& b, const ops::ReluMask& m,
                         const ops::ChannelView& v) {
  const Tensor mb = ops::channel_affine(b, {}, {.ka = m.ka, .ca = m.ca, .k0 = m.k0}, v);
  return ops::activation_backward(ops::Activation::kRelu, mb, a);
}

/// Blocked (block 8) from plain NCHW through the library's own conversion.
Tensor blocked8(const Tensor& plain) { return ops::blocked_image(plain, 8); }

TEST(BatchNormRelu, FusedOpsGiveTheBitsOfTheSeparateOnes) {
  const Shape shape{3, 16, 5, 7};
  const ops::ChannelView v{3, 16, 35};
  const ops::ReluMask m = mask_map(16);
  for (const DType dtype : {DType::kFloat32, DType::kFloat64}) {
    SCOPED_TRACE(dtype_name(dtype));
    const Tensor a = random(shape, 1, dtype);
    const Tensor b = with_centres(random(shape, 2, dtype), m, v);
    const ops::ChannelAffine k{.ka = m.ka, .ca = m.ca, .k0 = m.k0};
    ops::ChannelAffine k_relu = k;
    k_relu.relu = true;
    const Tensor y = ops::channel_affine(b, {}, k_relu, v);
    EXPECT_EQ(values(y),
              values(ops::activation_forward(ops::Activation::kRelu,
                                             ops::channel_affine(b, {}, k, v))));
    const Tensor am = separately_masked(a, b, m, v);
    EXPECT_EQ(ops::channel_sums(a, b, v, m), ops::channel_sums(am, b, v));
    const ops::ChannelAffine grad{.ka = m.k0, .kb = m.ka, .cb = m.ca, .k0 = m.ka};
    EXPECT_EQ(values(ops::channel_affine(a, b, grad, v, m)),
              values(ops::channel_affine(am, b, grad, v)));
    EXPECT_EQ(values(ops::channel_affine(a, b, {.ka = m.ka}, v, m)),
              values(ops::channel_affine(am, {}, {.ka = m.ka}, v)));
    // The mask really masks: the zeros it makes are where the map is <= 0, and there are some
    // of each.
    const std::vector<double> av = values(a), amv = values(am);
    std::size_t zeroed = 0;
    for (std::size_t i = 0; i < av.size(); ++i) zeroed += amv[i] == 0.0 && av[i] != 0.0;
    EXPECT_GT(zeroed, av.size() / 10);
    EXPECT_LT(zeroed, av.size() * 9 / 10);
    if (dtype != DType::kFloat32) continue;
    // Blocked images (Note [Blocked images]): the same bits again.
    const ops::ChannelView bv{3, 16, 35, 8};
    EXPECT_EQ(values(ops::channel_affine(blocked8(b), {}, k_relu, bv)), values(blocked8(y)));
    EXPECT_EQ(ops::channel_sums(blocked8(a), blocked8(b), bv, m), ops::channel_sums(am, b, v));
    EXPECT_EQ(values(ops::channel_affine(blocked8(a), blocked8(b), grad, bv, m)),
              values(blocked8(ops::channel_affine(am, b, grad, v))));
  }
  // A mask needs the tensor it is computed from, and one coefficient per channel.
  const Tensor a = random(shape, 3, DType::kFloat32);
  EXPECT_THROW(ops::channel_sums(a, Tensor(), v, m), InvalidArgument);
  EXPECT_THROW(ops::channel_sums(a, a, v, mask_map(8)), InvalidArgument);
}

TEST(BatchNormRelu, AddNIsAxpyIntoACopyThenTheRelu) {
  for (const DType dtype : {DType::kFloat32, DType::kFloat64}) {
    SCOPED_TRACE(dtype_name(dtype));
    // Exact cancellations put some sums on the ReLU's 0.
    const Tensor a = random({4, 3, 5}, 4, dtype), c = random({4, 3, 5}, 6, dtype);
    Tensor b = random({4, 3, 5}, 5, dtype);
    std::vector<double> bv = values(b);
    const std::vector<double> av = values(a);
    for (std::size_t i = 0; i < bv.size(); i += 4) bv[i] = -av[i];
    b = ops::cast(Tensor::from_vector(bv, b.shape()), dtype);
    for (const std::vector<Tensor>& xs : {std::vector<Tensor>{a, b}, std::vector<Tensor>{a, b, c}}) {
      Tensor expect = xs[0].clone();
      for (std::size_t i = 1; i < xs.size(); ++i) ops::axpy(1.0, xs[i], expect);
      EXPECT_EQ(values(ops::add_n(xs)), values(expect));
      EXPECT_EQ(values(ops::add_n(xs, true)),
                values(ops::activation_forward(ops::Activation::kRelu, expect)));
    }
  }
  EXPECT_THROW(ops::add_n({random({2, 3}, 1, DType::kFloat32)}), InvalidArgument);
  EXPECT_THROW(ops::add_n({random({2, 3}, 1, DType::kFloat32), random({3, 2}, 2, DType::kFloat32)}),
               InvalidArgument);
}

TEST(BatchNormRelu, OnlyALayerWhoseOneReaderIsAReluIsPaired) {
  // conv -> bn_a -> relu (paired) -> conv -> bn_b -> add(bn_b, relu) -> relu (paired with the
  // Add): bn_b's reader is the Add, not a ReLU.
  nn::Sequential m = nn::make_model(
      nn::ModelSpec::from_json(nlohmann::json::parse(R"({"input_shape": [3, 8, 8], "layers": [
        {"type": "conv2d", "name": "c1", "inputs": ["input"], "filters": 8, "kernel": 3,
         "padding": "same", "use_bias": false},
        {"type": "batch_normalization", "name": "bn_a", "inputs": ["c1"]},
        {"type": "activation", "name": "r1", "inputs": ["bn_a"], "activation": "relu"},
        {"type": "conv2d", "name": "c2", "inputs": ["r1"], "filters": 8, "kernel": 3,
         "padding": "same", "use_bias": false},
        {"type": "batch_normalization", "name": "bn_b", "inputs": ["c2"]},
        {"type": "add", "name": "sum", "inputs": ["bn_b", "r1"]},
        {"type": "activation", "name": "r2", "inputs": ["sum"], "activation": "relu"},
        {"type": "global_average_pooling2d", "name": "pool", "inputs": ["r2"]},
        {"type": "dense", "name": "out", "inputs": ["pool"], "units": 2}]})"))
          .bind({{3, 8, 8}, DType::kFloat32, 2}),
      DType::kFloat32, Device::cpu(), 1);
  // Layers in spec order: c1 0, bn_a 1, r1 2, c2 3, bn_b 4, sum 5, r2 6, pool 7, out 8.
  std::vector<std::size_t> fused, done;
  for (std::size_t i = 0; i < m.layers().size(); ++i) {
    if (m.layers()[i]->fuses_relu()) fused.push_back(i);
    if (m.layers()[i]->relu_done_by_producer()) done.push_back(i);
  }
  EXPECT_EQ(fused, (std::vector<std::size_t>{1, 5}));
  EXPECT_EQ(done, (std::vector<std::size_t>{2, 6}));
}

/// Undoes Sequential's pairs: each ReLU runs as its own layer again.
void unpair(nn::Sequential& m) {
  for (auto& layer : m.layers()) {
    layer->set_fuses_relu(false);
    layer->set_relu_done_by_producer(false);
  }
}

nn::Sequential resnet() {
  const nn::DataShape data{{1, 28, 28}, DType::kFloat32, 10};
  return nn::make_model(nn::ModelSpec::builtin("resnet").bind(data), DType::kFloat32,
                        Device::cpu(), 5);
}

TEST(BatchNormRelu, TheResNetTrainsAndPredictsTheSameWithAndWithoutThePairs) {
  const Tensor x = random({4, 1, 28, 28}, 22, DType::kFloat32, 0.0, 1.0);
  for (const bool blocked : {true, false}) {
    // Two models from one seed, one with its pairs undone; each pass updates both models'
    // moving statistics alike.
    nn::Sequential paired = resnet(), apart = resnet();
    paired.set_blocked_images(blocked);
    apart.set_blocked_images(blocked);
    unpair(apart);
    std::size_t pairs = 0;
    for (auto& layer : paired.layers()) pairs += layer->fuses_relu();
    EXPECT_EQ(pairs, 13u) << "the stem's BatchNorm, each block's first one and its Add feed a "
                             "ReLU alone";
    for (const bool training : {true, false}) {
      for (const bool padded : {false, true}) {
        SCOPED_TRACE(std::string(blocked ? "blocked" : "plain") +
                     (training ? " training" : " inference") + (padded ? " padded" : ""));
        const Pass with = run_pass(paired, x, training, padded);
        const Pass without = run_pass(apart, x, training, padded);
        expect_same_pass(with, without, paired);
      }
    }
  }
}

TEST(BatchNormRelu, TheDeviceBatchNormPathRunsThePairedReluAsAnOp) {
  // Synchronized BatchNorm's device path (Note [Device batch norm]), forced onto the CPU.
  const bool previous = nn::force_device_batchnorm(true);
  const Tensor x = random({4, 1, 28, 28}, 23, DType::kFloat32, 0.0, 1.0);
  nn::Sequential paired = resnet(), apart = resnet();
  unpair(apart);
  for (nn::Sequential* m : {&paired, &apart}) {
    for (auto& layer : m->layers()) {
      if (auto* bn = dynamic_cast<nn::BatchNormalization*>(layer.get())) bn->set_synchronized(true);
    }
  }
  const Pass with = run_pass(paired, x);
  const Pass without = run_pass(apart, x);
  nn::force_device_batchnorm(previous);
  expect_same_pass(with, without, paired);
}

}  // namespace
}  // namespace mirror
