// CUDA ops vs the CPU backend on seeded random inputs (GRU: cuda_gru_test.cpp). Each test
// builds its inputs on the CPU, runs the op there and on cuda:0, and compares. Tolerances,
// and why:
//   exact (0)       element-wise kernels over src/math with +,-,*,/,sqrt only (the library is
//                   built with --fmad=false, IEEE division/sqrt): bias_add, dropout, axpy,
//                   scale, fill, cast, max pool, embedding, SGD, Adam; copies
//   rtol 4e-6       tanh / sigmoid (CUDA's tanhf/expf vs glibc: a few ulp)
//   rtol 1e-5       GEMM, bias_grad (different summation order), loss value and dlogits
//   rtol 1e-4       cuDNN convolutions (algorithm-dependent summation order), atol 1e-5
//   rtol 1e-12      sum_squares (double accumulation, different grouping)
// Without a usable GPU every test skips with discover_gpus()'s reason.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "gpu/gpu_test_util.h"
#include "mirror/memory.h"
#include "mirror/ops.h"

namespace mirror {
namespace {

using testing::expect_close;
using testing::expect_equal;
using testing::GpuTest;
using testing::random_tensor;

class CudaOps : public GpuTest {};

Device gpu_device() { return Device::cuda(0); }

// ---------------------------------------------------------------- memory
TEST_F(CudaOps, CopiesRoundTripExactly) {
  const Tensor a = random_tensor({37, 11}, 1);
  const Tensor g = a.to(gpu());
  EXPECT_TRUE(g.device().is_cuda());
  expect_equal(g.clone(), a, "device clone");
  Tensor h = Tensor::zeros({37, 11}, DType::kFloat32, gpu());
  h.copy_from(g);
  expect_equal(h, a, "device-to-device copy_from");
  const Tensor big = random_tensor({5, 1 << 20}, 2);  // above the staging limit: waited upload
  expect_equal(big.to(gpu()), big, "large upload");
}

TEST_F(CudaOps, ZerosAreZero) {
  const Tensor z = Tensor::zeros({1000}, DType::kFloat32, gpu());
  expect_equal(z, Tensor::zeros({1000}), "zeros");
}

TEST_F(CudaOps, OutOfMemoryNamesTheDevice) {
  const std::size_t too_much = discover_gpus().devices.at(0).total_bytes + (1ull << 30);
  try {
    Tensor::empty({static_cast<std::int64_t>(too_much)}, DType::kUInt8, gpu());
    FAIL() << "allocating more than the device holds must throw OutOfMemory";
  } catch (const OutOfMemory& e) {
    EXPECT_NE(std::string(e.what()).find("cuda:0"), std::string::npos) << e.what();
  }
}

// ---------------------------------------------------------------- dense
TEST_F(CudaOps, GemmAllTransposes) {
  for (int ta = 0; ta < 2; ++ta) {
    for (int tb = 0; tb < 2; ++tb) {
      const Tensor a = random_tensor(ta ? Shape{19, 23} : Shape{23, 19}, 10 + ta);
      const Tensor b = random_tensor(tb ? Shape{17, 19} : Shape{19, 17}, 20 + tb);
      Tensor c = random_tensor({23, 17}, 30);
      Tensor cg = c.to(gpu());
      ops::gemm(ta, tb, 0.75, a, b, 0.5, c);
      ops::gemm(ta, tb, 0.75, a.to(gpu()), b.to(gpu()), 0.5, cg);
      expect_close(cg, c, 1e-5, 1e-6,
                   "gemm ta=" + std::to_string(ta) + " tb=" + std::to_string(tb));
    }
  }
}

TEST_F(CudaOps, BiasAddAndGrad) {
  // The larger shapes split each channel over slices (Note [Channel reductions]).
  for (const Shape& shape :
       {Shape{8, 13}, Shape{4, 6, 5, 7}, Shape{64, 1024}, Shape{64, 32, 28, 28}}) {
    Tensor y = random_tensor(shape, 40);
    Tensor yg = y.to(gpu());
    const Tensor bias = random_tensor({shape[1]}, 41);
    ops::bias_add(y, bias);
    ops::bias_add(yg, bias.to(gpu()));
    expect_equal(yg, y, "bias_add " + shape_str(shape));
    Tensor db = random_tensor({shape[1]}, 42);  // accumulates into existing values
    Tensor dbg = db.to(gpu());
    ops::bias_grad(y, db);
    ops::bias_grad(yg, dbg);
    expect_close(dbg, db, 1e-5, 1e-6, "bias_grad " + shape_str(shape));
  }
}

// ---------------------------------------------------------------- convolution
void check_conv(const Shape& xs, const Shape& ws, const ops::Conv2DGeometry& g, bool bias,
                const std::string& what) {
  const Tensor x = random_tensor(xs, 50), w = random_tensor(ws, 51, 0.5f);
  const Tensor b = bias ? random_tensor({ws[0]}, 52) : Tensor();
  const Tensor xg = x.to(gpu_device()), wg = w.to(gpu_device());
  const Tensor bg = bias ? b.to(gpu_device()) : Tensor();
  const Tensor y = ops::conv2d_forward(x, w, b, g);
  expect_close(ops::conv2d_forward(xg, wg, bg, g), y, 1e-4, 1e-5, what + " forward");
  const Tensor dy = random_tensor(y.shape(), 53);
  const Tensor dyg = dy.to(gpu_device());
  expect_close(ops::conv2d_backward_data(dyg, wg, xs, g), ops::conv2d_backward_data(dy, w, xs, g),
               1e-4, 1e-5, what + " backward data");
  Tensor dw = random_tensor(ws, 54), db = bias ? random_tensor({ws[0]}, 55) : Tensor();
  Tensor dwg = dw.to(gpu_device()), dbg = bias ? db.to(gpu_device()) : Tensor();
  ops::conv2d_backward_weights(x, dy, dw, db, g);
  ops::conv2d_backward_weights(xg, dyg, dwg, dbg, g);
  expect_close(dwg, dw, 1e-4, 1e-5, what + " backward weights (accumulated)");
  if (bias) expect_close(dbg, db, 1e-5, 1e-5, what + " bias grad (accumulated)");
}

TEST_F(CudaOps, Conv2dSymmetricPadding) {
  check_conv({2, 3, 9, 8}, {4, 3, 3, 3}, ops::Conv2DGeometry::same(9, 8, 3, 3, 1, 1), true,
             "same 3x3 stride 1");
}

TEST_F(CudaOps, Conv2dAsymmetricSamePaddingStride2) {
  // TensorFlow's "same" puts the odd row/column of padding at the bottom/right: 10 rows, 3x4
  // kernel, stride 2 pad 0 top / 1 bottom, and 9 columns pad 1 left / 2 right.
  const auto g = ops::Conv2DGeometry::same(10, 9, 3, 4, 2, 2);
  ASSERT_EQ(g.pad_top + 1, g.pad_bottom);
  ASSERT_EQ(g.pad_left + 1, g.pad_right);
  check_conv({3, 2, 10, 9}, {5, 2, 3, 4}, g, true, "same 3x4 stride 2");
}

TEST_F(CudaOps, Conv2dValidNoBias) {
  check_conv({2, 4, 7, 7}, {3, 4, 2, 2}, ops::Conv2DGeometry::valid(1, 2), false, "valid");
}

TEST_F(CudaOps, Conv2dGradientIntoUnalignedBucketView) {
  // Gradients live back to back in all-reduce buckets: a view 1 float in is only 4-byte aligned.
  const Tensor x = random_tensor({2, 3, 6, 6}, 56), dy = random_tensor({2, 4, 6, 6}, 57);
  const auto g = ops::Conv2DGeometry::same(6, 6, 3, 3, 1, 1);
  Tensor dw = random_tensor({4, 3, 3, 3}, 58), db;
  Tensor bucket = Tensor::zeros({1 + 4 * 3 * 3 * 3 + 1}, DType::kFloat32, gpu());
  Tensor view = bucket.view(1, {4, 3, 3, 3});
  view.copy_from(dw.to(gpu()));
  ops::conv2d_backward_weights(x, dy, dw, db, g);
  ops::conv2d_backward_weights(x.to(gpu()), dy.to(gpu()), view, db, g);
  expect_close(view, dw, 1e-4, 1e-5, "dw in a bucket view");
  const std::vector<float> all = bucket.to_vector<float>();
  EXPECT_EQ(all.front(), 0.0f) << "neighbours untouched";
  EXPECT_EQ(all.back(), 0.0f) << "neighbours untouched";
}

// ---------------------------------------------------------------- pooling
TEST_F(CudaOps, MaxPoolTiesAndPadding) {
  // Small integers make many ties: both backends must give the gradient to the first maximum.
  std::vector<float> v(2 * 3 * 7 * 6);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((i * 7919) % 5) - 2.0f;
  const Tensor x = Tensor::from_vector(v, {2, 3, 7, 6});
  for (const ops::Pool2DGeometry& g :
       {ops::Pool2DGeometry{}, ops::Pool2DGeometry{3, 3, 2, 2, 1, 1, 1, 1},
        ops::Pool2DGeometry{3, 2, 1, 1, 0, 2, 1, 0}}) {
    const Tensor y = ops::maxpool2d_forward(x, g);
    const Tensor yg = ops::maxpool2d_forward(x.to(gpu()), g);
    expect_equal(yg, y, "maxpool forward");
    const Tensor dy = random_tensor(y.shape(), 60);
    expect_equal(ops::maxpool2d_backward(x.to(gpu()), yg, dy.to(gpu()), g),
                 ops::maxpool2d_backward(x, y, dy, g), "maxpool backward");
  }
}

// ---------------------------------------------------------------- element-wise
TEST_F(CudaOps, Activations) {
  const Tensor x = random_tensor({1000}, 70, 6.0f), dy = random_tensor({1000}, 71);
  using A = ops::Activation;
  for (A act : {A::kIdentity, A::kRelu, A::kTanh, A::kSigmoid}) {
    const double tol = (act == A::kTanh || act == A::kSigmoid) ? 4e-6 : 0.0;
    const Tensor y = ops::activation_forward(act, x);
    const Tensor yg = ops::activation_forward(act, x.to(gpu()));
    expect_close(yg, y, tol, tol * 1e-2, "activation forward");
    // Backward from the same y on both sides, so only the backward formula is compared.
    expect_equal(ops::activation_backward(act, y.to(gpu()), dy.to(gpu())),
                 ops::activation_backward(act, y, dy), "activation backward");
  }
}

TEST_F(CudaOps, DropoutMatchesCpuMask) {
  const Tensor x = random_tensor({6, 5, 7}, 80);
  const Tensor ids = Tensor::from_vector(std::vector<std::int64_t>{9, 3, 12, 7, 100, 5}, {6});
  Tensor mask, mask_g;
  const Tensor y = ops::dropout_forward(x, 0.3f, 1234, ids, mask);
  const Tensor yg = ops::dropout_forward(x.to(gpu()), 0.3f, 1234, ids.to(gpu()), mask_g);
  expect_equal(mask_g, mask, "dropout mask");
  expect_equal(yg, y, "dropout forward");
  const Tensor dy = random_tensor(x.shape(), 81);
  expect_equal(ops::dropout_backward(dy.to(gpu()), mask_g), ops::dropout_backward(dy, mask),
               "dropout backward");
}

TEST_F(CudaOps, AxpyScaleFillSumSquares) {
  Tensor a = random_tensor({5000}, 90), b = random_tensor({5000}, 91);
  Tensor ag = a.to(gpu());
  ops::axpy(-0.37, b, a);
  ops::axpy(-0.37, b.to(gpu()), ag);
  expect_equal(ag, a, "axpy");
  ops::scale(a, 1.7);
  ops::scale(ag, 1.7);
  expect_equal(ag, a, "scale");
  const double s = ops::sum_squares(a), sg = ops::sum_squares(ag);
  EXPECT_NEAR(sg, s, 1e-12 * s);
  ops::fill(a, 2.5);
  ops::fill(ag, 2.5);
  expect_equal(ag, a, "fill");
  Tensor i = Tensor::zeros({7}, DType::kInt32, gpu());
  ops::fill(i, 42);
  EXPECT_EQ(i.to_vector<std::int32_t>(), std::vector<std::int32_t>(7, 42));
}

TEST_F(CudaOps, CastsRoundLikeTheCpu) {
  std::vector<float> v = testing::random_floats(4096, 70000.0f, 92);
  v[0] = 65520.0f;  // rounds to fp16 infinity
  v[1] = 1e-8f;     // fp16 subnormal range
  v[2] = std::numeric_limits<float>::quiet_NaN();
  const Tensor x = Tensor::from_vector(v, {4096});
  for (DType to : {DType::kFloat16, DType::kBFloat16}) {  // bit patterns, NaN payload included
    const Tensor c = ops::cast(x, to), cg = ops::cast(x.to(gpu()), to);
    EXPECT_EQ(ops::fingerprint(cg), ops::fingerprint(c)) << "cast to " << dtype_name(to);
    EXPECT_EQ(ops::fingerprint(ops::cast(cg, DType::kFloat32)),
              ops::fingerprint(ops::cast(c, DType::kFloat32)))
        << "cast back from " << dtype_name(to);
  }
  // float64 values (a NaN's payload may be canonicalised by the GPU's conversion).
  const Tensor d = ops::cast(x, DType::kFloat64), dg = ops::cast(x.to(gpu()), DType::kFloat64);
  expect_equal(ops::cast(dg, DType::kFloat32), ops::cast(d, DType::kFloat32), "float64 round trip");
}

TEST_F(CudaOps, AllFinite) {
  std::vector<float> v(300, 1.0f);
  EXPECT_TRUE(ops::all_finite(Tensor::from_vector(v, {300}).to(gpu())));
  v[123] = std::numeric_limits<float>::infinity();
  EXPECT_FALSE(ops::all_finite(Tensor::from_vector(v, {300}).to(gpu())));
  v[123] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_FALSE(ops::all_finite(Tensor::from_vector(v, {300}).to(gpu())));
  EXPECT_FALSE(
      ops::all_finite(ops::cast(Tensor::from_vector(v, {300}), DType::kFloat16).to(gpu())));
}

// ---------------------------------------------------------------- embedding, loss
TEST_F(CudaOps, EmbeddingForwardBackward) {
  const std::vector<std::int32_t> id_values{3, 0, 5, 3, 3, 1, 0, 5, 2, 3};
  const Tensor ids = Tensor::from_vector(id_values, {2, 5});
  const Tensor table = random_tensor({6, 4}, 100);
  expect_equal(ops::embedding_forward(ids.to(gpu()), table.to(gpu())),
               ops::embedding_forward(ids, table), "embedding forward");
  const Tensor dy = random_tensor({2, 5, 4}, 101);
  Tensor dt = random_tensor({6, 4}, 102);
  Tensor dtg = dt.to(gpu());
  ops::embedding_backward(ids, dy, dt);
  ops::embedding_backward(ids.to(gpu()), dy.to(gpu()), dtg);
  expect_equal(dtg, dt, "embedding backward (same add order, padding row untouched)");
  const Tensor bad = Tensor::from_vector(std::vector<std::int32_t>{1, 6}, {1, 2});
  EXPECT_THROW(ops::embedding_forward(bad.to(gpu()), table.to(gpu())), InvalidArgument);
  EXPECT_THROW(ops::embedding_backward(bad.to(gpu()), random_tensor({1, 2, 4}, 3).to(gpu()), dtg),
               InvalidArgument);
}

TEST_F(CudaOps, SoftmaxCrossEntropyAndAccuracy) {
  const Tensor logits = random_tensor({33, 10}, 110, 4.0f);
  std::vector<std::int32_t> l(33);
  std::vector<float> w(33, 1.0f);
  for (int i = 0; i < 33; ++i) l[i] = (i * 7) % 10;
  w[5] = 0.0f;  // a padded sample
  const Tensor labels = Tensor::from_vector(l, {33}), weights = Tensor::from_vector(w, {33});
  const ops::LossResult r = ops::softmax_cross_entropy(logits, labels, weights, 64.0);
  const ops::LossResult rg =
      ops::softmax_cross_entropy(logits.to(gpu()), labels.to(gpu()), weights.to(gpu()), 64.0);
  EXPECT_NEAR(rg.loss, r.loss, 1e-5 * std::fabs(r.loss));
  expect_close(rg.dlogits, r.dlogits, 1e-5, 1e-7, "dlogits");
  EXPECT_EQ(ops::correct_count(logits.to(gpu()), labels.to(gpu()), weights.to(gpu())),
            ops::correct_count(logits, labels, weights));
  l[7] = 10;  // out of range
  const Tensor bad = Tensor::from_vector(l, {33}).to(gpu());
  EXPECT_THROW(ops::softmax_cross_entropy(logits.to(gpu()), bad, weights.to(gpu()), 64.0),
               InvalidArgument);
  EXPECT_THROW(ops::correct_count(logits.to(gpu()), bad, weights.to(gpu())), InvalidArgument);
}

// ---------------------------------------------------------------- optimizer updates
TEST_F(CudaOps, SgdMomentumNesterovWeightDecay) {
  Tensor p = random_tensor({777}, 120), buf = random_tensor({777}, 121, 0.1f);
  const Tensor g = random_tensor({777}, 122);
  Tensor pg = p.to(gpu()), bufg = buf.to(gpu());
  for (int step = 0; step < 3; ++step) {
    ops::sgd_update(p, g, buf, 0.05, 0.9, step == 1, 1e-3);
    ops::sgd_update(pg, g.to(gpu()), bufg, 0.05, 0.9, step == 1, 1e-3);
  }
  expect_equal(pg, p, "sgd param");
  expect_equal(bufg, buf, "sgd momentum");
}

TEST_F(CudaOps, AdamAndAdamW) {
  for (bool decoupled : {false, true}) {
    Tensor p = random_tensor({999}, 130), m = Tensor::zeros({999}), v = Tensor::zeros({999});
    Tensor pg = p.to(gpu()), mg = m.to(gpu()), vg = v.to(gpu());
    for (int step = 1; step <= 3; ++step) {
      const Tensor g = random_tensor({999}, 131 + step);
      ops::adam_update(p, g, m, v, 1e-2, 0.9, 0.999, 1e-8, 0.01, decoupled, step);
      ops::adam_update(pg, g.to(gpu()), mg, vg, 1e-2, 0.9, 0.999, 1e-8, 0.01, decoupled, step);
    }
    expect_equal(pg, p, decoupled ? "adamw param" : "adam param");
    expect_equal(mg, m, "adam m");
    expect_equal(vg, v, "adam v");
  }
}

}  // namespace
}  // namespace mirror
