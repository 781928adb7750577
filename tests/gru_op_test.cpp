// Tests of ops::gru_forward / ops::gru_backward on the CPU: hand-computed values, central finite
// differences in float64 with mixed lengths, masking, float32 vs float64, accumulation and
// argument errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "mirror/ops.h"
#include "ops_test_util.h"

namespace mirror {
namespace {

using Vec = std::vector<double>;

Tensor make(const Vec& v, const Shape& shape, DType dtype = DType::kFloat64) {
  if (dtype == DType::kFloat64) return Tensor::from_vector(v, shape);
  return Tensor::from_vector(std::vector<float>(v.begin(), v.end()), shape);
}

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
  p.w_ih = random_values(static_cast<std::size_t>(3 * h * f), 0.8, rng);
  p.w_hh = random_values(static_cast<std::size_t>(3 * h * h), 0.8, rng);
  p.b_ih = random_values(static_cast<std::size_t>(3 * h), 0.5, rng);
  p.b_hh = random_values(static_cast<std::size_t>(3 * h), 0.5, rng);
  return p;
}

ops::GruWeights weights_of(const Problem& p, DType dtype) {
  return {make(p.w_ih, {3 * p.h, p.f}, dtype), make(p.w_hh, {3 * p.h, p.h}, dtype),
          make(p.b_ih, {3 * p.h}, dtype), make(p.b_hh, {3 * p.h}, dtype)};
}

ops::GruWeights zero_grads(const Problem& p, DType dtype) {
  return {Tensor::zeros({3 * p.h, p.f}, dtype), Tensor::zeros({3 * p.h, p.h}, dtype),
          Tensor::zeros({3 * p.h}, dtype), Tensor::zeros({3 * p.h}, dtype)};
}

double sig(double v) { return 1.0 / (1.0 + std::exp(-v)); }

// ---------------------------------------------------------------- (a) hand-computed values

TEST(GruOp, ForwardMatchesHandComputedEquations) {
  // N=2 (the same sequence twice, lengths 2 and 1), T=2, F=1, H=2. Rows of w_ih / w_hh are
  // r0, r1, z0, z1, n0, n1.
  const Vec x = {0.5, -1.0, 0.5, -1.0};
  const Tensor xt = make(x, {2, 2, 1});
  ops::GruWeights w{make({0.1, -0.2, 0.3, 0.4, -0.5, 0.6}, {6, 1}),
                    make({0.1, 0.2, -0.3, 0.4, 0.5, -0.6, 0.7, 0.8, -0.9, 0.1, 0.2, -0.3}, {6, 2}),
                    make({0.01, 0.02, 0.03, 0.04, 0.05, 0.06}, {6}),
                    make({-0.01, 0.02, -0.03, 0.04, -0.05, 0.06}, {6})};
  const auto out = ops::gru_forward(xt, {2, 1}, w, true);

  // Step 1, x = 0.5, h = (0, 0): U h = 0, so only the recurrent biases remain.
  const double r0 = sig(0.1 * 0.5 + 0.01 + -0.01), r1 = sig(-0.2 * 0.5 + 0.02 + 0.02);
  const double z0 = sig(0.3 * 0.5 + 0.03 + -0.03), z1 = sig(0.4 * 0.5 + 0.04 + 0.04);
  const double n0 = std::tanh(-0.5 * 0.5 + 0.05 + r0 * -0.05);
  const double n1 = std::tanh(0.6 * 0.5 + 0.06 + r1 * 0.06);
  const double a = (1 - z0) * n0 + z0 * 0.0, b = (1 - z1) * n1 + z1 * 0.0;
  // Step 2, x = -1, h = (a, b).
  const double s0 = sig(0.1 * -1 + 0.01 + (0.1 * a + 0.2 * b) + -0.01);
  const double s1 = sig(-0.2 * -1 + 0.02 + (-0.3 * a + 0.4 * b) + 0.02);
  const double u0 = sig(0.3 * -1 + 0.03 + (0.5 * a + -0.6 * b) + -0.03);
  const double u1 = sig(0.4 * -1 + 0.04 + (0.7 * a + 0.8 * b) + 0.04);
  const double m0 = std::tanh(-0.5 * -1 + 0.05 + s0 * ((-0.9 * a + 0.1 * b) + -0.05));
  const double m1 = std::tanh(0.6 * -1 + 0.06 + s1 * ((0.2 * a + -0.3 * b) + 0.06));
  const double c = (1 - u0) * m0 + u0 * a, d = (1 - u1) * m1 + u1 * b;

  const Vec y = values(out.y), h = values(out.h_last);
  const Vec want_y = {a, b, c, d, a, b, 0, 0};  // sample 1 stops after one step: zeros after
  const Vec want_h = {c, d, a, b};
  ASSERT_EQ(y.size(), want_y.size());
  for (std::size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y[i], want_y[i], 1e-14) << "y " << i;
  for (std::size_t i = 0; i < h.size(); ++i) EXPECT_NEAR(h[i], want_h[i], 1e-14) << "h " << i;
  EXPECT_EQ(out.y.shape(), (Shape{2, 2, 2}));
  EXPECT_EQ(out.h_last.shape(), (Shape{2, 2}));

  // The same numbers in float32, and without saving for backward.
  const auto f32 =
      ops::gru_forward(make(x, {2, 2, 1}, DType::kFloat32), {2, 1},
                       {ops::cast(w.w_ih, DType::kFloat32), ops::cast(w.w_hh, DType::kFloat32),
                        ops::cast(w.b_ih, DType::kFloat32), ops::cast(w.b_hh, DType::kFloat32)},
                       false);
  EXPECT_FALSE(f32.reserve.defined());
  const Vec y32 = values(f32.y);
  for (std::size_t i = 0; i < y32.size(); ++i) EXPECT_NEAR(y32[i], want_y[i], 1e-6) << i;
}

// ---------------------------------------------------------------- (b) finite differences

enum class Output { kLast, kSequence, kBoth };

// L = sum(a * y) + sum(b * h_last) with fixed random a, b (each used when `out` says so).
struct Loss {
  Output out;
  Vec a, b;
  double operator()(const Problem& p) const {
    const auto r = ops::gru_forward(make(p.x, {p.n, p.t, p.f}), p.lengths,
                                    weights_of(p, DType::kFloat64), false);
    double l = 0;
    if (out != Output::kLast) {
      const Vec y = values(r.y);
      for (std::size_t i = 0; i < y.size(); ++i) l += a[i] * y[i];
    }
    if (out != Output::kSequence) {
      const Vec h = values(r.h_last);
      for (std::size_t i = 0; i < h.size(); ++i) l += b[i] * h[i];
    }
    return l;
  }
};

// Compares `analytic` with central differences of `loss` w.r.t. every element of `field`.
void expect_fd_match(Problem p, Vec Problem::*field, const Vec& analytic, const Loss& loss,
                     const char* what) {
  const double eps = 1e-6;
  Vec& v = p.*field;
  ASSERT_EQ(v.size(), analytic.size()) << what;
  double diff2 = 0, num2 = 0, ana2 = 0;
  for (std::size_t i = 0; i < v.size(); ++i) {
    const double keep = v[i];
    v[i] = keep + eps;
    const double up = loss(p);
    v[i] = keep - eps;
    const double down = loss(p);
    v[i] = keep;
    const double num = (up - down) / (2 * eps);
    EXPECT_NEAR(num, analytic[i], 1e-7) << what << "[" << i << "]";
    diff2 += (num - analytic[i]) * (num - analytic[i]);
    num2 += num * num;
    ana2 += analytic[i] * analytic[i];
  }
  EXPECT_GT(num2, 1e-6) << what << ": the check must not be vacuous";
  EXPECT_LT(std::sqrt(diff2) / (std::sqrt(num2) + std::sqrt(ana2)), 1e-6) << what;
}

void check_gradients(Output out) {
  // Lengths mix 1, the full length and one in between; x holds garbage past each length.
  const Problem p = random_problem(3, 4, 3, 3, {1, 4, 2}, 42);
  std::mt19937_64 rng(7);
  Loss loss{out, random_values(static_cast<std::size_t>(p.n * p.t * p.h), 1.0, rng),
            random_values(static_cast<std::size_t>(p.n * p.h), 1.0, rng)};

  const Tensor x = make(p.x, {p.n, p.t, p.f});
  const ops::GruWeights w = weights_of(p, DType::kFloat64);
  const auto fwd = ops::gru_forward(x, p.lengths, w, true);
  ops::GruWeights dw = zero_grads(p, DType::kFloat64);
  const Tensor dy = out == Output::kLast ? Tensor() : make(loss.a, {p.n, p.t, p.h});
  const Tensor dh = out == Output::kSequence ? Tensor() : make(loss.b, {p.n, p.h});
  const Tensor dx = ops::gru_backward(x, p.lengths, w, fwd, dy, dh, dw);
  ASSERT_EQ(dx.shape(), x.shape());

  expect_fd_match(p, &Problem::x, values(dx), loss, "dx");
  expect_fd_match(p, &Problem::w_ih, values(dw.w_ih), loss, "dw_ih");
  expect_fd_match(p, &Problem::w_hh, values(dw.w_hh), loss, "dw_hh");
  expect_fd_match(p, &Problem::b_ih, values(dw.b_ih), loss, "db_ih");
  expect_fd_match(p, &Problem::b_hh, values(dw.b_hh), loss, "db_hh");

  // Inputs past a sequence's length get exactly zero gradient.
  const Vec g = values(dx);
  for (std::int64_t s = 0; s < p.n; ++s) {
    for (std::int64_t t = p.lengths[s]; t < p.t; ++t) {
      for (std::int64_t j = 0; j < p.f; ++j) EXPECT_EQ(g[(s * p.t + t) * p.f + j], 0.0);
    }
  }
}

TEST(GruOp, GradientsMatchFiniteDifferencesLastState) { check_gradients(Output::kLast); }
TEST(GruOp, GradientsMatchFiniteDifferencesSequence) { check_gradients(Output::kSequence); }
TEST(GruOp, GradientsMatchFiniteDifferencesBothOutputs) { check_gradients(Output::kBoth); }

// ---------------------------------------------------------------- (c) masking

TEST(GruOp, PaddedSequenceEqualsUnpaddedSequence) {
  const std::int64_t f = 3, h = 4, len = 2, t_pad = 6;
  Problem shortp = random_problem(1, len, f, h, {len}, 11);
  std::mt19937_64 rng(99);
  Problem padded = shortp;
  padded.t = t_pad;
  padded.x = shortp.x;
  const Vec garbage = random_values(static_cast<std::size_t>((t_pad - len) * f), 50.0, rng);
  padded.x.insert(padded.x.end(), garbage.begin(), garbage.end());

  Vec dy_short = random_values(static_cast<std::size_t>(len * h), 1.0, rng);
  Vec dy_pad = dy_short;  // garbage gradient past the length must be ignored too
  const Vec dy_garbage = random_values(static_cast<std::size_t>((t_pad - len) * h), 9.0, rng);
  dy_pad.insert(dy_pad.end(), dy_garbage.begin(), dy_garbage.end());
  const Vec dh = random_values(static_cast<std::size_t>(h), 1.0, rng);

  auto run = [&](const Problem& p, const Vec& dyv, ops::GruWeights& dw, Vec& y, Vec& hl) {
    const Tensor x = make(p.x, {1, p.t, f});
    const ops::GruWeights w = weights_of(p, DType::kFloat64);
    const auto fwd = ops::gru_forward(x, p.lengths, w, true);
    y = values(fwd.y);
    hl = values(fwd.h_last);
    return values(
        ops::gru_backward(x, p.lengths, w, fwd, make(dyv, {1, p.t, h}), make(dh, {1, h}), dw));
  };
  ops::GruWeights dw_s = zero_grads(shortp, DType::kFloat64);
  ops::GruWeights dw_p = zero_grads(padded, DType::kFloat64);
  Vec y_s, h_s, y_p, h_p;
  const Vec dx_s = run(shortp, dy_short, dw_s, y_s, h_s);
  const Vec dx_p = run(padded, dy_pad, dw_p, y_p, h_p);

  for (std::size_t i = 0; i < y_p.size(); ++i) {
    EXPECT_NEAR(y_p[i], i < y_s.size() ? y_s[i] : 0.0, 1e-13) << "y " << i;
  }
  for (std::size_t i = 0; i < h_s.size(); ++i) EXPECT_NEAR(h_p[i], h_s[i], 1e-13) << "h " << i;
  for (std::size_t i = 0; i < dx_p.size(); ++i) {
    EXPECT_NEAR(dx_p[i], i < dx_s.size() ? dx_s[i] : 0.0, 1e-12) << "dx " << i;
  }
  const std::pair<Tensor, Tensor> pairs[] = {{dw_s.w_ih, dw_p.w_ih},
                                             {dw_s.w_hh, dw_p.w_hh},
                                             {dw_s.b_ih, dw_p.b_ih},
                                             {dw_s.b_hh, dw_p.b_hh}};
  for (const auto& [s, pd] : pairs) {
    const Vec a = values(s), b = values(pd);
    for (std::size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-12) << i;
  }
}

// ---------------------------------------------------------------- (d) float32 vs float64

TEST(GruOp, Float32AgreesWithFloat64) {
  const Problem p = random_problem(4, 5, 3, 4, {5, 1, 3, 4}, 5);
  std::mt19937_64 rng(3);
  const Vec dyv = random_values(static_cast<std::size_t>(p.n * p.t * p.h), 1.0, rng);
  const Vec dhv = random_values(static_cast<std::size_t>(p.n * p.h), 1.0, rng);
  std::vector<Vec> results[2];
  for (int k = 0; k < 2; ++k) {
    const DType dt = k == 0 ? DType::kFloat64 : DType::kFloat32;
    const Tensor x = make(p.x, {p.n, p.t, p.f}, dt);
    const ops::GruWeights w = weights_of(p, dt);
    const auto fwd = ops::gru_forward(x, p.lengths, w, true);
    ops::GruWeights dw = zero_grads(p, dt);
    const Tensor dx = ops::gru_backward(x, p.lengths, w, fwd, make(dyv, {p.n, p.t, p.h}, dt),
                                        make(dhv, {p.n, p.h}, dt), dw);
    for (const Tensor& t : {fwd.y, fwd.h_last, dx, dw.w_ih, dw.w_hh, dw.b_ih, dw.b_hh}) {
      EXPECT_EQ(t.dtype(), dt);
      results[k].push_back(values(t));
    }
  }
  for (std::size_t r = 0; r < results[0].size(); ++r) {
    ASSERT_EQ(results[0][r].size(), results[1][r].size());
    for (std::size_t i = 0; i < results[0][r].size(); ++i) {
      EXPECT_NEAR(results[0][r][i], results[1][r][i], 1e-5) << "result " << r << " [" << i << "]";
    }
  }
}

TEST(GruOp, InferenceForwardEqualsTrainingForward) {
  const Problem p = random_problem(3, 5, 2, 3, {5, 2, 1}, 8);
  const Tensor x = make(p.x, {p.n, p.t, p.f});
  const auto w = weights_of(p, DType::kFloat64);
  const auto train = ops::gru_forward(x, p.lengths, w, true);
  const auto infer = ops::gru_forward(x, p.lengths, w, false);
  EXPECT_TRUE(train.reserve.defined());
  EXPECT_FALSE(infer.reserve.defined());
  EXPECT_EQ(values(train.y), values(infer.y));
  EXPECT_EQ(values(train.h_last), values(infer.h_last));
}

TEST(GruOp, LargeInputsStayFinite) {
  Problem p = random_problem(2, 3, 2, 2, {3, 2}, 4);
  for (auto& v : p.x) v *= 1e4;  // saturates every gate
  const Tensor x = make(p.x, {p.n, p.t, p.f}, DType::kFloat32);
  const auto w = weights_of(p, DType::kFloat32);
  const auto fwd = ops::gru_forward(x, p.lengths, w, true);
  ops::GruWeights dw = zero_grads(p, DType::kFloat32);
  const Tensor dx = ops::gru_backward(x, p.lengths, w, fwd, Tensor(), fwd.h_last, dw);
  EXPECT_TRUE(ops::all_finite(fwd.y));
  EXPECT_TRUE(ops::all_finite(dx));
  for (const Tensor& g : {dw.w_ih, dw.w_hh, dw.b_ih, dw.b_hh}) EXPECT_TRUE(ops::all_finite(g));
  for (double v : values(fwd.h_last)) EXPECT_LE(std::abs(v), 1.0);  // |h| <= 1 always
}

TEST(GruOp, EmptyBatchGivesEmptyResultsAndNoGradient) {
  const Problem p = random_problem(1, 3, 2, 2, {3}, 6);
  const auto w = weights_of(p, DType::kFloat64);
  const Tensor x = Tensor::zeros({0, 3, 2}, DType::kFloat64);
  const auto fwd = ops::gru_forward(x, {}, w, true);
  EXPECT_EQ(fwd.y.shape(), (Shape{0, 3, 2}));
  EXPECT_EQ(fwd.h_last.shape(), (Shape{0, 2}));
  ops::GruWeights dw = zero_grads(p, DType::kFloat64);
  const Tensor dx =
      ops::gru_backward(x, {}, w, fwd, Tensor(), Tensor::zeros({0, 2}, DType::kFloat64), dw);
  EXPECT_EQ(dx.shape(), x.shape());
  for (const Tensor& g : {dw.w_ih, dw.w_hh, dw.b_ih, dw.b_hh}) {
    for (double v : values(g)) EXPECT_EQ(v, 0.0);
  }
}

// ---------------------------------------------------------------- (f) accumulation

TEST(GruOp, BackwardAccumulatesWeightGradients) {
  const Problem p = random_problem(2, 3, 2, 3, {3, 2}, 21);
  const Tensor x = make(p.x, {p.n, p.t, p.f});
  const auto w = weights_of(p, DType::kFloat64);
  const auto fwd = ops::gru_forward(x, p.lengths, w, true);
  std::mt19937_64 rng(1);
  const Tensor dh = make(random_values(static_cast<std::size_t>(p.n * p.h), 1.0, rng), {p.n, p.h});

  ops::GruWeights once = zero_grads(p, DType::kFloat64);
  const Vec dx1 = values(ops::gru_backward(x, p.lengths, w, fwd, Tensor(), dh, once));
  // Start from non-zero gradients, add the same gradient twice.
  ops::GruWeights acc = zero_grads(p, DType::kFloat64);
  std::vector<Vec> start;
  for (Tensor* t : {&acc.w_ih, &acc.w_hh, &acc.b_ih, &acc.b_hh}) {
    Vec v = random_values(static_cast<std::size_t>(t->numel()), 1.0, rng);
    *t = make(v, t->shape());
    start.push_back(v);
  }
  const Vec dx2 = values(ops::gru_backward(x, p.lengths, w, fwd, Tensor(), dh, acc));
  const Vec dx3 = values(ops::gru_backward(x, p.lengths, w, fwd, Tensor(), dh, acc));
  EXPECT_EQ(dx1, dx2);  // dx is returned, not accumulated
  EXPECT_EQ(dx1, dx3);
  const Tensor* g1[] = {&once.w_ih, &once.w_hh, &once.b_ih, &once.b_hh};
  const Tensor* g2[] = {&acc.w_ih, &acc.w_hh, &acc.b_ih, &acc.b_hh};
  for (int k = 0; k < 4; ++k) {
    const Vec a = values(*g1[k]), b = values(*g2[k]);
    for (std::size_t i = 0; i < a.size(); ++i) {
      EXPECT_NEAR(b[i], start[k][i] + 2 * a[i], 1e-13) << k << "[" << i << "]";
    }
  }
}

// ---------------------------------------------------------------- (h) argument errors

TEST(GruOp, LengthsOutOfRangeAreInvalidArguments) {
  const Problem p = random_problem(2, 3, 2, 2, {3, 3}, 2);
  const Tensor x = make(p.x, {p.n, p.t, p.f});
  const auto w = weights_of(p, DType::kFloat64);
  EXPECT_THROW(ops::gru_forward(x, {0, 3}, w, true), InvalidArgument);
  EXPECT_THROW(ops::gru_forward(x, {3, 4}, w, true), InvalidArgument);
  EXPECT_THROW(ops::gru_forward(x, {-1, 2}, w, true), InvalidArgument);
  EXPECT_THROW(ops::gru_forward(x, {3}, w, true), InvalidArgument);
  EXPECT_THROW(ops::gru_forward(x, {1, 2, 3}, w, true), InvalidArgument);

  const auto fwd = ops::gru_forward(x, p.lengths, w, true);
  ops::GruWeights dw = zero_grads(p, DType::kFloat64);
  const Tensor dh = Tensor::zeros({p.n, p.h}, DType::kFloat64);
  EXPECT_THROW(ops::gru_backward(x, {0, 3}, w, fwd, Tensor(), dh, dw), InvalidArgument);
  EXPECT_THROW(ops::gru_backward(x, {3, 4}, w, fwd, Tensor(), dh, dw), InvalidArgument);
}

TEST(GruOp, BadArgumentsAreInvalidArguments) {
  const Problem p = random_problem(2, 3, 2, 2, {3, 1}, 2);
  const Tensor x = make(p.x, {p.n, p.t, p.f});
  const auto w = weights_of(p, DType::kFloat64);
  ops::GruWeights dw = zero_grads(p, DType::kFloat64);
  const Tensor dh = Tensor::zeros({p.n, p.h}, DType::kFloat64);
  // Mixed dtypes.
  EXPECT_THROW(ops::gru_forward(make(p.x, {p.n, p.t, p.f}, DType::kFloat32), p.lengths, w, true),
               InvalidArgument);
  // Backward after an inference forward (nothing saved).
  const auto infer = ops::gru_forward(x, p.lengths, w, false);
  EXPECT_THROW(ops::gru_backward(x, p.lengths, w, infer, Tensor(), dh, dw), InvalidArgument);
  const auto fwd = ops::gru_forward(x, p.lengths, w, true);
  // Wrong gradient shapes, neither gradient.
  EXPECT_THROW(ops::gru_backward(x, p.lengths, w, fwd, Tensor(),
                                 Tensor::zeros({p.n, p.h + 1}, DType::kFloat64), dw),
               InvalidArgument);
  EXPECT_THROW(ops::gru_backward(x, p.lengths, w, fwd,
                                 Tensor::zeros({p.n, p.t - 1, p.h}, DType::kFloat64), Tensor(), dw),
               InvalidArgument);
  EXPECT_THROW(ops::gru_backward(x, p.lengths, w, fwd, Tensor(), Tensor(), dw), InvalidArgument);
  ops::GruWeights bad = zero_grads(p, DType::kFloat64);
  bad.w_hh = Tensor::zeros({3 * p.h, p.h + 1}, DType::kFloat64);
  EXPECT_THROW(ops::gru_backward(x, p.lengths, w, fwd, Tensor(), dh, bad), InvalidArgument);
}

}  // namespace
}  // namespace mirror
