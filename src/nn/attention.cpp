// Attention, AdditiveAttention and MultiHeadAttention (nn/attention.h, Note [Attention masks]):
// batched products over [N * heads, T, width] matrices, the masked softmax, dropout of the
// weights keyed by sample id (so any replica layout drops the same weights).
#include "mirror/nn/attention.h"

#include <cmath>

#include "mirror/nn/cnn_layers.h"
#include "mirror/nn/init.h"
#include "mirror/nn/keras_layers.h"

namespace mirror::nn {

namespace detail {

namespace {

/// [N, T, H, W] <-> [N, H, T, W]: the block copy of one direction (`split`: to heads first).
ops::BlockCopy heads_block(const Shape& s, std::int64_t heads, bool split) {
  const std::int64_t n = s[0], t = s[1], w = split ? s[2] / heads : s[2];
  ops::BlockCopy b;
  b.dims[0] = n;
  b.dims[1] = heads;
  b.dims[2] = t;
  b.dims[3] = w;
  const std::int64_t steps_first[4] = {t * heads * w, w, heads * w, 1};  // [N, T, H * W]
  const std::int64_t heads_first[4] = {heads * t * w, t * w, w, 1};      // [N * H, T, W]
  for (int k = 0; k < 4; ++k) {
    b.dst_strides[k] = split ? heads_first[k] : steps_first[k];
    b.src_strides[k] = split ? steps_first[k] : heads_first[k];
  }
  return b;
}

}  // namespace

Tensor split_heads(const Tensor& x, std::int64_t heads) {
  Tensor y = Tensor::empty({x.dim(0) * heads, x.dim(1), x.dim(2) / heads}, x.dtype(), x.device());
  ops::copy_block(y, x, heads_block(x.shape(), heads, true));
  return y;
}

Tensor merge_heads(const Tensor& x, std::int64_t heads) {
  const Shape out = {x.dim(0) / heads, x.dim(1), x.dim(2) * heads};
  Tensor y = Tensor::empty(out, x.dtype(), x.device());
  ops::copy_block(y, x, heads_block({out[0], out[1], x.dim(2)}, heads, false));
  return y;
}

std::uint64_t dropout_seed(const Layer& layer, std::uint64_t step_seed) {
  Dropout recipe(0.5);
  recipe.set_name(layer.name());
  return recipe.layer_seed(step_seed);
}

}  // namespace detail

namespace {

std::vector<std::int32_t> lengths_for(const Layer& layer, const ForwardContext& ctx,
                                      std::int64_t n) {
  if (ctx.lengths.empty()) return {};
  detail::require(
      layer, static_cast<std::int64_t>(ctx.lengths.size()) == n,
      std::to_string(ctx.lengths.size()) + " sequence lengths for a batch of " + std::to_string(n));
  return ctx.lengths;
}

/// The probabilities, dropped out while training (`mask` keeps the scales).
Tensor drop_weights(const Layer& layer, const Tensor& probs, double rate, ForwardContext& ctx,
                    Tensor& mask, std::int64_t samples) {
  MIRROR_CHECK(ctx.sample_ids.defined(), InvalidArgument,
               layer.name() + " (" + layer.kind() + "): training needs ForwardContext::sample_ids");
  const Tensor flat = probs.reshape({samples, probs.numel() / samples});
  return ops::dropout_forward(flat, static_cast<float>(rate), detail::dropout_seed(layer, ctx.seed),
                              ctx.sample_ids, mask)
      .reshape(probs.shape());
}

Tensor plus(const Tensor& a, const Tensor& b) {
  Tensor y = a.clone();
  ops::axpy(1.0, b, y);
  return y;
}

Tensor ones(const Shape& s, DType dtype, Device device) {
  Tensor t = Tensor::empty(s, dtype, device);
  ops::fill(t, 1.0);
  return t;
}

void require_sequences(const Layer& layer, const std::vector<Shape>& shapes) {
  detail::require(layer, shapes.size() == 2 || shapes.size() == 3,
                  "reads [query, value] or [query, value, key], got " +
                      std::to_string(shapes.size()) + " inputs");
  for (const Shape& s : shapes) {
    detail::require(layer, s.size() == 2, "expects sequences [T, F], got " + shape_str(s));
  }
}

}  // namespace

// ---------------------------------------------------------------- Attention, AdditiveAttention

Attention::Attention(Score score, bool use_scale, double dropout, bool causal)
    : score_(score), use_scale_(use_scale), dropout_(dropout), causal_(causal) {
  MIRROR_CHECK(dropout >= 0 && dropout < 1, InvalidArgument,
               "Attention: dropout must be in [0, 1), got " + std::to_string(dropout));
}

Shape Attention::build_inputs(const std::vector<Shape>& shapes, const std::vector<std::string>&,
                              DType dtype, Device device) {
  require_sequences(*this, shapes);
  const Shape& key = shapes.size() == 3 ? shapes[2] : shapes[1];
  detail::require(*this, shapes[0][1] == key[1],
                  "query and key must have the same features, got " + shape_str(shapes[0]) +
                      " and " + shape_str(key));
  detail::require(*this, shapes.size() == 2 || shapes[1][0] == shapes[2][0],
                  "value and key must have the same steps");
  inputs_ = shapes.size();
  dim_ = shapes[0][1];
  dtype_ = dtype;
  if (use_scale_) {
    // Keras: a scalar initialised to 1 (Attention), ones [D] (AdditiveAttention, Glorot in Keras
    // 2 only); Mirror keeps the scalar as [1].
    const Shape s = score_ == Score::kDot ? Shape{1} : Shape{dim_};
    scale_ = detail::make_parameter(*this, "scale", ones(s, dtype, device));
  }
  return {shapes[0][0], shapes[1][1]};
}

std::vector<Parameter*> Attention::parameters() {
  if (use_scale_) return {&scale_};
  return {};
}

Tensor Attention::scores(const Tensor& q, const Tensor& k) {
  const std::int64_t n = q.dim(0), tq = q.dim(1), tk = k.dim(1);
  if (score_ == Score::kDot) {
    raw_ = Tensor::empty({n, tq, tk}, dtype_, q.device());
    ops::batched_gemm(false, true, 1.0, q, k, 0.0, raw_);
    if (!use_scale_) return raw_;
    Tensor s = raw_.clone();
    ops::scale(s, detail::host_values(scale_.value)[0]);  // one scalar: read on the host
    return s;
  }
  // Additive: tanh(q_i + k_j) for every pair, then the scale's dot product.
  const std::int64_t d = dim_;
  Tensor pre = Tensor::empty({n, tq, tk, d}, dtype_, q.device());
  ops::BlockCopy b;
  const std::int64_t dims[4] = {n, tq, tk, d}, dst[4] = {tq * tk * d, tk * d, d, 1};
  const std::int64_t from_q[4] = {tq * d, d, 0, 1}, from_k[4] = {tk * d, 0, d, 1};
  for (int i = 0; i < 4; ++i) {
    b.dims[i] = dims[i];
    b.dst_strides[i] = dst[i];
    b.src_strides[i] = from_q[i];
  }
  ops::copy_block(pre, q, b);
  Tensor kk = Tensor::empty(pre.shape(), dtype_, q.device());
  for (int i = 0; i < 4; ++i) b.src_strides[i] = from_k[i];
  ops::copy_block(kk, k, b);
  ops::axpy(1.0, kk, pre);
  tanh_ = ops::activation_forward(ops::Activation::kTanh, pre);
  const Tensor w = use_scale_ ? scale_.value : ones({d}, dtype_, q.device());
  Tensor s = Tensor::empty({n * tq * tk, 1}, dtype_, q.device());
  ops::gemm(false, false, 1.0, tanh_.reshape({n * tq * tk, d}), w.reshape({d, 1}), 0.0, s);
  return s.reshape({n, tq, tk});
}

std::pair<Tensor, Tensor> Attention::scores_backward(const Tensor& ds) {
  const std::int64_t n = ds.dim(0), tq = ds.dim(1), tk = ds.dim(2), d = dim_;
  const Device dev = ds.device();
  Tensor dq = Tensor::empty({n, tq, d}, dtype_, dev), dk = Tensor::empty({n, tk, d}, dtype_, dev);
  if (score_ == Score::kDot) {
    Tensor draw = ds;
    if (use_scale_) {
      // d scale = sum(ds * raw), as one product of the flattened tensors.
      Tensor g = Tensor::empty({1, 1}, dtype_, dev);
      ops::gemm(false, true, 1.0, ds.reshape({1, ds.numel()}), raw_.reshape({1, raw_.numel()}), 0.0,
                g);
      ops::axpy(1.0, g.reshape({1}), scale_.grad);
      draw = ds.clone();
      ops::scale(draw, detail::host_values(scale_.value)[0]);
    }
    ops::batched_gemm(false, false, 1.0, draw, k_, 0.0, dq);
    ops::batched_gemm(true, false, 1.0, draw, q_, 0.0, dk);
    return {dq, dk};
  }
  const Tensor w = use_scale_ ? scale_.value : ones({d}, dtype_, dev);
  const std::int64_t m = n * tq * tk;
  Tensor dt = Tensor::empty({m, d}, dtype_, dev);
  ops::gemm(false, true, 1.0, ds.reshape({m, 1}), w.reshape({d, 1}), 0.0, dt);
  if (use_scale_) {
    Tensor g = scale_.grad.reshape({d, 1});
    ops::gemm(true, false, 1.0, tanh_.reshape({m, d}), ds.reshape({m, 1}), 1.0, g);
  }
  const Tensor dpre = ops::activation_backward(ops::Activation::kTanh, tanh_.reshape({m, d}), dt);
  // Sums of the pair gradients: over keys for each query, over queries for each key.
  Tensor dq3 = dq.reshape({n * tq, 1, d});
  ops::batched_gemm(false, false, 1.0, ones({n * tq, 1, tk}, dtype_, dev),
                    dpre.reshape({n * tq, tk, d}), 0.0, dq3);
  Tensor dk3 = dk.reshape({n, 1, tk * d});
  ops::batched_gemm(false, false, 1.0, ones({n, 1, tq}, dtype_, dev), dpre.reshape({n, tq, tk * d}),
                    0.0, dk3);
  return {dq, dk};
}

Tensor Attention::forward_inputs(const std::vector<Tensor>& xs, ForwardContext& ctx) {
  detail::require(*this, xs.size() == inputs_, "expected " + std::to_string(inputs_) + " inputs");
  q_ = xs[0];
  v_ = xs[1];
  k_ = xs.size() == 3 ? xs[2] : xs[1];
  const std::int64_t n = q_.dim(0);
  att_ = {lengths_for(*this, ctx, n), 1, false, causal_};
  probs_ = ops::attention_softmax(scores(q_, k_), att_);
  drop_ = ctx.training && dropout_ > 0;
  dropped_ = drop_ ? drop_weights(*this, probs_, dropout_, ctx, mask_, n) : probs_;
  Tensor out = Tensor::empty({n, q_.dim(1), v_.dim(2)}, dtype_, q_.device());
  ops::batched_gemm(false, false, 1.0, dropped_, v_, 0.0, out);
  // Keras multiplies the output by the query mask: padded queries give zeros.
  return att_.lengths.empty() ? out : ops::zero_past_lengths(out, att_.lengths);
}

std::vector<Tensor> Attention::backward_inputs(const Tensor& dy) {
  detail::require(*this, probs_.defined(), "backward without forward");
  const Tensor g = att_.lengths.empty() ? dy : ops::zero_past_lengths(dy, att_.lengths);
  Tensor dd = Tensor::empty(probs_.shape(), dtype_, dy.device());
  ops::batched_gemm(false, true, 1.0, g, v_, 0.0, dd);
  Tensor dv = Tensor::empty(v_.shape(), dtype_, dy.device());
  ops::batched_gemm(true, false, 1.0, dropped_, g, 0.0, dv);
  const Tensor dp =
      drop_ ? ops::dropout_backward(dd.reshape(mask_.shape()), mask_).reshape(dd.shape()) : dd;
  const auto [dq, dk] = scores_backward(ops::attention_softmax_backward(probs_, dp, att_));
  if (inputs_ == 2) return {dq, plus(dv, dk)};
  return {dq, dv, dk};
}

nlohmann::json Attention::config() const {
  return {{"use_scale", use_scale_}, {"dropout", dropout_}, {"causal", causal_}};
}

// ---------------------------------------------------------------- MultiHeadAttention

MultiHeadAttention::MultiHeadAttention(int heads, int key_dim, int value_dim, double dropout,
                                       bool use_bias, int output_dim, bool causal)
    : heads_(heads),
      key_dim_(key_dim),
      value_dim_(value_dim),
      dropout_(dropout),
      use_bias_(use_bias),
      output_dim_(output_dim),
      causal_(causal) {
  MIRROR_CHECK(
      heads > 0 && key_dim > 0 && value_dim > 0 && output_dim >= 0 && dropout >= 0 && dropout < 1,
      InvalidArgument,
      "MultiHeadAttention: heads, key_dim and value_dim must be positive and dropout in "
      "[0, 1)");
}

Shape MultiHeadAttention::build_inputs(const std::vector<Shape>& shapes,
                                       const std::vector<std::string>&, DType dtype,
                                       Device device) {
  require_sequences(*this, shapes);
  detail::require(*this, shapes.size() == 2 || shapes[1][0] == shapes[2][0],
                  "value and key must have the same steps");
  inputs_ = shapes.size();
  dtype_ = dtype;
  dq_ = shapes[0][1];
  dv_ = shapes[1][1];
  dk_ = shapes.size() == 3 ? shapes[2][1] : dv_;
  if (output_dim_ == 0) output_dim_ = static_cast<int>(dq_);
  return {shapes[0][0], output_dim_};
}

void MultiHeadAttention::init_parameters(DType dtype, Device device, InitRng& rng) {
  // Glorot uniform on each kernel seen as a matrix [in, out]; zero biases.
  auto make = [&](Projection& p, const std::string& what, std::int64_t in, std::int64_t out) {
    p.kernel = detail::make_parameter(*this, what + "_kernel",
                                      init::glorot_uniform({in, out}, in, out, dtype, device, rng));
    if (use_bias_) {
      p.bias = detail::make_parameter(*this, what + "_bias", init::zeros({out}, dtype, device));
    }
  };
  const std::int64_t hk = std::int64_t{heads_} * key_dim_, hv = std::int64_t{heads_} * value_dim_;
  make(query_, "query", dq_, hk);
  make(key_, "key", dk_, hk);
  make(value_, "value", dv_, hv);
  make(output_, "output", hv, output_dim_);
}

Tensor MultiHeadAttention::project(Projection& p, const Tensor& x, std::int64_t width) {
  const std::int64_t n = x.dim(0), t = x.dim(1);
  p.input = x.reshape({n * t, x.dim(2)});
  Tensor y = Tensor::empty({n * t, heads_ * width}, dtype_, x.device());
  ops::gemm(false, false, 1.0, p.input, p.kernel.value, 0.0, y);
  if (use_bias_) ops::bias_add(y, p.bias.value);
  return detail::split_heads(y.reshape({n, t, heads_ * width}), heads_);
}

Tensor MultiHeadAttention::project_backward(Projection& p, const Tensor& d_heads,
                                            std::int64_t width, std::int64_t n, std::int64_t t) {
  const Tensor d = detail::merge_heads(d_heads, heads_).reshape({n * t, heads_ * width});
  ops::gemm(true, false, 1.0, p.input, d, 1.0, p.kernel.grad);
  if (use_bias_) ops::bias_grad(d, p.bias.grad);
  Tensor dx = Tensor::empty(p.input.shape(), dtype_, d.device());
  ops::gemm(false, true, 1.0, d, p.kernel.value, 0.0, dx);
  return dx.reshape({n, t, p.input.dim(1)});
}

Tensor MultiHeadAttention::forward_inputs(const std::vector<Tensor>& xs, ForwardContext& ctx) {
  detail::require(*this, xs.size() == inputs_ && query_.kernel.value.defined(),
                  "expected " + std::to_string(inputs_) + " inputs, after build");
  const Tensor& key = xs.size() == 3 ? xs[2] : xs[1];
  n_ = xs[0].dim(0);
  tq_ = xs[0].dim(1);
  tv_ = xs[1].dim(1);
  q_ = project(query_, xs[0], key_dim_);
  ops::scale(q_, 1.0 / std::sqrt(static_cast<double>(key_dim_)));  // Keras scales the query
  k_ = project(key_, key, key_dim_);
  v_ = project(value_, xs[1], value_dim_);
  Tensor scores = Tensor::empty({n_ * heads_, tq_, tv_}, dtype_, q_.device());
  ops::batched_gemm(false, true, 1.0, q_, k_, 0.0, scores);
  att_ = {lengths_for(*this, ctx, n_), heads_, true, causal_};
  probs_ = ops::attention_softmax(scores, att_);
  drop_ = ctx.training && dropout_ > 0;
  dropped_ = drop_ ? drop_weights(*this, probs_, dropout_, ctx, mask_, n_) : probs_;
  Tensor heads = Tensor::empty({n_ * heads_, tq_, value_dim_}, dtype_, q_.device());
  ops::batched_gemm(false, false, 1.0, dropped_, v_, 0.0, heads);
  output_.input = detail::merge_heads(heads, heads_).reshape({n_ * tq_, heads_ * value_dim_});
  Tensor y = Tensor::empty({n_ * tq_, output_dim_}, dtype_, q_.device());
  ops::gemm(false, false, 1.0, output_.input, output_.kernel.value, 0.0, y);
  if (use_bias_) ops::bias_add(y, output_.bias.value);
  return y.reshape({n_, tq_, output_dim_});
}

std::vector<Tensor> MultiHeadAttention::backward_inputs(const Tensor& dy) {
  detail::require(*this, probs_.defined(), "backward without forward");
  const Tensor g = dy.reshape({n_ * tq_, output_dim_});
  ops::gemm(true, false, 1.0, output_.input, g, 1.0, output_.kernel.grad);
  if (use_bias_) ops::bias_grad(g, output_.bias.grad);
  Tensor dmerged = Tensor::empty({n_ * tq_, heads_ * value_dim_}, dtype_, dy.device());
  ops::gemm(false, true, 1.0, g, output_.kernel.value, 0.0, dmerged);
  const Tensor dheads =
      detail::split_heads(dmerged.reshape({n_, tq_, heads_ * value_dim_}), heads_);
  Tensor dd = Tensor::empty(probs_.shape(), dtype_, dy.device());
  ops::batched_gemm(false, true, 1.0, dheads, v_, 0.0, dd);
  Tensor dv = Tensor::empty(v_.shape(), dtype_, dy.device());
  ops::batched_gemm(true, false, 1.0, dropped_, dheads, 0.0, dv);
  const Tensor dp =
      drop_ ? ops::dropout_backward(dd.reshape(mask_.shape()), mask_).reshape(dd.shape()) : dd;
  const Tensor ds = ops::attention_softmax_backward(probs_, dp, att_);
  Tensor dq = Tensor::empty(q_.shape(), dtype_, dy.device());
  ops::batched_gemm(false, false, 1.0 / std::sqrt(static_cast<double>(key_dim_)), ds, k_, 0.0, dq);
  Tensor dk = Tensor::empty(k_.shape(), dtype_, dy.device());
  ops::batched_gemm(true, false, 1.0, ds, q_, 0.0, dk);  // q_ is the scaled query
  const Tensor dquery = project_backward(query_, dq, key_dim_, n_, tq_);
  const Tensor dkey = project_backward(key_, dk, key_dim_, n_, tv_);
  const Tensor dvalue = project_backward(value_, dv, value_dim_, n_, tv_);
  if (inputs_ == 2) return {dquery, plus(dvalue, dkey)};
  return {dquery, dvalue, dkey};
}

std::vector<Parameter*> MultiHeadAttention::parameters() {
  std::vector<Parameter*> out;
  for (Projection* p : {&query_, &key_, &value_, &output_}) {
    out.push_back(&p->kernel);
    if (use_bias_) out.push_back(&p->bias);
  }
  return out;
}

nlohmann::json MultiHeadAttention::config() const {
  return {{"num_heads", heads_}, {"key_dim", key_dim_},   {"value_dim", value_dim_},
          {"dropout", dropout_}, {"use_bias", use_bias_}, {"output_dim", output_dim_},
          {"causal", causal_}};
}

}  // namespace mirror::nn
