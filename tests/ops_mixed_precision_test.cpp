// The CPU backend's mixed-precision math modes (Note [Mixed precision], mirror/precision.h):
// under kBFloat16 gemm and the three convolutions compute exactly the float32-accumulated
// products of bfloat16-rounded operands (checked against float64 loops on the rounded values,
// and shown to differ from the float32 result, so a mode that was ignored fails); kFloat16
// rounds to fp16 (inf beyond 65504); the mode is scoped; the loss-scale state machine.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <iterator>
#include <limits>

#include "cpu/cpu_kernels.h"
#include "math/convert.h"
#include "mirror/ops.h"
#include "mirror/precision.h"
#include "ops_test_util.h"

namespace mirror {
namespace {

using ops_test::expect_close;
using ops_test::random;
using ops_test::values;

/// A float32 tensor with every element rounded to bfloat16 (or fp16) and back.
Tensor rounded(const Tensor& t, MathMode mode) {
  auto v = t.to_vector<float>();
  for (float& x : v) {
    x = mode == MathMode::kBFloat16 ? math::bfloat16_bits_to_float(math::float_to_bfloat16_bits(x))
                                    : math::half_bits_to_float(math::float_to_half_bits(x));
  }
  return Tensor::from_vector(v, t.shape());
}

Tensor f64(const Tensor& t) { return ops::cast(t, DType::kFloat64); }

double max_abs_diff(const Tensor& a, const Tensor& b) {
  const auto x = values(a), y = values(b);
  double m = 0;
  for (std::size_t i = 0; i < x.size(); ++i) m = std::max(m, std::abs(x[i] - y[i]));
  return m;
}

class MixedPrecisionCpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cpu::cpu_has_bf16()) GTEST_SKIP() << "this CPU (or ONEDNN_MAX_CPU_ISA) lacks AVX-512 BF16";
  }
};

TEST_F(MixedPrecisionCpu, Bf16GemmIsTheProductOfRoundedOperands) {
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      const std::int64_t m = 7, n = 9, k = 33;
      const Tensor a = random(ta ? Shape{k, m} : Shape{m, k}, 1, DType::kFloat32);
      const Tensor b = random(tb ? Shape{n, k} : Shape{k, n}, 2, DType::kFloat32);
      const Tensor c0 = random({m, n}, 3, DType::kFloat32);
      for (auto [alpha, beta] : {std::pair{1.0, 0.0}, std::pair{0.5, 1.0}}) {
        Tensor c = c0.clone();
        {
          ScopedMathMode mode(MathMode::kBFloat16);
          ops::gemm(ta, tb, alpha, a, b, beta, c);
        }
        Tensor want = f64(c0);
        ops::gemm(ta, tb, alpha, f64(rounded(a, MathMode::kBFloat16)),
                  f64(rounded(b, MathMode::kBFloat16)), beta, want);
        const std::string what = std::string("gemm ") + (ta ? "T" : "N") + (tb ? "T" : "N");
        expect_close(values(c), values(want), 1e-5, 1e-5, what);
        Tensor exact = c0.clone();
        ops::gemm(ta, tb, alpha, a, b, beta, exact);
        EXPECT_GT(max_abs_diff(c, exact), 1e-4) << what << ": the bfloat16 mode was not applied";
      }
    }
  }
}

TEST_F(MixedPrecisionCpu, Bf16GemmKeepsTinyScalesApart) {
  // alpha is baked into a cached primitive: 1e-7 and 2e-7 must not share one.
  const Tensor a = random({4, 8}, 7, DType::kFloat32), b = random({8, 5}, 8, DType::kFloat32);
  Tensor c1 = Tensor::zeros({4, 5}), c2 = Tensor::zeros({4, 5});
  {
    ScopedMathMode mode(MathMode::kBFloat16);
    ops::gemm(false, false, 1e-7, a, b, 0.0, c1);
    ops::gemm(false, false, 2e-7, a, b, 0.0, c2);
  }
  const auto v1 = c1.to_vector<float>(), v2 = c2.to_vector<float>();
  for (std::size_t i = 0; i < v1.size(); ++i) EXPECT_FLOAT_EQ(v2[i], 2 * v1[i]) << i;
}

TEST_F(MixedPrecisionCpu, ParametersAreCastOncePerGeneration) {
  // Note [Cast once per step]: a ConstantOperands operand is cast once per math generation.
  const Tensor x = random({6, 16}, 9, DType::kFloat32);
  Tensor w = random({16, 5}, 10, DType::kFloat32);
  auto product = [&](bool constant) {
    Tensor y = Tensor::zeros({6, 5});
    if (constant) {
      const ConstantOperands hint({w.raw_data()});
      ops::gemm(false, false, 1.0, x, w, 0.0, y);
    } else {
      ops::gemm(false, false, 1.0, x, w, 0.0, y);
    }
    return y.to_vector<float>();
  };
  ScopedMathMode mode(MathMode::kBFloat16);
  const auto fresh = product(false);
  EXPECT_EQ(product(true), fresh);  // the cached copy rounds like the reorder: same bits
  EXPECT_EQ(product(true), fresh);
  ops::scale(w, 2.0);  // written behind the cache's back: the same generation still reads it
  EXPECT_EQ(product(true), fresh);
  note_parameters_changed();  // what the optimizer updates do
  const auto doubled = product(true);
  EXPECT_EQ(doubled, product(false));
  EXPECT_FLOAT_EQ(doubled[0], 2 * fresh[0]);
  Tensor m = Tensor::zeros(w.shape()), v = Tensor::zeros(w.shape());
  ops::adam_update(w, w, m, v, 0.1, 0.9, 0.999, 1e-8, 0.0, false, 1);
  EXPECT_EQ(product(true), product(false));  // an optimizer step starts a generation
  EXPECT_NE(product(true), doubled);
}

struct ConvCase {
  Shape x, w;
  ops::Conv2DGeometry g;
};

void check_conv(const ConvCase& cc, MathMode mode, double tol) {
  const Tensor x = random(cc.x, 11, DType::kFloat32), w = random(cc.w, 12, DType::kFloat32);
  const Tensor bias = random({cc.w[0]}, 13, DType::kFloat32);
  const Tensor xr = f64(rounded(x, mode)), wr = f64(rounded(w, mode));
  Tensor y, dx, dw = Tensor::zeros(w.shape(), DType::kFloat32),
                db = Tensor::zeros(bias.shape(), DType::kFloat32);
  const Tensor y64 = ops::conv2d_forward(xr, wr, f64(bias), cc.g);
  const Tensor dy = random(y64.shape(), 14, DType::kFloat32);
  const Tensor dyr = f64(rounded(dy, mode));
  {
    ScopedMathMode scoped(mode);
    y = ops::conv2d_forward(x, w, bias, cc.g);
    dx = ops::conv2d_backward_data(dy, w, x.shape(), cc.g);
    ops::conv2d_backward_weights(x, dy, dw, db, cc.g);
  }
  expect_close(values(y), values(y64), tol, tol, "forward");
  expect_close(values(dx), values(ops::conv2d_backward_data(dyr, wr, x.shape(), cc.g)), tol, tol,
               "backward data");
  Tensor dw64 = Tensor::zeros(w.shape(), DType::kFloat64),
         db64 = Tensor::zeros(bias.shape(), DType::kFloat64);
  ops::conv2d_backward_weights(xr, dyr, dw64, db64, cc.g);
  expect_close(values(dw), values(dw64), tol, tol, "backward weights");
  expect_close(values(db), values(db64), tol, tol, "bias gradient");
  // The same ops in float32 differ: a mode that was silently ignored fails here.
  EXPECT_GT(max_abs_diff(y, ops::conv2d_forward(x, w, bias, cc.g)), 1e-4) << math_mode_name(mode);
}

TEST_F(MixedPrecisionCpu, Bf16ConvolutionsAreTheProductsOfRoundedOperands) {
  // A 1-channel first layer (channels-last in oneDNN), a wide one (blocked), strided + padded.
  check_conv({{2, 1, 9, 9}, {8, 1, 3, 3}, ops::Conv2DGeometry::same(9, 9, 3, 3, 1, 1)},
             MathMode::kBFloat16, 1e-4);
  check_conv({{2, 16, 8, 8}, {32, 16, 3, 3}, ops::Conv2DGeometry::same(8, 8, 3, 3, 1, 1)},
             MathMode::kBFloat16, 1e-4);
  check_conv({{3, 5, 11, 10}, {6, 5, 3, 2}, ops::Conv2DGeometry::same(11, 10, 3, 2, 2, 2)},
             MathMode::kBFloat16, 1e-4);
}

/// x with a few values whose rounding to bfloat16 is an edge: ties to even (down and up), a
/// subnormal, a value that rounds up to the next binade, and a negative tie.
Tensor with_rounding_edges(Tensor x) {
  auto v = x.to_vector<float>();
  const std::uint32_t edges[] = {0x3F808000u, 0x3F818000u, 0x00000123u, 0x3FFFFFFFu, 0xBF838000u};
  for (std::size_t i = 0; i < std::size(edges); ++i) {
    float f;
    std::memcpy(&f, &edges[i], sizeof f);
    v[i * 7] = f;
  }
  return Tensor::from_vector(v, x.shape());
}

TEST_F(MixedPrecisionCpu, ConvolutionOperandsGiveTheSameBits) {
  // Note [Convolution operands]: rounding x and dy once (conv2d_operand) and handing the bfloat16
  // copies to the three convolutions gives the bits of handing them float32 x and dy.
  const Shape xs{3, 16, 9, 8}, ws{32, 16, 3, 3};
  const auto g = ops::Conv2DGeometry::same(9, 8, 3, 3, 2, 1);
  const Tensor x = with_rounding_edges(random(xs, 41, DType::kFloat32));
  const Tensor w = random(ws, 42, DType::kFloat32), bias = random({32}, 43, DType::kFloat32);
  const Tensor dy = with_rounding_edges(random({3, 32, 5, 8}, 44, DType::kFloat32));
  ScopedMathMode mode(MathMode::kBFloat16);
  for (std::int64_t x_block : {0, 16}) {
    for (std::int64_t dy_block : {0, 16}) {
      SCOPED_TRACE("x block " + std::to_string(x_block) + ", dy block " + std::to_string(dy_block));
      const Tensor xi = ops::blocked_image(x, x_block), dyi = ops::blocked_image(dy, dy_block);
      const Tensor xo = ops::conv2d_operand(xi), dyo = ops::conv2d_operand(dyi);
      EXPECT_EQ(xo.dtype(), DType::kBFloat16);
      EXPECT_EQ(xo.shape(), (Shape{3, 1, 9, 8, 16}));
      EXPECT_EQ(dyo.shape(), (Shape{3, 2, 5, 8, 16}));
      for (bool blocked_out : {false, true}) {
        EXPECT_EQ(values(ops::plain_image(
                      ops::conv2d_forward(xo, w, bias, g, ops::Activation::kRelu, blocked_out))),
                  values(ops::plain_image(
                      ops::conv2d_forward(xi, w, bias, g, ops::Activation::kRelu, blocked_out))));
      }
      for (std::int64_t dx_block : {0, 16}) {
        EXPECT_EQ(values(ops::conv2d_backward_data(dyo, w, xs, g, dx_block)),
                  values(ops::conv2d_backward_data(dyi, w, xs, g, dx_block)));
      }
      Tensor dw = random(ws, 45, DType::kFloat32), db = random({32}, 46, DType::kFloat32);
      Tensor dw_ref = dw.clone(), db_ref = db.clone();
      ops::conv2d_backward_weights(xo, dyo, dw, db, g);
      ops::conv2d_backward_weights(xi, dyi, dw_ref, db_ref, g);
      EXPECT_EQ(values(dw), values(dw_ref));
      EXPECT_EQ(values(db), values(db_ref));
    }
  }
}

TEST_F(MixedPrecisionCpu, ConvolutionOperandsOnlyWhereTheyHelp) {
  const Tensor x = random({2, 16, 4, 4}, 47, DType::kFloat32);
  // Under float32 math, for channels the bfloat16 primitives do not block by 16, and for float64,
  // the tensor itself comes back.
  EXPECT_EQ(ops::conv2d_operand(x).raw_data(), x.raw_data());
  ScopedMathMode mode(MathMode::kBFloat16);
  const Tensor eight = random({2, 8, 4, 4}, 48, DType::kFloat32);
  EXPECT_EQ(ops::conv2d_operand(eight).raw_data(), eight.raw_data());
  const Tensor x64 = random({2, 16, 4, 4}, 49, DType::kFloat64);
  EXPECT_EQ(ops::conv2d_operand(x64).raw_data(), x64.raw_data());
  const Tensor operand = ops::conv2d_operand(x);
  ASSERT_EQ(operand.dtype(), DType::kBFloat16);
  // An operand is for a float32 convolution only.
  const auto g = ops::Conv2DGeometry::valid(1, 1);
  EXPECT_THROW(ops::conv2d_forward(operand, random({4, 16, 3, 3}, 50, DType::kFloat64), Tensor(), g,
                                   ops::Activation::kIdentity, false),
               InvalidArgument);
  EXPECT_THROW(ops::conv2d_operand(random({2, 16, 4}, 51, DType::kFloat32)), InvalidArgument);
  const Tensor w = random({4, 16, 3, 3}, 52, DType::kFloat32);
  try {
    ScopedMathMode half(MathMode::kFloat16);
    ops::conv2d_forward(operand, w, Tensor(), g, ops::Activation::kIdentity, false);
    ADD_FAILURE() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("mixed_float16"), std::string::npos) << e.what();
  }
}

TEST(MixedPrecisionFp16, ConvolutionsAndGemmRoundOperandsToHalf) {
  check_conv({{2, 16, 8, 8}, {32, 16, 3, 3}, ops::Conv2DGeometry::same(8, 8, 3, 3, 1, 1)},
             MathMode::kFloat16, 1e-4);
  // Beyond fp16's range an operand becomes inf, as on a GPU: the overflow loss scaling catches.
  const Tensor a = Tensor::from_vector<float>({70000.0f, 1.0f}, {1, 2});
  const Tensor b = Tensor::from_vector<float>({1.0f, 1.0f}, {2, 1});
  Tensor c = Tensor::zeros({1, 1}, DType::kFloat32);
  {
    ScopedMathMode mode(MathMode::kFloat16);
    ops::gemm(false, false, 1.0, a, b, 0.0, c);
  }
  EXPECT_TRUE(std::isinf(c.to_vector<float>()[0]));
  ops::gemm(false, false, 1.0, a, b, 0.0, c);
  EXPECT_EQ(c.to_vector<float>()[0], 70001.0f);
}

TEST(MixedPrecisionMode, ScopedAndNamed) {
  EXPECT_EQ(math_mode(), MathMode::kFloat32);
  {
    ScopedMathMode outer(MathMode::kBFloat16);
    EXPECT_EQ(math_mode(), MathMode::kBFloat16);
    {
      ScopedMathMode inner(MathMode::kFloat16);
      EXPECT_EQ(math_mode(), MathMode::kFloat16);
    }
    EXPECT_EQ(math_mode(), MathMode::kBFloat16);
  }
  EXPECT_EQ(math_mode(), MathMode::kFloat32);
  for (Precision p : {Precision::kFloat32, Precision::kMixedBFloat16, Precision::kMixedFloat16})
    EXPECT_EQ(parse_precision(precision_name(p)), p);
  EXPECT_EQ(math_mode_of(Precision::kMixedBFloat16), MathMode::kBFloat16);
  try {
    parse_precision("bfloat16");
    ADD_FAILURE() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("mixed_bfloat16"), std::string::npos) << e.what();
  }
  // The CPU says how it runs each mode: fp16 is a stated emulation.
  EXPECT_TRUE(ops::math_support(Device::cpu(), MathMode::kFloat32).missing.empty());
  const ops::MathSupport fp16 = ops::math_support(Device::cpu(), MathMode::kFloat16);
  EXPECT_TRUE(fp16.missing.empty());
  EXPECT_NE(fp16.fallback.find("EMULATED"), std::string::npos) << fp16.fallback;
  EXPECT_EQ(ops::math_support(Device::cpu(), MathMode::kBFloat16).missing.empty(),
            cpu::cpu_has_bf16());
}

TEST(LossScaleState, HalvesOnOverflowDoublesAfterTheGrowthInterval) {
  LossScale s;
  EXPECT_EQ(s.scale, 32768.0);
  s.update(false);
  EXPECT_EQ(s.scale, 16384.0);
  EXPECT_EQ(s.good_steps, 0);
  for (std::int64_t i = 0; i < LossScale::kGrowthInterval - 1; ++i) s.update(true);
  EXPECT_EQ(s.scale, 16384.0);
  EXPECT_EQ(s.good_steps, LossScale::kGrowthInterval - 1);
  s.update(false);  // an overflow resets the count
  EXPECT_EQ(s.scale, 8192.0);
  EXPECT_EQ(s.good_steps, 0);
  for (std::int64_t i = 0; i < LossScale::kGrowthInterval; ++i) s.update(true);
  EXPECT_EQ(s.scale, 16384.0);
  EXPECT_EQ(s.good_steps, 0);
  // Bounded both ways.
  for (int i = 0; i < 40; ++i) s.update(false);
  EXPECT_EQ(s.scale, LossScale::kMin);
  LossScale big{LossScale::kMax, LossScale::kGrowthInterval - 1};
  big.update(true);
  EXPECT_EQ(big.scale, LossScale::kMax);
}

}  // namespace
}  // namespace mirror
