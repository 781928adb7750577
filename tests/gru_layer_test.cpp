// Tests of the GRU and Masking layers: shapes, parameter names and order, Keras-like init
// (orthogonal recurrent blocks, Glorot bounds, determinism), finite-difference gradients through
// the layer API, Masking lengths, and errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "mirror/nn/layers.h"
#include "mirror/nn/recurrent.h"
#include "mirror/nn/sequential.h"
#include "mirror/ops.h"
#include "ops_test_util.h"

namespace mirror::nn {
namespace {

using Vec = std::vector<double>;

using ops_test::random_values;
using ops_test::values;

GRU built_gru(int units, bool seq, std::int64_t t, std::int64_t f, std::uint64_t seed,
              DType dtype = DType::kFloat64) {
  GRU g(units, seq);
  g.set_name("gru_1");
  InitRng rng(seed);
  g.build({t, f}, dtype, Device::cpu(), rng);
  return g;
}

// ---------------------------------------------------------------- build, names, config

TEST(GruLayer, BuildShapesNamesAndConfig) {
  GRU last = built_gru(4, false, 7, 3, 1);
  GRU seq = built_gru(4, true, 7, 3, 1);
  InitRng rng(1);
  GRU again(4, true);
  EXPECT_EQ(again.build({7, 3}, DType::kFloat64, Device::cpu(), rng), (Shape{7, 4}));
  GRU again_last(4);
  EXPECT_EQ(again_last.build({7, 3}, DType::kFloat64, Device::cpu(), rng), (Shape{4}));

  const auto params = last.parameters();
  ASSERT_EQ(params.size(), 4u);
  const char* names[] = {"gru_1/kernel", "gru_1/recurrent_kernel", "gru_1/bias",
                         "gru_1/recurrent_bias"};
  const Shape shapes[] = {{12, 3}, {12, 4}, {12}, {12}};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(params[i]->name, names[i]);
    EXPECT_EQ(params[i]->value.shape(), shapes[i]);
    EXPECT_EQ(params[i]->grad.shape(), shapes[i]);
    EXPECT_EQ(params[i]->value.dtype(), DType::kFloat64);
    for (double g : values(params[i]->grad)) EXPECT_EQ(g, 0.0);
  }
  EXPECT_EQ(last.kind(), "gru");
  EXPECT_EQ(last.config()["units"], 4);
  EXPECT_EQ(last.config()["return_sequences"], false);
  EXPECT_EQ(seq.config()["return_sequences"], true);
  EXPECT_EQ(last.config()["reset_after"], true);

  Masking m;
  EXPECT_EQ(m.kind(), "masking");
  EXPECT_TRUE(m.parameters().empty());
  EXPECT_EQ(m.config()["mask_value"], 0);
  EXPECT_EQ(m.build({5, 2}, DType::kFloat32, Device::cpu(), rng), (Shape{5, 2}));
}

// ---------------------------------------------------------------- (g) init

TEST(GruLayer, RecurrentKernelIsOrthogonalPerGateBlock) {
  const int h = 5;
  GRU g = built_gru(h, false, 3, 4, 123);
  const Vec u = values(g.parameters()[1]->value);  // [3H, H]
  for (int gate = 0; gate < 3; ++gate) {
    const double* b = u.data() + gate * h * h;
    for (int i = 0; i < h; ++i) {
      for (int j = 0; j < h; ++j) {
        double col = 0, row = 0;  // (U^T U)_ij and (U U^T)_ij
        for (int k = 0; k < h; ++k) {
          col += b[k * h + i] * b[k * h + j];
          row += b[i * h + k] * b[j * h + k];
        }
        EXPECT_NEAR(col, i == j ? 1.0 : 0.0, 1e-12) << gate << " " << i << " " << j;
        EXPECT_NEAR(row, i == j ? 1.0 : 0.0, 1e-12) << gate << " " << i << " " << j;
      }
    }
  }
  // The three blocks are different draws.
  EXPECT_NE(u[0], u[h * h]);
  EXPECT_NE(u[h * h], u[2 * h * h]);
}

TEST(GruLayer, KernelIsGlorotUniformAndBiasesZero) {
  const std::int64_t h = 8, f = 6;
  GRU g = built_gru(static_cast<int>(h), false, 3, f, 5);
  const Vec k = values(g.parameters()[0]->value);
  const double limit = std::sqrt(6.0 / static_cast<double>(f + 3 * h));
  double mean = 0, sq = 0;
  for (double v : k) {
    EXPECT_LE(std::abs(v), limit);
    mean += v;
    sq += v * v;
  }
  mean /= static_cast<double>(k.size());
  sq /= static_cast<double>(k.size());
  // U(-l, l) has variance l^2 / 3; 144 samples keep the estimate within ~25%.
  EXPECT_NEAR(sq, limit * limit / 3, 0.25 * limit * limit / 3);
  EXPECT_NEAR(mean, 0.0, 0.2 * limit);
  for (double v : values(g.parameters()[2]->value)) EXPECT_EQ(v, 0.0);
  for (double v : values(g.parameters()[3]->value)) EXPECT_EQ(v, 0.0);
}

TEST(GruLayer, InitIsDeterministicPerSeedAndDtype) {
  GRU a = built_gru(3, false, 4, 2, 77), b = built_gru(3, false, 4, 2, 77);
  GRU c = built_gru(3, false, 4, 2, 78);
  GRU f32 = built_gru(3, false, 4, 2, 77, DType::kFloat32);
  for (int i = 0; i < 2; ++i) {
    const Vec va = values(a.parameters()[i]->value);
    EXPECT_EQ(va, values(b.parameters()[i]->value)) << i;
    EXPECT_NE(va, values(c.parameters()[i]->value)) << i;
    EXPECT_EQ(f32.parameters()[i]->value.dtype(), DType::kFloat32);
    const auto vf = f32.parameters()[i]->value.to_vector<float>();
    for (std::size_t j = 0; j < va.size(); ++j) EXPECT_EQ(vf[j], static_cast<float>(va[j])) << j;
  }
}

// ---------------------------------------------------------------- gradients through the layer

// L = sum(a * layer(x)) with lengths {1, T, 2}; compares every gradient with central
// differences of L (float64).
void check_layer_gradients(bool return_sequences) {
  const std::int64_t n = 3, t = 4, f = 2;
  const int h = 3;
  GRU g = built_gru(h, return_sequences, t, f, 9);
  std::mt19937_64 rng(17);
  // Non-zero biases so their gradients are exercised around a generic point.
  for (int i = 2; i < 4; ++i) {
    Parameter* p = g.parameters()[i];
    p->value = Tensor::from_vector(
        random_values(static_cast<std::size_t>(p->value.numel()), 0.5, rng), p->value.shape());
  }
  Vec xv = random_values(static_cast<std::size_t>(n * t * f), 1.0, rng);
  const std::vector<std::int32_t> lengths = {1, static_cast<std::int32_t>(t), 2};
  const Shape out_shape = return_sequences ? Shape{n, t, h} : Shape{n, h};
  const Vec a = random_values(static_cast<std::size_t>(shape_numel(out_shape)), 1.0, rng);

  auto loss = [&]() {
    ForwardContext ctx;
    ctx.lengths = lengths;
    const Vec y = values(g.forward(Tensor::from_vector(xv, {n, t, f}), ctx));
    double l = 0;
    for (std::size_t i = 0; i < y.size(); ++i) l += a[i] * y[i];
    return l;
  };
  ForwardContext ctx;
  ctx.training = true;
  ctx.lengths = lengths;
  const Tensor y = g.forward(Tensor::from_vector(xv, {n, t, f}), ctx);
  ASSERT_EQ(y.shape(), out_shape);
  const Vec dx = values(g.backward(Tensor::from_vector(a, out_shape)));

  const double eps = 1e-6;
  auto check = [&](double* v, std::size_t count, const Vec& analytic, const char* what) {
    ASSERT_EQ(analytic.size(), count) << what;
    double diff2 = 0, num2 = 0;
    for (std::size_t i = 0; i < count; ++i) {
      const double keep = v[i];
      v[i] = keep + eps;
      const double up = loss();
      v[i] = keep - eps;
      const double down = loss();
      v[i] = keep;
      const double num = (up - down) / (2 * eps);
      EXPECT_NEAR(num, analytic[i], 1e-7) << what << "[" << i << "]";
      diff2 += (num - analytic[i]) * (num - analytic[i]);
      num2 += num * num;
    }
    EXPECT_GT(num2, 1e-6) << what;
    EXPECT_LT(std::sqrt(diff2 / num2), 1e-6) << what;
  };
  check(xv.data(), xv.size(), dx, "dx");
  for (Parameter* p : g.parameters()) {
    check(p->value.data<double>(), static_cast<std::size_t>(p->value.numel()), values(p->grad),
          p->name.c_str());
  }
}

TEST(GruLayer, GradientsMatchFiniteDifferencesLastState) { check_layer_gradients(false); }
TEST(GruLayer, GradientsMatchFiniteDifferencesSequences) { check_layer_gradients(true); }

TEST(GruLayer, EmptyLengthsMeanFullSequencesAndInferenceMatchesTraining) {
  GRU g = built_gru(3, true, 4, 2, 3);
  std::mt19937_64 rng(2);
  const Tensor x = Tensor::from_vector(random_values(2 * 4 * 2, 1.0, rng), {2, 4, 2});
  ForwardContext none, full;
  full.lengths = {4, 4};
  full.training = true;
  const Vec y_none = values(g.forward(x, none));
  EXPECT_TRUE(none.lengths.empty());  // the layer does not invent lengths for later layers
  EXPECT_EQ(y_none, values(g.forward(x, full)));
  // A longer batch than the one built for is fine (T is only informative).
  const Tensor x6 = Tensor::from_vector(random_values(2 * 6 * 2, 1.0, rng), {2, 6, 2});
  EXPECT_EQ(g.forward(x6, none).shape(), (Shape{2, 6, 3}));
}

// ---------------------------------------------------------------- (e) Masking

TEST(MaskingLayer, LengthsFromTrailingZeroIds) {
  const Tensor ids =
      Tensor::from_vector(std::vector<std::int32_t>{5, 3, 0, 0,  //
                                                    0, 0, 0, 0,  // all padding -> 1
                                                    1, 0, 2, 0,  // interior zero is kept
                                                    0, 0, 0, 7},
                          {4, 4});
  Masking m;
  m.set_name("masking_1");
  InitRng rng(0);
  m.build({4}, DType::kFloat32, Device::cpu(), rng);
  ForwardContext ctx;
  const Tensor out = m.forward(ids, ctx);
  EXPECT_EQ(ctx.lengths, (std::vector<std::int32_t>{2, 1, 3, 4}));
  EXPECT_TRUE(out.shares_storage_with(ids));  // identity on the data
  EXPECT_EQ(out.to_vector<std::int32_t>(), ids.to_vector<std::int32_t>());
  const Tensor dy = Tensor::zeros({4, 4, 2});
  EXPECT_TRUE(m.backward(dy).shares_storage_with(dy));
  EXPECT_FALSE(m.backward(Tensor()).defined());  // Embedding below gives no gradient
}

TEST(MaskingLayer, LengthsFromTrailingZeroFeatureSteps) {
  // [N=3, T=3, F=2]
  const std::vector<float> v = {1, 2, 0, 0.5f, 0,  0,   // last non-zero step 1 (one feature)
                                0, 0, 0, 0,    0,  0,   // all zero -> 1
                                0, 0, 0, 0,    -3, 0};  // only the last step
  Masking m;
  InitRng rng(0);
  m.build({3, 2}, DType::kFloat32, Device::cpu(), rng);
  ForwardContext ctx;
  m.forward(Tensor::from_vector(v, {3, 3, 2}), ctx);
  EXPECT_EQ(ctx.lengths, (std::vector<std::int32_t>{2, 1, 3}));
  const Vec vd(v.begin(), v.end());
  EXPECT_EQ(Masking::lengths_of(Tensor::from_vector(vd, {3, 3, 2})),
            (std::vector<std::int32_t>{2, 1, 3}));
  EXPECT_THROW(Masking::lengths_of(Tensor::zeros({3, 3})), InvalidArgument);  // float [N, T]
  EXPECT_THROW(m.forward(Tensor::zeros({3, 3}), ctx), InvalidArgument);
}

TEST(MaskingLayer, MaskingThenGruEqualsExplicitLengths) {
  const std::int64_t n = 3, t = 5, f = 2;
  std::mt19937_64 rng(12);
  Vec xv = random_values(static_cast<std::size_t>(n * t * f), 1.0, rng);
  const std::vector<std::int32_t> lengths = {2, 5, 1};
  for (std::int64_t s = 0; s < n; ++s) {
    for (std::int64_t step = lengths[s]; step < t; ++step) {
      for (std::int64_t j = 0; j < f; ++j) xv[(s * t + step) * f + j] = 0.0;
    }
  }
  const Tensor x = Tensor::from_vector(xv, {n, t, f});
  Masking m;
  InitRng init(0);
  m.build({t, f}, DType::kFloat64, Device::cpu(), init);
  GRU g = built_gru(4, false, t, f, 4);
  ForwardContext masked;
  const Vec via_mask = values(g.forward(m.forward(x, masked), masked));
  EXPECT_EQ(masked.lengths, lengths);
  ForwardContext explicit_ctx;
  explicit_ctx.lengths = lengths;
  EXPECT_EQ(via_mask, values(g.forward(x, explicit_ctx)));
  // Without lengths the zero steps are processed and the result differs.
  ForwardContext full;
  EXPECT_NE(via_mask, values(g.forward(x, full)));
}

TEST(MaskingLayer, PaddedIdsGiveTheSameOutputAsUnpaddedInASequential) {
  Sequential m;
  m.emplace<Masking>().emplace<Embedding>(20, 4).emplace<GRU>(3).emplace<Dense>(2);
  m.build({6}, 31, DType::kFloat64);
  std::vector<std::string> names;
  for (Parameter* p : m.parameters()) names.push_back(p->name);
  EXPECT_EQ(names, (std::vector<std::string>{
                       "embedding_1/embeddings", "gru_1/kernel", "gru_1/recurrent_kernel",
                       "gru_1/bias", "gru_1/recurrent_bias", "dense_1/kernel", "dense_1/bias"}));
  // Sample 0 (length 3) padded to 6 next to a full-length sample, and alone without padding.
  const Tensor padded =
      Tensor::from_vector(std::vector<std::int32_t>{4, 9, 2, 0, 0, 0, 1, 2, 3, 4, 5, 6}, {2, 6});
  const Tensor alone = Tensor::from_vector(std::vector<std::int32_t>{4, 9, 2}, {1, 3});
  ForwardContext c1, c2;
  c1.training = c2.training = true;
  const Vec y_pad = values(m.forward(padded, c1));
  EXPECT_EQ(Masking::lengths_of(padded), (std::vector<std::int32_t>{3, 6}));
  EXPECT_TRUE(c1.lengths.empty());  // ended by the recurrent layer (Note [Sequence masks])
  m.backward(Tensor::from_vector(Vec{1.0, -0.5, 0.0, 0.0}, {2, 2}));
  std::vector<Vec> grads_pad;
  for (Parameter* p : m.parameters()) grads_pad.push_back(values(p->grad));
  m.zero_grad();
  const Vec y_alone = values(m.forward(alone, c2));
  m.backward(Tensor::from_vector(Vec{1.0, -0.5}, {1, 2}));
  ASSERT_EQ(y_alone.size(), 2u);
  EXPECT_NEAR(y_pad[0], y_alone[0], 1e-14);
  EXPECT_NEAR(y_pad[1], y_alone[1], 1e-14);
  const auto params = m.parameters();
  for (std::size_t i = 0; i < params.size(); ++i) {
    const Vec g = values(params[i]->grad);
    double norm = 0;
    for (std::size_t j = 0; j < g.size(); ++j) {
      EXPECT_NEAR(g[j], grads_pad[i][j], 1e-13) << params[i]->name << "[" << j << "]";
      norm += g[j] * g[j];
    }
    EXPECT_GT(norm, 0.0) << params[i]->name;
  }
}

// ---------------------------------------------------------------- (h) errors

TEST(GruLayer, BadInputsAreInvalidArguments) {
  GRU g = built_gru(3, false, 4, 2, 1);
  const Tensor x = Tensor::zeros({2, 4, 2}, DType::kFloat64);
  ForwardContext ctx;
  ctx.training = true;
  ctx.lengths = {4};  // one length for two samples
  EXPECT_THROW(g.forward(x, ctx), InvalidArgument);
  ctx.lengths = {0, 4};
  EXPECT_THROW(g.forward(x, ctx), InvalidArgument);
  ctx.lengths = {5, 4};
  EXPECT_THROW(g.forward(x, ctx), InvalidArgument);
  ctx.lengths = {};
  EXPECT_THROW(g.forward(Tensor::zeros({2, 4, 3}, DType::kFloat64), ctx), InvalidArgument);
  EXPECT_THROW(g.forward(Tensor::zeros({2, 4, 2}, DType::kFloat32), ctx), InvalidArgument);
  // backward without a training forward, and with a wrong dy shape.
  GRU fresh = built_gru(3, false, 4, 2, 1);
  EXPECT_THROW(fresh.backward(Tensor::zeros({2, 3}, DType::kFloat64)), InvalidArgument);
  ForwardContext eval;
  fresh.forward(x, eval);
  EXPECT_THROW(fresh.backward(Tensor::zeros({2, 3}, DType::kFloat64)), InvalidArgument);
  g.forward(x, ctx);
  EXPECT_THROW(g.backward(Tensor::zeros({2, 4, 3}, DType::kFloat64)), InvalidArgument);
  // Build errors.
  InitRng rng(0);
  GRU bad(3);
  EXPECT_THROW(bad.build({4}, DType::kFloat64, Device::cpu(), rng), InvalidArgument);
  EXPECT_THROW(bad.build({4, 2}, DType::kInt32, Device::cpu(), rng), InvalidArgument);
  EXPECT_THROW(GRU(0), InvalidArgument);
  GRU unbuilt(3);
  EXPECT_THROW(unbuilt.forward(x, ctx), InvalidArgument);
}

}  // namespace
}  // namespace mirror::nn
