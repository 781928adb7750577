// Sequential: naming, build, forward/backward over the layer graph with the gradient-ready hook,
// summary, config; MergeLayer's single-input entry points.
#include "mirror/nn/sequential.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>

#include "mirror/ops.h"

namespace mirror::nn {

namespace {
double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}
}  // namespace

// ---------------------------------------------------------------- MergeLayer

Shape MergeLayer::build(const Shape&, DType, Device, InitRng&) {
  throw InvalidArgument(kind() +
                        " merges two or more inputs: add it to a model with its inputs "
                        "(Sequential::add(layer, {a, b}) or \"inputs\" in a spec)");
}
Tensor MergeLayer::forward(const Tensor&, ForwardContext&) {
  throw InvalidArgument(name() + " (" + kind() + "): forward takes its inputs as a list");
}
Tensor MergeLayer::backward(const Tensor&) {
  throw InvalidArgument(name() + " (" + kind() + "): backward returns one gradient per input");
}

// ---------------------------------------------------------------- Sequential

Sequential& Sequential::add(std::unique_ptr<Layer> layer) {
  const int previous = static_cast<int>(layers_.size()) - 1;
  return add(std::move(layer), {previous < 0 ? kModelInput : previous});
}

Sequential& Sequential::add(std::unique_ptr<Layer> layer, std::vector<int> inputs) {
  MIRROR_CHECK(layer != nullptr, InvalidArgument, "Sequential::add: null layer");
  MIRROR_CHECK(!built_, InvalidArgument,
               "Sequential::add(" + layer->kind() +
                   "): the model is already built; add every "
                   "layer before build()");
  const bool merge = dynamic_cast<MergeLayer*>(layer.get()) != nullptr;
  const std::string what =
      "Sequential::add(" + layer->kind() + ", layer " + std::to_string(layers_.size()) + ")";
  MIRROR_CHECK(merge ? inputs.size() >= 2 : inputs.size() == 1, InvalidArgument,
               what + ": expected " + (merge ? "two or more inputs" : "exactly one input") +
                   ", got " + std::to_string(inputs.size()));
  for (int in : inputs) {
    MIRROR_CHECK(in >= kModelInput && in < static_cast<int>(layers_.size()), InvalidArgument,
                 what + ": input " + std::to_string(in) +
                     " is not an earlier layer (expected -1 for the model input or an index in "
                     "[0, " +
                     std::to_string(layers_.size()) + "))");
  }
  layers_.push_back(std::move(layer));
  inputs_.push_back(std::move(inputs));
  return *this;
}

bool Sequential::is_chain() const {
  for (std::size_t i = 0; i < inputs_.size(); ++i) {
    if (inputs_[i] != std::vector<int>{static_cast<int>(i) - 1}) return false;
  }
  return true;
}

void Sequential::build(const Shape& input_shape, std::uint64_t seed, DType dtype, Device device) {
  MIRROR_CHECK(!built_, InvalidArgument, "Sequential::build called twice");
  MIRROR_CHECK(!layers_.empty(), InvalidArgument, "Sequential::build: the model has no layers");
  MIRROR_CHECK(dtype == DType::kFloat32 || dtype == DType::kFloat64, InvalidArgument,
               std::string("Sequential::build: parameters must be float32 or float64, got ") +
                   dtype_name(dtype));
  // Names first (parameters are named after their layer), counted per kind from 1 like Keras.
  std::map<std::string, int> counts;
  for (auto& layer : layers_) {
    const std::string kind = layer->kind();
    layer->set_name(kind + "_" + std::to_string(++counts[kind]));
  }
  // One generator for the whole model, consumed in layer order: same seed -> same weights.
  InitRng rng(seed);
  output_shapes_.clear();
  const int n = static_cast<int>(layers_.size());
  last_reader_.assign(layers_.size(), -1);
  // Whether a layer's output gradient reaches a parameter: its own, or one upstream of it.
  std::vector<bool> trains(layers_.size(), false);
  for (int i = 0; i < n; ++i) {
    Layer& layer = *layers_[static_cast<std::size_t>(i)];
    std::vector<Shape> shapes;
    std::vector<std::string> names;
    bool reads_trained = false;
    for (int in : inputs_[static_cast<std::size_t>(i)]) {
      shapes.push_back(in == kModelInput ? input_shape
                                         : output_shapes_[static_cast<std::size_t>(in)]);
      names.push_back(in == kModelInput ? std::string("input")
                                        : layers_[static_cast<std::size_t>(in)]->name());
      if (in != kModelInput) last_reader_[static_cast<std::size_t>(in)] = i;
      reads_trained = reads_trained || (in != kModelInput && trains[static_cast<std::size_t>(in)]);
    }
    auto* merge = dynamic_cast<MergeLayer*>(&layer);
    output_shapes_.push_back(merge ? merge->build_inputs(shapes, names, dtype, device)
                                   : layer.build(shapes[0], dtype, device, rng));
    if (merge) merge->init_parameters(dtype, device, rng);
    // Nothing consumes the gradient of the data, nor of layers with no parameter at or above
    // them (a Keras model's Rescaling and augmentation layers): the first convolution after
    // them skips its input gradient, as one reading the data does.
    trains[static_cast<std::size_t>(i)] = reads_trained || !layer.parameters().empty();
    layer.set_input_grad_needed(reads_trained);
  }
  for (int i = 0; i + 1 < n; ++i) {
    MIRROR_CHECK(last_reader_[static_cast<std::size_t>(i)] >= 0, InvalidArgument,
                 "Sequential::build: the output of " +
                     layers_[static_cast<std::size_t>(i)]->name() + " (layer " + std::to_string(i) +
                     ") is read by no layer; only the last layer is the model's output, so "
                     "connect it or remove it");
  }
  input_shape_ = input_shape;
  output_shape_ = output_shapes_.back();
  dtype_ = dtype;
  device_ = device;
  built_ = true;
  set_blocked_images(blocked_images_);
  // Note [ReLU through max pool]: a ReLU output read only by a layer that can mask it.
  std::vector<std::vector<int>> readers(layers_.size());
  for (int i = 0; i < n; ++i) {
    for (int in : inputs_[static_cast<std::size_t>(i)]) {
      if (in != kModelInput) readers[static_cast<std::size_t>(in)].push_back(i);
    }
  }
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    Layer& producer = *layers_[i];
    Layer* reader = readers[i].size() == 1
                        ? layers_[static_cast<std::size_t>(readers[i][0])].get()
                        : nullptr;
    const bool pair = reader && producer.relu_output() && reader->can_mask_input_relu();
    producer.set_relu_masked_by_reader(pair);
    if (pair) reader->set_masks_input_relu(true);
    // Note [BatchNorm and ReLU] (mirror/ops.h): a producer whose only reader is a ReLU layer
    // applies that ReLU itself.
    const bool fuse = reader && producer.can_fuse_relu() && reader->is_relu();
    producer.set_fuses_relu(fuse);
    if (fuse) reader->set_relu_done_by_producer(true);
  }
  // Note [Gradients as convolution operands] (mirror/ops.h): after the ReLU
  // pairs, which decide whether a convolution reads dy through conv2d_operand alone.
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    if (readers[i].size() != 1) continue;  // two readers' gradients are summed in float32
    Layer& reader = *layers_[static_cast<std::size_t>(readers[i][0])];
    if (layers_[i]->output_grad_is_conv_operand() && reader.can_return_conv_operand())
      reader.set_input_grad_as_conv_operand(true);
  }
}

void Sequential::set_blocked_images(bool enabled) {
  blocked_images_ = enabled;
  if (!built_) return;  // build applies it
  // An output may be blocked when every reader takes blocked input; never the model's output.
  std::vector<bool> allowed(layers_.size(), enabled);
  allowed.back() = false;
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    for (int in : inputs_[i]) {
      if (in != kModelInput && !layers_[i]->accepts_blocked_input())
        allowed[static_cast<std::size_t>(in)] = false;
    }
  }
  for (std::size_t i = 0; i < layers_.size(); ++i)
    layers_[i]->set_blocked_output_allowed(allowed[i]);
}

Tensor Sequential::forward(const Tensor& x, ForwardContext& ctx) {
  MIRROR_CHECK(built_, InvalidArgument, "Sequential::forward before build(input_shape, seed)");
  const std::size_t n = layers_.size();
  outputs_.assign(n, Tensor{});
  if (times_) prepare_times();
  lengths_.assign(n, {});
  // Note [Sequence masks]: the batch's lengths are the model input's, in Mirror's semantics only.
  const std::vector<std::int32_t> input_lengths =
      keras_masks_ ? std::vector<std::int32_t>{} : std::move(ctx.lengths);
  ctx.keras_masks = keras_masks_;
  std::vector<Tensor> xs;
  for (std::size_t i = 0; i < n; ++i) {
    xs.clear();
    ctx.lengths.clear();
    bool unmasked_input = false;
    for (int in : inputs_[i]) {
      const auto k = static_cast<std::size_t>(in);
      xs.push_back(in == kModelInput ? x : outputs_[k]);
      // A merge's step is valid where it is valid in any input (Keras 3 ORs the masks): the
      // longest length; an input without lengths makes every step valid.
      const std::vector<std::int32_t>& l = in == kModelInput ? input_lengths : lengths_[k];
      unmasked_input = unmasked_input || l.empty();
      if (ctx.lengths.empty()) {
        ctx.lengths = l;
      } else if (l.size() == ctx.lengths.size()) {
        for (std::size_t s = 0; s < l.size(); ++s) ctx.lengths[s] = std::max(ctx.lengths[s], l[s]);
      }
    }
    if (unmasked_input) ctx.lengths.clear();
    auto* merge = dynamic_cast<MergeLayer*>(layers_[i].get());
    fence_times();
    const auto start = std::chrono::steady_clock::now();
    outputs_[i] = merge ? merge->forward_inputs(xs, ctx) : layers_[i]->forward(xs[0], ctx);
    fence_times();
    if (times_) times_->forward_ms[i] += ms_since(start);
    // A sequence turned into something without a time axis has no lengths any more.
    if (outputs_[i].rank() < 3 && xs[0].rank() >= 3) ctx.lengths.clear();
    lengths_[i] = ctx.lengths;
    // An output no later layer reads is dropped now (the layers keep what backward needs).
    for (int in : inputs_[i]) {
      if (in != kModelInput && last_reader_[static_cast<std::size_t>(in)] == static_cast<int>(i)) {
        outputs_[static_cast<std::size_t>(in)] = Tensor{};
        lengths_[static_cast<std::size_t>(in)].clear();
      }
    }
  }
  Tensor y = std::move(outputs_.back());
  outputs_.back() = Tensor{};
  ctx.lengths = lengths_.back();  // the output's: a per-step loss masks with them
  if (times_) ++times_->forwards;
  return y;
}

void Sequential::fence_times() const {
  if (times_ && times_->fence) times_->fence();
}

void Sequential::prepare_times() {
  times_->forward_ms.resize(layers_.size(), 0.0);
  times_->backward_ms.resize(layers_.size(), 0.0);
}

void Sequential::accumulate_grad(int index, const Tensor& g) {
  if (index == kModelInput || !g.defined()) return;
  const auto i = static_cast<std::size_t>(index);
  if (!grads_[i].defined()) {
    grads_[i] = g;  // may be shared with another gradient (Add passes dy on): not owned
    grad_owned_[i] = false;
    return;
  }
  if (!grad_owned_[i]) {
    grads_[i] = grads_[i].clone();
    grad_owned_[i] = true;
  }
  ops::axpy(1.0, g, grads_[i]);
}

void Sequential::backward(const Tensor& dlogits, const GradReadyHook& on_ready) {
  MIRROR_CHECK(built_, InvalidArgument, "Sequential::backward before build");
  const std::size_t n = layers_.size();
  grads_.assign(n, Tensor{});
  grad_owned_.assign(n, false);
  grads_[n - 1] = dlogits;
  if (times_) prepare_times();
  for (std::size_t i = n; i-- > 0;) {
    Layer& layer = *layers_[i];
    // Every reader of layer i comes later, so its gradient is complete here.
    const Tensor dy = std::move(grads_[i]);
    grads_[i] = Tensor{};
    if (!dy.defined()) {
      // A layer below a non-differentiable input (ids into Embedding) has nothing to learn.
      MIRROR_CHECK(layer.parameters().empty(), Error,
                   layer.name() +
                       " has parameters but receives no gradient: the layer above "
                       "it does not propagate one");
      continue;
    }
    fence_times();
    const auto start = std::chrono::steady_clock::now();
    if (auto* merge = dynamic_cast<MergeLayer*>(&layer)) {
      const std::vector<Tensor> dxs = merge->backward_inputs(dy);
      for (std::size_t k = 0; k < inputs_[i].size(); ++k) accumulate_grad(inputs_[i][k], dxs[k]);
    } else {
      accumulate_grad(inputs_[i][0], layer.backward(dy));
    }
    fence_times();
    if (times_) times_->backward_ms[i] += ms_since(start);
    // Note [Gradient-ready hook]: once a layer's backward returns, no later (lower) layer
    // touches its gradients, so a bucket holding them may start its all-reduce now.
    if (on_ready) {
      std::vector<Parameter*> params = layer.parameters();
      if (!params.empty()) on_ready(params);
    }
  }
  if (times_) ++times_->backwards;
}

std::vector<Parameter*> Sequential::parameters() {
  std::vector<Parameter*> all;
  for (auto& layer : layers_) {
    for (Parameter* p : layer->parameters()) all.push_back(p);
  }
  return all;
}

std::vector<Buffer*> Sequential::buffers() {
  std::vector<Buffer*> all;
  for (auto& layer : layers_) {
    for (Buffer* b : layer->buffers()) all.push_back(b);
  }
  return all;
}

void Parameter::clear_grad() {
  if (overwrites_grad) {
    grad_unwritten = true;
  } else {
    ops::fill(grad, 0.0);
  }
}

void Sequential::zero_grad() {
  for (Parameter* p : parameters()) p->clear_grad();
}

std::int64_t Sequential::parameter_count() {
  std::int64_t n = 0;
  for (Parameter* p : parameters()) n += p->value.numel();
  return n;
}

nlohmann::json Sequential::config() const {
  nlohmann::json layers = nlohmann::json::array();
  for (const auto& layer : layers_) {
    layers.push_back(
        {{"kind", layer->kind()}, {"name", layer->name()}, {"config", layer->config()}});
  }
  if (!is_chain()) {
    for (std::size_t i = 0; i < layers_.size(); ++i) {
      nlohmann::json in = nlohmann::json::array();
      for (int k : inputs_[i])
        in.push_back(k == kModelInput ? std::string("input")
                                      : layers_[static_cast<std::size_t>(k)]->name());
      layers[i]["inputs"] = in;
    }
  }
  return {{"input_shape", input_shape_}, {"dtype", dtype_name(dtype_)}, {"layers", layers}};
}

std::string Sequential::summary() {
  auto line = [](const std::string& a, const std::string& b, const std::string& c) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "%-34s %-22s %12s\n", a.c_str(), b.c_str(), c.c_str());
    return std::string(buf);
  };
  const std::string rule(70, '-');
  std::string s = line("Layer (type)", "Output shape", "Param #") + rule + "\n";
  std::int64_t total = 0;
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    std::int64_t n = 0;
    for (Parameter* p : layers_[i]->parameters()) n += p->value.numel();
    total += n;
    std::string shape = "(None";
    if (i < output_shapes_.size()) {
      for (auto d : output_shapes_[i]) shape += ", " + std::to_string(d);
    }
    s += line(layers_[i]->name() + " (" + layers_[i]->kind() + ")", shape + ")", std::to_string(n));
  }
  s += rule + "\nTotal params: " + std::to_string(total) + "\n";
  return s;
}

}  // namespace mirror::nn
