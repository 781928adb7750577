// The fused per-bucket update (Optimizer::step_groups, Note [Fused update]) against the
// per-parameter step(): bitwise the same parameters and named state for Adam, AdamW and SGD with
// momentum over several steps and several buckets laid out by plan_buckets; and the four-lane
// float32 Adam loop (Note [Vector Adam]) against the scalar math::adam_step.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "math/optim.h"
#include "mirror/distributed/bucket.h"
#include "mirror/ops.h"
#include "mirror/optim/optimizer.h"

namespace mirror::optim {
namespace {

// Odd sizes so that vector loops have tails; 1 and 4 for the edges.
const std::vector<Shape> kShapes = {{3, 5}, {7}, {1}, {4}, {6, 11}, {130}, {2, 2, 9}};

/// A model's parameters whose gradients are views of flat bucket buffers, as in the strategy.
struct Bucketed {
  std::vector<nn::Parameter> params;
  std::vector<Tensor> buffers;
  std::vector<FlatGroup> groups;
  dist::BucketPlan plan;

  explicit Bucketed(DType dtype) : params(kShapes.size()) {
    std::vector<dist::BucketParam> sizes;
    for (std::size_t i = 0; i < kShapes.size(); ++i) {
      nn::Parameter& p = params[i];
      p.name = "layer_" + std::to_string(i) + "/kernel";
      const std::int64_t n = shape_numel(kShapes[i]);
      std::vector<double> v(static_cast<std::size_t>(n));
      for (std::int64_t k = 0; k < n; ++k) v[k] = std::cos(0.37 * k + static_cast<double>(i));
      p.value = ops::cast(Tensor::from_vector(v, kShapes[i]), dtype);
      sizes.push_back({p.name, dtype, n});
    }
    // Small caps: several buckets, several parameters in some of them.
    plan = dist::plan_buckets(
        sizes, {.first_bytes = 64 * dtype_size(dtype), .bytes = 150 * dtype_size(dtype)});
    for (const dist::Bucket& b : plan.buckets) {
      buffers.push_back(Tensor::zeros({b.numel}, dtype));
      FlatGroup g;
      for (std::size_t s = 0; s < b.params.size(); ++s) {
        nn::Parameter& p = params[static_cast<std::size_t>(b.params[s])];
        p.grad = buffers.back().view(b.offsets[s], p.value.shape());
        g.params.push_back(&p);
      }
      g.offsets = b.offsets;
      g.grad = buffers.back();
      groups.push_back(std::move(g));
    }
  }

  std::vector<nn::Parameter*> pointers() {
    std::vector<nn::Parameter*> out;
    for (auto& p : params) out.push_back(&p);
    return out;
  }

  /// Gradients of step t: signs and sizes vary, some exact zeros.
  void set_grads(int t) {
    for (std::size_t i = 0; i < params.size(); ++i) {
      nn::Parameter& p = params[i];
      std::vector<double> g(static_cast<std::size_t>(p.grad.numel()));
      for (std::size_t k = 0; k < g.size(); ++k) {
        g[k] = k % 5 == 3 ? 0.0 : std::sin(1.1 * t + 0.3 * static_cast<double>(k + 7 * i)) * 0.5;
      }
      p.grad.copy_from(ops::cast(Tensor::from_vector(g, p.grad.shape()), p.grad.dtype()));
    }
  }
};

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.numel() == b.numel() &&
         std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

void expect_bitwise_equal(Bucketed& a, Bucketed& b, const Optimizer& oa, const Optimizer& ob) {
  for (std::size_t i = 0; i < a.params.size(); ++i) {
    EXPECT_EQ(a.params[i].value.shape(), b.params[i].value.shape());
    EXPECT_TRUE(same_bytes(a.params[i].value, b.params[i].value)) << a.params[i].name;
  }
  const State sa = oa.state(), sb = ob.state();
  ASSERT_EQ(sa.size(), sb.size());
  for (auto ia = sa.begin(), ib = sb.begin(); ia != sa.end(); ++ia, ++ib) {
    EXPECT_EQ(ia->first, ib->first);
    EXPECT_EQ(ia->second.shape(), ib->second.shape()) << ia->first;
    EXPECT_TRUE(same_bytes(ia->second, ib->second)) << ia->first;
  }
}

struct Case {
  std::string name;
  OptimizerOptions options;
  DType dtype;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.name << " momentum " << c.options.momentum << (c.options.nesterov ? " nesterov" : "")
      << " weight_decay " << c.options.weight_decay << " " << dtype_name(c.dtype);
}

class FusedUpdate : public ::testing::TestWithParam<Case> {};

TEST_P(FusedUpdate, BitwiseTheSameAsPerParameterSteps) {
  const Case& c = GetParam();
  Bucketed per(c.dtype), fused(c.dtype);
  ASSERT_GE(fused.plan.buckets.size(), 3u);
  // A parameter never spans buckets: each is in exactly one, whole.
  std::int64_t total = 0;
  for (const auto& b : fused.plan.buckets) total += b.numel;
  std::int64_t expected = 0;
  for (const auto& p : fused.params) expected += p.value.numel();
  EXPECT_EQ(total, expected);

  auto opt_per = make_optimizer(c.name, c.options);
  auto opt_fused = make_optimizer(c.name, c.options);
  const double lrs[] = {0.1, 0.05, 0.02, 0.08, 0.01};
  for (int t = 1; t <= 5; ++t) {
    per.set_grads(t);
    fused.set_grads(t);
    opt_per->step(per.pointers(), lrs[t - 1]);
    opt_fused->step_groups(fused.groups, lrs[t - 1]);
    expect_bitwise_equal(per, fused, *opt_per, *opt_fused);
  }
  // The values became views of a flat buffer; the model still sees its own shapes.
  for (const auto& p : fused.params) EXPECT_EQ(p.value.numel(), shape_numel(p.value.shape()));

  // A checkpoint restore in the middle: both continue from the same state, still bitwise equal.
  State snapshot;
  for (const auto& [name, tensor] : opt_per->state()) snapshot[name] = tensor.clone();
  opt_fused->load_state(snapshot);
  opt_per->load_state(snapshot);
  for (int t = 6; t <= 8; ++t) {
    per.set_grads(t);
    fused.set_grads(t);
    opt_per->step(per.pointers(), 0.03);
    opt_fused->step_groups(fused.groups, 0.03);
  }
  expect_bitwise_equal(per, fused, *opt_per, *opt_fused);

  // A value replaced from outside (as a weights restore might) is taken in at the next step.
  Tensor replaced = per.params[2].value.clone();
  per.params[2].value.copy_from(replaced);
  fused.params[2].value = replaced.clone();
  per.set_grads(9);
  fused.set_grads(9);
  opt_per->step(per.pointers(), 0.04);
  opt_fused->step_groups(fused.groups, 0.04);
  expect_bitwise_equal(per, fused, *opt_per, *opt_fused);
}

OptimizerOptions with(double momentum, bool nesterov, double wd) {
  OptimizerOptions o;
  o.momentum = momentum;
  o.nesterov = nesterov;
  o.weight_decay = wd;
  return o;
}

INSTANTIATE_TEST_SUITE_P(Optimizers, FusedUpdate,
                         ::testing::Values(Case{"adam", with(0, false, 0.0), DType::kFloat32},
                                           Case{"adam", with(0, false, 0.01), DType::kFloat32},
                                           Case{"adamw", with(0, false, 0.05), DType::kFloat32},
                                           Case{"adamw", with(0, false, -1), DType::kFloat64},
                                           Case{"sgd", with(0.9, false, 0.0), DType::kFloat32},
                                           Case{"sgd", with(0.9, true, 0.01), DType::kFloat32},
                                           Case{"sgd", with(0.0, false, 0.0), DType::kFloat64}),
                         [](const auto& info) { return "Case" + std::to_string(info.index); });

TEST(FusedUpdate, GroupsNotInTheGradientLayoutAreAnError) {
  Bucketed b(DType::kFloat32);
  std::vector<FlatGroup> groups = b.groups;
  std::size_t k = 0;
  while (groups[k].params.size() < 2) ++k;
  std::swap(groups[k].params[0], groups[k].params[1]);
  auto opt = make_optimizer("adam");
  EXPECT_THROW(opt->step_groups(groups, 0.1), InvalidArgument);
}

// Note [Vector Adam]: the four-lane float32 loop is bitwise the scalar per-element code.
TEST(VectorAdam, Float32LanesMatchTheScalarLoop) {
  for (const bool decoupled : {false, true}) {
    for (const double wd : {0.0, 0.02}) {
      const std::int64_t n = 4099;  // a tail of 3
      std::vector<float> p(n), g(n), m(n), v(n);
      for (std::int64_t i = 0; i < n; ++i) {
        p[i] = std::cos(0.01f * i);
        g[i] = i % 7 == 0 ? 0.0f : std::sin(0.37f * i) * 1e-3f * (1 + i % 11);
        m[i] = 0.01f * std::sin(0.5f * i);
        v[i] = 1e-6f * (i % 13);
      }
      Tensor tp = Tensor::from_vector(p, {n}), tg = Tensor::from_vector(g, {n});
      Tensor tm = Tensor::from_vector(m, {n}), tv = Tensor::from_vector(v, {n});
      for (std::int64_t step = 1; step <= 3; ++step) {
        const math::AdamScalars s = math::adam_scalars(1e-3, 0.9, 0.999, 1e-8, wd, decoupled, step);
        for (std::int64_t i = 0; i < n; ++i) math::adam_step(p[i], g[i], m[i], v[i], s);
        ops::adam_update(tp, tg, tm, tv, 1e-3, 0.9, 0.999, 1e-8, wd, decoupled, step);
      }
      const auto bytes = [](const std::vector<float>& x) { return x.size() * sizeof(float); };
      EXPECT_EQ(std::memcmp(tp.raw_data(), p.data(), bytes(p)), 0) << decoupled << wd;
      EXPECT_EQ(std::memcmp(tm.raw_data(), m.data(), bytes(m)), 0) << decoupled << wd;
      EXPECT_EQ(std::memcmp(tv.raw_data(), v.data(), bytes(v)), 0) << decoupled << wd;
    }
  }
}

}  // namespace
}  // namespace mirror::optim
