// Dense, Flatten, ActivationLayer, Dropout, Embedding and the helpers every layer shares
// (Conv2D and MaxPool2D are in conv.cpp).
#include <algorithm>
#include <cmath>

#include "mirror/nn/init.h"
#include "mirror/nn/keras_layers.h"
#include "mirror/nn/layers.h"

namespace mirror::nn {

const char* activation_name(Activation act) {
  switch (act) {
    case Activation::kIdentity:
      return "linear";
    case Activation::kRelu:
      return "relu";
    case Activation::kTanh:
      return "tanh";
    case Activation::kSigmoid:
      return "sigmoid";
  }
  return "?";
}

Activation parse_activation(const std::string& name) {
  if (name == "linear" || name == "identity" || name == "none") return Activation::kIdentity;
  if (name == "relu") return Activation::kRelu;
  if (name == "tanh") return Activation::kTanh;
  if (name == "sigmoid") return Activation::kSigmoid;
  throw InvalidArgument("unknown activation '" + name +
                        "': expected linear, relu, tanh or sigmoid");
}

const char* padding_name(Padding padding) { return padding == Padding::kSame ? "same" : "valid"; }

namespace detail {

ops::Pool2DGeometry pool_geometry(const Layer& layer, const Shape& input_shape, int pool,
                                  int stride, Padding padding) {
  const int h = static_cast<int>(input_shape[1]), w = static_cast<int>(input_shape[2]);
  ops::Pool2DGeometry g;
  g.k_h = g.k_w = pool;
  g.stride_h = g.stride_w = stride;
  if (padding == Padding::kSame) {
    const auto c = ops::Conv2DGeometry::same(h, w, pool, pool, stride, stride);
    g.pad_top = c.pad_top;
    g.pad_bottom = c.pad_bottom;
    g.pad_left = c.pad_left;
    g.pad_right = c.pad_right;
  }
  MIRROR_CHECK(g.out_h(h) > 0 && g.out_w(w) > 0, InvalidArgument,
               layer.name() + " (" + layer.kind() + "): window " + std::to_string(pool) +
                   " larger than input " + shape_str(input_shape));
  return g;
}

void check_input(const Layer& layer, const Tensor& x, const Shape& inner, DType dtype) {
  bool ok = x.defined() && x.rank() == static_cast<int>(inner.size()) + 1 && x.dtype() == dtype;
  for (std::size_t i = 0; ok && i < inner.size(); ++i) {
    ok = inner[i] < 0 || x.shape()[i + 1] == inner[i];
  }
  if (ok) return;
  std::string want = "[N";
  for (auto d : inner) want += "," + (d < 0 ? std::string("*") : std::to_string(d));
  throw InvalidArgument(layer.name() + " (" + layer.kind() + "): expected input " + want + "] " +
                        dtype_name(dtype) + ", got " + x.str() +
                        "; check the model's input shape and the layer order");
}

void check_image_input(const Layer& layer, const Tensor& x, const Shape& inner, DType dtype) {
  if (ops::image_block(x) == 0) return check_input(layer, x, inner, dtype);
  const Shape s = ops::image_shape(x);
  MIRROR_CHECK(inner.size() == 3 && x.dtype() == dtype && s[1] == inner[0] && s[2] == inner[1] &&
                   s[3] == inner[2],
               InvalidArgument,
               layer.name() + " (" + layer.kind() + "): expected " +
                   (inner.size() == 3 ? "a blocked image of " : "a plain input of ") +
                   shape_str(inner) + " " + dtype_name(dtype) + ", got " + x.str());
}

Shape any_steps(const Shape& inner) {
  if (inner.size() != 2) return inner;
  return {-1, inner[1]};
}

Parameter make_parameter(const Layer& layer, const std::string& what, Tensor value) {
  Parameter p;
  p.name = layer.name() + "/" + what;
  p.grad = Tensor::zeros(value.shape(), value.dtype(), value.device());
  p.value = std::move(value);
  return p;
}

}  // namespace detail

namespace {

void require_built(const Layer& layer, bool built) {
  MIRROR_CHECK(built, InvalidArgument,
               layer.name() + " (" + layer.kind() + "): used before build(); add it to a " +
                   "Sequential and call build(input_shape, seed)");
}

void require_forward(const Layer& layer, const Tensor& saved) {
  MIRROR_CHECK(saved.defined(), InvalidArgument,
               layer.name() + " (" + layer.kind() + "): backward called without a forward");
}

}  // namespace

// ---------------------------------------------------------------- Dense

Dense::Dense(int units, Activation act) : units_(units), act_(act) {
  MIRROR_CHECK(units > 0, InvalidArgument,
               "Dense: units must be positive, got " + std::to_string(units));
}

Shape Dense::build(const Shape& input_shape, DType dtype, Device device, InitRng& rng) {
  MIRROR_CHECK(input_shape.size() == 1 || input_shape.size() == 2, InvalidArgument,
               name() + " (dense): expects features [F] or sequences [T, F] (applied to each " +
                   "step, as Keras does), got " + shape_str(input_shape) +
                   "; put a Flatten or a global pooling before it");
  in_ = input_shape.back();
  // A sequence's T varies from batch to batch.
  inner_ = input_shape.size() == 2 ? Shape{-1, in_} : Shape{in_};
  dtype_ = dtype;
  kernel_ = detail::make_parameter(
      *this, "kernel",
      init::kernel(*this, "kernel", {in_, units_}, in_, units_, dtype, device, rng));
  // Backward's first product writes it (Note [First gradient write], layer.h).
  kernel_.overwrites_grad = true;
  bias_ = detail::make_parameter(*this, "bias",
                                 init::bias(*this, "bias", {units_}, dtype, device, rng));
  Shape out = input_shape;
  out.back() = units_;
  return out;
}

Tensor Dense::forward(const Tensor& x, ForwardContext& ctx) {
  require_built(*this, kernel_.value.defined());
  detail::check_input(*this, x, inner_, dtype_);
  // Every step of a sequence [N, T, F] is a row: one product over [N*T, F] (Keras's last axis).
  const std::int64_t rows = x.numel() / in_;
  const Tensor x2 = x.reshape({rows, in_});
  Tensor y = Tensor::empty({rows, units_}, dtype_, x.device());
  {
    const ConstantOperands constant({kernel_.value.raw_data()});  // Note [Cast once per step]
    ops::gemm(false, false, 1.0, x2, kernel_.value, 0.0, y);
  }
  ops::bias_add(y, bias_.value);
  if (act_ != Activation::kIdentity) y = ops::activation_forward(act_, y);
  x_ = x2;
  y_ = y;
  Shape out = x.shape();
  out.back() = units_;
  // Note [Sequence masks]: Mirror's sequences stay zero past their lengths.
  lengths_.clear();
  if (x.rank() == 3 && !ctx.lengths.empty() && !ctx.keras_masks) {
    lengths_ = ctx.lengths;
    return ops::zero_past_lengths(y.reshape(out), lengths_);
  }
  return y.reshape(out);
}

Tensor Dense::backward(const Tensor& dy) {
  require_forward(*this, x_);
  MIRROR_CHECK(
      dy.defined() && dy.numel() == y_.numel() && dy.shape().back() == units_, InvalidArgument,
      name() + " backward: expected dy of " + std::to_string(y_.numel()) + " elements [..., " +
          std::to_string(units_) + "], got " + (dy.defined() ? dy.str() : std::string("nothing")));
  // The outputs set to zero past the lengths pass no gradient.
  const Tensor dy2 =
      (lengths_.empty() ? dy : ops::zero_past_lengths(dy, lengths_)).reshape(y_.shape());
  const Tensor g = act_ == Activation::kIdentity ? dy2 : ops::activation_backward(act_, y_, dy2);
  ops::gemm(true, false, 1.0, x_, g, kernel_.take_grad_beta(), kernel_.grad);  // dW += x^T g
  ops::bias_grad(g, bias_.grad);
  if (!input_grad_needed()) return {};
  Tensor dx = Tensor::empty(x_.shape(), dtype_, x_.device());
  const ConstantOperands constant({kernel_.value.raw_data()});
  ops::gemm(false, true, 1.0, g, kernel_.value, 0.0, dx);  // dx = g W^T
  Shape in = dy.shape();
  in.back() = in_;
  return dx.reshape(in);
}

nlohmann::json Dense::config() const {
  return {{"units", units_}, {"activation", activation_name(act_)}};
}

// ---------------------------------------------------------------- Flatten

Shape Flatten::build(const Shape& input_shape, DType dtype, Device, InitRng&) {
  MIRROR_CHECK(!input_shape.empty(), InvalidArgument, name() + " (flatten): empty input shape");
  input_shape_ = input_shape;
  dtype_ = dtype;
  return {shape_numel(input_shape)};
}

Tensor Flatten::forward(const Tensor& x, ForwardContext&) {
  require_built(*this, !input_shape_.empty());
  detail::check_input(*this, x, input_shape_, dtype_);
  return x.reshape({x.dim(0), shape_numel(input_shape_)});
}

Tensor Flatten::backward(const Tensor& dy) {
  require_built(*this, !input_shape_.empty());
  Shape s = input_shape_;
  s.insert(s.begin(), dy.dim(0));
  return dy.reshape(s);
}

// ---------------------------------------------------------------- ActivationLayer

ActivationLayer::ActivationLayer(Activation act) : act_(act) {}

std::unique_ptr<ActivationLayer> ActivationLayer::gelu() {
  auto layer = std::make_unique<ActivationLayer>(Activation::kIdentity);
  layer->gelu_ = true;
  return layer;
}

Shape ActivationLayer::build(const Shape& input_shape, DType dtype, Device, InitRng&) {
  input_shape_ = input_shape;
  dtype_ = dtype;
  return input_shape;
}

Tensor ActivationLayer::forward(const Tensor& in, ForwardContext& ctx) {
  detail::check_image_input(*this, in, detail::any_steps(input_shape_), dtype_);
  converted_block_ = blocked_output_allowed() ? 0 : ops::image_block(in);
  const Tensor x = converted_block_ > 0 ? ops::plain_image(in) : in;
  if (relu_done_by_producer()) {  // Note [BatchNorm and ReLU]: x is the ReLU's output already
    y_ = x;
    return x;
  }
  if (gelu_) {
    y_ = x;
    return ops::gelu_forward(x);
  }
  y_ = act_ == Activation::kIdentity ? x : ops::activation_forward(act_, x);
  // Note [Sequence masks]: the one activation that is not 0 at 0 keeps Mirror's sequences zero
  // past their lengths.
  lengths_.clear();
  if (act_ == Activation::kSigmoid && x.rank() == 3 && !ctx.lengths.empty() && !ctx.keras_masks) {
    lengths_ = ctx.lengths;
    return ops::zero_past_lengths(y_, lengths_);
  }
  return y_;
}

Tensor ActivationLayer::backward(const Tensor& dy) {
  require_forward(*this, y_);
  check_shape(dy, y_.shape(), (name() + " backward dy").c_str());
  const auto in_layout = [&](const Tensor& dx) {
    return converted_block_ > 0 ? ops::blocked_image(dx, converted_block_) : dx;
  };
  if (relu_done_by_producer()) return in_layout(dy);  // the producer applies the mask
  if (gelu_) return in_layout(ops::gelu_backward(y_, dy));
  const Tensor g = lengths_.empty() ? dy : ops::zero_past_lengths(dy, lengths_);
  return in_layout(act_ == Activation::kIdentity ? g : ops::activation_backward(act_, y_, g));
}

nlohmann::json ActivationLayer::config() const {
  return {{"activation", gelu_ ? "gelu" : activation_name(act_)}};
}

// ---------------------------------------------------------------- Dropout

Dropout::Dropout(double rate, std::vector<std::int64_t> noise_shape, bool channels_last)
    : rate_(rate), noise_shape_(std::move(noise_shape)), channels_last_(channels_last) {
  MIRROR_CHECK(rate >= 0.0 && rate < 1.0, InvalidArgument,
               "Dropout: rate must be in [0, 1), got " + std::to_string(rate));
}

Shape Dropout::build(const Shape& input_shape, DType dtype, Device, InitRng&) {
  input_shape_ = input_shape;
  dtype_ = dtype;
  if (!noise_shape_.empty()) mask_shape(input_shape);  // checks it
  return input_shape;
}

Shape Dropout::mask_shape(const Shape& s) const {
  std::string given = "[";
  for (std::size_t i = 0; i < noise_shape_.size(); ++i) {
    given += (i ? ", " : "") +
             (noise_shape_[i] < 0 ? std::string("None") : std::to_string(noise_shape_[i]));
  }
  given += "]";
  const auto refuse = [&](const std::string& why) {
    throw InvalidArgument(name() + " (dropout): noise_shape " + given + " " + why +
                          " (the input is " + shape_str(s) + " per sample, NCHW for images)");
  };
  if (noise_shape_.size() != s.size() + 1) refuse("does not have the input's rank");
  if (noise_shape_[0] >= 0) {
    refuse("fixes the batch axis; Mirror draws each sample's mask on its own, so it must be None");
  }
  const std::vector<int> axes = keras_axes(s.size(), channels_last_);
  Shape m = s;
  for (std::size_t i = 0; i < axes.size(); ++i) {
    const auto axis = static_cast<std::size_t>(axes[i]);
    const std::int64_t v = noise_shape_[i + 1];
    if (v == 1) {
      m[axis] = 1;
    } else if (v >= 0 && v != s[axis] && s[axis] >= 0) {
      refuse("has " + std::to_string(v) + " where the input has " + std::to_string(s[axis]) +
             "; each dimension must be None, 1 or the input's");
    }
  }
  return m;
}

std::uint64_t Dropout::layer_seed(std::uint64_t step_seed) const {
  // FNV-1a of the layer name (deterministic across ranks), then a splitmix64 finaliser so
  // nearby step seeds give unrelated streams and two dropout layers never share a mask.
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char c : name()) {
    h ^= c;
    h *= 1099511628211ull;
  }
  std::uint64_t z = step_seed ^ h;
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

Tensor Dropout::forward(const Tensor& x, ForwardContext& ctx) {
  detail::check_input(*this, x, detail::any_steps(input_shape_), dtype_);
  active_ = ctx.training && rate_ > 0.0;
  if (!active_) return x;
  MIRROR_CHECK(ctx.sample_ids.defined(), InvalidArgument,
               name() + " (dropout): training needs ForwardContext::sample_ids (int64 [N]), " +
                   "which key the masks; set them from the batch");
  const Shape sample(x.shape().begin() + 1, x.shape().end());
  const Shape m = noise_shape_.empty() ? sample : mask_shape(sample);
  if (m == sample) {
    return ops::dropout_forward(x, static_cast<float>(rate_), layer_seed(ctx.seed), ctx.sample_ids,
                                mask_);
  }
  // The mask of the smaller shape, drawn as plain dropout draws it, spread over x.
  Shape small = {x.dim(0)};
  small.insert(small.end(), m.begin(), m.end());
  Tensor ones = Tensor::empty(small, dtype_, x.device());
  ops::fill(ones, 1.0);
  Tensor unused;
  mask_ = detail::broadcast_to(ops::dropout_forward(ones, static_cast<float>(rate_),
                                                    layer_seed(ctx.seed), ctx.sample_ids, unused),
                               x.shape());
  return ops::multiply(x, mask_);
}

Tensor Dropout::backward(const Tensor& dy) {
  if (!active_) return dy;
  return ops::dropout_backward(dy, mask_);
}

nlohmann::json Dropout::config() const {
  nlohmann::json j = {{"rate", rate_}};
  if (!noise_shape_.empty()) {
    nlohmann::json ns = nlohmann::json::array();
    for (auto d : noise_shape_) ns.push_back(d < 0 ? nlohmann::json() : nlohmann::json(d));
    j["noise_shape"] = ns;
    j["channels_last"] = channels_last_;
  }
  return j;
}

// ---------------------------------------------------------------- Embedding

Embedding::Embedding(std::int64_t vocab, int dim, bool padding_row)
    : vocab_(vocab), dim_(dim), padding_row_(padding_row) {
  MIRROR_CHECK(vocab >= 2 && dim > 0, InvalidArgument,
               "Embedding: expected vocab >= 2 (index 0 is padding) and dim > 0, got vocab " +
                   std::to_string(vocab) + ", dim " + std::to_string(dim));
}

Shape Embedding::build(const Shape& input_shape, DType dtype, Device device, InitRng& rng) {
  MIRROR_CHECK(input_shape.size() == 1, InvalidArgument,
               name() + " (embedding): expects ids [T], got " + shape_str(input_shape));
  std::vector<double> values = init::uniform_values(vocab_ * dim_, -0.05, 0.05, rng);
  std::fill(values.begin(), values.begin() + dim_, 0.0);  // starts at zero either way
  table_ = detail::make_parameter(*this, "embeddings",
                                  init::to_tensor(values, {vocab_, dim_}, dtype, device));
  return {input_shape[0], dim_};
}

Tensor Embedding::forward(const Tensor& x, ForwardContext&) {
  require_built(*this, table_.value.defined());
  detail::check_input(*this, x, {-1}, DType::kInt32);
  ids_ = x;
  return ops::embedding_forward(x, table_.value);
}

Tensor Embedding::backward(const Tensor& dy) {
  require_forward(*this, ids_);
  ops::embedding_backward(ids_, dy, table_.grad);  // every row but 0
  if (!padding_row_) {
    // Row 0 trains like the others: the sum of dy over the steps whose id is 0, as one product
    // of a 0/1 row over the steps with dy [N*T, dim].
    const std::vector<std::int32_t> ids = ids_.to(Device::cpu()).to_vector<std::int32_t>();
    std::vector<float> zero(ids.size());
    for (std::size_t i = 0; i < ids.size(); ++i) zero[i] = ids[i] == 0 ? 1.0f : 0.0f;
    Tensor w = Tensor::from_vector(zero, {1, static_cast<std::int64_t>(ids.size())});
    if (dy.dtype() != DType::kFloat32) w = ops::cast(w, dy.dtype());
    Tensor row0 = table_.grad.view(0, {1, dim_});
    ops::gemm(false, false, 1.0, w.to(dy.device()),
              dy.reshape({static_cast<std::int64_t>(ids.size()), dim_}), 1.0, row0);
  }
  return {};
}

nlohmann::json Embedding::config() const {
  nlohmann::json j = {{"vocab", vocab_}, {"dim", dim_}};
  if (!padding_row_) j["padding_row"] = false;
  return j;
}

}  // namespace mirror::nn
