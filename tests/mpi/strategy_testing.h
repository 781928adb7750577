// defines: helpers shared by the MirroredStrategy tests: two small models (CNN-shaped with
// dropout, GRU over variable-length token ids, a stacked bidirectional GRU + LSTM over them),
// seeded global batches with optional padding, sharding, a no-communication reference step on the
// global batch, and weight comparisons.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "mirror/data/batch.h"
#include "mirror/distributed/runtime.h"
#include "mirror/distributed/strategy.h"
#include "mirror/nn/bidirectional.h"
#include "mirror/nn/cnn_layers.h"
#include "mirror/nn/layers.h"
#include "mirror/nn/recurrent.h"
#include "mirror/nn/sequential.h"
#include "mirror/ops.h"
#include "mirror/optim/optimizer.h"

namespace mirror::testing {

/// kResBn: a residual CNN whose BatchNormalizations are synchronized across replicas.
enum class ModelKind { kCnn, kGru, kStackedBidirectional, kResBn };

inline constexpr int kClasses = 5;
inline constexpr int kImage = 8;   // CNN input [1, 8, 8]
inline constexpr int kVocab = 30;  // GRU token ids in [1, 30)
inline constexpr int kMaxLen = 7;  // GRU sequences of 1..7 tokens

/// Conv(4, 3x3, same, relu) -> MaxPool 2 -> Flatten -> Dense(16, relu) -> Dropout(0.25) ->
/// Dense(5). `hidden` changes the first dense width (to build a "different model").
inline nn::Sequential small_cnn(Device device, std::uint64_t seed, int hidden = 16) {
  nn::Sequential m;
  m.emplace<nn::Conv2D>(4, 3, 3, 1, nn::Padding::kSame, ops::Activation::kRelu);
  m.emplace<nn::MaxPool2D>(2);
  m.emplace<nn::Flatten>();
  m.emplace<nn::Dense>(hidden, ops::Activation::kRelu);
  m.emplace<nn::Dropout>(0.25);
  m.emplace<nn::Dense>(kClasses);
  m.build({1, kImage, kImage}, seed, DType::kFloat32, device);
  return m;
}

/// Masking -> Embedding(30, 8) -> GRU(12) -> Dense(5) over int32 ids [T].
inline nn::Sequential small_gru(Device device, std::uint64_t seed) {
  nn::Sequential m;
  m.emplace<nn::Masking>();
  m.emplace<nn::Embedding>(kVocab, 8);
  m.emplace<nn::GRU>(12);
  m.emplace<nn::Dense>(kClasses);
  m.build({kMaxLen}, seed, DType::kFloat32, device);
  return m;
}

/// Masking -> Embedding(30, 8) -> Bidirectional(GRU(6), return_sequences) -> LSTM(5) ->
/// Dense(5) over int32 ids [T]: lengths flow through a stack and both directions.
inline nn::Sequential small_stacked_bidirectional(Device device, std::uint64_t seed) {
  nn::Sequential m;
  m.emplace<nn::Masking>();
  m.emplace<nn::Embedding>(kVocab, 8);
  m.emplace<nn::Bidirectional>(std::make_unique<nn::GRU>(6, true));
  m.emplace<nn::LSTM>(5);
  m.emplace<nn::Dense>(kClasses);
  m.build({kMaxLen}, seed, DType::kFloat32, device);
  return m;
}

/// Conv(4, 3x3, no bias) -> sync BN -> relu -> Conv(4, 3x3, no bias) -> sync BN, plus the first
/// relu's output -> relu -> GlobalAveragePooling -> Dense(5) over [1, 8, 8].
inline nn::Sequential small_resnet(Device device, std::uint64_t seed, bool sync = true) {
  using nn::Padding;
  nn::Sequential m;
  m.add(
      std::make_unique<nn::Conv2D>(4, 3, 3, 1, Padding::kSame, ops::Activation::kIdentity, false));
  m.add(std::make_unique<nn::BatchNormalization>(0.9, 1e-3, true, true, sync));
  m.add(std::make_unique<nn::ActivationLayer>(ops::Activation::kRelu));  // 2
  m.add(
      std::make_unique<nn::Conv2D>(4, 3, 3, 1, Padding::kSame, ops::Activation::kIdentity, false));
  m.add(std::make_unique<nn::BatchNormalization>(0.9, 1e-3, true, true, sync));
  m.add(std::make_unique<nn::Add>(), {4, 2});
  m.add(std::make_unique<nn::ActivationLayer>(ops::Activation::kRelu));
  m.add(std::make_unique<nn::GlobalAveragePooling2D>());
  m.add(std::make_unique<nn::Dense>(kClasses));
  m.build({1, kImage, kImage}, seed, DType::kFloat32, device);
  return m;
}

inline nn::Sequential small_model(ModelKind kind, Device device, std::uint64_t seed) {
  if (kind == ModelKind::kStackedBidirectional) return small_stacked_bidirectional(device, seed);
  if (kind == ModelKind::kResBn) return small_resnet(device, seed);
  return kind == ModelKind::kCnn ? small_cnn(device, seed) : small_gru(device, seed);
}

/// The global batch of `step`: `size` samples of which the first `real` are real (weight 1,
/// sample id = step * size + i) and the rest padding (weight 0, zero inputs, id -1 - k).
inline data::Batch global_batch(ModelKind kind, std::int64_t step, std::int64_t size,
                                std::int64_t real, std::uint64_t seed = 1) {
  std::mt19937_64 rng(seed * 1000003 + static_cast<std::uint64_t>(step));
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  std::vector<std::int32_t> labels(static_cast<std::size_t>(size), 0);
  std::vector<float> weights(static_cast<std::size_t>(size), 0.0f);
  std::vector<std::int64_t> ids(static_cast<std::size_t>(size));
  data::Batch b;
  std::vector<float> pixels;
  std::vector<std::int32_t> tokens;
  const bool images = kind == ModelKind::kCnn || kind == ModelKind::kResBn;  // else token ids
  for (std::int64_t i = 0; i < size; ++i) {
    const bool is_real = i < real;
    const auto u = static_cast<std::size_t>(i);
    labels[u] = is_real ? static_cast<std::int32_t>(rng() % kClasses) : 0;
    weights[u] = is_real ? 1.0f : 0.0f;
    ids[u] = is_real ? step * size + i : -1 - (i - real);
    if (images) {
      for (int j = 0; j < kImage * kImage; ++j) pixels.push_back(is_real ? value(rng) : 0.0f);
    } else {
      const int len = is_real ? 1 + static_cast<int>(rng() % kMaxLen) : 1;
      b.lengths.push_back(len);
      for (int t = 0; t < kMaxLen; ++t) {
        tokens.push_back(is_real && t < len ? 1 + static_cast<std::int32_t>(rng() % (kVocab - 1))
                                            : 0);
      }
    }
  }
  b.inputs = images ? Tensor::from_vector(pixels, {size, 1, kImage, kImage})
                    : Tensor::from_vector(tokens, {size, kMaxLen});
  b.labels = Tensor::from_vector(labels, {size});
  b.weights = Tensor::from_vector(weights, {size});
  b.sample_ids = Tensor::from_vector(ids, {size});
  b.global_count = real;
  b.step = step;
  return b;
}

/// Rows [begin, end) of a batch, copied to `device`.
inline data::Batch shard(const data::Batch& g, std::int64_t begin, std::int64_t end,
                         Device device) {
  auto rows = [&](const Tensor& t) {
    Shape shape = t.shape();
    const std::int64_t row = t.numel() / shape[0];
    shape[0] = end - begin;
    return t.view(begin * row, shape).clone().to(device);
  };
  data::Batch b;
  b.inputs = rows(g.inputs);
  b.labels = rows(g.labels);
  b.weights = rows(g.weights);
  b.sample_ids = rows(g.sample_ids);
  if (!g.lengths.empty()) b.lengths.assign(g.lengths.begin() + begin, g.lengths.begin() + end);
  b.global_count = g.global_count;
  b.step = g.step;
  return b;
}

/// This rank's local batches: world replica w gets rows [w * per, (w + 1) * per).
inline std::vector<data::Batch> local_batches(const data::Batch& g, const dist::MirroredStrategy& s,
                                              std::int64_t per) {
  std::vector<data::Batch> out;
  for (int i = 0; i < static_cast<int>(s.devices().size()); ++i) {
    const std::int64_t w = s.first_replica() + i;
    out.push_back(shard(g, w * per, (w + 1) * per, s.devices()[static_cast<std::size_t>(i)]));
  }
  return out;
}

/// One plain step of `model` on the whole global batch (no communication): the oracle.
inline double reference_step(nn::Sequential& model, optim::Optimizer& opt, const data::Batch& g,
                             double lr, std::uint64_t seed_base) {
  for (nn::Parameter* p : model.parameters()) ops::fill(p->grad, 0.0);
  const data::Batch b = shard(g, 0, g.size(), model.device());
  nn::ForwardContext ctx;
  ctx.training = true;
  ctx.seed = dist::step_seed(seed_base, g.step);
  ctx.sample_ids = b.sample_ids;
  ctx.lengths = b.lengths;
  ctx.sample_weights = b.weights;  // as the strategy does: BatchNorm leaves padding out
  const Tensor logits = model.forward(b.inputs, ctx);
  auto loss =
      ops::softmax_cross_entropy(logits, b.labels, b.weights, static_cast<double>(g.global_count));
  model.backward(loss.dlogits);
  opt.step(model.parameters(), lr);
  return loss.loss;
}

/// max |a - b| / max |b| over each parameter; the largest over the model.
inline double max_relative_difference(nn::Sequential& a, nn::Sequential& b) {
  const auto pa = a.parameters(), pb = b.parameters();
  EXPECT_EQ(pa.size(), pb.size());
  double worst = 0;
  for (std::size_t i = 0; i < pa.size() && i < pb.size(); ++i) {
    const auto x = pa[i]->value.to(Device::cpu()).to_vector<float>();
    const auto y = pb[i]->value.to(Device::cpu()).to_vector<float>();
    double diff = 0, scale = 1e-30;
    for (std::size_t j = 0; j < x.size(); ++j) {
      diff = std::max(diff, static_cast<double>(std::fabs(x[j] - y[j])));
      scale = std::max(scale, static_cast<double>(std::fabs(y[j])));
    }
    worst = std::max(worst, diff / scale);
  }
  return worst;
}

/// max |a - b| / max |b| over each buffer (BatchNorm moving statistics); the largest.
inline double max_buffer_difference(nn::Sequential& a, nn::Sequential& b) {
  const auto ba = a.buffers(), bb = b.buffers();
  EXPECT_EQ(ba.size(), bb.size());
  double worst = 0;
  for (std::size_t i = 0; i < ba.size() && i < bb.size(); ++i) {
    const auto x = ba[i]->value.to(Device::cpu()).to_vector<float>();
    const auto y = bb[i]->value.to(Device::cpu()).to_vector<float>();
    double diff = 0, scale = 1e-30;
    for (std::size_t j = 0; j < x.size(); ++j) {
      diff = std::max(diff, static_cast<double>(std::fabs(x[j] - y[j])));
      scale = std::max(scale, static_cast<double>(std::fabs(y[j])));
    }
    worst = std::max(worst, diff / scale);
  }
  return worst;
}

/// Every local replica's weight fingerprint, gathered from every rank (world replica order).
inline std::vector<std::uint64_t> world_fingerprints(dist::MirroredStrategy& s) {
  std::vector<std::uint64_t> mine;
  for (int i = 0; i < s.local_replicas(); ++i) mine.push_back(s.weights_fingerprint(i));
  std::vector<std::uint64_t> all;
  for (const std::string& text : dist::Runtime::get().all_gather_string(
           std::string(reinterpret_cast<const char*>(mine.data()), mine.size() * 8))) {
    const std::size_t n = text.size() / 8;
    const std::size_t at = all.size();
    all.resize(at + n);
    std::copy(text.data(), text.data() + n * 8, reinterpret_cast<char*>(all.data() + at));
  }
  return all;
}

inline std::vector<Device> cpu_devices(int first, int count) {
  std::vector<Device> d;
  for (int i = 0; i < count; ++i) d.push_back(Device::cpu(first + i));
  return d;
}

inline std::unique_ptr<optim::Optimizer> adam() { return std::make_unique<optim::Adam>(); }

}  // namespace mirror::testing
