// Note [Dense labels]: softmax cross-entropy per step ([N, T, K] logits, [N, T] labels, padding
// steps masked) and per pixel ([N, K, H, W], [N, H, W]) against a hand computation, its gradient
// against central differences, the same global mean from 1, 2 and 3 replicas (each dividing by
// the global count of labelled positions), the loader's per-step labels and global count at
// every replica count, and the shape and range errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "mirror/data/arrays.h"
#include "mirror/data/loader.h"
#include "mirror/nn/models.h"
#include "mirror/ops.h"
#include "ops_test_util.h"

namespace mirror {
namespace {

using ::testing::HasSubstr;

double nll(const std::vector<double>& row, int label) {
  double mx = row[0], sum = 0;
  for (double v : row) mx = std::max(mx, v);
  for (double v : row) sum += std::exp(v - mx);
  return mx + std::log(sum) - row[static_cast<std::size_t>(label)];
}

Tensor f64(std::vector<double> v, const Shape& s) { return Tensor::from_vector(v, s); }
Tensor i32(std::vector<std::int32_t> v, const Shape& s) { return Tensor::from_vector(v, s); }

TEST(DenseLabels, PerStepLossMasksPaddingAndDividesByTheGlobalCount) {
  // 2 samples x 3 steps x 2 classes; sample 0 has 2 valid steps, sample 1 all 3 (weight 0.5).
  const std::vector<double> x = {1, 2, 0, -1, 9, 9, /**/ 0.5, 0, -2, 1, 3, 3};
  const Tensor logits = f64(x, {2, 3, 2});
  const Tensor labels = i32({1, 0, 7 /* padding: ignored */, 0, 1, 1}, {2, 3});
  const Tensor w = f64({1, 0.5}, {2});
  const double global = 9;  // labelled steps in the global batch (other replicas hold 4)
  const ops::DenseLossResult r =
      ops::dense_softmax_cross_entropy(logits, labels, w, {2, 3}, global);
  auto row = [&](int i) { return std::vector<double>{x[2 * i], x[2 * i + 1]}; };
  const double want =
      (nll(row(0), 1) + nll(row(1), 0) + 0.5 * (nll(row(3), 0) + nll(row(4), 1) + nll(row(5), 1))) /
      global;
  EXPECT_NEAR(r.loss, want, 1e-12);
  EXPECT_EQ(r.counted, 5);
  // argmax: step (1,2)->1 ok, (0,-1)->0 ok; (0.5,0)->0 ok, (-2,1)->1 ok, (3,3)->0 (first max) no.
  EXPECT_EQ(r.correct, 4);
  // Gradient: w * (softmax - onehot) / global at counted steps, zero at the padding step.
  const std::vector<double> d = ops_test::values(r.dlogits);
  ASSERT_EQ(r.dlogits.shape(), logits.shape());
  const double p0 = 1 / (1 + std::exp(1.0));  // softmax(1, 2)[0]
  EXPECT_NEAR(d[0], p0 / global, 1e-12);
  EXPECT_NEAR(d[1], (1 - p0 - 1) / global, 1e-12);
  EXPECT_EQ(d[4], 0);
  EXPECT_EQ(d[5], 0);
  EXPECT_NEAR(d[10], 0.5 * 0.5 / global, 1e-12);  // (3, 3), label 1: softmax 1/2 each
  EXPECT_NEAR(d[11], 0.5 * (0.5 - 1) / global, 1e-12);
}

TEST(DenseLabels, PerStepGradientMatchesCentralDifferences) {
  const Tensor logits = ops_test::random({3, 4, 5}, 7);
  const Tensor labels = i32({0, 4, 2, 1, 3, 3, 0, 0, 1, 2, 3, 4}, {3, 4});
  const Tensor w = f64({1, 1, 0.25}, {3});
  const std::vector<std::int32_t> counted = {4, 1, 3};
  const ops::DenseLossResult r = ops::dense_softmax_cross_entropy(logits, labels, w, counted, 8);
  const std::vector<double> d = ops_test::values(r.dlogits);
  std::vector<double> x = logits.to_vector<double>();
  const double h = 1e-6;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double keep = x[i];
    x[i] = keep + h;
    const double up =
        ops::dense_softmax_cross_entropy(f64(x, {3, 4, 5}), labels, w, counted, 8).loss;
    x[i] = keep - h;
    const double down =
        ops::dense_softmax_cross_entropy(f64(x, {3, 4, 5}), labels, w, counted, 8).loss;
    x[i] = keep;
    EXPECT_NEAR(d[i], (up - down) / (2 * h), 1e-8) << "element " << i;
  }
}

TEST(DenseLabels, PerPixelLossTakesTheClassesFromTheChannelAxis) {
  // 1 sample, K = 3 classes, 2 x 2 pixels, NCHW: logits[k][p].
  const std::vector<double> x = {1, 0, 2, -1, /**/ 0, 3, 2, 0, /**/ -1, 0, 5, 2};
  const Tensor logits = f64(x, {1, 3, 2, 2});
  const Tensor labels = i32({0, 1, 2, 0}, {1, 2, 2});
  const ops::DenseLossResult r =
      ops::dense_softmax_cross_entropy(logits, labels, f64({1}, {1}), {4}, 4);
  double want = 0;
  const int label[4] = {0, 1, 2, 0};
  for (int p = 0; p < 4; ++p) want += nll({x[p], x[4 + p], x[8 + p]}, label[p]);
  EXPECT_NEAR(r.loss, want / 4, 1e-12);
  EXPECT_EQ(r.counted, 4);
  EXPECT_EQ(r.correct, 3);
  EXPECT_THROW(ops::dense_softmax_cross_entropy(logits, i32({0, 1, 2, 3}, {1, 2, 2}), f64({1}, {1}),
                                                {4}, 4),
               InvalidArgument);  // class 3 of 3  // argmax per pixel: 0, 1, 2 right; (-1, 0, 2) -> 2, not 0
  // dlogits back in NCHW: pixel 0, class 0 is the softmax minus one, over 4.
  const double s0 = std::exp(1) + std::exp(0) + std::exp(-1);
  EXPECT_NEAR(ops_test::values(r.dlogits)[0], (std::exp(1) / s0 - 1) / 4, 1e-12);
  EXPECT_NEAR(ops_test::values(r.dlogits)[4], std::exp(0) / s0 / 4, 1e-12);
}

TEST(DenseLabels, ReplicasSumToTheOneReplicaMean) {
  // 6 samples x 4 steps; lengths 4, 1, 3, 2, 4, 2 (global count 16). R replicas each take 6 / R
  // samples and divide by the global count; their losses add up to the one-replica loss and their
  // gradients are its rows.
  const Tensor logits = ops_test::random({6, 4, 3}, 11);
  std::vector<std::int32_t> l(24);
  for (std::size_t i = 0; i < l.size(); ++i) l[i] = static_cast<std::int32_t>((i * 7) % 3);
  const Tensor labels = i32(l, {6, 4});
  const std::vector<std::int32_t> counted = {4, 1, 3, 2, 4, 2};
  const ops::DenseLossResult one = ops::dense_softmax_cross_entropy(
      logits, labels, f64(std::vector<double>(6, 1), {6}), counted, 16);
  const std::vector<double> d1 = ops_test::values(one.dlogits);
  for (int replicas : {2, 3}) {
    const std::int64_t per = 6 / replicas;
    double loss = 0;
    std::int64_t correct = 0;
    for (int r = 0; r < replicas; ++r) {
      const Tensor x = logits.view(r * per * 12, {per, 4, 3});
      const Tensor y = labels.view(r * per * 4, {per, 4});
      const std::vector<std::int32_t> c(counted.begin() + r * per, counted.begin() + (r + 1) * per);
      const ops::DenseLossResult part = ops::dense_softmax_cross_entropy(
          x, y, f64(std::vector<double>(static_cast<std::size_t>(per), 1), {per}), c, 16);
      loss += part.loss;
      correct += part.correct;
      const std::vector<double> d = ops_test::values(part.dlogits);
      for (std::size_t i = 0; i < d.size(); ++i)
        EXPECT_EQ(d[i], d1[static_cast<std::size_t>(r * per * 12) + i]) << replicas << " replicas";
    }
    EXPECT_NEAR(loss, one.loss, 1e-14) << replicas << " replicas";
    EXPECT_EQ(correct, one.correct);
  }
}

TEST(DenseLabels, ErrorsNameTheShapesAndTheLabel) {
  const Tensor logits = ops_test::random({2, 3, 4}, 3);
  const Tensor w = f64({1, 1}, {2});
  try {
    ops::dense_softmax_cross_entropy(logits, i32({0, 0, 0, 0}, {2, 2}), w, {2, 2}, 4);
    FAIL() << "a label shape that does not match";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("logits [2,3,4]"));
    EXPECT_THAT(e.what(), HasSubstr("labels [2,2]"));
  }
  try {
    ops::dense_softmax_cross_entropy(logits, i32({0, 1, 9, 0, 0, 0}, {2, 3}), w, {3, 3}, 6);
    FAIL() << "a label out of range";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("label 9 of sample 0 at step 2 is outside [0, 4)"));
  }
  // The same label past a sequence's length is padding and does not count.
  EXPECT_NO_THROW(
      ops::dense_softmax_cross_entropy(logits, i32({0, 1, 9, 0, 0, 0}, {2, 3}), w, {2, 3}, 5));
}

data::NumericArray int_array(const std::vector<std::int32_t>& v, std::vector<std::int64_t> shape) {
  data::NumericArray a;
  a.type = data::ElementType::kInt32;
  a.shape = std::move(shape);
  a.bytes.resize(v.size() * 4);
  std::memcpy(a.bytes.data(), v.data(), a.bytes.size());
  return a;
}

TEST(DenseLabels, LoaderServesPerStepLabelsAndTheGlobalCountAtEveryReplicaCount) {
  // 6 token sequences of up to 4 steps (trailing zeros are padding) with per-step labels.
  const std::vector<std::int32_t> x = {3, 1, 2, 2, /**/ 5, 0, 0, 0, /**/ 1, 1, 4, 0,
                                       2, 2, 0, 0, /**/ 7, 1, 1, 1, /**/ 6, 6, 0, 0};
  std::vector<std::int32_t> y(24);
  for (std::size_t i = 0; i < y.size(); ++i) y[i] = static_cast<std::int32_t>(i % 3);
  const auto ds = data::arrays_dataset(int_array(x, {6, 4}), int_array(y, {6, 4}), {});
  EXPECT_EQ(ds->label_shape(), (Shape{4}));
  EXPECT_EQ(ds->num_classes(), 3);
  EXPECT_EQ(ds->label_count(1), 1);
  EXPECT_THROW(ds->label(0), InvalidArgument);
  for (int replicas : {1, 2, 3}) {
    data::LoaderOptions o;
    o.global_batch = 6;
    o.prefetch_depth = 0;
    std::int64_t local_sum = 0;
    for (int r = 0; r < replicas; ++r) {
      data::Loader loader(ds, data::ShardSpec{r, replicas}, o);
      const data::Batch b = loader.make_batch(0, 0);
      EXPECT_EQ(b.global_label_count, 4 + 1 + 3 + 2 + 4 + 2) << replicas;
      ASSERT_EQ(b.labels.rank(), 2);
      ASSERT_EQ(b.label_counts.size(), static_cast<std::size_t>(6 / replicas));
      const auto ids = b.sample_ids.to_vector<std::int64_t>();
      const auto labels = b.labels.to_vector<std::int32_t>();
      const std::int64_t steps = b.labels.dim(1);
      EXPECT_EQ(steps, b.inputs.dim(1));  // as long as the batch's tokens
      for (std::size_t j = 0; j < ids.size(); ++j) {
        local_sum += b.label_counts[j];
        EXPECT_EQ(b.label_counts[j], b.lengths[j]);
        for (std::int64_t t = 0; t < std::min<std::int64_t>(steps, 4); ++t)
          EXPECT_EQ(labels[j * static_cast<std::size_t>(steps) + static_cast<std::size_t>(t)],
                    y[static_cast<std::size_t>(ids[j] * 4 + t)]);
      }
    }
    EXPECT_EQ(local_sum, 16) << replicas;
  }
}

TEST(DenseLabels, ArraysRefuseLabelsOfMoreThanThreeAxes) {
  const std::vector<std::int32_t> x(2 * 4, 1), y(2 * 8, 0);
  try {
    data::arrays_dataset(int_array(x, {2, 4}), int_array(y, {2, 2, 2, 2}), {});
    FAIL();
  } catch (const DataError& e) {
    EXPECT_THAT(e.what(), HasSubstr("[N, H, W] (one per pixel)"));
  }
}

std::string bind_error(const nn::ModelSpec& spec, const nn::DataShape& data) {
  try {
    spec.bind(data);
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "";
}

TEST(DenseLabels, SoftmaxFoldsInTimeDistributedDenseAndTheLastConv2D) {
  // Note [Folded softmax]: per step (TimeDistributed(Dense)) and per pixel (Conv2D).
  const auto tagger = nn::ModelSpec::from_json(nlohmann::json::parse(R"({"input_shape": [6, 3],
      "layers": [{"type": "gru", "units": 4, "return_sequences": true},
                 {"type": "TimeDistributed", "layer": {"class_name": "Dense",
                  "config": {"units": 5, "activation": "softmax"}}}]})"));
  EXPECT_TRUE(tagger.softmax_folded());
  nn::DataShape steps{{6, 3}, DType::kFloat32, 5, 0};
  steps.label_shape = {6};
  EXPECT_EQ(bind_error(tagger, steps), "");
  steps.label_shape = {7};
  EXPECT_THAT(bind_error(tagger, steps),
              HasSubstr("outputs [6,5] per sample but the data needs [7,5]"));
  const auto seg = nn::ModelSpec::from_json(nlohmann::json::parse(R"({"input_shape": [2, 4, 4],
      "layers": [{"type": "conv2d", "filters": 3, "kernel": 1, "activation": "softmax"}]})"));
  EXPECT_TRUE(seg.softmax_folded());
  nn::DataShape pixels{{2, 4, 4}, DType::kFloat32, 3, 0};
  pixels.label_shape = {4, 4};
  EXPECT_EQ(bind_error(seg, pixels), "");
  pixels.outputs = 4;
  EXPECT_THAT(bind_error(seg, pixels),
              HasSubstr("outputs [3,4,4] per sample but the data needs [4,4,4]"));
  // A float target of another shape than the output names both.
  nn::DataShape image{{2, 4, 4}, DType::kFloat32, 0, 0};
  image.target_shape = {3, 4, 4};
  EXPECT_EQ(bind_error(seg, image), "");
  image.target_shape = {4, 4, 3};
  EXPECT_THAT(bind_error(seg, image),
              HasSubstr("outputs [3,4,4] per sample but the data needs [4,4,3]"));
  // A softmax anywhere but on the last layer is still refused.
  EXPECT_THROW(nn::ModelSpec::from_json(nlohmann::json::parse(R"({"input_shape": [2, 4, 4],
      "layers": [{"type": "conv2d", "filters": 3, "kernel": 1, "activation": "softmax"},
                 {"type": "conv2d", "filters": 3, "kernel": 1}]})")),
               InvalidArgument);
}

}  // namespace
}  // namespace mirror
