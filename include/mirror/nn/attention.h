// defines: Keras's attention layers over sequences [N, T, F]: Attention (Luong's dot product),
// AdditiveAttention (Bahdanau's) and MultiHeadAttention, as merge layers reading [query, value]
// or [query, value, key]. Built from ops (gemm, batched_gemm, attention_softmax, dropout,
// copy_block), so every backend runs them.
//
// Note [Attention masks]
// Mirror's sequences carry one vector of lengths per batch (ForwardContext::lengths: the token
// data's, a Masking layer's, shortened by Conv1D and pooling; Note [Export lengths] in the ONNX
// exporter). The attention layers read it as Keras reads the propagated masks: a key (and value)
// step at or past its sample's length is masked, so is every score of a padded query in
// MultiHeadAttention (Keras ANDs the query and value masks), and with `causal` (Keras's
// use_causal_mask call argument) key j > query i. Masked scores become -1e9 before the softmax,
// as Keras's, so a padded query of MultiHeadAttention attends uniformly to every step, and
// Attention / AdditiveAttention output zeros for padded queries (Keras multiplies by the query
// mask). Query and value are one sequence or step-aligned ones (the same lengths); without
// lengths nothing is masked but the causal triangle.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mirror/nn/layer.h"
#include "mirror/ops.h"

namespace mirror::nn {

/// Keras's Attention (score_mode "dot": scores = query . key, times a trained scalar `scale`
/// when use_scale) and AdditiveAttention (scores = sum_d scale[d] tanh(query[d] + key[d]), scale
/// [D] trained when use_scale, ones otherwise); then masks (Note [Attention masks]), softmax,
/// dropout of the weights while training, weights . value. Inputs [query [Tq, D], value [Tv, Dv]]
/// or with a key [Tv, D]; output [Tq, Dv].
class Attention : public MergeLayer {
 public:
  enum class Score { kDot, kAdditive };
  Attention(Score score, bool use_scale, double dropout, bool causal);
  std::string kind() const override {
    return score_ == Score::kDot ? "attention" : "additive_attention";
  }
  Shape build_inputs(const std::vector<Shape>& input_shapes, const std::vector<std::string>& names,
                     DType dtype, Device device) override;
  Tensor forward_inputs(const std::vector<Tensor>& xs, ForwardContext& ctx) override;
  std::vector<Tensor> backward_inputs(const Tensor& dy) override;
  std::vector<Parameter*> parameters() override;
  nlohmann::json config() const override;

 private:
  Tensor scores(const Tensor& q, const Tensor& k);
  /// dq, dk for the scores' gradient ds; accumulates the scale's gradient.
  std::pair<Tensor, Tensor> scores_backward(const Tensor& ds);

  Score score_;
  bool use_scale_;
  double dropout_;
  bool causal_;
  std::size_t inputs_ = 0;
  std::int64_t dim_ = 0;
  DType dtype_ = DType::kFloat32;
  Parameter scale_;
  // Saved by forward.
  Tensor q_, k_, v_, raw_, tanh_, probs_, dropped_, mask_;
  ops::AttentionMask att_;
  bool drop_ = false;
};

/// Keras's MultiHeadAttention (attention_axes over the steps): per head h, Q = query Wq[h] + bq[h]
/// scaled by 1/sqrt(key_dim), K = key Wk[h] + bk[h], V = value Wv[h] + bv[h]; weights =
/// softmax(Q K^T) with the masks of Note [Attention masks], dropped out while training; the heads'
/// weights . V concatenated and projected by Wo + bo to `output_dim` (default: the query's
/// features). Parameters (Keras's kernels flattened, same memory): query_kernel [Dq, H * key_dim],
/// query_bias [H * key_dim], key_kernel, key_bias, value_kernel [Dv, H * value_dim], value_bias,
/// output_kernel [H * value_dim, output_dim], output_bias (biases only with use_bias).
class MultiHeadAttention : public MergeLayer {
 public:
  MultiHeadAttention(int heads, int key_dim, int value_dim, double dropout, bool use_bias,
                     int output_dim, bool causal);
  std::string kind() const override { return "multi_head_attention"; }
  Shape build_inputs(const std::vector<Shape>& input_shapes, const std::vector<std::string>& names,
                     DType dtype, Device device) override;
  void init_parameters(DType dtype, Device device, InitRng& rng) override;
  Tensor forward_inputs(const std::vector<Tensor>& xs, ForwardContext& ctx) override;
  std::vector<Tensor> backward_inputs(const Tensor& dy) override;
  std::vector<Parameter*> parameters() override;
  nlohmann::json config() const override;

 private:
  struct Projection {
    Parameter kernel, bias;
    Tensor input;  // [N * T, D], saved by forward
  };
  /// x [N, T, D] through a projection to [N * heads, T, width] (heads split, batch-major).
  Tensor project(Projection& p, const Tensor& x, std::int64_t width);
  /// The gradient of a projection's output [N * heads, T, width]: accumulates its parameters'
  /// gradients, returns the input's [N, T, D].
  Tensor project_backward(Projection& p, const Tensor& d_heads, std::int64_t width, std::int64_t n,
                          std::int64_t t);

  int heads_, key_dim_, value_dim_;
  double dropout_;
  bool use_bias_;
  int output_dim_;
  bool causal_;
  std::size_t inputs_ = 0;
  std::int64_t dq_ = 0, dv_ = 0, dk_ = 0;  // the inputs' features
  DType dtype_ = DType::kFloat32;
  Projection query_, key_, value_, output_;
  // Saved by forward.
  Tensor q_, k_, v_, probs_, dropped_, mask_;
  ops::AttentionMask att_;
  bool drop_ = false;
  std::int64_t n_ = 0, tq_ = 0, tv_ = 0;
};

namespace detail {
/// x [N, T, H * W] <-> [N * H, T, W] (the heads of each sample split out / merged back).
Tensor split_heads(const Tensor& x, std::int64_t heads);
Tensor merge_heads(const Tensor& x, std::int64_t heads);
/// The seed of a layer's dropout masks for a step (Dropout's recipe, keyed by the layer's name).
std::uint64_t dropout_seed(const Layer& layer, std::uint64_t step_seed);
}  // namespace detail

}  // namespace mirror::nn
