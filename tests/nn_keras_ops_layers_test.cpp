// The parametric activations (ReLU with max_value / negative_slope / threshold, LeakyReLU, ELU),
// Maximum / Minimum, grouped convolutions, DepthwiseConv2D and SeparableConv2D
// (nn/keras_ops_layers.h) and their ops: values against Keras's definitions written here,
// oneDNN's grouped (float32) path against the float64 reference loops, gradients against
// central differences, and the MobileNet-style and image-layers Keras fixtures.
#include "mirror/nn/keras_ops_layers.h"

#include <gtest/gtest.h>

#include <cmath>

#include "gradcheck.h"
#include "mirror/nn/models.h"
#include "mirror/precision.h"

namespace mirror::nn {
namespace {

using testing::built;
using testing::check_layer;
using testing::expect_gradients_within;
using testing::random_tensor;

std::vector<double> v(const Tensor& t) { return t.to_vector<double>(); }

ops::Eltwise relu(double max_value, double slope, double threshold) {
  ops::Eltwise f;
  f.max_value = max_value;
  f.negative_slope = slope;
  f.threshold = threshold;
  return f;
}

/// Keras's ReLU.static_call, written from its source's steps.
double keras_relu(double x, double max_value, double slope, double threshold) {
  if (slope != 0 && max_value < 0 && threshold == 0) return x >= 0 ? x : slope * x;
  const double negative = slope != 0 ? std::max(threshold - x, 0.0) : 0.0;
  double y = threshold != 0 ? (x > threshold ? x : 0.0) : std::max(x, 0.0);
  if (max_value >= 0) y = std::min(std::max(y, 0.0), max_value);
  return y - slope * negative;
}

TEST(ParametricActivations, ComputeKerassFunctions) {
  const std::vector<double> xs = {-3, -0.7, -0.1, 0.05, 0.3, 0.9, 2.5, 7};
  const Tensor x = Tensor::from_vector(xs, {1, 8});
  struct Case {
    double max_value, slope, threshold;
  };
  for (const Case c : {Case{6, 0, 0}, Case{2, 0.1, 0.2}, Case{-1, 0.2, 0}, Case{-1, 0.3, 0.5},
                       Case{1, 0, -0.5}, Case{-1, 0, 0.25}}) {
    ops::Eltwise f = relu(c.max_value, c.slope, c.threshold);
    if (c.max_value < 0 && c.threshold == 0) f.kind = ops::Eltwise::Kind::kLeakyRelu;
    const std::vector<double> y = v(ops::eltwise_forward(f, x));
    for (std::size_t i = 0; i < xs.size(); ++i) {
      EXPECT_DOUBLE_EQ(y[i], keras_relu(xs[i], c.max_value, c.slope, c.threshold))
          << "x " << xs[i] << " max " << c.max_value << " slope " << c.slope << " threshold "
          << c.threshold;
    }
  }
  ops::Eltwise elu;
  elu.kind = ops::Eltwise::Kind::kElu;
  elu.alpha = 0.5;
  const std::vector<double> y = v(ops::eltwise_forward(elu, x));
  for (std::size_t i = 0; i < xs.size(); ++i) {
    EXPECT_DOUBLE_EQ(y[i], xs[i] > 0 ? xs[i] : 0.5 * std::expm1(xs[i]));
  }
}

TEST(ParametricActivations, MatchFiniteDifferences) {
  ForwardContext ctx;
  for (const ops::Eltwise& f : {relu(6, 0, 0), relu(1.5, 0.1, 0.2), relu(-1, 0.3, -0.4)}) {
    ParametricActivation a(f);
    const auto r = check_layer(built(a, {4, 5}), random_tensor({3, 4, 5}, 3, -2, 8), ctx);
    expect_gradients_within(r, 1);
  }
  ops::Eltwise elu;
  elu.kind = ops::Eltwise::Kind::kElu;
  ParametricActivation e(elu);
  expect_gradients_within(check_layer(built(e, {6}), random_tensor({3, 6}, 4, -3, 3), ctx), 1);
}

TEST(ExtremumMerge, TakesTheLargestAndRoutesTheGradient) {
  ForwardContext ctx;
  for (const bool minimum : {false, true}) {
    Extremum m(minimum);
    m.set_name(m.kind() + "_1");
    m.build_inputs({{4}, {4}, {4}}, {"a", "b", "c"}, DType::kFloat64, Device::cpu());
    const Tensor a = Tensor::from_vector(std::vector<double>{1, 5, -2, 0}, {1, 4});
    const Tensor b = Tensor::from_vector(std::vector<double>{3, 2, -1, 7}, {1, 4});
    const Tensor c = Tensor::from_vector(std::vector<double>{2, 6, -3, 1}, {1, 4});
    EXPECT_EQ(v(m.forward_inputs({a, b, c}, ctx)),
              minimum ? (std::vector<double>{1, 2, -3, 0}) : (std::vector<double>{3, 6, -1, 7}));
    const auto g = m.backward_inputs(Tensor::from_vector(std::vector<double>{1, 2, 3, 4}, {1, 4}));
    const std::vector<double> ga = v(g[0]), gb = v(g[1]), gc = v(g[2]);
    for (std::size_t i = 0; i < 4; ++i)
      EXPECT_EQ(ga[i] + gb[i] + gc[i], static_cast<double>(i + 1));
    EXPECT_EQ(minimum ? ga[0] : gb[0], 1.0);
    EXPECT_EQ(gc[minimum ? 2 : 1], minimum ? 3.0 : 2.0);
  }
}

/// A grouped convolution by its definition (valid padding, stride s).
std::vector<double> grouped_conv(const Tensor& x, const Tensor& w, int groups, int s) {
  const auto n = x.dim(0), c = x.dim(1), h = x.dim(2), wd = x.dim(3);
  const auto o = w.dim(0), cg = w.dim(1), kh = w.dim(2), kw = w.dim(3), og = o / groups;
  const auto oh = (h - kh) / s + 1, ow = (wd - kw) / s + 1;
  const std::vector<double> xs = v(x), ws = v(w);
  std::vector<double> y(static_cast<std::size_t>(n * o * oh * ow), 0.0);
  for (std::int64_t b = 0; b < n; ++b)
    for (std::int64_t oc = 0; oc < o; ++oc)
      for (std::int64_t i = 0; i < oh; ++i)
        for (std::int64_t j = 0; j < ow; ++j) {
          double acc = 0;
          for (std::int64_t k = 0; k < cg; ++k)
            for (std::int64_t a = 0; a < kh; ++a)
              for (std::int64_t q = 0; q < kw; ++q) {
                const std::int64_t ci = oc / og * cg + k;
                acc +=
                    xs[static_cast<std::size_t>(((b * c + ci) * h + i * s + a) * wd + j * s + q)] *
                    ws[static_cast<std::size_t>(((oc * cg + k) * kh + a) * kw + q)];
              }
          y[static_cast<std::size_t>(((b * o + oc) * oh + i) * ow + j)] = acc;
        }
  (void)c;
  return y;
}

TEST(GroupedConv, ReferenceAndOneDnnComputeTheDefinition) {
  for (const int groups : {2, 6}) {
    const Tensor x = random_tensor({2, 6, 7, 6}, 1), w = random_tensor({12, 6 / groups, 3, 2}, 2);
    ops::Conv2DGeometry g = ops::Conv2DGeometry::valid(2, 2);
    g.groups = groups;
    const std::vector<double> want = grouped_conv(x, w, groups, 2);
    const std::vector<double> ref = v(ops::conv2d_forward(x, w, Tensor(), g));  // float64 loops
    const std::vector<double> dnnl = v(ops::cast(  // float32: oneDNN with goihw weights
        ops::conv2d_forward(ops::cast(x, DType::kFloat32), ops::cast(w, DType::kFloat32), Tensor(),
                            g),
        DType::kFloat64));
    ASSERT_EQ(ref.size(), want.size());
    for (std::size_t i = 0; i < want.size(); ++i) {
      EXPECT_NEAR(ref[i], want[i], 1e-12);
      EXPECT_NEAR(dnnl[i], want[i], 1e-5);
    }
    // oneDNN's backward passes agree with the reference loops.
    const Tensor dy = random_tensor(ops::conv2d_forward(x, w, Tensor(), g).shape(), 3);
    const std::vector<double> dx64 = v(ops::conv2d_backward_data(dy, w, x.shape(), g));
    const std::vector<double> dx32 =
        v(ops::cast(ops::conv2d_backward_data(ops::cast(dy, DType::kFloat32),
                                              ops::cast(w, DType::kFloat32), x.shape(), g),
                    DType::kFloat64));
    for (std::size_t i = 0; i < dx64.size(); ++i) EXPECT_NEAR(dx32[i], dx64[i], 1e-5);
    Tensor dw64 = Tensor::zeros(w.shape(), DType::kFloat64), none;
    Tensor dw32 = Tensor::zeros(w.shape(), DType::kFloat32);
    ops::conv2d_backward_weights(x, dy, dw64, none, g);
    ops::conv2d_backward_weights(ops::cast(x, DType::kFloat32), ops::cast(dy, DType::kFloat32),
                                 dw32, none, g);
    const std::vector<double> a = v(dw64), b = v(ops::cast(dw32, DType::kFloat64));
    for (std::size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(b[i], a[i], 1e-4);
  }
}

TEST(DepthwiseConv, IsAGroupedConvolutionInKerassChannelOrder) {
  DepthwiseConv2D d(3, 3, 1, Padding::kValid, 2, Activation::kIdentity, false);
  built(d, {3, 5, 5});
  ASSERT_EQ(d.parameters().size(), 1u);
  EXPECT_EQ(d.parameters()[0]->value.shape(), (Shape{6, 1, 3, 3}));
  const Tensor x = random_tensor({1, 3, 5, 5}, 5);
  ForwardContext ctx;
  const std::vector<double> y = v(d.forward(x, ctx));
  EXPECT_EQ(y, grouped_conv(x, d.parameters()[0]->value, 3, 1));  // channel c * 2 + j reads c
}

TEST(DepthwiseConv, SeparableIsDepthwiseThenPointwise) {
  DepthwiseConv2D s(3, 3, 2, Padding::kSame, 2, Activation::kIdentity, true, 4);
  built(s, {3, 6, 6});
  const auto params = s.parameters();
  ASSERT_EQ(params.size(), 3u);
  EXPECT_EQ(params[0]->name, "layer_1/depthwise_kernel");
  EXPECT_EQ(params[1]->value.shape(), (Shape{4, 6, 1, 1}));
  const Tensor x = random_tensor({2, 3, 6, 6}, 6);
  ForwardContext ctx;
  ops::Conv2DGeometry g = ops::Conv2DGeometry::same(6, 6, 3, 3, 2, 2);
  g.groups = 3;
  const Tensor mid = ops::conv2d_forward(x, params[0]->value, Tensor(), g);
  EXPECT_EQ(v(s.forward(x, ctx)), v(ops::conv2d_forward(mid, params[1]->value, params[2]->value,
                                                        ops::Conv2DGeometry::valid(1, 1))));
}

TEST(DepthwiseConv, MatchesFiniteDifferences) {
  ForwardContext ctx;
  DepthwiseConv2D d(3, 2, 2, Padding::kSame, 2, Activation::kTanh, true);
  expect_gradients_within(check_layer(built(d, {3, 5, 4}), random_tensor({2, 3, 5, 4}, 7), ctx), 3);
  DepthwiseConv2D s(3, 3, 1, Padding::kValid, 1, Activation::kIdentity, true, 4);
  expect_gradients_within(check_layer(built(s, {2, 5, 5}), random_tensor({2, 2, 5, 5}, 8), ctx), 4);
}

// ---------------------------------------------------------------- ops

TEST(BatchedGemm, IsOneGemmPerMatrix) {
  for (const bool ta : {false, true}) {
    for (const bool tb : {false, true}) {
      const Tensor a = random_tensor(ta ? Shape{3, 4, 2} : Shape{3, 2, 4}, 1);
      const Tensor b = random_tensor(tb ? Shape{3, 5, 4} : Shape{3, 4, 5}, 2);
      Tensor c = random_tensor({3, 2, 5}, 3);
      const Tensor c0 = c.clone();
      ops::batched_gemm(ta, tb, 0.5, a, b, 2.0, c);
      for (std::int64_t i = 0; i < 3; ++i) {
        Tensor want = c0.view(i * 10, {2, 5}).clone();
        ops::gemm(ta, tb, 0.5, a.view(i * 8, ta ? Shape{4, 2} : Shape{2, 4}),
                  b.view(i * 20, tb ? Shape{5, 4} : Shape{4, 5}), 2.0, want);
        EXPECT_EQ(v(c.view(i * 10, {2, 5}).clone()), v(want));
      }
    }
  }
}

// Mixed precision: the batched products (attention's) follow the math mode like gemm: under
// mixed_float16 they are the float32 products of operands rounded to fp16.
TEST(BatchedGemm, FollowsTheMathMode) {
  const Tensor a = ops::cast(random_tensor({2, 3, 5}, 7), DType::kFloat32);
  const Tensor b = ops::cast(random_tensor({2, 5, 4}, 8), DType::kFloat32);
  auto half = [](const Tensor& t) {
    return ops::cast(ops::cast(t, DType::kFloat16), DType::kFloat32);
  };
  Tensor mixed = Tensor::zeros({2, 3, 4}, DType::kFloat32), rounded = mixed.clone(),
         exact = mixed.clone();
  {
    ScopedMathMode mode(MathMode::kFloat16);
    ops::batched_gemm(false, false, 1.0, a, b, 0.0, mixed);
  }
  ops::batched_gemm(false, false, 1.0, half(a), half(b), 0.0, rounded);
  ops::batched_gemm(false, false, 1.0, a, b, 0.0, exact);
  EXPECT_EQ(v(ops::cast(mixed, DType::kFloat64)), v(ops::cast(rounded, DType::kFloat64)));
  EXPECT_NE(v(ops::cast(mixed, DType::kFloat64)), v(ops::cast(exact, DType::kFloat64)));
}

TEST(AttentionSoftmax, MasksKeysQueriesAndTheFuture) {
  const Tensor s = random_tensor({4, 3, 3}, 4);  // 2 samples x 2 heads
  ops::AttentionMask m;
  m.heads = 2;
  m.lengths = {2, 3};
  m.mask_queries = true;
  const std::vector<double> p = v(ops::attention_softmax(s, m)), sv = v(s);
  for (int b = 0; b < 4; ++b) {
    for (int i = 0; i < 3; ++i) {
      const double* row = p.data() + (b * 3 + i) * 3;
      const int len = b < 2 ? 2 : 3;
      double total = 0;
      for (int j = 0; j < 3; ++j) total += row[j];
      EXPECT_NEAR(total, 1.0, 1e-12);
      if (i >= len) {  // a padded query: every key masked, uniform (Keras)
        for (int j = 0; j < 3; ++j) EXPECT_NEAR(row[j], 1.0 / 3, 1e-12);
        continue;
      }
      if (len == 2) {
        EXPECT_EQ(row[2], 0.0);
      }
      EXPECT_NEAR(row[0] / row[1], std::exp(sv[(b * 3 + i) * 3] - sv[(b * 3 + i) * 3 + 1]), 1e-12);
    }
  }
  ops::AttentionMask causal;
  causal.causal = true;
  const std::vector<double> pc = v(ops::attention_softmax(s, causal));
  EXPECT_EQ(pc[1], 0.0);  // query 0 sees key 0 only
  EXPECT_EQ(pc[0], 1.0);
  // The gradient: central differences of sum(w * p), zero for masked scores.
  const Tensor w = random_tensor(s.shape(), 5);
  const Tensor probs = ops::attention_softmax(s, m);
  const std::vector<double> analytic = v(ops::attention_softmax_backward(probs, w, m));
  const auto numeric = testing::numeric_gradient(
      s, [&] { return testing::weighted_sum(ops::attention_softmax(s, m), w); });
  EXPECT_LE(testing::relative_error(analytic, numeric), 1e-8);
}

// ---------------------------------------------------------------- fixtures

std::string fixture(const std::string& name) {
  return std::string(MIRROR_SOURCE_DIR) + "/tests/data/keras/" + name + ".keras.json";
}

TEST(KerasFixtures, MobilenetAndImageLayersTrain) {
  for (const auto& [name, shape, classes] :
       {std::tuple<std::string, Shape, int>{"mobilenet_block", {3, 16, 16}, 5},
        {"image_layers", {3, 12, 12}, 4}}) {
    SCOPED_TRACE(name);
    const ModelSpec spec =
        ModelSpec::from_file(fixture(name)).bind({shape, DType::kFloat32, classes, 0});
    EXPECT_TRUE(spec.softmax_folded());
    Sequential m = make_model(spec, DType::kFloat32, Device::cpu(), 1);
    ForwardContext ctx;
    ctx.training = true;
    ctx.sample_ids = Tensor::from_vector(std::vector<std::int64_t>{0, 1}, {2});
    Shape batch = {2};
    batch.insert(batch.end(), shape.begin(), shape.end());
    const Tensor y = m.forward(ops::cast(random_tensor(batch, 3), DType::kFloat32), ctx);
    EXPECT_EQ(y.shape(), (Shape{2, classes}));
    m.backward(ops::cast(random_tensor(y.shape(), 4), DType::kFloat32));
  }
  // ReLU(6.0) is the relu layer with max_value 6; ReLU() stays the plain activation.
  const ModelSpec mobile = ModelSpec::from_file(fixture("mobilenet_block"));
  int relu6 = 0;
  for (const auto& l : mobile.layers()) relu6 += l["type"] == "relu" && l["max_value"] == 6.0;
  EXPECT_EQ(relu6, 5);
}

}  // namespace
}  // namespace mirror::nn
