// Each reference model drives its loss down on a small fixed synthetic set with Adam, and a
// steady-state training step allocates nothing from the backend (docs/architecture.md, performance
// rules).
#include <gtest/gtest.h>

#include <cstdio>
#include <random>

#include "mirror/data/batch.h"
#include "mirror/memory.h"
#include "mirror/nn/models.h"
#include "mirror/ops.h"
#include "mirror/optim/optimizer.h"

namespace mirror::nn {
namespace {

// Images: class k is a bright 6x6 patch at one of ten places on dim noise.
data::Batch image_set(int n, bool rows, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> noise(0.0f, 0.2f);
  std::vector<float> x(static_cast<std::size_t>(n) * 28 * 28);
  std::vector<std::int32_t> labels(n);
  for (int s = 0; s < n; ++s) {
    const int k = s % 10;
    labels[s] = k;
    const int r0 = 2 + (k / 5) * 13, c0 = 2 + (k % 5) * 5;
    for (int r = 0; r < 28; ++r) {
      for (int c = 0; c < 28; ++c) {
        const bool on = r >= r0 && r < r0 + 6 && c >= c0 && c < c0 + 6;
        x[(static_cast<std::size_t>(s) * 28 + r) * 28 + c] = noise(rng) + (on ? 0.8f : 0.0f);
      }
    }
  }
  data::Batch b;
  b.inputs = rows ? Tensor::from_vector(x, {n, 28, 28}) : Tensor::from_vector(x, {n, 1, 28, 28});
  b.labels = Tensor::from_vector(labels, {n});
  return b;
}

// Words: ids in [1, vocab) of length 2..max_len (trailing 0 padding); the class is the last
// real token mod num_classes, so the model must read up to each sequence's own end.
data::Batch word_set(int n, int vocab, int max_len, int classes, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::int32_t> ids(static_cast<std::size_t>(n) * max_len, 0), labels(n);
  for (int s = 0; s < n; ++s) {
    const int len = 2 + static_cast<int>(rng() % static_cast<unsigned>(max_len - 1));
    for (int t = 0; t < len; ++t) {
      ids[static_cast<std::size_t>(s) * max_len + t] = 1 + static_cast<int>(rng() % (vocab - 1));
    }
    labels[s] = ids[static_cast<std::size_t>(s) * max_len + len - 1] % classes;
  }
  data::Batch b;
  b.inputs = Tensor::from_vector(ids, {n, max_len});
  b.labels = Tensor::from_vector(labels, {n});
  return b;
}

void finish(data::Batch& b) {
  const auto n = b.labels.dim(0);
  b.weights = Tensor::from_vector(std::vector<float>(n, 1.0f), {n});
  std::vector<std::int64_t> ids(n);
  for (std::int64_t i = 0; i < n; ++i) ids[i] = i;
  b.sample_ids = Tensor::from_vector(ids, {n});
  b.global_count = n;
}

// Rows [begin, begin + n) of a batch (views; no copy).
data::Batch slice(const data::Batch& all, std::int64_t begin, std::int64_t n) {
  auto rows = [&](const Tensor& t) {
    Shape s = t.shape();
    const std::int64_t per = t.numel() / s[0];
    s[0] = n;
    return t.view(begin * per, s);
  };
  data::Batch b;
  b.inputs = rows(all.inputs);
  b.labels = rows(all.labels);
  b.weights = rows(all.weights);
  b.sample_ids = rows(all.sample_ids);
  b.global_count = n;
  return b;
}

double train_step(Sequential& m, optim::Optimizer& opt, const data::Batch& b, double lr) {
  ForwardContext ctx;
  ctx.training = true;
  ctx.seed = static_cast<std::uint64_t>(opt.steps());
  ctx.sample_ids = b.sample_ids;
  m.zero_grad();
  const Tensor logits = m.forward(b.inputs, ctx);
  const ops::LossResult r =
      ops::softmax_cross_entropy(logits, b.labels, b.weights, static_cast<double>(b.global_count));
  m.backward(r.dlogits);
  opt.step(m.parameters(), lr);
  return r.loss;
}

struct Eval {
  double loss, accuracy;
};

Eval evaluate(Sequential& m, const data::Batch& b) {
  ForwardContext ctx;  // inference: dropout off
  const Tensor logits = m.forward(b.inputs, ctx);
  const double loss =
      ops::softmax_cross_entropy(logits, b.labels, b.weights, static_cast<double>(b.size())).loss;
  return {loss, static_cast<double>(ops::correct_count(logits, b.labels, b.weights)) /
                    static_cast<double>(b.size())};
}

void expect_learns(Sequential& m, const data::Batch& set, std::int64_t batch, int steps, double lr,
                   double loss_fraction, double min_accuracy) {
  optim::Adam adam;
  const Eval before = evaluate(m, set);
  for (int s = 0; s < steps; ++s) {
    const std::int64_t begin = (s * batch) % set.size();
    train_step(m, adam, slice(set, begin, batch), lr);
  }
  const Eval after = evaluate(m, set);
  std::printf("loss %.4f -> %.4f, accuracy %.3f -> %.3f\n", before.loss, after.loss,
              before.accuracy, after.accuracy);
  EXPECT_LT(after.loss, loss_fraction * before.loss)
      << "loss " << before.loss << " -> " << after.loss;
  EXPECT_GE(after.accuracy, min_accuracy)
      << "accuracy " << before.accuracy << " -> " << after.accuracy;
  EXPECT_GT(after.accuracy, before.accuracy);
}

TEST(Training, CnnLearnsASyntheticSet) {
  Sequential m = make_cnn(DType::kFloat32, Device::cpu(), 1);
  data::Batch set = image_set(40, false, 3);
  finish(set);
  expect_learns(m, set, 8, 15, 1e-3, 0.3, 0.9);
}

TEST(Training, RowGruLearnsASyntheticSet) {
  Sequential m = make_row_gru(DType::kFloat32, Device::cpu(), 2);
  data::Batch set = image_set(64, true, 4);
  finish(set);
  expect_learns(m, set, 32, 40, 1e-2, 0.3, 0.9);
}

TEST(Training, WordGruLearnsASyntheticSet) {
  Sequential m = make_word_gru(12, 4, 8, DType::kFloat32, Device::cpu(), 3);
  data::Batch set = word_set(64, 12, 8, 4, 5);
  finish(set);
  expect_learns(m, set, 64, 60, 1e-2, 0.3, 0.9);
  // The padding row never moves (it gets no gradient, so Adam leaves it at zero).
  const auto table = m.parameters()[0]->value.to_vector<float>();
  for (int j = 0; j < 32; ++j) EXPECT_EQ(table[j], 0.0f);
}

// Note [Steady state]: every op returns a fresh tensor, but the caching allocator hands back
// the blocks the previous step released, so after warm-up the backend is never called.
void expect_no_steady_state_allocation(Sequential& m, const data::Batch& b) {
  optim::Adam adam;
  for (int s = 0; s < 2; ++s) train_step(m, adam, b, 1e-3);
  const auto before = allocator_for(Device::cpu()).stats();
  for (int s = 0; s < 3; ++s) train_step(m, adam, b, 1e-3);
  const auto after = allocator_for(Device::cpu()).stats();
  EXPECT_EQ(after.backend_allocs, before.backend_allocs);
  EXPECT_GT(after.requests, before.requests);  // the steps did allocate, from the cache
}

TEST(SteadyState, RowGruStepAllocatesNothingFromTheBackend) {
  Sequential m = make_row_gru(DType::kFloat32, Device::cpu(), 2);
  data::Batch b = image_set(16, true, 4);
  finish(b);
  expect_no_steady_state_allocation(m, b);
}

TEST(SteadyState, CnnStepAllocatesNothingFromTheBackend) {
  Sequential m = make_cnn(DType::kFloat32, Device::cpu(), 1);
  data::Batch b = image_set(4, false, 4);
  finish(b);
  expect_no_steady_state_allocation(m, b);
}

TEST(SteadyState, WordGruStepAllocatesNothingFromTheBackend) {
  Sequential m = make_word_gru(12, 4, 8, DType::kFloat32, Device::cpu(), 3);
  data::Batch b = word_set(16, 12, 8, 4, 5);
  finish(b);
  expect_no_steady_state_allocation(m, b);
}

}  // namespace
}  // namespace mirror::nn
