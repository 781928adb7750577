// Attention, AdditiveAttention and MultiHeadAttention (nn/attention.h): outputs against Keras's
// definitions computed here in double (masks from the batch's lengths, the causal triangle, a
// padded query's uniform weights), gradients of inputs and parameters against float64 central
// differences (self-attention reading one output twice included), dropout keyed by sample id,
// and the Keras fixture that uses them all.
#include "mirror/nn/attention.h"

#include <gtest/gtest.h>

#include <cmath>

#include "gradcheck.h"
#include "mirror/nn/models.h"

namespace mirror::nn {
namespace {

using testing::random_tensor;

std::vector<double> v(const Tensor& t) { return t.to_vector<double>(); }

template <class L>
L& built_merge(L& layer, const std::vector<Shape>& shapes) {
  layer.set_name(layer.kind() + "_1");
  layer.build_inputs(shapes, std::vector<std::string>(shapes.size(), "x"), DType::kFloat64,
                     Device::cpu());
  InitRng rng(42);
  layer.init_parameters(DType::kFloat64, Device::cpu(), rng);
  return layer;
}

/// softmax over keys with Keras's masking (masked scores replaced by -1e9).
std::vector<double> masked_softmax(std::vector<double> s, const std::vector<bool>& masked) {
  double top = -INFINITY, sum = 0;
  for (std::size_t j = 0; j < s.size(); ++j) {
    if (masked[j]) s[j] = -1e9;
    top = std::max(top, s[j]);
  }
  for (double& x : s) sum += (x = std::exp(x - top));
  for (double& x : s) x /= sum;
  return s;
}

/// Keras's MultiHeadAttention for one sample (query = x[Tq, D], value = key = x), in double.
std::vector<double> keras_mha(MultiHeadAttention& m, const std::vector<double>& x, int t, int d,
                              int heads, int kd, int len, bool causal) {
  const auto p = m.parameters();  // query k/b, key k/b, value k/b, output k/b
  const std::vector<double> wq = v(p[0]->value), bq = v(p[1]->value), wk = v(p[2]->value),
                            bk = v(p[3]->value), wv = v(p[4]->value), bv = v(p[5]->value),
                            wo = v(p[6]->value), bo = v(p[7]->value);
  const int hk = heads * kd, out_d = static_cast<int>(bo.size());
  auto proj = [&](const std::vector<double>& w, const std::vector<double>& b) {
    std::vector<double> y(static_cast<std::size_t>(t * hk));
    for (int i = 0; i < t; ++i)
      for (int j = 0; j < hk; ++j) {
        double acc = b[static_cast<std::size_t>(j)];
        for (int c = 0; c < d; ++c)
          acc += x[static_cast<std::size_t>(i * d + c)] * w[static_cast<std::size_t>(c * hk + j)];
        y[static_cast<std::size_t>(i * hk + j)] = acc;
      }
    return y;
  };
  const std::vector<double> q = proj(wq, bq), k = proj(wk, bk), val = proj(wv, bv);
  std::vector<double> heads_out(static_cast<std::size_t>(t * hk), 0.0);
  for (int h = 0; h < heads; ++h) {
    for (int i = 0; i < t; ++i) {
      std::vector<double> s(static_cast<std::size_t>(t));
      std::vector<bool> masked(static_cast<std::size_t>(t));
      for (int j = 0; j < t; ++j) {
        double acc = 0;
        for (int c = 0; c < kd; ++c)
          acc += q[static_cast<std::size_t>(i * hk + h * kd + c)] *
                 k[static_cast<std::size_t>(j * hk + h * kd + c)];
        s[static_cast<std::size_t>(j)] = acc / std::sqrt(static_cast<double>(kd));
        masked[static_cast<std::size_t>(j)] = j >= len || i >= len || (causal && j > i);
      }
      const std::vector<double> w = masked_softmax(s, masked);
      for (int j = 0; j < t; ++j)
        for (int c = 0; c < kd; ++c)
          heads_out[static_cast<std::size_t>(i * hk + h * kd + c)] +=
              w[static_cast<std::size_t>(j)] * val[static_cast<std::size_t>(j * hk + h * kd + c)];
    }
  }
  std::vector<double> y(static_cast<std::size_t>(t * out_d));
  for (int i = 0; i < t; ++i)
    for (int o = 0; o < out_d; ++o) {
      double acc = bo[static_cast<std::size_t>(o)];
      for (int j = 0; j < hk; ++j)
        acc += heads_out[static_cast<std::size_t>(i * hk + j)] *
               wo[static_cast<std::size_t>(j * out_d + o)];
      y[static_cast<std::size_t>(i * out_d + o)] = acc;
    }
  return y;
}

TEST(MultiHeadAttention, ComputesKerassFunctionWithMasks) {
  for (const bool causal : {false, true}) {
    MultiHeadAttention m(2, 3, 3, 0.0, true, 0, causal);
    built_merge(m, {{5, 4}, {5, 4}});
    const Tensor x = random_tensor({2, 5, 4}, 1);
    ForwardContext ctx;
    ctx.lengths = {3, 5};
    const std::vector<double> y = v(m.forward_inputs({x, x}, ctx)), xs = v(x);
    for (int n = 0; n < 2; ++n) {
      const std::vector<double> sample(xs.begin() + n * 20, xs.begin() + (n + 1) * 20);
      const std::vector<double> want =
          keras_mha(m, sample, 5, 4, 2, 3, ctx.lengths[static_cast<std::size_t>(n)], causal);
      for (std::size_t i = 0; i < want.size(); ++i)
        EXPECT_NEAR(y[static_cast<std::size_t>(n * 20) + i], want[i], 1e-12) << n << " " << i;
    }
  }
}

TEST(AttentionLayers, ComputeKerassFunctions) {
  const Tensor q = random_tensor({1, 3, 2}, 2), k = random_tensor({1, 4, 2}, 3),
               val = random_tensor({1, 4, 3}, 4);
  ForwardContext ctx;
  ctx.lengths = {2};
  for (const auto score : {Attention::Score::kDot, Attention::Score::kAdditive}) {
    Attention a(score, true, 0.0, false);
    built_merge(a, {{3, 2}, {4, 3}, {4, 2}});
    ops::fill(a.parameters()[0]->value, 0.7);
    const std::vector<double> y = v(a.forward_inputs({q, val, k}, ctx));
    const std::vector<double> qs = v(q), ks = v(k), vs = v(val);
    for (int i = 0; i < 3; ++i) {
      std::vector<double> s(4);
      std::vector<bool> masked(4);
      for (int j = 0; j < 4; ++j) {
        double acc = 0;
        for (int c = 0; c < 2; ++c) {
          const double qv = qs[static_cast<std::size_t>(i * 2 + c)],
                       kv = ks[static_cast<std::size_t>(j * 2 + c)];
          acc += score == Attention::Score::kDot ? qv * kv : 0.7 * std::tanh(qv + kv);
        }
        s[static_cast<std::size_t>(j)] = score == Attention::Score::kDot ? 0.7 * acc : acc;
        masked[static_cast<std::size_t>(j)] = j >= 2;  // value mask only (Keras's Attention)
      }
      const std::vector<double> w = masked_softmax(s, masked);
      for (int c = 0; c < 3; ++c) {
        double want = 0;
        for (int j = 0; j < 4; ++j)
          want += w[static_cast<std::size_t>(j)] * vs[static_cast<std::size_t>(j * 3 + c)];
        if (i >= 2) want = 0;  // Keras multiplies by the query mask
        EXPECT_NEAR(y[static_cast<std::size_t>(i * 3 + c)], want, 1e-12) << a.kind();
      }
    }
  }
}

/// Central differences of sum(w * forward) for every input and parameter of a merge layer.
void expect_merge_gradients(MergeLayer& layer, std::vector<Tensor> xs, ForwardContext& ctx) {
  const Tensor y = layer.forward_inputs(xs, ctx);
  const Tensor w = random_tensor(y.shape(), 9);
  for (Parameter* p : layer.parameters()) ops::fill(p->grad, 0.0);
  const std::vector<Tensor> grads = layer.backward_inputs(w);
  auto loss = [&] { return testing::weighted_sum(layer.forward_inputs(xs, ctx), w); };
  // A key bias moves every score of a row alike, which the softmax ignores: its gradient is zero
  // (both sides ~1e-12), where a relative error means nothing.
  auto check = [](const std::vector<double>& analytic, const std::vector<double>& numeric,
                  const std::string& what) {
    double norm = 0;
    for (double x : numeric) norm = std::max(norm, std::fabs(x));
    for (double x : analytic) norm = std::max(norm, std::fabs(x));
    if (norm < 1e-8) return;
    EXPECT_LE(testing::relative_error(analytic, numeric), 1e-6) << what;
  };
  for (std::size_t i = 0; i < xs.size(); ++i) {
    check(v(grads[i]), testing::numeric_gradient(xs[i], loss),
          layer.kind() + " input " + std::to_string(i));
  }
  for (Parameter* p : layer.parameters()) {
    check(v(p->grad), testing::numeric_gradient(p->value, loss), p->name);
  }
}

TEST(AttentionGrad, MatchesFiniteDifferences) {
  ForwardContext ctx;
  ctx.lengths = {4, 2};
  ctx.training = true;
  ctx.seed = 5;
  ctx.sample_ids = Tensor::from_vector(std::vector<std::int64_t>{3, 8}, {2});
  for (const bool causal : {false, true}) {
    for (const bool bias : {true, false}) {
      MultiHeadAttention m(2, 3, 2, causal ? 0.3 : 0.0, bias, 5, causal);
      built_merge(m, {{4, 3}, {4, 2}, {4, 4}});
      expect_merge_gradients(
          m,
          {random_tensor({2, 4, 3}, 1), random_tensor({2, 4, 2}, 2), random_tensor({2, 4, 4}, 3)},
          ctx);
    }
  }
  MultiHeadAttention self(3, 2, 2, 0.0, true, 0, false);
  built_merge(self, {{4, 3}, {4, 3}});
  expect_merge_gradients(self, {random_tensor({2, 4, 3}, 4), random_tensor({2, 4, 3}, 5)}, ctx);
  for (const auto score : {Attention::Score::kDot, Attention::Score::kAdditive}) {
    for (const bool scale : {true, false}) {
      Attention a(score, scale, 0.25, !scale);
      built_merge(a, {{4, 3}, {4, 2}, {4, 3}});
      expect_merge_gradients(
          a,
          {random_tensor({2, 4, 3}, 6), random_tensor({2, 4, 2}, 7), random_tensor({2, 4, 3}, 8)},
          ctx);
      Attention two(score, scale, 0.0, false);
      built_merge(two, {{4, 3}, {4, 3}});
      expect_merge_gradients(two, {random_tensor({2, 4, 3}, 9), random_tensor({2, 4, 3}, 10)}, ctx);
    }
  }
}

TEST(AttentionDropout, DependsOnTheSampleNotTheBatch) {
  MultiHeadAttention m(2, 2, 2, 0.5, true, 0, false);
  built_merge(m, {{3, 4}, {3, 4}});
  const Tensor x = random_tensor({2, 3, 4}, 11);
  ForwardContext ctx;
  ctx.training = true;
  ctx.seed = 1;
  ctx.sample_ids = Tensor::from_vector(std::vector<std::int64_t>{10, 11}, {2});
  const std::vector<double> both = v(m.forward_inputs({x, x}, ctx));
  ctx.sample_ids = Tensor::from_vector(std::vector<std::int64_t>{11}, {1});
  const Tensor second = x.view(12, {1, 3, 4}).clone();
  EXPECT_EQ(v(m.forward_inputs({second, second}, ctx)),
            std::vector<double>(both.begin() + 12, both.end()));
}

// A Mirror graph spec with self-attention (one layer's output read twice), trained as float64:
// the model's gradients match central differences.
TEST(AttentionGraph, SelfAttentionInAModelMatchesFiniteDifferences) {
  const ModelSpec spec = ModelSpec::from_json(nlohmann::json::parse(R"({"input_shape": [5, 3],
    "layers": [{"type": "masking", "name": "m"},
               {"type": "gru", "name": "g", "units": 4, "return_sequences": true},
               {"type": "multi_head_attention", "name": "a", "inputs": ["g", "g"], "num_heads": 2,
                "key_dim": 2, "causal": true},
               {"type": "add", "name": "r", "inputs": ["g", "a"]},
               {"type": "layer_normalization"},
               {"type": "global_average_pooling1d"},
               {"type": "dense", "units": 3}]})"));
  Sequential model =
      make_model(spec.bind({{5, 3}, DType::kFloat32, 3, 0}), DType::kFloat64, Device::cpu(), 3);
  Tensor x = random_tensor({2, 5, 3}, 12);
  std::vector<double> xs = v(x);
  for (int t = 3; t < 5; ++t)
    for (int c = 0; c < 3; ++c)
      xs[static_cast<std::size_t>(15 + t * 3 + c)] = 0;  // sample 1: length 3
  x = Tensor::from_vector(xs, {2, 5, 3});
  ForwardContext ctx;
  ctx.training = true;
  const Tensor w = random_tensor({2, 3}, 13);
  const Tensor y = model.forward(x, ctx);
  model.zero_grad();
  model.backward(w);
  auto loss = [&] {
    ForwardContext c;
    c.training = true;
    return testing::weighted_sum(model.forward(x, c), w);
  };
  for (Parameter* p : model.parameters()) {
    const std::vector<double> numeric = testing::numeric_gradient(p->value, loss);
    if (p->name.find("key_bias") != std::string::npos) {  // the softmax ignores it: zero
      for (double g : v(p->grad)) EXPECT_NEAR(g, 0.0, 1e-12);
      continue;
    }
    EXPECT_LE(testing::relative_error(v(p->grad), numeric), 1e-6) << p->name;
  }
  EXPECT_EQ(y.shape(), (Shape{2, 3}));
}

TEST(AttentionFixture, SequenceLayersReadsTrainsAndKeepsTheCausalMask) {
  const ModelSpec spec = ModelSpec::from_file(std::string(MIRROR_SOURCE_DIR) +
                                              "/tests/data/keras/sequence_layers.keras.json");
  int causal = 0;
  for (const auto& l : spec.layers()) causal += l.value("causal", false) ? 1 : 0;
  EXPECT_EQ(causal, 1);  // the MultiHeadAttention's use_causal_mask (a call argument)
  const ModelSpec bound = spec.bind({{8, 6}, DType::kFloat32, 4, 0});
  EXPECT_EQ(ModelSpec::from_json(bound.to_json()).layers(), bound.layers());
  Sequential m = make_model(bound, DType::kFloat32, Device::cpu(), 1);
  ForwardContext ctx;
  ctx.training = true;
  ctx.sample_ids = Tensor::from_vector(std::vector<std::int64_t>{0, 1}, {2});
  const Tensor y = m.forward(ops::cast(random_tensor({2, 8, 6}, 3), DType::kFloat32), ctx);
  EXPECT_EQ(y.shape(), (Shape{2, 4}));
  m.backward(ops::cast(random_tensor(y.shape(), 4), DType::kFloat32));
}

}  // namespace
}  // namespace mirror::nn
