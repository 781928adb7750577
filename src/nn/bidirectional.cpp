// Bidirectional: two recurrent layers and the sequence layout ops (reverse within each length,
// feature concat/slice, element-wise product), so it runs on every backend with no kernel of
// its own.
#include "mirror/nn/bidirectional.h"

#include <string>

#include "mirror/nn/layers.h"
#include "mirror/ops.h"

namespace mirror::nn {

MergeMode parse_merge_mode(const std::string& name) {
  if (name == "concat") return MergeMode::kConcat;
  if (name == "sum") return MergeMode::kSum;
  if (name == "ave") return MergeMode::kAve;
  if (name == "mul") return MergeMode::kMul;
  throw InvalidArgument("bidirectional: unknown merge_mode '" + name +
                        "'; expected concat, sum, ave or mul (Keras's null, which returns the two "
                        "outputs separately, needs a multi-output model)");
}

const char* merge_mode_name(MergeMode mode) {
  switch (mode) {
    case MergeMode::kConcat:
      return "concat";
    case MergeMode::kSum:
      return "sum";
    case MergeMode::kAve:
      return "ave";
    case MergeMode::kMul:
      return "mul";
  }
  return "?";
}

Bidirectional::Bidirectional(std::unique_ptr<Recurrent> layer, MergeMode mode) : mode_(mode) {
  MIRROR_CHECK(layer != nullptr, InvalidArgument,
               "Bidirectional: needs a recurrent layer (GRU or LSTM) to wrap, got none");
  backward_ = layer->fresh_copy();
  forward_ = std::move(layer);
}

Shape Bidirectional::build(const Shape& input_shape, DType dtype, Device device, InitRng& rng) {
  // The forward direction draws its initial weights first, then the backward one.
  forward_->set_name(name() + "/forward");
  backward_->set_name(name() + "/backward");
  Shape out = forward_->build(input_shape, dtype, device, rng);
  backward_->build(input_shape, dtype, device, rng);
  if (mode_ == MergeMode::kConcat) out.back() *= 2;
  return out;
}

std::vector<Parameter*> Bidirectional::parameters() {
  std::vector<Parameter*> all = forward_->parameters();
  for (Parameter* p : backward_->parameters()) all.push_back(p);
  return all;
}

Tensor Bidirectional::forward(const Tensor& x, ForwardContext& ctx) {
  MIRROR_CHECK(x.defined() && x.rank() == 3, InvalidArgument,
               name() + " (bidirectional): expects sequences [N, T, F], got " +
                   (x.defined() ? x.str() : std::string("nothing")));
  std::vector<std::int32_t> lengths = ctx.lengths;
  if (lengths.empty()) {
    lengths.assign(static_cast<std::size_t>(x.dim(0)), static_cast<std::int32_t>(x.dim(1)));
  }
  const Tensor yf = forward_->forward(x, ctx);
  Tensor yb = backward_->forward(ops::reverse_sequences(x, lengths), ctx);
  if (backward_->return_sequences()) yb = ops::reverse_sequences(yb, lengths);
  Tensor y;
  switch (mode_) {
    case MergeMode::kConcat:
      y = ops::concat_features(yf, yb);
      break;
    case MergeMode::kSum:
    case MergeMode::kAve:
      y = yf.clone();
      ops::axpy(1.0, yb, y);
      if (mode_ == MergeMode::kAve) ops::scale(y, 0.5);
      break;
    case MergeMode::kMul:
      y = ops::multiply(yf, yb);
      break;
  }
  saved_ = ctx.training;
  if (ctx.training) {
    lengths_ = std::move(lengths);
    const bool keep = mode_ == MergeMode::kMul;
    y_forward_ = keep ? yf : Tensor();
    y_backward_ = keep ? yb : Tensor();
  }
  return y;
}

Tensor Bidirectional::backward(const Tensor& dy) {
  MIRROR_CHECK(saved_, InvalidArgument,
               name() +
                   " (bidirectional): backward needs a preceding forward with "
                   "ctx.training = true");
  MIRROR_CHECK(dy.defined() && dy.rank() >= 2, InvalidArgument,
               name() + " (bidirectional) backward: expected dy of the output's shape, got " +
                   (dy.defined() ? dy.str() : std::string("an undefined tensor")));
  const std::int64_t units = forward_->units();
  Tensor dyf, dyb;
  switch (mode_) {
    case MergeMode::kConcat:
      MIRROR_CHECK(dy.dim(dy.rank() - 1) == 2 * units, InvalidArgument,
                   name() + " (bidirectional) backward: expected dy with " +
                       std::to_string(2 * units) + " features, got " + dy.str());
      dyf = ops::slice_features(dy, 0, units);
      dyb = ops::slice_features(dy, units, units);
      break;
    case MergeMode::kSum:
      dyf = dyb = dy;
      break;
    case MergeMode::kAve:
      dyf = dy.clone();
      ops::scale(dyf, 0.5);
      dyb = dyf;
      break;
    case MergeMode::kMul:
      dyf = ops::multiply(dy, y_backward_);
      dyb = ops::multiply(dy, y_forward_);
      break;
  }
  if (backward_->return_sequences()) dyb = ops::reverse_sequences(dyb, lengths_);
  // A first layer's directions skip the data's gradient too.
  forward_->set_input_grad_needed(input_grad_needed());
  backward_->set_input_grad_needed(input_grad_needed());
  Tensor dx = forward_->backward(dyf);
  const Tensor dx_reversed = backward_->backward(dyb);
  if (dx.defined()) ops::axpy(1.0, ops::reverse_sequences(dx_reversed, lengths_), dx);
  saved_ = false;
  y_forward_ = y_backward_ = Tensor();
  return dx;
}

nlohmann::json Bidirectional::config() const {
  return {{"merge_mode", merge_mode_name(mode_)},
          {"layer", {{"kind", forward_->kind()}, {"config", forward_->config()}}}};
}

}  // namespace mirror::nn
