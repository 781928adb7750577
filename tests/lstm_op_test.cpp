// Tests of ops::lstm_forward / ops::lstm_backward on the CPU: an independent reference of the
// equations (docs/architecture.md invariant 5) with mixed lengths, central finite differences in
// float64 with shorter sequences and both gradient sources, float32 vs float64, accumulation,
// empty sizes and argument errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "math/rnn_tanh.h"
#include "mirror/ops.h"
#include "ops_test_util.h"

namespace mirror {
namespace {

using Vec = std::vector<double>;
using ops_test::expect_close;
using ops_test::random_values;
using ops_test::values;

struct Problem {
  std::int64_t n, t, f, h;
  std::vector<std::int32_t> lengths;
  Vec x, w_ih, w_hh, b_ih, b_hh;
};

Problem random_problem(std::int64_t n, std::int64_t t, std::int64_t f, std::int64_t h,
                       std::vector<std::int32_t> lengths, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  Problem p{n, t, f, h, std::move(lengths), {}, {}, {}, {}, {}};
  p.x = random_values(static_cast<std::size_t>(n * t * f), 1.0, rng);
  p.w_ih = random_values(static_cast<std::size_t>(4 * h * f), 0.8, rng);
  p.w_hh = random_values(static_cast<std::size_t>(4 * h * h), 0.8, rng);
  p.b_ih = random_values(static_cast<std::size_t>(4 * h), 0.5, rng);
  p.b_hh = random_values(static_cast<std::size_t>(4 * h), 0.5, rng);
  return p;
}

Tensor make(const Vec& v, const Shape& shape, DType dtype) {
  Tensor t = Tensor::from_vector(v, shape);
  return dtype == DType::kFloat64 ? t : ops::cast(t, dtype);
}

ops::LstmWeights weights_of(const Problem& p, DType dtype = DType::kFloat64) {
  return {make(p.w_ih, {4 * p.h, p.f}, dtype), make(p.w_hh, {4 * p.h, p.h}, dtype),
          make(p.b_ih, {4 * p.h}, dtype), make(p.b_hh, {4 * p.h}, dtype)};
}

ops::LstmWeights zero_grads(const Problem& p, DType dtype = DType::kFloat64) {
  return {Tensor::zeros({4 * p.h, p.f}, dtype), Tensor::zeros({4 * p.h, p.h}, dtype),
          Tensor::zeros({4 * p.h}, dtype), Tensor::zeros({4 * p.h}, dtype)};
}

double sig(double v) { return 1.0 / (1.0 + std::exp(-v)); }

/// The LSTM written out per sample and unit, straight from the equations.
struct Reference {
  Vec y, h_last, c_last;
};
Reference reference(const Problem& p) {
  Reference r{Vec(static_cast<std::size_t>(p.n * p.t * p.h), 0.0), {}, {}};
  for (std::int64_t s = 0; s < p.n; ++s) {
    Vec h(static_cast<std::size_t>(p.h), 0.0), c = h;
    for (std::int64_t step = 0; step < p.lengths[static_cast<std::size_t>(s)]; ++step) {
      Vec hn = h, cn = c;
      for (std::int64_t j = 0; j < p.h; ++j) {
        double a[4];
        for (int gate = 0; gate < 4; ++gate) {
          const std::int64_t row = gate * p.h + j;
          a[gate] = p.b_ih[row] + p.b_hh[row];
          for (std::int64_t k = 0; k < p.f; ++k) {
            a[gate] += p.w_ih[row * p.f + k] * p.x[(s * p.t + step) * p.f + k];
          }
          for (std::int64_t k = 0; k < p.h; ++k) a[gate] += p.w_hh[row * p.h + k] * h[k];
        }
        const double i = sig(a[0]), f = sig(a[1]), g = std::tanh(a[2]), o = sig(a[3]);
        cn[j] = f * c[j] + i * g;
        hn[j] = o * std::tanh(cn[j]);
        r.y[(s * p.t + step) * p.h + j] = hn[j];
      }
      h = hn;
      c = cn;
    }
    r.h_last.insert(r.h_last.end(), h.begin(), h.end());
    r.c_last.insert(r.c_last.end(), c.begin(), c.end());
  }
  return r;
}

TEST(LstmOp, ForwardMatchesTheEquationsWithMixedLengths) {
  const Problem p = random_problem(4, 5, 3, 4, {5, 2, 1, 4}, 11);
  const Reference want = reference(p);
  for (bool training : {true, false}) {
    const auto out = ops::lstm_forward(make(p.x, {p.n, p.t, p.f}, DType::kFloat64), p.lengths,
                                       weights_of(p), training);
    expect_close(values(out.y), want.y, 1e-14, 1e-12, "y (zeros past each length)");
    expect_close(values(out.h_last), want.h_last, 1e-14, 1e-12, "h_last");
    expect_close(values(out.c_last), want.c_last, 1e-14, 1e-12, "c_last");
    EXPECT_EQ(out.reserve.defined(), training);
  }
}

TEST(LstmOp, Float32MatchesFloat64) {
  const Problem p = random_problem(3, 6, 4, 5, {6, 3, 1}, 12);
  const auto d = ops::lstm_forward(make(p.x, {p.n, p.t, p.f}, DType::kFloat64), p.lengths,
                                   weights_of(p), true);
  const auto f = ops::lstm_forward(make(p.x, {p.n, p.t, p.f}, DType::kFloat32), p.lengths,
                                   weights_of(p, DType::kFloat32), true);
  expect_close(values(f.y), values(d.y), 1e-6, 1e-5, "y");
  expect_close(values(f.c_last), values(d.c_last), 1e-6, 1e-5, "c_last");
  std::mt19937_64 rng(3);
  const Tensor dy = make(random_values(3 * 6 * 5, 1.0, rng), {3, 6, 5}, DType::kFloat64);
  ops::LstmWeights gd = zero_grads(p), gf = zero_grads(p, DType::kFloat32);
  const Tensor dxd = ops::lstm_backward(make(p.x, {p.n, p.t, p.f}, DType::kFloat64), p.lengths,
                                        weights_of(p), d, dy, Tensor(), gd);
  const Tensor dxf = ops::lstm_backward(make(p.x, {p.n, p.t, p.f}, DType::kFloat32), p.lengths,
                                        weights_of(p, DType::kFloat32), f,
                                        ops::cast(dy, DType::kFloat32), Tensor(), gf);
  expect_close(values(dxf), values(dxd), 1e-5, 1e-4, "dx");
  expect_close(values(gf.w_hh), values(gd.w_hh), 1e-5, 1e-4, "dw_hh");
}

/// L = sum(a * y) + sum(b * h_last): the op's gradients against central differences (float64).
void check_gradients(bool use_dy, bool use_dh, std::uint64_t seed) {
  Problem p = random_problem(3, 4, 2, 3, {1, 4, 2}, seed);
  std::mt19937_64 rng(seed + 100);
  const Vec a = random_values(static_cast<std::size_t>(p.n * p.t * p.h), 1.0, rng);
  const Vec b = random_values(static_cast<std::size_t>(p.n * p.h), 1.0, rng);
  const Tensor x = make(p.x, {p.n, p.t, p.f}, DType::kFloat64);
  ops::LstmWeights w = weights_of(p);
  auto loss = [&] {
    const auto out = ops::lstm_forward(x, p.lengths, w, false);
    double l = 0;
    const Vec y = values(out.y), h = values(out.h_last);
    for (std::size_t i = 0; use_dy && i < y.size(); ++i) l += a[i] * y[i];
    for (std::size_t i = 0; use_dh && i < h.size(); ++i) l += b[i] * h[i];
    return l;
  };
  const auto fwd = ops::lstm_forward(x, p.lengths, w, true);
  // Gradients accumulate: start from ones and subtract them afterwards.
  ops::LstmWeights dw = zero_grads(p);
  for (Tensor* g : {&dw.w_ih, &dw.w_hh, &dw.b_ih, &dw.b_hh}) ops::fill(*g, 1.0);
  const Tensor dy = use_dy ? make(a, {p.n, p.t, p.h}, DType::kFloat64) : Tensor();
  const Tensor dh = use_dh ? make(b, {p.n, p.h}, DType::kFloat64) : Tensor();
  const Tensor dx = ops::lstm_backward(x, p.lengths, w, fwd, dy, dh, dw);
  auto check = [&](const Tensor& t, const Tensor& analytic, double offset, const char* what) {
    Vec got = values(analytic);
    for (double& v : got) v -= offset;
    const Vec num = ops_test::numeric_gradient(t, loss);
    double norm = 0;
    for (double v : num) norm += v * v;
    EXPECT_GT(norm, 1e-8) << what;
    EXPECT_LT(testing::relative_error(got, num), 1e-7) << what;
  };
  check(x, dx, 0.0, "dx");
  check(w.w_ih, dw.w_ih, 1.0, "dw_ih");
  check(w.w_hh, dw.w_hh, 1.0, "dw_hh");
  check(w.b_ih, dw.b_ih, 1.0, "db_ih");
  check(w.b_hh, dw.b_hh, 1.0, "db_hh");
  // Steps past a length get no input gradient.
  const Vec dxv = values(dx);
  for (std::int64_t s = 0; s < p.n; ++s) {
    for (std::int64_t step = p.lengths[static_cast<std::size_t>(s)]; step < p.t; ++step) {
      for (std::int64_t k = 0; k < p.f; ++k) EXPECT_EQ(dxv[(s * p.t + step) * p.f + k], 0.0);
    }
  }
}

TEST(LstmOp, GradientsMatchFiniteDifferencesBothSources) { check_gradients(true, true, 21); }
TEST(LstmOp, GradientsMatchFiniteDifferencesSequenceOnly) { check_gradients(true, false, 22); }
TEST(LstmOp, GradientsMatchFiniteDifferencesLastStateOnly) { check_gradients(false, true, 23); }

TEST(LstmOp, EmptySizes) {
  // F = 0: the biases still drive the recurrence (as a zero input would).
  Problem p = random_problem(2, 3, 0, 2, {3, 1}, 31);
  const auto out =
      ops::lstm_forward(Tensor::zeros({2, 3, 0}, DType::kFloat64), p.lengths, weights_of(p), true);
  expect_close(values(out.h_last), reference(p).h_last, 1e-14, 1e-12, "h_last with F = 0");
  ops::LstmWeights dw = zero_grads(p);
  EXPECT_EQ(ops::lstm_backward(Tensor::zeros({2, 3, 0}, DType::kFloat64), p.lengths, weights_of(p),
                               out, Tensor(), Tensor::zeros({2, 2}, DType::kFloat64), dw)
                .shape(),
            (Shape{2, 3, 0}));
  // H = 0 and N = 0: empty outputs.
  Problem q = random_problem(2, 3, 2, 0, {3, 1}, 32);
  const auto e =
      ops::lstm_forward(make(q.x, {2, 3, 2}, DType::kFloat64), q.lengths, weights_of(q), false);
  EXPECT_EQ(e.y.shape(), (Shape{2, 3, 0}));
  EXPECT_EQ(e.c_last.shape(), (Shape{2, 0}));
  Problem r = random_problem(0, 3, 2, 2, {}, 33);
  EXPECT_EQ(ops::lstm_forward(Tensor::zeros({0, 3, 2}, DType::kFloat64), {}, weights_of(r), false)
                .y.shape(),
            (Shape{0, 3, 2}));
}

// Note [Cell tanh]: the float tanh of the GRU and LSTM cells against double tanh, over the
// polynomial range, the switch point, the exp range, saturation, and the special values.
TEST(CellTanh, FloatIsWithinAFewUlpOfTanh) {
  double worst = 0;
  for (double v = -20.0; v <= 20.0; v += 1.0 / 1024) {
    for (double x : {v, v * 1e-3, v * 1e-6}) {
      const auto f = static_cast<float>(x);
      const double want = std::tanh(static_cast<double>(f));
      const double got = math::cell_tanh(f);
      const double ulp = std::nextafter(static_cast<float>(std::fabs(want)), 2.0f) -
                         static_cast<float>(std::fabs(want));
      if (want != 0) worst = std::max(worst, std::fabs(got - want) / ulp);
      ASSERT_LE(std::fabs(got - want), 4 * ulp) << "x = " << x;
    }
  }
  EXPECT_GT(worst, 0.0);  // it is an approximation, and the sweep reached it
  EXPECT_EQ(math::cell_tanh(0.0f), 0.0f);
  EXPECT_EQ(math::cell_tanh(INFINITY), 1.0f);
  EXPECT_EQ(math::cell_tanh(-INFINITY), -1.0f);
  EXPECT_TRUE(std::isnan(math::cell_tanh(NAN)));
  EXPECT_EQ(math::cell_tanh(0.3), std::tanh(0.3));  // double: tanh itself
}

// Note [Cell tanh]: the branch-free float exp and sigmoid the vectorised gate loops use, against
// double, over the polynomial's whole range, the clamps and the special values.
TEST(CellTanh, FloatExpAndSigmoidAreWithinAFewUlp) {
  auto ulp_of = [](double want) {
    const auto a = static_cast<float>(std::fabs(want));
    return static_cast<double>(std::nextafter(a, INFINITY)) - a;
  };
  double worst_exp = 0, worst_sigmoid = 0;
  for (double v = -100.0; v <= 100.0; v += 1.0 / 512) {
    for (double x : {v, v * 1e-3, v * 1e-6}) {
      const auto f = static_cast<float>(x);
      const double e = std::exp(static_cast<double>(f));
      if (f > -87.0f && f < 88.0f) {
        worst_exp = std::max(worst_exp, std::fabs(math::cell_exp(f) - e) / ulp_of(e));
      }
      const double s = 1.0 / (1.0 + std::exp(-static_cast<double>(f)));
      if (s > 1e-37) {  // below, the clamp gives about 1e-38 instead of a denormal
        worst_sigmoid = std::max(worst_sigmoid, std::fabs(math::cell_sigmoid(f) - s) / ulp_of(s));
      }
    }
  }
  EXPECT_LE(worst_exp, 2.0);
  EXPECT_LE(worst_sigmoid, 4.0);
  EXPECT_GT(worst_exp, 0.0);  // an approximation, and the sweep reached it
  EXPECT_EQ(math::cell_exp(0.0f), 1.0f);
  EXPECT_GT(math::cell_exp(1000.0f), 1e38f);  // saturates, finite
  EXPECT_TRUE(std::isfinite(math::cell_exp(1000.0f)));
  EXPECT_LT(math::cell_exp(-1000.0f), 1e-37f);
  EXPECT_EQ(math::cell_sigmoid(INFINITY), 1.0f);
  EXPECT_LT(math::cell_sigmoid(-INFINITY), 1e-37f);
  EXPECT_EQ(math::cell_sigmoid(0.0f), 0.5f);
  EXPECT_TRUE(std::isnan(math::cell_exp(NAN)));
  EXPECT_TRUE(std::isnan(math::cell_sigmoid(NAN)));
  EXPECT_EQ(math::cell_sigmoid(0.3), 1.0 / (1.0 + std::exp(-0.3)));  // double: the exact one
}

TEST(LstmOp, BadArgumentsAreInvalidArguments) {
  const Problem p = random_problem(2, 3, 2, 2, {3, 1}, 41);
  const Tensor x = make(p.x, {2, 3, 2}, DType::kFloat64);
  ops::LstmWeights w = weights_of(p);
  EXPECT_THROW(ops::lstm_forward(x, {3}, w, false), InvalidArgument);     // one length for two
  EXPECT_THROW(ops::lstm_forward(x, {0, 3}, w, false), InvalidArgument);  // length 0
  EXPECT_THROW(ops::lstm_forward(x, {4, 3}, w, false), InvalidArgument);  // past T
  ops::LstmWeights gru_shaped = w;
  gru_shaped.w_hh = Tensor::zeros({6, 2}, DType::kFloat64);
  EXPECT_THROW(ops::lstm_forward(x, p.lengths, gru_shaped, false), InvalidArgument);
  ops::LstmWeights f32 = weights_of(p, DType::kFloat32);
  EXPECT_THROW(ops::lstm_forward(x, p.lengths, f32, false), InvalidArgument);
  const auto infer = ops::lstm_forward(x, p.lengths, w, false);
  ops::LstmWeights dw = zero_grads(p);
  EXPECT_THROW(ops::lstm_backward(x, p.lengths, w, infer, Tensor(),
                                  Tensor::zeros({2, 2}, DType::kFloat64), dw),
               InvalidArgument);  // no reserve: inference forward
  const auto train = ops::lstm_forward(x, p.lengths, w, true);
  EXPECT_THROW(ops::lstm_backward(x, p.lengths, w, train, Tensor(), Tensor(), dw),
               InvalidArgument);  // no gradient source
  EXPECT_THROW(ops::lstm_backward(x, p.lengths, w, train, Tensor(),
                                  Tensor::zeros({2, 3}, DType::kFloat64), dw),
               InvalidArgument);  // dh_last of the wrong shape
}

}  // namespace
}  // namespace mirror
