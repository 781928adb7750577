// defines: helpers for the ops_* tests: seeded random tensors in float32/float64, element-wise
// comparison with an absolute + relative tolerance, central finite differences, and the fixture
// of the per-dtype tests.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "gradcheck.h"
#include "mirror/ops.h"
#include "mirror/tensor.h"

namespace mirror::ops_test {

/// Entries U(lo, hi) from `seed`, drawn in double and then cast (so the float32 and float64
/// tensors made from the same seed hold the same numbers up to float rounding).
inline Tensor random(const Shape& shape, std::uint64_t seed, DType dtype = DType::kFloat64,
                     double lo = -1.0, double hi = 1.0) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(static_cast<std::size_t>(shape_numel(shape)));
  for (double& x : v) x = dist(rng);
  Tensor t = Tensor::from_vector(v, shape);
  return dtype == DType::kFloat64 ? t : ops::cast(t, dtype);
}

/// Host copy as double, whatever the float dtype.
inline std::vector<double> values(const Tensor& t) {
  if (t.dtype() == DType::kFloat64) return t.to_vector<double>();
  return ops::cast(t, DType::kFloat64).to_vector<double>();
}

/// n values U(-scale, scale) from `rng`, drawn from its top 53 bits so that every standard
/// library gives the same numbers.
inline std::vector<double> random_values(std::size_t n, double scale, std::mt19937_64& rng) {
  std::vector<double> v(n);
  for (auto& x : v) x = scale * (2.0 * static_cast<double>(rng() >> 11) * 0x1.0p-53 - 1.0);
  return v;
}

inline Tensor f64(const Tensor& t) { return ops::cast(t, DType::kFloat64); }
inline Tensor f32(const Tensor& t) { return ops::cast(t, DType::kFloat32); }

/// Asserts |got - want| <= atol + rtol * |want| element-wise, reporting the worst element.
inline void expect_close(const std::vector<double>& got, const std::vector<double>& want,
                         double atol, double rtol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  std::size_t worst = 0;
  double worst_excess = -1;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double excess = std::abs(got[i] - want[i]) - (atol + rtol * std::abs(want[i]));
    if (!(excess <= worst_excess) || std::isnan(got[i]) != std::isnan(want[i])) {
      worst = i;
      worst_excess = std::isnan(got[i]) || std::isnan(want[i]) ? INFINITY : excess;
    }
  }
  EXPECT_LE(worst_excess, 0.0) << what << ": element " << worst << " is " << got[worst]
                               << ", expected " << want[worst] << " (atol " << atol << ", rtol "
                               << rtol << ")";
}

inline void expect_close(const Tensor& got, const Tensor& want, double atol, double rtol,
                         const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  expect_close(values(got), values(want), atol, rtol, what);
}

/// Fixture of the tests run once per float dtype (the parameter): tensors made in that dtype
/// from double values, and the tolerance that dtype's rounding allows.
class DTypeTest : public ::testing::TestWithParam<DType> {
 protected:
  DType dt() const { return GetParam(); }
  double tol() const { return dt() == DType::kFloat32 ? 2e-6 : 1e-14; }
  Tensor make(const std::vector<double>& v, const Shape& s) const {
    Tensor t = Tensor::from_vector(v, s);
    return dt() == DType::kFloat64 ? t : ops::cast(t, dt());
  }
  Tensor zeros(const Shape& s) const { return Tensor::zeros(s, dt()); }
};

using testing::numeric_gradient;  // central differences, shared with the layer checks

/// sum(a * b) for float64 tensors of equal size (the scalar "loss" of gradient checks).
inline double dot(const Tensor& a, const Tensor& b) {
  const double* x = a.data<double>();
  const double* y = b.data<double>();
  double s = 0;
  for (std::int64_t i = 0; i < a.numel(); ++i) s += x[i] * y[i];
  return s;
}

}  // namespace mirror::ops_test
