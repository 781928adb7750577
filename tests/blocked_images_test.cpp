// Note [Blocked images] (mirror/ops.h): convolutions, max pools, BatchNormalization's channel
// sums and affine maps, activations and Add that pass blocked images give exactly what the plain
// NCHW path gives (forward, gradients, pooling ties and padding, padded samples, the device
// BatchNorm path), Sequential blocks only the outputs every reader accepts, and a layer that
// takes no blocked input refuses one instead of misreading it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
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

/// A plain float32 NCHW tensor in the blocked layout (block b), built index by index.
Tensor blocked(const Tensor& plain, std::int64_t b) {
  const Shape& s = plain.shape();
  const std::vector<float> v = plain.to_vector<float>();
  std::vector<float> out(v.size());
  const std::int64_t hw = s[2] * s[3];
  for (std::int64_t n = 0; n < s[0]; ++n) {
    for (std::int64_t c = 0; c < s[1]; ++c) {
      for (std::int64_t q = 0; q < hw; ++q) {
        const std::int64_t at = ((n * (s[1] / b) + c / b) * hw + q) * b + c % b;
        out[static_cast<std::size_t>(at)] = v[static_cast<std::size_t>((n * s[1] + c) * hw + q)];
      }
    }
  }
  return Tensor::from_vector(out, {s[0], s[1] / b, s[2], s[3], b});
}

/// Values rounded to a few levels, so that max-pool windows hold ties.
Tensor with_ties(const Shape& shape, std::uint64_t seed) {
  std::vector<double> v = values(random(shape, seed));
  for (double& x : v) x = std::round(x * 2) / 2;
  return ops::cast(Tensor::from_vector(v, shape), DType::kFloat32);
}

TEST(BlockedImages, ConvolutionForwardAndGradientsEqualThePlainPath) {
  const ops::Conv2DGeometry g = ops::Conv2DGeometry::same(9, 9, 3, 3, 1, 1);
  const Tensor x = random({2, 3, 9, 9}, 1, DType::kFloat32);
  const Tensor w1 = random({32, 3, 3, 3}, 2, DType::kFloat32);
  const Tensor b1 = random({32}, 3, DType::kFloat32);
  const Tensor w2 = random({16, 32, 3, 3}, 4, DType::kFloat32);
  for (ops::Activation act :
       {ops::Activation::kIdentity, ops::Activation::kRelu, ops::Activation::kTanh}) {
    SCOPED_TRACE(static_cast<int>(act));
    // x -> conv1 (act) -> y1 -> conv2 -> y2: blocked y1 against plain y1.
    const Tensor y1 = ops::conv2d_forward(x, w1, b1, g, act, true);
    const std::int64_t b = ops::image_block(y1);
    ASSERT_GT(b, 0) << "the CPU convolution gave a plain output when asked for a blocked one: "
                    << y1.str();
    EXPECT_EQ(ops::image_shape(y1), (Shape{2, 32, 9, 9}));
    Tensor plain1 = ops::conv2d_forward(x, w1, b1, g);
    if (act != ops::Activation::kIdentity) plain1 = ops::activation_forward(act, plain1);
    EXPECT_EQ(values(ops::plain_image(y1)), values(plain1));

    const Tensor y2 = ops::conv2d_forward(y1, w2, Tensor(), g, ops::Activation::kIdentity, false);
    EXPECT_EQ(ops::image_block(y2), 0);
    EXPECT_EQ(values(y2), values(ops::conv2d_forward(plain1, w2, Tensor(), g)));

    // Backward of conv2 with dy plain, dx asked blocked like y1; and with dy blocked.
    const Tensor dy2 = random({2, 16, 9, 9}, 5, DType::kFloat32);
    const Tensor dx_blocked = ops::conv2d_backward_data(dy2, w2, {2, 32, 9, 9}, g, b);
    EXPECT_EQ(ops::image_block(dx_blocked), b);
    const Tensor dx_plain = ops::conv2d_backward_data(dy2, w2, {2, 32, 9, 9}, g);
    EXPECT_EQ(values(ops::plain_image(dx_blocked)), values(dx_plain));
    Tensor dw_blocked = Tensor::zeros({16, 32, 3, 3}), dw_plain = Tensor::zeros({16, 32, 3, 3});
    Tensor no_bias;
    ops::conv2d_backward_weights(y1, dy2, dw_blocked, no_bias, g);
    ops::conv2d_backward_weights(plain1, dy2, dw_plain, no_bias, g);
    EXPECT_EQ(values(dw_blocked), values(dw_plain));

    // conv1's weight gradient from a blocked dy.
    Tensor dw1_blocked = Tensor::zeros({32, 3, 3, 3}), dw1_plain = Tensor::zeros({32, 3, 3, 3});
    Tensor db1_blocked = Tensor::zeros({32}), db1_plain = Tensor::zeros({32});
    ops::conv2d_backward_weights(x, dx_blocked, dw1_blocked, db1_blocked, g);
    ops::conv2d_backward_weights(x, dx_plain, dw1_plain, db1_plain, g);
    EXPECT_EQ(values(dw1_blocked), values(dw1_plain));
    EXPECT_EQ(values(db1_blocked), values(db1_plain));
    const Tensor dx1 = ops::conv2d_backward_data(dx_blocked, w1, x.shape(), g, 0);
    EXPECT_EQ(values(dx1), values(ops::conv2d_backward_data(dx_plain, w1, x.shape(), g)));
  }
}

TEST(BlockedImages, MaxPoolTiesPaddingAndOddSizesEqualThePlainPath) {
  struct Case {
    ops::Pool2DGeometry g;
    std::int64_t h, w;
  };
  ops::Pool2DGeometry two;  // 2x2 stride 2
  ops::Pool2DGeometry three_same;
  three_same.k_h = three_same.k_w = 3;
  three_same.pad_top = three_same.pad_left = 0;
  three_same.pad_bottom = three_same.pad_right = 1;
  ops::Pool2DGeometry overlapping;  // 3x3 stride 1: windows share elements
  overlapping.k_h = overlapping.k_w = 3;
  overlapping.stride_h = overlapping.stride_w = 1;
  overlapping.pad_top = overlapping.pad_bottom = overlapping.pad_left = overlapping.pad_right = 1;
  for (const Case& c :
       {Case{two, 8, 8}, Case{two, 7, 9}, Case{three_same, 9, 8}, Case{overlapping, 6, 5}}) {
    SCOPED_TRACE("window " + std::to_string(c.g.k_h) + " stride " + std::to_string(c.g.stride_h) +
                 " input " + std::to_string(c.h) + "x" + std::to_string(c.w));
    for (std::int64_t b : {16, 8, 4}) {
      SCOPED_TRACE("block " + std::to_string(b));
      const Tensor x = with_ties({2, 32, c.h, c.w}, 11);
      const Tensor xb = blocked(x, b);
      const Tensor y = ops::maxpool2d_forward(x, c.g);
      const Tensor yb = ops::maxpool2d_forward(xb, c.g, true);
      ASSERT_EQ(ops::image_block(yb), b);
      EXPECT_EQ(values(ops::plain_image(yb)), values(y));
      const Tensor y_plain_out = ops::maxpool2d_forward(xb, c.g, false);
      EXPECT_EQ(y_plain_out.shape(), y.shape());
      EXPECT_EQ(values(y_plain_out), values(y));

      const Tensor dy = random(y.shape(), 12, DType::kFloat32);
      const Tensor dx = ops::maxpool2d_backward(x, y, dy, c.g);
      // dy blocked like a blocked y, or plain like a plain y: dx is blocked like x either way.
      const Tensor dxb = ops::maxpool2d_backward(xb, yb, blocked(dy, b), c.g);
      ASSERT_EQ(ops::image_block(dxb), b);
      EXPECT_EQ(values(ops::plain_image(dxb)), values(dx));
      const Tensor dxp = ops::maxpool2d_backward(xb, y_plain_out, dy, c.g);
      EXPECT_EQ(values(ops::plain_image(dxp)), values(dx));
      // With the ReLU mask of x (Note [ReLU through max pool]): the plain path's result.
      const Tensor relu_x = ops::activation_forward(ops::Activation::kRelu, x);
      const Tensor relu_y = ops::maxpool2d_forward(relu_x, c.g);
      const Tensor masked = ops::maxpool2d_backward(relu_x, relu_y, dy, c.g, true);
      const Tensor relu_xb = blocked(relu_x, b);
      const Tensor masked_b = ops::maxpool2d_backward(
          relu_xb, ops::maxpool2d_forward(relu_xb, c.g, true), blocked(dy, b), c.g, true);
      EXPECT_EQ(values(ops::plain_image(masked_b)), values(masked));
    }
  }
}

TEST(BlockedImages, ABackendWithoutThemOrAPlainOnlyOpRefusesABlockedTensor) {
  const Tensor xb = blocked(random({1, 16, 4, 4}, 1, DType::kFloat32), 8);
  // The plain-only entry points.
  EXPECT_THROW(ops::conv2d_forward(xb, Tensor::zeros({4, 16, 3, 3}), Tensor(),
                                   ops::Conv2DGeometry::valid(1, 1)),
               InvalidArgument);
  // float64 images are never blocked (the reference loops read NCHW).
  const Tensor x64 = ops::cast(xb, DType::kFloat64);
  EXPECT_THROW(
      ops::conv2d_forward(x64, Tensor::zeros({4, 16, 3, 3}, DType::kFloat64), Tensor(),
                          ops::Conv2DGeometry::valid(1, 1), ops::Activation::kIdentity, true),
      InvalidArgument);
  EXPECT_THROW(ops::maxpool2d_forward(x64, ops::Pool2DGeometry{}, true), InvalidArgument);
  // A grouped convolution takes no blocked input.
  ops::Conv2DGeometry grouped = ops::Conv2DGeometry::valid(1, 1);
  grouped.groups = 2;
  EXPECT_THROW(ops::conv2d_forward(xb, Tensor::zeros({4, 8, 3, 3}), Tensor(), grouped,
                                   ops::Activation::kIdentity, true),
               InvalidArgument);
}

/// Runs one forward and backward and returns the loss-free outputs and every gradient.
TEST(BlockedImages, TheCnnTrainsTheSameWithAndWithoutThem) {
  nn::Sequential m = nn::make_cnn();
  const Tensor x = random({4, 1, 28, 28}, 21, DType::kFloat32, 0.0, 1.0);
  // conv -> pool -> conv -> pool -> flatten: the first three outputs may be blocked, not the
  // second pool's (Flatten reads NCHW).
  std::vector<bool> allowed;
  for (auto& layer : m.layers()) allowed.push_back(layer->blocked_output_allowed());
  EXPECT_EQ(allowed, (std::vector<bool>{true, true, true, false, false, false, false, false}));
  // Note [ReLU through max pool]: each ReLU convolution's pool applies its mask.
  std::vector<bool> masked_by_reader, masks_input;
  for (auto& layer : m.layers()) {
    masked_by_reader.push_back(layer->relu_masked_by_reader());
    masks_input.push_back(layer->masks_input_relu());
  }
  EXPECT_EQ(masked_by_reader,
            (std::vector<bool>{true, false, true, false, false, false, false, false}));
  EXPECT_EQ(masks_input, (std::vector<bool>{false, true, false, true, false, false, false, false}));
  const Pass with = run_pass(m, x);
  // Without blocked images and with the ReLUs' own backward passes: the same bits.
  m.set_blocked_images(false);
  for (auto& layer : m.layers()) {
    EXPECT_FALSE(layer->blocked_output_allowed()) << layer->name();
    layer->set_relu_masked_by_reader(false);
    layer->set_masks_input_relu(false);
  }
  const Pass without = run_pass(m, x);
  expect_same_pass(with, without, m);
}

TEST(BlockedImages, OnlyOutputsEveryReaderAcceptsAreBlocked) {
  // conv -> batch norm -> conv -> pool -> flatten: BatchNormalization and the pool take blocked
  // images; the pool's output feeds Flatten, which reads NCHW, and may not be blocked.
  nn::Sequential m;
  m.add(std::make_unique<nn::Conv2D>(16, 3, 3, 1, nn::Padding::kSame));  // 0
  m.add(std::make_unique<nn::BatchNormalization>());                     // 1
  m.add(std::make_unique<nn::Conv2D>(16, 3, 3, 1, nn::Padding::kSame));  // 2
  m.add(std::make_unique<nn::MaxPool2D>(2));                             // 3
  m.add(std::make_unique<nn::Flatten>());                                // 4
  m.add(std::make_unique<nn::Dense>(3));                                 // 5
  m.build({3, 8, 8}, 1);
  std::vector<bool> allowed;
  for (auto& layer : m.layers()) allowed.push_back(layer->blocked_output_allowed());
  EXPECT_EQ(allowed, (std::vector<bool>{true, true, true, false, false, false}));
  const Tensor x = random({4, 3, 8, 8}, 2, DType::kFloat32);
  const Pass with = run_pass(m, x);
  m.set_blocked_images(false);
  const Pass without = run_pass(m, x);
  expect_same_pass(with, without, m);
  // BatchNorm given a blocked image but read by Flatten: it computes on the plain image and
  // hands the gradient back blocked.
  nn::Sequential m2;
  m2.add(std::make_unique<nn::Conv2D>(16, 3, 3, 1, nn::Padding::kSame));
  m2.add(std::make_unique<nn::BatchNormalization>());
  m2.add(std::make_unique<nn::Flatten>());
  m2.add(std::make_unique<nn::Dense>(3));
  m2.build({3, 8, 8}, 1);
  EXPECT_TRUE(m2.layers()[0]->blocked_output_allowed());
  EXPECT_FALSE(m2.layers()[1]->blocked_output_allowed());
  const Pass with2 = run_pass(m2, x);
  m2.set_blocked_images(false);
  const Pass without2 = run_pass(m2, x);
  expect_same_pass(with2, without2, m2);
}

TEST(BlockedImages, ChannelSumsAndAffineMapsGiveThePlainBits) {
  // Spatial sizes below, at and above the 32 summation lanes and not multiples of them.
  for (const std::int64_t b : {16, 8, 4}) {
    for (const Shape& shape : {Shape{3, 32, 7, 7}, Shape{2, 16, 28, 28}, Shape{5, 16, 1, 1},
                               Shape{2, 48, 4, 8}}) {
      if (shape[1] % b != 0) continue;
      SCOPED_TRACE(shape_str(shape) + " block " + std::to_string(b));
      const Tensor a = random(shape, 31, DType::kFloat32, -3.0, 5.0);
      const Tensor c = random(shape, 32, DType::kFloat32);
      const Tensor ab = blocked(a, b), cb = blocked(c, b);
      const std::int64_t channels = shape[1], inner = shape[2] * shape[3];
      const ops::ChannelView plain{shape[0], channels, inner};
      const ops::ChannelView view{shape[0], channels, inner, b};
      EXPECT_EQ(ops::channel_sums(ab, cb, view), ops::channel_sums(a, c, plain));
      EXPECT_EQ(ops::channel_sums(ab, ab, view), ops::channel_sums(a, a, plain));
      std::vector<double> ka, ca, kb, cc, k0;
      for (std::int64_t k = 0; k < channels; ++k) {
        ka.push_back(0.5 + 0.1 * static_cast<double>(k));
        ca.push_back(0.25 * static_cast<double>(k % 5) - 0.3);
        kb.push_back(-0.7 + 0.03 * static_cast<double>(k));
        cc.push_back(0.11 * static_cast<double>(k % 3));
        k0.push_back(1.0 / (1.0 + static_cast<double>(k)));
      }
      const ops::ChannelAffine one{.ka = ka, .ca = ca, .k0 = k0};
      const ops::ChannelAffine two{.ka = ka, .ca = ca, .kb = kb, .cb = cc, .k0 = k0};
      EXPECT_EQ(values(ops::channel_affine(ab, {}, one, view)),
                values(blocked(ops::channel_affine(a, {}, one, plain), b)));
      EXPECT_EQ(values(ops::channel_affine(ab, cb, two, view)),
                values(blocked(ops::channel_affine(a, c, two, plain), b)));
    }
  }
  // The layout must be said: a plain view of a blocked image, or a blocked view of a plain one,
  // would mix channels.
  const Tensor a = random({2, 16, 3, 3}, 33, DType::kFloat32);
  EXPECT_THROW(ops::channel_sums(blocked(a, 8), blocked(a, 8), {2, 16, 9}), InvalidArgument);
  EXPECT_THROW(ops::channel_sums(a, a, {2, 16, 9, 8}), InvalidArgument);
}

TEST(BlockedImages, BlockedImageAndPlainImageAreInverse) {
  const Tensor x = random({2, 32, 5, 3}, 34, DType::kFloat32);
  for (const std::int64_t b : {16, 8}) {
    const Tensor xb = ops::blocked_image(x, b);
    EXPECT_EQ(xb.shape(), (Shape{2, 32 / b, 5, 3, b}));
    EXPECT_EQ(values(xb), values(blocked(x, b)));
    EXPECT_EQ(values(ops::plain_image(xb)), values(x));
    EXPECT_EQ(values(ops::blocked_image(xb, 0)), values(x));
    // From one block to another goes through NCHW.
    EXPECT_EQ(values(ops::blocked_image(xb, b == 16 ? 8 : 16)), values(blocked(x, b == 16 ? 8 : 16)));
  }
  try {
    ops::blocked_image(random({1, 12, 2, 2}, 35, DType::kFloat32), 8);
    FAIL() << "12 channels were blocked by 8";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("divisible by 8"));
  }
  EXPECT_THROW(ops::blocked_image(random({1, 16, 2, 2}, 36, DType::kFloat64), 8), InvalidArgument);
}

TEST(BlockedImages, ActivationAndAddKeepOrConvertTheLayout) {
  nn::InitRng rng(1);
  nn::ForwardContext ctx;
  const Tensor x = random({2, 16, 3, 3}, 37, DType::kFloat32), z = random({2, 16, 3, 3}, 38);
  const Tensor xb = blocked(x, 8);
  const Tensor dy = random({2, 16, 3, 3}, 39, DType::kFloat32);
  // ReLU: blocked in, blocked out when allowed; plain out (and a blocked dx) when not.
  nn::ActivationLayer relu(ops::Activation::kRelu);
  relu.build({16, 3, 3}, DType::kFloat32, Device::cpu(), rng);
  const Tensor plain_y = ops::activation_forward(ops::Activation::kRelu, x);
  const Tensor plain_dx = ops::activation_backward(ops::Activation::kRelu, plain_y, dy);
  relu.set_blocked_output_allowed(true);
  EXPECT_EQ(values(relu.forward(xb, ctx)), values(blocked(plain_y, 8)));
  EXPECT_EQ(values(relu.backward(blocked(dy, 8))), values(blocked(plain_dx, 8)));
  relu.set_blocked_output_allowed(false);
  const Tensor y = relu.forward(xb, ctx);
  EXPECT_EQ(ops::image_block(y), 0);
  EXPECT_EQ(values(y), values(plain_y));
  const Tensor dx = relu.backward(dy);
  EXPECT_EQ(ops::image_block(dx), 8) << "the gradient goes back in its input's layout";
  EXPECT_EQ(values(dx), values(blocked(plain_dx, 8)));
  // Add of a blocked and a plain input: blocked when allowed, each gradient in its input's
  // layout.
  const Tensor zf = ops::cast(z, DType::kFloat32);
  Tensor sum = x.clone();
  ops::axpy(1.0, zf, sum);
  nn::Add add;
  add.build_inputs({{16, 3, 3}, {16, 3, 3}}, {"a", "b"}, DType::kFloat32, Device::cpu());
  for (const bool allowed : {true, false}) {
    SCOPED_TRACE(allowed);
    add.set_blocked_output_allowed(allowed);
    const Tensor s = add.forward_inputs({xb, zf}, ctx);
    EXPECT_EQ(ops::image_block(s), allowed ? 8 : 0);
    EXPECT_EQ(values(ops::plain_image(s)), values(sum));
    const std::vector<Tensor> d = add.backward_inputs(allowed ? blocked(dy, 8) : dy);
    ASSERT_EQ(d.size(), 2u);
    EXPECT_EQ(ops::image_block(d[0]), 8);
    EXPECT_EQ(ops::image_block(d[1]), 0);
    EXPECT_EQ(values(ops::plain_image(d[0])), values(dy));
    EXPECT_EQ(values(d[1]), values(dy));
  }
}

/// The shipped ResNet (examples/models/resnet.json) for [1, 28, 28] images and 10 classes.
nn::Sequential resnet() {
  const nn::DataShape data{{1, 28, 28}, DType::kFloat32, 10};
  return nn::make_model(nn::ModelSpec::builtin("resnet").bind(data), DType::kFloat32,
                        Device::cpu(), 5);
}

TEST(BlockedImages, TheResNetTrainsTheSameWithAndWithoutThem) {
  nn::Sequential m = resnet();
  // Every convolution, BatchNorm, ReLU and Add output may stay blocked except the last ReLU's
  // (global average pooling reads NCHW) and the pooling and Dense at the end.
  const auto& layers = m.layers();
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const bool tail = i + 3 >= layers.size();
    EXPECT_EQ(layers[i]->blocked_output_allowed(), !tail) << layers[i]->name();
  }
  const Tensor x = random({4, 1, 28, 28}, 22, DType::kFloat32, 0.0, 1.0);
  const Pass with = run_pass(m, x);
  // A padded batch: BatchNorm leaves padding out of its statistics and gives it no gradient, on
  // the blocked layout too.
  const Pass with_padding = run_pass(m, x, true, true);
  m.set_blocked_images(false);
  const Pass without = run_pass(m, x);
  const Pass without_padding = run_pass(m, x, true, true);
  expect_same_pass(with, without, m);
  expect_same_pass(with_padding, without_padding, m);
}

TEST(BlockedImages, TheDeviceBatchNormPathConvertsAroundItself) {
  // Synchronized BatchNorm's device path (Note [Device batch norm]) takes plain images; forced
  // onto the CPU, the ResNet must train the same with blocked images between the layers.
  const bool previous = nn::force_device_batchnorm(true);
  nn::Sequential m = resnet();
  for (auto& layer : m.layers()) {
    if (auto* bn = dynamic_cast<nn::BatchNormalization*>(layer.get())) bn->set_synchronized(true);
  }
  const Tensor x = random({4, 1, 28, 28}, 23, DType::kFloat32, 0.0, 1.0);
  const Pass with = run_pass(m, x);
  m.set_blocked_images(false);
  const Pass without = run_pass(m, x);
  nn::force_device_batchnorm(previous);
  expect_same_pass(with, without, m);
}

TEST(BlockedImages, ALayerThatTakesOnlyPlainImagesRefusesABlockedOne) {
  nn::Flatten flatten;
  nn::InitRng rng(1);
  flatten.set_name("flatten_1");
  flatten.build({16, 4, 4}, DType::kFloat32, Device::cpu(), rng);
  nn::ForwardContext ctx;
  const Tensor xb = blocked(random({2, 16, 4, 4}, 1, DType::kFloat32), 8);
  try {
    flatten.forward(xb, ctx);
    FAIL() << "Flatten read a blocked image";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("flatten_1"));
  }
}

}  // namespace
}  // namespace mirror
