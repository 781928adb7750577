// The casts and the 16-bit sums of the communicators run in the CPU's widest vectors
// (MIRROR_VECTOR_CALL): over arrays long enough for the vector bodies and several OpenMP runs,
// with the values whose conversion is an edge (NaN, infinities, subnormals, ties, fp16
// overflow), every element has the bits of the scalar conversion in src/math/convert.h.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "cpu/cpu_kernels.h"
#include "distributed/collective_util.h"
#include "math/convert.h"
#include "mirror/ops.h"

namespace mirror {
namespace {

float from_bits(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
std::uint32_t bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

/// n floats: random magnitudes from 1e-42 to 1e6 of both signs, with the edges spread through.
std::vector<float> edge_values(std::int64_t n) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> exponent(-42.0f, 6.0f), unit(0.0f, 1.0f);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (float& x : v) x = (unit(rng) < 0.5f ? -1.0f : 1.0f) * std::pow(10.0f, exponent(rng));
  const float edges[] = {0.0f,
                         -0.0f,
                         std::numeric_limits<float>::infinity(),
                         -std::numeric_limits<float>::infinity(),
                         std::numeric_limits<float>::quiet_NaN(),
                         from_bits(0x7F800001u),  // a signalling NaN with payload
                         from_bits(0xFFC01234u),  // a negative NaN with payload
                         from_bits(0x00000001u),  // the smallest subnormal
                         from_bits(0x807FFFFFu),  // the largest negative subnormal
                         from_bits(0x3F808000u),  // bfloat16 tie, rounds down to even
                         from_bits(0x3F818000u),  // bfloat16 tie, rounds up to even
                         from_bits(0x7F7FFFFFu),  // float max: bfloat16 rounds it to Inf
                         65504.0f,                // fp16 max
                         65520.0f,                // fp16 rounds it to Inf
                         6.0e-8f,                 // an fp16 subnormal
                         2.9e-8f,                 // below half the smallest fp16 subnormal
                         1.00048828125f};         // fp16 tie
  for (std::size_t i = 0; i < std::size(edges); ++i) {
    v[i] = edges[i];                                // in the first vector body
    v[v.size() / 2 + i * 3] = edges[i];             // mid-array, off the vector alignment
    v[v.size() - std::size(edges) + i] = edges[i];  // in the scalar tail
  }
  return v;
}

constexpr std::int64_t kLong = 3 * cpu::kParallelGrain + 21;

TEST(SixteenBitLoops, CastsGiveTheScalarBits) {
  const std::vector<float> v = edge_values(kLong);
  const Tensor a = Tensor::from_vector(v, {kLong});
  const Tensor b = ops::cast(a, DType::kBFloat16), h = ops::cast(a, DType::kFloat16);
  const Tensor d = ops::cast(a, DType::kFloat64);
  const Tensor b_back = ops::cast(b, DType::kFloat32), h_back = ops::cast(h, DType::kFloat32);
  const Tensor d_back = ops::cast(d, DType::kFloat32);
  for (std::int64_t i = 0; i < kLong; ++i) {
    const float x = v[static_cast<std::size_t>(i)];
    const std::uint16_t want_b = math::float_to_bfloat16_bits(x),
                        want_h = math::float_to_half_bits(x);
    ASSERT_EQ(b.data<BFloat16>()[i].bits, want_b) << i << ": " << x;
    ASSERT_EQ(h.data<Half>()[i].bits, want_h) << i << ": " << x;
    ASSERT_EQ(bits(b_back.data<float>()[i]), bits(math::bfloat16_bits_to_float(want_b))) << i;
    ASSERT_EQ(bits(h_back.data<float>()[i]), bits(math::half_bits_to_float(want_h))) << i;
    // Exact through double; a NaN stays a NaN (the hardware quiets a signalling one).
    if (std::isnan(x)) {
      ASSERT_TRUE(std::isnan(d_back.data<float>()[i])) << i;
    } else {
      ASSERT_EQ(bits(d_back.data<float>()[i]), bits(x)) << i;
    }
  }
}

TEST(SixteenBitLoops, CastIntoWritesTheCastInPlace) {
  const Tensor a = Tensor::from_vector(edge_values(kLong), {kLong});
  for (DType to : {DType::kBFloat16, DType::kFloat16, DType::kFloat64, DType::kFloat32}) {
    Tensor out = Tensor::empty({kLong}, to);
    const void* where = out.raw_data();
    ops::cast_into(a, out);
    EXPECT_EQ(out.raw_data(), where);
    const Tensor want = ops::cast(a, to);
    EXPECT_EQ(std::memcmp(out.raw_data(), want.raw_data(), want.nbytes()), 0) << dtype_name(to);
  }
  Tensor wrong = Tensor::empty({kLong - 1}, DType::kBFloat16);
  EXPECT_THROW(ops::cast_into(a, wrong), InvalidArgument);
  Tensor ints = Tensor::empty({kLong}, DType::kInt32);
  EXPECT_THROW(ops::cast_into(a, ints), InvalidArgument);
}

TEST(SixteenBitLoops, WireSumsGiveTheScalarBits) {
  // The MPI communicator's 16-bit reduction operations: widen, add in float, round back.
  const std::int64_t n = 4099;
  const std::vector<float> x = edge_values(n), y = edge_values(2 * n);
  std::vector<std::uint16_t> in_b(n), acc_b(n), in_h(n), acc_h(n);
  for (std::int64_t i = 0; i < n; ++i) {
    in_b[i] = math::float_to_bfloat16_bits(x[i]);
    acc_b[i] = math::float_to_bfloat16_bits(y[2 * i + 1]);
    in_h[i] = math::float_to_half_bits(x[i]);
    acc_h[i] = math::float_to_half_bits(y[2 * i + 1]);
  }
  std::vector<std::uint16_t> sum_b = acc_b, sum_h = acc_h;
  dist::detail::add_bfloat16(in_b.data(), sum_b.data(), n);
  dist::detail::add_half(in_h.data(), sum_h.data(), n);
  for (std::int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(sum_b[i], math::float_to_bfloat16_bits(math::bfloat16_bits_to_float(in_b[i]) +
                                                     math::bfloat16_bits_to_float(acc_b[i])))
        << i;
    ASSERT_EQ(sum_h[i], math::float_to_half_bits(math::half_bits_to_float(in_h[i]) +
                                                 math::half_bits_to_float(acc_h[i])))
        << i;
  }
}

}  // namespace
}  // namespace mirror
