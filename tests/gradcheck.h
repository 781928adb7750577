// defines: finite-difference gradient checks for tests (header-only): numeric_gradient of any
// scalar function of a float64 CPU tensor, relative_error, random tensors, and check_layer,
// which compares a layer's backward (input and parameter gradients) with central differences.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "mirror/nn/layer.h"
#include "mirror/ops.h"
#include "mirror/tensor.h"

namespace mirror::testing {

/// A float64 CPU tensor with entries U(low, high) from `seed`.
inline Tensor random_tensor(const Shape& shape, std::uint64_t seed, double low = -1.0,
                            double high = 1.0) {
  std::mt19937_64 rng(seed);
  std::vector<double> v(static_cast<std::size_t>(shape_numel(shape)));
  for (auto& x : v) x = low + (high - low) * (static_cast<double>(rng() >> 11) * 0x1.0p-53);
  return Tensor::from_vector(v, shape);
}

/// ||a - b|| / max(||a||, ||b||, 1e-300): 0 when both are zero.
inline double relative_error(const std::vector<double>& a, const std::vector<double>& b) {
  double diff = 0, na = 0, nb = 0;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) {
    diff += (a[i] - b[i]) * (a[i] - b[i]);
    na += a[i] * a[i];
    nb += b[i] * b[i];
  }
  if (a.size() != b.size()) return INFINITY;
  const double denom = std::sqrt(std::max(na, nb));
  return denom == 0 ? 0.0 : std::sqrt(diff) / std::max(denom, 1e-300);
}

/// Central differences d f / d t, perturbing each element of the float64 CPU tensor `t` in
/// place by +-eps (and restoring it).
inline std::vector<double> numeric_gradient(const Tensor& t, const std::function<double()>& f,
                                            double eps = 1e-6) {
  double* p = t.data<double>();
  std::vector<double> g(static_cast<std::size_t>(t.numel()));
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    const double saved = p[i];
    p[i] = saved + eps;
    const double plus = f();
    p[i] = saved - eps;
    const double minus = f();
    p[i] = saved;
    g[static_cast<std::size_t>(i)] = (plus - minus) / (2 * eps);
  }
  return g;
}

/// sum(w * y) in double for float64 CPU tensors of the same size.
inline double weighted_sum(const Tensor& y, const Tensor& w) {
  const double* a = y.data<double>();
  const double* b = w.data<double>();
  double s = 0;
  for (std::int64_t i = 0; i < y.numel(); ++i) s += a[i] * b[i];
  return s;
}

struct GradCheckReport {
  double max_error = 0;  // the largest relative error over the checked tensors
  std::string worst;     // which tensor it was ("input" or a parameter name)
  std::vector<std::pair<std::string, double>> errors;  // per tensor
};

/// Checks layer.backward against central differences of L = sum(w * layer.forward(x)) for a
/// fixed random w, for the input (when it is floating point and layer.input_grad_needed())
/// and every parameter. The layer must be built in float64 on the CPU; `ctx` is reused for
/// every evaluation (so dropout masks and lengths stay fixed).
inline GradCheckReport check_layer(nn::Layer& layer, const Tensor& x, nn::ForwardContext& ctx,
                                   double eps = 1e-6, std::uint64_t seed = 7) {
  GradCheckReport report;
  Tensor y = layer.forward(x, ctx);
  const Tensor w = random_tensor(y.shape(), seed);
  for (nn::Parameter* p : layer.parameters()) ops::fill(p->grad, 0.0);
  const Tensor dx = layer.backward(w);
  auto loss = [&] { return weighted_sum(layer.forward(x, ctx), w); };
  auto record = [&](const std::string& what, const std::vector<double>& analytic,
                    const std::vector<double>& numeric) {
    const double e = relative_error(analytic, numeric);
    report.errors.emplace_back(what, e);
    if (e >= report.max_error) {
      report.max_error = e;
      report.worst = what;
    }
  };
  if (x.dtype() == DType::kFloat64 && layer.input_grad_needed()) {
    record("input", dx.defined() ? dx.to_vector<double>() : std::vector<double>{},
           numeric_gradient(x, loss, eps));
  }
  for (nn::Parameter* p : layer.parameters()) {
    record(p->name, p->grad.to_vector<double>(), numeric_gradient(p->value, loss, eps));
  }
  return report;
}

/// Builds `layer` for `input_shape` in float64 with a fixed seed and names it (gradient checks
/// run in float64, where central differences are accurate to ~1e-8).
template <class L>
L& built(L& layer, const Shape& input_shape, const std::string& name = "layer_1") {
  layer.set_name(name);
  nn::InitRng rng(42);
  layer.build(input_shape, DType::kFloat64, Device::cpu(), rng);
  return layer;
}

/// The report covers `tensors` tensors and each one's relative error is at most `tol`.
inline void expect_gradients_within(const GradCheckReport& r, std::size_t tensors,
                                    double tol = 1e-6) {
  EXPECT_EQ(r.errors.size(), tensors);
  for (const auto& [what, err] : r.errors) EXPECT_LE(err, tol) << what;
}

}  // namespace mirror::testing
