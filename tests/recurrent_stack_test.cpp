// Tests of the LSTM and Bidirectional layers and of stacked recurrent models: init (Keras's
// unit_forget_bias), parameter names, finite-difference gradients through the layers with
// shorter sequences (every merge mode, both output kinds), the backward direction reading each
// sequence's own valid steps in reverse, lengths passed on through return_sequences, padded vs
// unpadded equality in a stacked model, and errors.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gradcheck.h"
#include "mirror/nn/bidirectional.h"
#include "mirror/nn/layers.h"
#include "mirror/nn/recurrent.h"
#include "mirror/nn/sequential.h"
#include "mirror/ops.h"
#include "ops_test_util.h"

namespace mirror::nn {
namespace {

using Vec = std::vector<double>;
using ops_test::values;

template <class L>
void build_f64(L& layer, const std::string& name, const Shape& in, std::uint64_t seed) {
  layer.set_name(name);
  InitRng rng(seed);
  layer.build(in, DType::kFloat64, Device::cpu(), rng);
}

/// Non-zero biases, so their gradients are checked around a generic point.
void randomize_biases(Layer& layer, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  for (Parameter* p : layer.parameters()) {
    if (p->value.rank() != 1) continue;
    p->value.copy_from(Tensor::from_vector(
        ops_test::random_values(static_cast<std::size_t>(p->value.numel()), 0.5, rng),
        p->value.shape()));
  }
}

void expect_gradients_match(Layer& layer, const Shape& x_shape, std::vector<std::int32_t> lengths,
                            std::uint64_t seed) {
  ForwardContext ctx;
  ctx.training = true;
  ctx.lengths = std::move(lengths);
  const Tensor x = testing::random_tensor(x_shape, seed);
  const testing::GradCheckReport r = testing::check_layer(layer, x, ctx);
  ASSERT_FALSE(r.errors.empty());
  for (const auto& [what, err] : r.errors) EXPECT_LT(err, 1e-7) << layer.name() << " " << what;
}

// ---------------------------------------------------------------- LSTM layer

TEST(LstmLayer, BuildNamesShapesAndUnitForgetBias) {
  LSTM with(3, true), without(3, false, false);
  build_f64(with, "lstm_1", {5, 2}, 1);
  build_f64(without, "lstm_2", {5, 2}, 1);
  const auto params = with.parameters();
  ASSERT_EQ(params.size(), 4u);
  const char* names[] = {"lstm_1/kernel", "lstm_1/recurrent_kernel", "lstm_1/bias",
                         "lstm_1/recurrent_bias"};
  const Shape shapes[] = {{12, 2}, {12, 3}, {12}, {12}};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(params[i]->name, names[i]);
    EXPECT_EQ(params[i]->value.shape(), shapes[i]);
  }
  // Forget block (rows H..2H of b_ih) is 1 with unit_forget_bias, everything else 0.
  EXPECT_EQ(values(params[2]->value), (Vec{0, 0, 0, 1, 1, 1, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(values(params[3]->value), Vec(12, 0.0));
  EXPECT_EQ(values(without.parameters()[2]->value), Vec(12, 0.0));
  // The same seed gives the same kernels whatever unit_forget_bias says.
  EXPECT_EQ(values(params[0]->value), values(without.parameters()[0]->value));
  EXPECT_EQ(with.config()["unit_forget_bias"], true);
  EXPECT_EQ(with.config()["gate_order"], "ifgo");
  InitRng rng(0);
  LSTM last(4);
  EXPECT_EQ(last.build({7, 3}, DType::kFloat32, Device::cpu(), rng), (Shape{4}));
  LSTM seq(4, true);
  EXPECT_EQ(seq.build({7, 3}, DType::kFloat32, Device::cpu(), rng), (Shape{7, 4}));
}

TEST(LstmLayer, GradientsMatchFiniteDifferencesWithShorterSequences) {
  for (bool sequences : {false, true}) {
    LSTM l(3, sequences);
    build_f64(l, "lstm_1", {4, 2}, 5);
    randomize_biases(l, 6);
    expect_gradients_match(l, {3, 4, 2}, {1, 4, 2}, 7);
  }
}

TEST(LstmLayer, ErrorsAreInvalidArguments) {
  EXPECT_THROW(LSTM(0), InvalidArgument);
  LSTM l(3);
  ForwardContext ctx;
  EXPECT_THROW(l.forward(Tensor::zeros({2, 4, 2}, DType::kFloat64), ctx), InvalidArgument);
  build_f64(l, "lstm_1", {4, 2}, 1);
  ctx.lengths = {4};
  EXPECT_THROW(l.forward(Tensor::zeros({2, 4, 2}, DType::kFloat64), ctx), InvalidArgument);
  EXPECT_THROW(l.backward(Tensor::zeros({2, 3}, DType::kFloat64)), InvalidArgument);
  ctx.lengths = {};
  ctx.training = true;
  l.forward(Tensor::zeros({2, 4, 2}, DType::kFloat64), ctx);
  EXPECT_THROW(l.backward(Tensor::zeros({2, 4, 3}, DType::kFloat64)), InvalidArgument);
  InitRng rng(0);
  EXPECT_THROW(LSTM(2).build({4}, DType::kFloat64, Device::cpu(), rng), InvalidArgument);
}

// ---------------------------------------------------------------- Bidirectional

TEST(Bidirectional, NamesShapesAndConfig) {
  Bidirectional b(std::make_unique<GRU>(3, true));
  build_f64(b, "bidirectional_1", {5, 2}, 1);
  std::vector<std::string> names;
  for (Parameter* p : b.parameters()) names.push_back(p->name);
  EXPECT_EQ(names,
            (std::vector<std::string>{
                "bidirectional_1/forward/kernel", "bidirectional_1/forward/recurrent_kernel",
                "bidirectional_1/forward/bias", "bidirectional_1/forward/recurrent_bias",
                "bidirectional_1/backward/kernel", "bidirectional_1/backward/recurrent_kernel",
                "bidirectional_1/backward/bias", "bidirectional_1/backward/recurrent_bias"}));
  // The two directions start from different weights.
  EXPECT_NE(values(b.parameters()[0]->value), values(b.parameters()[4]->value));
  EXPECT_EQ(b.config()["merge_mode"], "concat");
  EXPECT_EQ(b.config()["layer"]["kind"], "gru");
  InitRng rng(0);
  Bidirectional sum(std::make_unique<LSTM>(4), MergeMode::kSum);
  sum.set_name("bidirectional_2");
  EXPECT_EQ(sum.build({6, 2}, DType::kFloat32, Device::cpu(), rng), (Shape{4}));
  Bidirectional cat(std::make_unique<LSTM>(4, true));
  cat.set_name("bidirectional_3");
  EXPECT_EQ(cat.build({6, 2}, DType::kFloat32, Device::cpu(), rng), (Shape{6, 8}));
  EXPECT_EQ(parse_merge_mode("ave"), MergeMode::kAve);
  EXPECT_THROW(parse_merge_mode("first"), InvalidArgument);
  EXPECT_THROW(Bidirectional(nullptr), InvalidArgument);
}

// The backward direction of a padded sample equals the backward layer run alone over that
// sample's valid steps in reverse order (PyTorch packed semantics), never over the padding.
TEST(Bidirectional, BackwardDirectionReadsEachSequenceReversedWithinItsLength) {
  for (bool sequences : {false, true}) {
    Bidirectional b(std::make_unique<GRU>(3, sequences));
    build_f64(b, "bidirectional_1", {5, 2}, 3);
    const std::int64_t t = 5, f = 2, h = 3;
    const Tensor x = testing::random_tensor({2, t, f}, 4);  // sample 0: length 3, sample 1: 5
    ForwardContext ctx;
    ctx.lengths = {3, 5};
    const Vec y = values(b.forward(x, ctx));
    // Sample 0's valid steps reversed, alone (length 3, no padding at all).
    const Vec xv = values(x);
    Vec rev;
    for (int step = 2; step >= 0; --step) {
      for (std::int64_t k = 0; k < f; ++k)
        rev.push_back(xv[static_cast<std::size_t>(step * f + k)]);
    }
    ForwardContext alone;
    const Vec back = values(b.backward_layer().forward(Tensor::from_vector(rev, {1, 3, f}), alone));
    ForwardContext first;
    first.lengths = {3};
    const Vec fwd = values(b.forward_layer().forward(x.view(0, {1, t, f}), first));
    if (!sequences) {  // [N, 2H]: forward's last state, then backward's (the state after x[0])
      for (int j = 0; j < h; ++j) {
        EXPECT_NEAR(y[j], fwd[j], 1e-14);
        EXPECT_NEAR(y[h + j], back[j], 1e-14);
      }
      continue;
    }
    // [N, T, 2H]: at step s the backward half is what the backward layer produced reading x[s],
    // which is its step 2 - s when reading the reversed sample; zeros past the length.
    for (int s = 0; s < t; ++s) {
      for (int j = 0; j < h; ++j) {
        const double want_f = s < 3 ? fwd[s * h + j] : 0.0;
        const double want_b = s < 3 ? back[(2 - s) * h + j] : 0.0;
        EXPECT_NEAR(y[s * 2 * h + j], want_f, 1e-14) << s << " " << j;
        EXPECT_NEAR(y[s * 2 * h + h + j], want_b, 1e-14) << s << " " << j;
      }
    }
  }
}

TEST(Bidirectional, GradientsMatchFiniteDifferencesEveryMergeMode) {
  for (MergeMode mode : {MergeMode::kConcat, MergeMode::kSum, MergeMode::kAve, MergeMode::kMul}) {
    for (bool sequences : {false, true}) {
      std::unique_ptr<Recurrent> inner;
      if (sequences) {
        inner = std::make_unique<LSTM>(2, true);
      } else {
        inner = std::make_unique<GRU>(2, false);
      }
      Bidirectional b(std::move(inner), mode);
      build_f64(b, std::string("bidirectional_") + merge_mode_name(mode), {4, 2}, 8);
      randomize_biases(b, 9);
      expect_gradients_match(b, {3, 4, 2}, {2, 4, 1}, 10);
    }
  }
}

TEST(Bidirectional, ErrorsAreInvalidArguments) {
  Bidirectional b(std::make_unique<GRU>(2));
  build_f64(b, "bidirectional_1", {4, 2}, 1);
  EXPECT_THROW(b.backward(Tensor::zeros({2, 4}, DType::kFloat64)), InvalidArgument);
  ForwardContext ctx;
  ctx.training = true;
  EXPECT_THROW(b.forward(Tensor::zeros({2, 4}, DType::kFloat64), ctx), InvalidArgument);
  ctx.lengths = {4, 5};  // past T
  EXPECT_THROW(b.forward(Tensor::zeros({2, 4, 2}, DType::kFloat64), ctx), InvalidArgument);
  ctx.lengths = {};
  b.forward(Tensor::zeros({2, 4, 2}, DType::kFloat64), ctx);
  EXPECT_THROW(b.backward(Tensor::zeros({2, 2}, DType::kFloat64)), InvalidArgument);  // 2H = 4
}

// ---------------------------------------------------------------- stacked models

// Embedding -> Bidirectional(GRU, return_sequences) -> LSTM -> Dense: a sample padded next to a
// longer one gives the same output and gradients as the sample alone, so every layer passes the
// lengths on and no padding leaks into either direction.
TEST(StackedRecurrent, PaddedIdsGiveTheSameOutputAndGradientsAsUnpadded) {
  Sequential m;
  m.emplace<Masking>().emplace<Embedding>(20, 4);
  m.emplace<Bidirectional>(std::make_unique<GRU>(3, true));
  m.emplace<LSTM>(3).emplace<Dense>(2);
  m.build({6}, 31, DType::kFloat64);
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
  EXPECT_NEAR(y_pad[0], y_alone[0], 1e-13);
  EXPECT_NEAR(y_pad[1], y_alone[1], 1e-13);
  const auto params = m.parameters();
  ASSERT_EQ(params.size(), 1u + 8u + 4u + 2u);
  for (std::size_t i = 0; i < params.size(); ++i) {
    const Vec g = values(params[i]->grad);
    double norm = 0;
    for (std::size_t j = 0; j < g.size(); ++j) {
      EXPECT_NEAR(g[j], grads_pad[i][j], 1e-12) << params[i]->name << "[" << j << "]";
      norm += g[j] * g[j];
    }
    EXPECT_GT(norm, 0.0) << params[i]->name;
  }
}

// GRU(return_sequences) -> GRU: gradients of the stack through Sequential with shorter sequences.
TEST(StackedRecurrent, StackedGruGradientsMatchFiniteDifferences) {
  Sequential m;
  m.emplace<GRU>(3, true).emplace<GRU>(2);
  m.build({4, 2}, 5, DType::kFloat64);
  const Tensor x = testing::random_tensor({3, 4, 2}, 6);
  const Tensor a = testing::random_tensor({3, 2}, 7);
  auto loss = [&] {
    ForwardContext ctx;
    ctx.lengths = {2, 4, 1};
    return testing::weighted_sum(m.forward(x, ctx), a);
  };
  ForwardContext ctx;
  ctx.training = true;
  ctx.lengths = {2, 4, 1};
  m.forward(x, ctx);
  m.zero_grad();
  m.backward(a);
  for (Parameter* p : m.parameters()) {
    const Vec num = testing::numeric_gradient(p->value, loss);
    EXPECT_LT(testing::relative_error(values(p->grad), num), 1e-7) << p->name;
  }
}

}  // namespace
}  // namespace mirror::nn
