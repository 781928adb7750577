// The shape layers, GlobalMaxPooling2D, SpatialDropout, TimeDistributed, Conv2DTranspose and the
// element-wise merges (nn/keras_layers.h): values against direct computations of Keras's
// definitions, gradients against float64 central differences, and the Keras fixtures that use
// them (tests/data/keras/*.keras.json) read, bound and trained.
#include "mirror/nn/keras_layers.h"

#include <gtest/gtest.h>

#include "gradcheck.h"
#include "mirror/nn/models.h"

namespace mirror::nn {
namespace {

using testing::built;
using testing::check_layer;
using testing::expect_gradients_within;
using testing::random_tensor;

std::vector<double> v(const Tensor& t) { return t.to_vector<double>(); }

// ---------------------------------------------------------------- values

// Note [Channels-last layouts]: Keras reshapes [H, W, C] in that order.
TEST(KerasReshape, ChannelsLastReadsImagesAsKerasDoes) {
  Reshape r({6, 2}, true);
  built(r, {2, 2, 3});  // Mirror [C=2, H=2, W=3] = Keras [H=2, W=3, C=2]
  const Tensor x = random_tensor({1, 2, 2, 3}, 1);
  ForwardContext ctx;
  const std::vector<double> y = v(r.forward(x, ctx)), xs = v(x);
  ASSERT_EQ(y.size(), 12u);
  for (int h = 0; h < 2; ++h)
    for (int w = 0; w < 3; ++w)
      for (int c = 0; c < 2; ++c) {
        EXPECT_EQ(y[static_cast<std::size_t>((h * 3 + w) * 2 + c)],
                  xs[static_cast<std::size_t>((c * 2 + h) * 3 + w)]);
      }
  // Back to an image: Keras [H=3, W=2, C=2] is Mirror [2, 3, 2]; the round trip is exact.
  Reshape back({3, 2, 2}, true);
  built(back, {6, 2}, "layer_2");
  const Tensor img = back.forward(r.forward(x, ctx), ctx);
  EXPECT_EQ(img.shape(), (Shape{1, 2, 3, 2}));
  Reshape mirror_order({12}, false);
  built(mirror_order, {2, 2, 3}, "layer_3");
  EXPECT_EQ(v(mirror_order.forward(x, ctx)), xs);  // channels first: Mirror's own order
}

TEST(KerasPermute, SwapsKerasAxes) {
  Permute p({2, 1, 3}, true);  // Keras [H, W, C] -> [W, H, C]
  built(p, {3, 2, 4});
  const Tensor x = random_tensor({1, 3, 2, 4}, 2);
  ForwardContext ctx;
  const Tensor y = p.forward(x, ctx);
  ASSERT_EQ(y.shape(), (Shape{1, 3, 4, 2}));  // Mirror [C, W, H]
  const std::vector<double> ys = v(y), xs = v(x);
  for (int c = 0; c < 3; ++c)
    for (int h = 0; h < 2; ++h)
      for (int w = 0; w < 4; ++w) {
        EXPECT_EQ(ys[static_cast<std::size_t>((c * 4 + w) * 2 + h)],
                  xs[static_cast<std::size_t>((c * 2 + h) * 4 + w)]);
      }
  Permute seq({2, 1}, true);
  built(seq, {5, 3}, "layer_2");
  EXPECT_EQ(seq.forward(random_tensor({2, 5, 3}, 3), ctx).shape(), (Shape{2, 3, 5}));
}

TEST(KerasRepeatVector, RepeatsAndEndsTheLengths) {
  RepeatVector r(3);
  built(r, {4});
  const Tensor x = random_tensor({2, 4}, 3);
  ForwardContext ctx;
  ctx.lengths = {1, 2};
  const std::vector<double> y = v(r.forward(x, ctx)), xs = v(x);
  EXPECT_TRUE(ctx.lengths.empty());
  for (int n = 0; n < 2; ++n)
    for (int t = 0; t < 3; ++t)
      for (int f = 0; f < 4; ++f) {
        EXPECT_EQ(y[static_cast<std::size_t>((n * 3 + t) * 4 + f)],
                  xs[static_cast<std::size_t>(n * 4 + f)]);
      }
}

TEST(KerasUpSampling, RepeatsEachPixel) {
  UpSampling2D u(2, 3);
  built(u, {1, 2, 2});
  const Tensor x = Tensor::from_vector(std::vector<double>{1, 2, 3, 4}, {1, 1, 2, 2});
  ForwardContext ctx;
  EXPECT_EQ(v(u.forward(x, ctx)), (std::vector<double>{1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2,
                                                       3, 3, 3, 4, 4, 4, 3, 3, 3, 4, 4, 4}));
  // Each input pixel's gradient is the sum over its 6 copies.
  std::vector<double> dy(24);
  for (std::size_t i = 0; i < dy.size(); ++i) dy[i] = static_cast<double>(i);
  EXPECT_EQ(v(u.backward(Tensor::from_vector(dy, {1, 1, 4, 6}))),
            (std::vector<double>{0 + 1 + 2 + 6 + 7 + 8, 3 + 4 + 5 + 9 + 10 + 11,
                                 12 + 13 + 14 + 18 + 19 + 20, 15 + 16 + 17 + 21 + 22 + 23}));
}

TEST(KerasCropping, CropsAndPadsBack) {
  Cropping2D c(1, 0, 0, 2);
  built(c, {1, 3, 3});
  const Tensor x =
      Tensor::from_vector(std::vector<double>{1, 2, 3, 4, 5, 6, 7, 8, 9}, {1, 1, 3, 3});
  ForwardContext ctx;
  EXPECT_EQ(v(c.forward(x, ctx)), (std::vector<double>{4, 7}));
  EXPECT_EQ(v(c.backward(Tensor::from_vector(std::vector<double>{1, 2}, {1, 1, 2, 1}))),
            (std::vector<double>{0, 0, 0, 1, 0, 0, 2, 0, 0}));
  Cropping2D all(2, 1, 0, 0);
  all.set_name("cropping2d_2");
  InitRng rng(1);
  EXPECT_THROW(all.build({1, 3, 3}, DType::kFloat64, Device::cpu(), rng), InvalidArgument);
}

TEST(KerasGlobalMaxPooling, TakesEachPlanesMaximum) {
  GlobalMaxPooling2D g;
  built(g, {2, 2, 2});
  const Tensor x =
      Tensor::from_vector(std::vector<double>{1, 5, 3, 2, -1, -4, -2, -3}, {1, 2, 2, 2});
  ForwardContext ctx;
  EXPECT_EQ(v(g.forward(x, ctx)), (std::vector<double>{5, -1}));
  EXPECT_EQ(v(g.backward(Tensor::from_vector(std::vector<double>{1, 2}, {1, 2}))),
            (std::vector<double>{0, 1, 0, 0, 2, 0, 0, 0}));
}

TEST(KerasSpatialDropout, DropsWholeChannelsBySampleId) {
  SpatialDropout d(0.5, 3);
  built(d, {8, 3, 3});
  ForwardContext ctx;
  ctx.training = true;
  ctx.seed = 9;
  ctx.sample_ids = Tensor::from_vector(std::vector<std::int64_t>{4, 7}, {2});
  Tensor x = Tensor::empty({2, 8, 3, 3}, DType::kFloat64);
  ops::fill(x, 1.0);
  const std::vector<double> y = v(d.forward(x, ctx));
  int dropped = 0;
  for (int n = 0; n < 2; ++n) {
    for (int c = 0; c < 8; ++c) {
      const double first = y[static_cast<std::size_t>((n * 8 + c) * 9)];
      EXPECT_TRUE(first == 0.0 || first == 2.0);
      dropped += first == 0.0;
      for (int p = 1; p < 9; ++p)
        EXPECT_EQ(y[static_cast<std::size_t>((n * 8 + c) * 9 + p)], first);
    }
  }
  EXPECT_GT(dropped, 0);
  EXPECT_LT(dropped, 16);
  // Sample 7 alone (another replica's batch) gets the same channels.
  ctx.sample_ids = Tensor::from_vector(std::vector<std::int64_t>{7}, {1});
  Tensor one = Tensor::empty({1, 8, 3, 3}, DType::kFloat64);
  ops::fill(one, 1.0);
  const std::vector<double> alone = v(d.forward(one, ctx));
  EXPECT_EQ(alone, std::vector<double>(y.begin() + 72, y.end()));
  ctx.training = false;
  EXPECT_EQ(v(d.forward(x, ctx)), std::vector<double>(144, 1.0));
}

TEST(KerasTimeDistributed, AppliesTheLayerToEveryStep) {
  TimeDistributed td(std::make_unique<Dense>(3));
  built(td, {4, 5});
  EXPECT_EQ(td.parameters()[0]->name, "layer_1/dense/kernel");
  const Tensor x = random_tensor({2, 4, 5}, 4);
  ForwardContext ctx;
  const std::vector<double> y = v(td.forward(x, ctx)), xs = v(x);
  const std::vector<double> k = v(td.parameters()[0]->value);
  ASSERT_EQ(y.size(), 24u);
  for (int n = 0; n < 2; ++n)
    for (int t = 0; t < 4; ++t)
      for (int u = 0; u < 3; ++u) {
        double want = 0;  // zero bias
        for (int f = 0; f < 5; ++f)
          want += xs[static_cast<std::size_t>((n * 4 + t) * 5 + f)] *
                  k[static_cast<std::size_t>(f * 3 + u)];
        EXPECT_NEAR(y[static_cast<std::size_t>((n * 4 + t) * 3 + u)], want, 1e-12);
      }
}

/// Conv2DTranspose by its definition: every input pixel scatters kernel * value into the output
/// at (i * stride + kh - pad_top, j * stride + kw - pad_left).
std::vector<double> transpose_conv(const std::vector<double>& x, const std::vector<double>& w,
                                   const Shape& xs, int filters, int k, int s, int pad, int oh,
                                   int ow) {
  const int c = static_cast<int>(xs[1]), h = static_cast<int>(xs[2]), wd = static_cast<int>(xs[3]);
  std::vector<double> y(static_cast<std::size_t>(filters * oh * ow), 0.0);
  for (int ci = 0; ci < c; ++ci)
    for (int i = 0; i < h; ++i)
      for (int j = 0; j < wd; ++j)
        for (int o = 0; o < filters; ++o)
          for (int a = 0; a < k; ++a)
            for (int b = 0; b < k; ++b) {
              const int r = i * s + a - pad, q = j * s + b - pad;
              if (r < 0 || q < 0 || r >= oh || q >= ow) continue;
              y[static_cast<std::size_t>((o * oh + r) * ow + q)] +=
                  x[static_cast<std::size_t>((ci * h + i) * wd + j)] *
                  w[static_cast<std::size_t>(((ci * filters + o) * k + a) * k + b)];
            }
  return y;
}

TEST(KerasConv2DTranspose, SizesAndValuesAreKerass) {
  struct Case {
    Padding padding;
    int k, s, pad, out;  // input 3x3
  };
  for (const Case c : {Case{Padding::kSame, 3, 2, 0, 6}, Case{Padding::kValid, 3, 2, 0, 7},
                       Case{Padding::kSame, 4, 2, 1, 6}, Case{Padding::kValid, 1, 2, 0, 6}}) {
    Conv2DTranspose t(2, c.k, c.k, c.s, c.padding, Activation::kIdentity, false);
    EXPECT_EQ(built(t, {3, 3, 3}).parameters().size(), 1u);
    InitRng rng(1);
    Conv2DTranspose probe(2, c.k, c.k, c.s, c.padding, Activation::kIdentity, false);
    probe.set_name("p");
    ASSERT_EQ(probe.build({3, 3, 3}, DType::kFloat64, Device::cpu(), rng),
              (Shape{2, c.out, c.out}));
    const Tensor x = random_tensor({1, 3, 3, 3}, 5);
    ForwardContext ctx;
    const std::vector<double> y = v(t.forward(x, ctx));
    const std::vector<double> want = transpose_conv(v(x), v(t.parameters()[0]->value), x.shape(), 2,
                                                    c.k, c.s, c.pad, c.out, c.out);
    ASSERT_EQ(y.size(), want.size());
    for (std::size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y[i], want[i], 1e-12) << i;
  }
}

TEST(KerasMerges, MultiplySubtractAverage) {
  const Tensor a = Tensor::from_vector(std::vector<double>{1, 2}, {1, 2});
  const Tensor b = Tensor::from_vector(std::vector<double>{3, -1}, {1, 2});
  const Tensor c = Tensor::from_vector(std::vector<double>{2, 4}, {1, 2});
  ForwardContext ctx;
  ElementwiseMerge mul(ElementwiseMerge::Op::kMultiply), sub(ElementwiseMerge::Op::kSubtract),
      avg(ElementwiseMerge::Op::kAverage);
  for (ElementwiseMerge* m : {&mul, &sub, &avg}) m->set_name(m->kind() + "_1");
  mul.build_inputs({{2}, {2}, {2}}, {"a", "b", "c"}, DType::kFloat64, Device::cpu());
  sub.build_inputs({{2}, {2}}, {"a", "b"}, DType::kFloat64, Device::cpu());
  avg.build_inputs({{2}, {2}, {2}}, {"a", "b", "c"}, DType::kFloat64, Device::cpu());
  EXPECT_EQ(v(mul.forward_inputs({a, b, c}, ctx)), (std::vector<double>{6, -8}));
  EXPECT_EQ(v(sub.forward_inputs({a, b}, ctx)), (std::vector<double>{-2, 3}));
  const std::vector<double> mean = v(avg.forward_inputs({a, b, c}, ctx));
  EXPECT_DOUBLE_EQ(mean[0], 2);
  EXPECT_DOUBLE_EQ(mean[1], 5.0 / 3);
  const Tensor dy = Tensor::from_vector(std::vector<double>{1, 1}, {1, 2});
  const auto g = mul.backward_inputs(dy);
  EXPECT_EQ(v(g[0]), (std::vector<double>{6, -4}));  // b * c
  EXPECT_EQ(v(g[2]), (std::vector<double>{3, -2}));  // a * b
  EXPECT_EQ(v(sub.backward_inputs(dy)[1]), (std::vector<double>{-1, -1}));
  EXPECT_THROW(sub.build_inputs({{2}, {2}, {2}}, {"a", "b", "c"}, DType::kFloat64, Device::cpu()),
               InvalidArgument);
  EXPECT_THROW(mul.build_inputs({{2}, {3}}, {"a", "b"}, DType::kFloat64, Device::cpu()),
               InvalidArgument);
}

// ---------------------------------------------------------------- gradients

TEST(KerasLayersGrad, MatchFiniteDifferences) {
  ForwardContext ctx;
  ctx.training = true;
  ctx.seed = 3;
  ctx.sample_ids = Tensor::from_vector(std::vector<std::int64_t>{0, 1}, {2});
  auto check = [&](Layer& l, const Shape& in, std::size_t tensors) {
    SCOPED_TRACE(l.kind());
    Shape batch = {2};
    batch.insert(batch.end(), in.begin(), in.end());
    const auto r = check_layer(built(l, in), random_tensor(batch, 11), ctx);
    expect_gradients_within(r, tensors);
  };
  Reshape reshape({6, 4}, true);
  check(reshape, {2, 3, 4}, 1);
  Permute permute({3, 1, 2}, true);
  check(permute, {2, 3, 4}, 1);
  RepeatVector repeat(3);
  check(repeat, {5}, 1);
  Cropping2D crop(1, 0, 2, 1);
  check(crop, {2, 4, 5}, 1);
  UpSampling2D up(2, 3);
  check(up, {2, 2, 3}, 1);
  GlobalMaxPooling2D gmp;
  check(gmp, {3, 3, 4}, 1);
  SpatialDropout sd1(0.4, 2), sd2(0.4, 3);
  check(sd1, {4, 6}, 1);
  check(sd2, {5, 2, 3}, 1);
  TimeDistributed td(std::make_unique<Dense>(3, Activation::kTanh));
  check(td, {4, 5}, 3);
  for (Padding p : {Padding::kSame, Padding::kValid}) {
    Conv2DTranspose ct(3, 3, 2, 2, p, Activation::kTanh, true);
    check(ct, {2, 3, 4}, 3);
  }
}

TEST(KerasMergesGrad, MatchFiniteDifferences) {
  for (auto op : {ElementwiseMerge::Op::kMultiply, ElementwiseMerge::Op::kSubtract,
                  ElementwiseMerge::Op::kAverage}) {
    ElementwiseMerge m(op);
    m.set_name(m.kind() + "_1");
    const std::size_t n = op == ElementwiseMerge::Op::kSubtract ? 2 : 3;
    std::vector<Shape> shapes(n, Shape{2, 3});
    m.build_inputs(shapes, std::vector<std::string>(n, "x"), DType::kFloat64, Device::cpu());
    std::vector<Tensor> xs;
    for (std::size_t i = 0; i < n; ++i) xs.push_back(random_tensor({2, 2, 3}, 20 + i));
    ForwardContext ctx;
    const Tensor w = random_tensor({2, 2, 3}, 30);
    m.forward_inputs(xs, ctx);
    const auto grads = m.backward_inputs(w);
    for (std::size_t i = 0; i < n; ++i) {
      const auto numeric = testing::numeric_gradient(
          xs[i], [&] { return testing::weighted_sum(m.forward_inputs(xs, ctx), w); });
      EXPECT_LE(testing::relative_error(v(grads[i]), numeric), 1e-8) << m.kind() << " input " << i;
    }
  }
}

// ---------------------------------------------------------------- the Keras fixtures

std::string fixture(const std::string& name) {
  return std::string(MIRROR_SOURCE_DIR) + "/tests/data/keras/" + name + ".keras.json";
}

/// Reads, binds and builds a fixture and runs one forward and backward pass.
void train_once(const std::string& name, const DataShape& data, const Shape& batch) {
  SCOPED_TRACE(name);
  const ModelSpec spec = ModelSpec::from_file(fixture(name)).bind(data);
  Sequential m = make_model(spec, DType::kFloat32, Device::cpu(), 1);
  ForwardContext ctx;
  ctx.training = true;
  std::vector<std::int64_t> ids(static_cast<std::size_t>(batch[0]));
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int64_t>(i);
  ctx.sample_ids = Tensor::from_vector(ids, {batch[0]});
  const Tensor x = ops::cast(random_tensor(batch, 3), DType::kFloat32);
  const Tensor y = m.forward(x, ctx);
  EXPECT_EQ(y.shape(), (Shape{batch[0], data.outputs}));
  m.backward(ops::cast(random_tensor(y.shape(), 4), DType::kFloat32));
  double norm = 0;
  for (Parameter* p : m.parameters()) norm += ops::sum_squares(p->grad);
  EXPECT_GT(norm, 0);
}

TEST(KerasFixtures, UnetAndSeq2seqTrain) {
  train_once("unet", {{1, 16, 16}, DType::kFloat32, 256, 0}, {2, 1, 16, 16});
  train_once("seq2seq_repeat", {{10, 4}, DType::kFloat32, 18, 0}, {2, 10, 4});
}

TEST(KerasFixtures, RefusedFieldsAreNamed) {
  auto parse = [](const std::string& layer) {
    return ModelSpec::from_json(nlohmann::json::parse(
        R"({"class_name": "Sequential", "config": {"layers": [)" + layer + "]}}"));
  };
  try {
    parse(R"({"class_name": "UpSampling2D", "config": {"size": 2, "interpolation": "bilinear"}})");
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("'interpolation': only \"nearest\""), std::string::npos)
        << e.what();
  }
  try {
    parse(
        R"({"class_name": "TimeDistributed", "config": {"layer": {"class_name": "GRU", "config": {"units": 3}}}})");
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("applies gru to whole samples only"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(
      parse(
          R"({"class_name": "Conv2DTranspose", "config": {"filters": 2, "kernel_size": 3, "output_padding": [1, 1]}})"),
      InvalidArgument);
  // A Reshape that does not fit is named by bind.
  const ModelSpec bad = parse(R"({"class_name": "Reshape", "config": {"target_shape": [5, 7]}})");
  try {
    bad.bind({{4, 4}, DType::kFloat32, 35, 0});
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("layer 0 (reshape): cannot reshape [4,4]"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace mirror::nn
