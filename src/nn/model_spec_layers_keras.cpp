// The per-layer parsers of ModelSpecParser (model_spec_parser.h) for the layers Keras users
// combine with GRUs and CNNs (nn/keras_layers.h, nn/keras_ops_layers.h, nn/attention.h): shape
// layers, TimeDistributed, Conv2DTranspose, the depthwise convolutions, the parametric
// activations, the element-wise merges and the attention layers. Each returns its canonical layer
// (docs/model-spec.md).
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "nn/model_spec_initializers.h"
#include "nn/model_spec_parser.h"

namespace mirror::nn {

using nlohmann::json;
using namespace spec_fields;  // NOLINT(google-build-using-namespace): the parsers' own helpers

namespace {

const std::set<std::string> kShapeFields = {"batch_input_shape", "input_shape"};

/// A list of positive integers (or -1 where `open` allows it), at most `max` long.
std::vector<std::int64_t> int_list(Fields& f, const std::string& name, bool open, std::size_t max) {
  std::string field;
  const json* v = f.take(name, "", &field);
  if (v == nullptr) f.fail(name, "required");
  std::vector<std::int64_t> out;
  bool ok = v->is_array() && !v->empty() && v->size() <= max;
  for (std::size_t i = 0; ok && i < v->size(); ++i) {
    const json& d = (*v)[i];
    ok = d.is_number_integer() && (d.get<std::int64_t>() > 0 || (open && d == -1)) &&
         d.get<std::int64_t>() <= (1 << 30);
    if (ok) out.push_back(d.get<std::int64_t>());
  }
  if (!ok) {
    f.fail(field, "expected a list of 1 to " + std::to_string(max) + " positive integers" +
                      (open ? " (one may be -1)" : "") + ", got " + v->dump());
  }
  return out;
}

}  // namespace

std::array<std::int64_t, 4> ModelSpecParser::four_sides(Fields& f, const std::string& name,
                                                        std::int64_t fallback) {
  std::string field;
  const json* v = f.take(name, "", &field);
  std::array<std::int64_t, 4> p;
  p.fill(fallback);
  if (v == nullptr) return p;
  auto nonneg = [](const json& x) { return x.is_number_integer() && x.get<std::int64_t>() >= 0; };
  auto pair = [&](const json& x) {
    return x.is_array() && x.size() == 2 && nonneg(x[0]) && nonneg(x[1]);
  };
  const json& j = *v;
  if (nonneg(j)) {
    p.fill(j.get<std::int64_t>());
  } else if (pair(j)) {
    p = {j[0].get<std::int64_t>(), j[0].get<std::int64_t>(), j[1].get<std::int64_t>(),
         j[1].get<std::int64_t>()};
  } else if (j.is_array() && j.size() == 2 && pair(j[0]) && pair(j[1])) {
    p = {j[0][0].get<std::int64_t>(), j[0][1].get<std::int64_t>(), j[1][0].get<std::int64_t>(),
         j[1][1].get<std::int64_t>()};
  } else {
    f.fail(field,
           "expected n, [rows, columns] or [[top, bottom], [left, right]] of non-negative "
           "integers, got " +
               j.dump());
  }
  return p;
}

// ---------------------------------------------------------------- shape layers

std::vector<json> ModelSpecParser::reshape(Fields& f, bool keras) {
  const std::vector<std::int64_t> target = int_list(f, "target_shape", true, 3);
  // Note [Channels-last layouts] (nn/keras_layers.h): a Keras Reshape reads and writes images in
  // Keras's [H, W, C] order; the canonical form states it.
  const bool channels_last = f.boolean("channels_last", "", keras);
  f.finish(kShapeFields);
  return {{{"type", "reshape"}, {"target_shape", target}, {"channels_last", channels_last}}};
}

std::vector<json> ModelSpecParser::permute(Fields& f, bool keras) {
  const std::vector<std::int64_t> dims = int_list(f, "dims", false, 3);
  const bool channels_last = f.boolean("channels_last", "", keras);
  f.finish(kShapeFields);
  return {{{"type", "permute"}, {"dims", dims}, {"channels_last", channels_last}}};
}

std::vector<json> ModelSpecParser::repeat_vector(Fields& f, bool) {
  const auto n = f.integer("n", "", 0, 1);
  if (n == 0) f.fail("n", "required (a positive integer)");
  f.finish(kShapeFields);
  return {{{"type", "repeat_vector"}, {"n", n}}};
}

std::vector<json> ModelSpecParser::cropping2d(Fields& f, bool keras) {
  const auto p = four_sides(f, "cropping", 0);
  image_format(f, keras);
  f.finish(kShapeFields);
  return {{{"type", "cropping2d"}, {"cropping", {{p[0], p[1]}, {p[2], p[3]}}}}};
}

std::vector<json> ModelSpecParser::up_sampling2d(Fields& f, bool keras) {
  const auto size = f.pair("size", "", 2);
  if (lower(f.text("interpolation", "", "nearest")) != "nearest") {
    f.fail("interpolation", "only \"nearest\" is supported");
  }
  image_format(f, keras);
  f.finish(kShapeFields);
  return {{{"type", "up_sampling2d"}, {"size", {size[0], size[1]}}}};
}

std::vector<json> ModelSpecParser::global_max_pooling2d(Fields& f, bool keras) {
  image_format(f, keras);
  const bool keepdims = f.boolean("keepdims", "", false);
  f.finish(kShapeFields);
  if (!keepdims) return {{{"type", "global_max_pooling2d"}}};
  // Keras's [N, 1, 1, C]: the pooled [N, C] reshaped (as GlobalAveragePooling2D's keepdims).
  const bool last = data_format == "channels_last";
  return {{{"type", "global_max_pooling2d"}},
          {{"type", "reshape"},
           {"target_shape", last ? json::array({1, 1, -1}) : json::array({-1, 1, 1})},
           {"channels_last", last}}};
}

std::vector<json> ModelSpecParser::spatial_dropout(Fields& f, bool keras, int rank) {
  std::string field;
  if (!f.take("rate", "", &field)) f.fail("rate", "required (a number in [0, 1))");
  const double rate = f.number("rate", "", 0);
  if (!(rate >= 0 && rate < 1))
    f.fail("rate", "expected a number in [0, 1), got " + std::to_string(rate));
  if (rank == 3) {
    image_format(f, keras);
  } else {
    sequence_format(f);
  }
  f.require_null("noise_shape", "the layer drops whole channels");
  f.finish(kShapeFields);
  return {{{"type", rank == 2 ? "spatial_dropout1d" : "spatial_dropout2d"}, {"rate", rate}}};
}

std::vector<json> ModelSpecParser::spatial_dropout1d(Fields& f, bool keras) {
  return spatial_dropout(f, keras, 2);
}

std::vector<json> ModelSpecParser::spatial_dropout2d(Fields& f, bool keras) {
  return spatial_dropout(f, keras, 3);
}

/// TimeDistributed(layer): the wrapped layer is read by the same table (Keras or Mirror form) and
/// must make one canonical layer without inputs of its own.
std::vector<json> ModelSpecParser::time_distributed(Fields& f, bool) {
  std::string field;
  const json* inner = f.take("layer", "", &field);
  if (inner == nullptr || !inner->is_object())
    f.fail("layer", "required (the layer applied to every step)");
  f.finish(kShapeFields);
  json entry = *inner;
  entry.erase("inbound_nodes");
  if (entry.contains("config") && entry["config"].is_object()) entry["config"].erase("name");
  entry.erase("name");
  const std::size_t before = spec.layers_.size();
  layer(entry, current_index);
  const std::size_t made = spec.layers_.size() - before;
  json wrapped = made == 1 ? spec.layers_.back() : json();
  for (std::size_t i = 0; i < made; ++i) {
    spec.layers_.erase(spec.layers_.size() - 1);
    spec.origin_.pop_back();
  }
  if (made != 1) f.fail("layer", "must be one layer (got " + std::to_string(made) + ")");
  const std::string type = wrapped["type"].get<std::string>();
  if (wrapped.contains("data_format")) {  // Note [Positive channel axes]: checked by bind()
    f.fail("layer", "a positive axis (" + wrapped["axis"].dump() +
                        ") inside a TimeDistributed is not read; write -1 (the channel axis)");
  }
  static const std::set<std::string> supported = {"dense",
                                                  "conv2d",
                                                  "conv1d",
                                                  "maxpool2d",
                                                  "average_pooling2d",
                                                  "flatten",
                                                  "activation",
                                                  "dropout",
                                                  "relu",
                                                  "leaky_relu",
                                                  "elu",
                                                  "zero_padding2d",
                                                  "cropping2d",
                                                  "up_sampling2d",
                                                  "global_average_pooling2d",
                                                  "global_max_pooling2d",
                                                  "batch_normalization",
                                                  "layer_normalization",
                                                  "reshape"};
  if (!supported.count(type)) {
    f.fail("layer", "Mirror applies " + type +
                        " to whole samples only; TimeDistributed takes a single-input layer "
                        "without a time axis of its own (dense, conv2d, pooling, activation, "
                        "dropout, normalization, ...)");
  }
  wrapped.erase("name");
  wrapped.erase("inputs");
  return {{{"type", "time_distributed"}, {"layer", wrapped}}};
}

// ---------------------------------------------------------------- Conv2DTranspose

ModelSpecParser::Window ModelSpecParser::window(Fields& f) {
  std::string kf;
  if (!f.take("kernel", "kernel_size", &kf)) f.fail("kernel", "required ([height, width])");
  Window w{f.pair("kernel", "kernel_size", 1), 0};
  w.stride = square(f, "strides", f.pair("strides", "stride", 1));
  if (f.pair("dilation_rate", "", 1) != std::array<std::int64_t, 2>{1, 1}) {
    f.fail("dilation_rate", "only 1 (no dilation) is supported");
  }
  return w;
}

std::vector<json> ModelSpecParser::conv2d_transpose(Fields& f, bool keras) {
  const auto filters = f.integer("filters", "", 0, 1);
  if (filters == 0) f.fail("filters", "required (a positive integer)");
  const Window w = window(f);
  f.require_null("output_padding", "Mirror's output size is Keras's default");
  const std::string padding = padding_field(f);
  const std::string act = activation_field(f, "activation", "linear");
  const bool use_bias = f.boolean("use_bias", "", true);
  const json inits = kernel_and_bias(f, "Conv2DTranspose", true);  // Note [Spec initializers]
  image_format(f, keras);
  f.finish(kShapeFields);
  json j = {{"type", "conv2d_transpose"},
            {"filters", filters},
            {"kernel", {w.kernel[0], w.kernel[1]}},
            {"strides", {w.stride, w.stride}},
            {"padding", padding},
            {"activation", act},
            {"use_bias", use_bias}};
  j.update(inits);
  return {j};
}

// ---------------------------------------------------------------- merges

std::vector<json> ModelSpecParser::merge(Fields& f, const char* type) {
  const std::string t = type;
  if (t == "multiply" || t == "subtract") {
    if (auto scalar = scalar_operand(f, t)) return {*scalar};  // Note [Scalar operands]
  }
  f.finish();
  return {{{"type", type}}};
}

// ---------------------------------------------------------------- parametric activations

/// Note [Parametric activations] (ops.h): Keras's ReLU maps to plain relu at its defaults, to
/// leaky_relu with only a negative slope (Keras's own shortcut), else to Mirror's relu layer.
json ModelSpecParser::relu_layer(double max_value, double slope, double threshold) {
  if (max_value < 0 && slope == 0 && threshold == 0) {
    return {{"type", "activation"}, {"activation", "relu"}};
  }
  if (max_value < 0 && threshold == 0) return {{"type", "leaky_relu"}, {"negative_slope", slope}};
  return {{"type", "relu"},
          {"max_value", max_value < 0 ? json() : json(max_value)},
          {"negative_slope", slope},
          {"threshold", threshold}};
}

std::vector<json> ModelSpecParser::relu(Fields& f, bool) {
  std::string field;
  double max_value = -1;
  if (const json* v = f.take("max_value", "", &field)) {
    if (!v->is_number() || v->get<double>() < 0) {
      f.fail(field, "expected a number >= 0 or null, got " + v->dump());
    }
    max_value = v->get<double>();
  }
  const double slope = f.number("negative_slope", "", 0.0);
  const double threshold = f.number("threshold", "", 0.0);
  if (slope < 0) f.fail("negative_slope", "expected a number >= 0 (Keras's rule)");
  f.finish(kShapeFields);
  return {relu_layer(max_value, slope, threshold)};
}

std::vector<json> ModelSpecParser::leaky_relu(Fields& f, bool) {
  // Keras 3 writes negative_slope, Keras 2 alpha (default 0.3 in both).
  const double slope = f.number("negative_slope", "alpha", 0.3);
  f.finish(kShapeFields);
  return {{{"type", "leaky_relu"}, {"negative_slope", slope}}};
}

std::vector<json> ModelSpecParser::elu(Fields& f, bool) {
  const double alpha = f.number("alpha", "", 1.0);
  f.finish(kShapeFields);
  return {{{"type", "elu"}, {"alpha", alpha}}};
}

std::optional<json> ModelSpecParser::activation_layer_for(const std::string& name) {
  if (name == "relu6") return relu_layer(6, 0, 0);
  if (name == "leaky_relu") return json{{"type", "leaky_relu"}, {"negative_slope", 0.2}};
  if (name == "elu") return json{{"type", "elu"}, {"alpha", 1.0}};
  return std::nullopt;
}

// ---------------------------------------------------------------- attention

namespace {

/// Keras's use_causal_mask: a call argument (the functional node's kwargs), or Keras 2's
/// `causal` field; Mirror's canonical form writes `causal`.
bool causal_of(Fields& f, const json& call_kwargs) {
  const bool field = f.boolean("causal", "", false);
  for (const auto& [key, value] : call_kwargs.items()) {
    if (key == "use_causal_mask" && value.is_boolean()) return field || value.get<bool>();
  }
  return field;
}

double dropout_of(Fields& f) {
  const double rate = f.number("dropout", "", 0.0);
  if (!(rate >= 0 && rate < 1)) f.fail("dropout", "expected a number in [0, 1)");
  return rate;
}

}  // namespace

/// Keras's Attention (score_mode "dot") and AdditiveAttention; Note [Attention masks].
std::vector<json> ModelSpecParser::attention(Fields& f, bool additive) {
  const bool use_scale = f.boolean("use_scale", "", additive);
  if (!additive && lower(f.text("score_mode", "", "dot")) != "dot") {
    f.fail("score_mode", "only \"dot\" is supported");
  }
  const double dropout = dropout_of(f);
  const bool causal = causal_of(f, call_kwargs);
  f.finish(kShapeFields);
  return {{{"type", additive ? "additive_attention" : "attention"},
           {"use_scale", use_scale},
           {"dropout", dropout},
           {"causal", causal}}};
}

std::vector<json> ModelSpecParser::multi_head_attention(Fields& f, bool) {
  const auto heads = f.integer("num_heads", "", 0, 1);
  if (heads == 0) f.fail("num_heads", "required (a positive integer)");
  const auto key_dim = f.integer("key_dim", "", 0, 1);
  if (key_dim == 0) f.fail("key_dim", "required (a positive integer)");
  const auto value_dim = f.integer("value_dim", "", key_dim, 1);
  const double dropout = dropout_of(f);
  const bool use_bias = f.boolean("use_bias", "", true);
  std::int64_t output_dim = 0;
  std::string field;
  if (const json* v = f.take("output_shape", "output_dim", &field)) {
    const json& d = v->is_array() && v->size() == 1 ? (*v)[0] : *v;
    if (!d.is_number_integer() || d.get<std::int64_t>() < 1) {
      f.fail(field,
             "expected a positive integer or [integer] (the output features), got " + v->dump());
    }
    output_dim = d.get<std::int64_t>();
  }
  if (const json* axes = f.take("attention_axes", "", &field)) {
    if (*axes != json::array({1}) && *axes != json(1)) {
      f.fail(field,
             "only the steps (axis 1, Keras's default) are attended over, got " + axes->dump());
    }
  }
  f.require_bool("use_gate", false, "Mirror's attention has no gate");
  f.require_null("sliding_window", "Mirror attends over every step (use_causal_mask is supported)");
  f.require_bool("flash_attention", false, "the scores are computed in full");
  f.initializer("kernel_initializer", "GlorotUniform");
  f.initializer("bias_initializer", "Zeros");
  no_regularizers(f, {"kernel_regularizer", "bias_regularizer", "activity_regularizer",
                      "kernel_constraint", "bias_constraint"});
  const bool causal = causal_of(f, call_kwargs);
  f.finish(kShapeFields);
  json j = {{"type", "multi_head_attention"},
            {"num_heads", heads},
            {"key_dim", key_dim},
            {"value_dim", value_dim},
            {"dropout", dropout},
            {"use_bias", use_bias},
            {"causal", causal}};
  if (output_dim > 0) j["output_dim"] = output_dim;
  return {j};
}

// ---------------------------------------------------------------- depthwise convolutions

/// DepthwiseConv2D and SeparableConv2D (`separable`: with filters and a pointwise kernel).
std::vector<json> ModelSpecParser::depthwise(Fields& f, bool keras, bool separable) {
  std::int64_t filters = 0;
  if (separable) {
    filters = f.integer("filters", "", 0, 1);
    if (filters == 0) f.fail("filters", "required (a positive integer)");
  }
  const Window w = window(f);
  const auto multiplier = f.integer("depth_multiplier", "", 1, 1);
  const std::string padding = padding_field(f);
  const std::string act = activation_field(f, "activation", "linear");
  const bool use_bias = f.boolean("use_bias", "", true);
  // Note [Spec initializers]: a depthwise kernel [C * m, 1, kh, kw] is no matrix of Keras's.
  json inits = json::object();
  const json depthwise_init = initializer_spec(f, "depthwise_initializer", "GlorotUniform", false);
  if (!depthwise_init.is_null()) inits["depthwise_initializer"] = depthwise_init;
  if (separable) {
    const json pointwise_init = initializer_spec(f, "pointwise_initializer", "GlorotUniform");
    if (!pointwise_init.is_null()) inits["pointwise_initializer"] = pointwise_init;
  }
  const json bias_init = initializer_spec(f, "bias_initializer", "Zeros", false);
  if (!bias_init.is_null()) inits["bias_initializer"] = bias_init;
  no_regularizers(f, {"depthwise_regularizer", "pointwise_regularizer", "bias_regularizer",
                      "activity_regularizer", "depthwise_constraint", "pointwise_constraint",
                      "bias_constraint"});
  image_format(f, keras);
  f.finish(kShapeFields);
  json j = {{"type", separable ? "separable_conv2d" : "depthwise_conv2d"}};
  if (separable) j["filters"] = filters;
  j["kernel"] = {w.kernel[0], w.kernel[1]};
  j["strides"] = {w.stride, w.stride};
  j["padding"] = padding;
  j["depth_multiplier"] = multiplier;
  j["activation"] = act;
  j["use_bias"] = use_bias;
  j.update(inits);
  return {j};
}

}  // namespace mirror::nn
