// The per-layer parsers of ModelSpecParser (model_spec_parser.h): each reads one layer's fields,
// Mirror's or Keras's spelling, and returns its canonical layers (docs/model-spec.md).
#include <array>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "mirror/nn/bidirectional.h"
#include "nn/model_spec_initializers.h"
#include "nn/model_spec_parser.h"

namespace mirror::nn {

using nlohmann::json;
using namespace spec_fields;  // NOLINT(google-build-using-namespace): the parsers' own helpers

void ModelSpecParser::image_format(Fields& f, bool keras) {
  const std::string fmt =
      lower(f.text("data_format", "", keras ? "channels_last" : "channels_first"));
  if (fmt != "channels_last" && fmt != "channels_first") {
    f.fail("data_format", "expected channels_first or channels_last, got \"" + fmt + "\"");
  }
  if (!data_format.empty() && fmt != data_format) {
    f.fail("data_format", "is " + fmt + " but an earlier layer is " + data_format +
                              "; all image layers must use one layout");
  }
  data_format = fmt;
}

std::vector<json> ModelSpecParser::conv2d(Fields& f, bool keras) {
  const auto filters = f.integer("filters", "", 0, 1);
  if (filters == 0) f.fail("filters", "required (a positive integer)");
  std::string kf;
  if (!f.take("kernel", "kernel_size", &kf)) f.fail("kernel", "required ([height, width])");
  const auto kernel = f.pair("kernel", "kernel_size", 1);
  const auto stride = square(f, "strides", f.pair("strides", "stride", 1));
  if (f.pair("dilation_rate", "", 1) != std::array<std::int64_t, 2>{1, 1}) {
    f.fail("dilation_rate", "only 1 (no dilation) is supported");
  }
  // Keras's grouped convolution (ConvNeXt's 7x7 depthwise is Conv2D(groups=C)); bind() checks
  // that groups divides the input's channels.
  const auto groups = f.integer("groups", "", 1, 1);
  if (filters % groups != 0) {
    f.fail("groups", std::to_string(groups) + " does not divide filters " +
                         std::to_string(filters));
  }
  const std::string padding = padding_field(f);
  const std::string act = activation_field(f, "activation", "linear");
  const bool use_bias = f.boolean("use_bias", "", true);
  const json inits = kernel_and_bias(f, "Conv2D", true);  // Note [Spec initializers]
  image_format(f, keras);
  f.finish({"batch_input_shape", "input_shape"});
  json j = {{"type", "conv2d"},
            {"filters", filters},
            {"kernel", {kernel[0], kernel[1]}},
            {"strides", {stride, stride}},
            {"padding", padding},
            {"activation", act}};
  if (!use_bias) j["use_bias"] = false;  // written only when false: older specs stay as they were
  if (groups != 1) j["groups"] = groups;  // likewise
  j.update(inits);
  return {j};
}

std::vector<json> ModelSpecParser::pool2d(Fields& f, bool keras, const char* type) {
  const auto pool = square(f, "pool", f.pair("pool", "pool_size", 2));
  const auto stride = square(f, "strides", f.pair("strides", "stride", pool));
  const std::string padding = padding_field(f);
  image_format(f, keras);
  f.finish({"batch_input_shape", "input_shape"});
  return {{{"type", type},
           {"pool", {pool, pool}},
           {"strides", {stride, stride}},
           {"padding", padding}}};
}

std::vector<json> ModelSpecParser::maxpool2d(Fields& f, bool keras) {
  return pool2d(f, keras, "maxpool2d");
}

std::vector<json> ModelSpecParser::flatten(Fields& f, bool keras) {
  if (f.text("data_format", "", "").size()) image_format(f, keras);
  f.finish({"batch_input_shape", "input_shape"});
  return {{{"type", "flatten"}}};
}

std::vector<json> ModelSpecParser::dense(Fields& f, bool) {
  const auto units = f.integer("units", "", 0, 1);
  const std::string act = activation_field(f, "activation", "linear");
  const json inits = kernel_and_bias(f, "Dense");  // Note [Spec initializers]
  const bool images = f.boolean("keras_channels_last", "", false);  // Note [Keras layers on ...]
  f.finish({"batch_input_shape", "input_shape"});
  json j = {{"type", "dense"}};
  if (units > 0) j["units"] = units;
  j["activation"] = act;
  if (images) j["keras_channels_last"] = true;
  j.update(inits);
  return {j};
}

std::vector<json> ModelSpecParser::dropout(Fields& f, bool keras) {
  std::string field;
  if (!f.take("rate", "", &field)) f.fail("rate", "required (a number in [0, 1))");
  const double rate = f.number("rate", "", 0);
  if (!(rate >= 0 && rate < 1))
    f.fail("rate", "expected a number in [0, 1), got " + std::to_string(rate));
  // Keras's noise_shape (batch first, None or a size each): kept when some dimension is fixed;
  // the layer checks the sizes against its input (nn/layers.h Dropout).
  json noise_shape;
  if (const json* v = f.take("noise_shape", "", &field)) {
    bool ok = v->is_array() && v->size() >= 2 && v->size() <= 4 && (*v)[0].is_null();
    bool fixed = false;
    for (std::size_t i = 1; ok && i < v->size(); ++i) {
      const json& d = (*v)[i];
      ok = d.is_null() || (d.is_number_integer() && d.get<std::int64_t>() >= 1);
      fixed = fixed || !d.is_null();
    }
    if (!ok) {
      f.fail(field,
             "expected [None, d1, ...] (2 to 4 entries, the batch's None, then None or a positive "
             "size: 1 shares the mask along that axis), got " +
                 v->dump());
    }
    if (fixed) noise_shape = *v;
  }
  const bool channels_last = f.boolean("channels_last", "", keras);
  f.finish({"batch_input_shape", "input_shape"});
  json j = {{"type", "dropout"}, {"rate", rate}};
  if (!noise_shape.is_null()) {
    j["noise_shape"] = noise_shape;
    j["channels_last"] = channels_last;
  }
  return {j};
}

std::vector<json> ModelSpecParser::embedding(Fields& f, bool) {
  const auto vocab = f.integer("input_dim", "vocab", 0, 2);
  const auto dim = f.integer("output_dim", "dim", 0, 1);
  if (dim == 0) f.fail("output_dim", "required (a positive integer)");
  const bool mask_zero = f.boolean("mask_zero", "", false);
  f.initializer("embeddings_initializer", "RandomUniform");
  no_regularizers(f, {"embeddings_regularizer", "activity_regularizer", "embeddings_constraint",
                      "lora_rank", "quantization_config"});
  f.require_bool("sparse", false, "Mirror's embedding gradient is dense");
  f.finish({"batch_input_shape", "input_shape", "input_length", "lora_alpha"});
  json j = {{"type", "embedding"}};
  if (vocab > 0) j["input_dim"] = vocab;
  j["output_dim"] = dim;
  // Note [mask_zero]: Mirror's sequence lengths come from a Masking layer, which reads the same
  // trailing zero ids that Keras's mask_zero masks.
  if (mask_zero && (spec.layers_.empty() || spec.layers_.back()["type"] != "masking")) {
    return {{{"type", "masking"}}, j};
  }
  return {j};
}

std::vector<json> ModelSpecParser::masking(Fields& f, bool) {
  if (f.number("mask_value", "", 0.0) != 0.0) {
    f.fail("mask_value", "only 0 is supported (Mirror's padding value)");
  }
  f.finish({"batch_input_shape", "input_shape"});
  return {{{"type", "masking"}}};
}

/// GRU and LSTM (`kind`); `backwards`: the backward layer of a Bidirectional, which Keras
/// writes with go_backwards = true.
std::vector<json> ModelSpecParser::recurrent(Fields& f, const std::string& kind, bool backwards) {
  const std::string layer = kind == "gru" ? "GRU" : "LSTM";
  const auto units = f.integer("units", "", 0, 1);
  if (units == 0) f.fail("units", "required (a positive integer)");
  const bool seq = f.boolean("return_sequences", "", false);
  json j = {{"type", kind}, {"units", units}, {"return_sequences", seq}};
  if (kind == "gru") {
    f.require_bool("reset_after", true, "Mirror's GRU is the reset-after (cuDNN/PyTorch) form");
  } else {
    j["unit_forget_bias"] = f.boolean("unit_forget_bias", "", true);
  }
  if (activation_field(f, "activation", "tanh") != "tanh") {
    f.fail("activation", "only tanh is supported");
  }
  if (activation_field(f, "recurrent_activation", "sigmoid") != "sigmoid") {
    f.fail("recurrent_activation", "only sigmoid is supported");
  }
  f.require_bool("use_bias", true, "Mirror's " + layer + " always has biases");
  f.require_bool("return_state", false, "a Sequential passes one tensor on");
  if (backwards) {
    f.require_bool("go_backwards", true, "it is the backward layer of a Bidirectional");
  } else {
    f.require_bool("go_backwards", false,
                   "Mirror's " + layer + " reads forwards; wrap it in a Bidirectional");
  }
  f.require_bool("stateful", false, "every batch starts from a zero state");
  f.require_bool("time_major", false, "inputs are [N, T, F]");
  for (const char* d : {"dropout", "recurrent_dropout"}) {
    if (f.number(d, "", 0.0) != 0.0) f.fail(d, "only 0 is supported (no " + layer + " dropout)");
  }
  f.initializer("kernel_initializer", "GlorotUniform");
  f.initializer("recurrent_initializer", "Orthogonal");
  f.initializer("bias_initializer", "Zeros");
  no_regularizers(
      f, {"kernel_regularizer", "recurrent_regularizer", "bias_regularizer", "activity_regularizer",
          "kernel_constraint", "recurrent_constraint", "bias_constraint"});
  // Note [Carried outputs]: Keras's default false repeats the last output past a masked length.
  if (!f.boolean("zero_output_for_mask", "", true) && seq) j["zero_output_for_mask"] = false;
  f.finish({"batch_input_shape", "input_shape", "unroll", "implementation"});
  return {j};
}

/// The recurrent layer inside a Bidirectional: a Keras {"class_name", "config"} or a Mirror
/// {"type", ...} object, as canonical JSON.
json ModelSpecParser::wrapped_recurrent(Fields& outer, const std::string& field, const json& entry,
                                        bool backwards) {
  const bool keras = entry.is_object() && entry.contains("class_name");
  const char* key = keras ? "class_name" : "type";
  if (!entry.is_object() || !entry.contains(key) || !entry[key].is_string()) {
    outer.fail(field, "expected a GRU or LSTM layer object, got " + entry.dump());
  }
  const std::string type =
      lower(keras ? entry["class_name"].get<std::string>() : entry["type"].get<std::string>());
  if (type != "gru" && type != "lstm") {
    outer.fail(field, "Mirror wraps GRU or LSTM only, got '" + type + "'");
  }
  json config = keras ? entry.value("config", json::object()) : entry;
  if (!keras) config.erase("type");
  Fields f(source + ", field '" + field + "'", config);
  return recurrent(f, type, backwards)[0];
}

std::vector<json> ModelSpecParser::bidirectional(Fields& f, bool) {
  std::string field;
  const json* layer = f.take("layer", "", &field);
  if (layer == nullptr) f.fail("layer", "required (the GRU or LSTM to run both ways)");
  json inner = wrapped_recurrent(f, "layer", *layer, false);
  inner.erase("zero_output_for_mask");  // Keras's Bidirectional sets it true (zeros)
  if (f.is_null("merge_mode")) {
    f.fail("merge_mode",
           "null (the two directions as separate outputs) needs a multi-output model; use "
           "concat, sum, ave or mul");
  }
  const std::string mode = f.text("merge_mode", "", "concat");
  try {
    parse_merge_mode(mode);
  } catch (const InvalidArgument& e) {
    f.fail("merge_mode", e.what());
  }
  // Keras 3 writes the backward layer out in full: it must be the forward one read backwards.
  if (const json* back = f.take("backward_layer", "", &field)) {
    json backward = wrapped_recurrent(f, "backward_layer", *back, true);
    backward.erase("zero_output_for_mask");
    if (backward != inner) {
      f.fail("backward_layer",
             "Mirror's backward direction is a copy of 'layer' (go_backwards aside), but it "
             "reads as " +
                 backward.dump() + " and 'layer' as " + inner.dump());
    }
  }
  f.finish({"batch_input_shape", "input_shape"});
  return {{{"type", "bidirectional"}, {"merge_mode", mode}, {"layer", inner}}};
}

/// An integer or a list of one (Keras writes kernel_size, strides, ... as [k]).
std::int64_t ModelSpecParser::single(Fields& f, const std::string& name, const std::string& alias,
                                     std::int64_t fallback) {
  std::string field;
  const json* v = f.take(name, alias, &field);
  if (v == nullptr) return fallback;
  const json& x = v->is_array() && v->size() == 1 ? (*v)[0] : *v;
  if (!x.is_number_integer() || x.get<std::int64_t>() < 1 || x.get<std::int64_t>() > 65536) {
    f.fail(field, "expected a positive integer or [integer], got " + v->dump());
  }
  return x.get<std::int64_t>();
}

/// Mirror's sequences are [T, C]: only Keras's channels_last.
void ModelSpecParser::sequence_format(Fields& f) {
  const std::string fmt = lower(f.text("data_format", "", "channels_last"));
  if (fmt != "channels_last") {
    f.fail("data_format",
           "1-D layers read sequences [T, C]: only channels_last, got \"" + fmt + "\"");
  }
}

std::string ModelSpecParser::padding_1d(Fields& f, bool causal_ok) {
  const std::string p = lower(f.text("padding", "", "valid"));
  if (p != "valid" && p != "same" && (!causal_ok || p != "causal")) {
    f.fail("padding", std::string("expected \"valid\", \"same\"") +
                          (causal_ok ? " or \"causal\"" : "") + ", got \"" + p + "\"");
  }
  return p;
}

std::vector<json> ModelSpecParser::conv1d(Fields& f, bool) {
  const auto filters = f.integer("filters", "", 0, 1);
  if (filters == 0) f.fail("filters", "required (a positive integer)");
  std::string kf;
  if (!f.take("kernel", "kernel_size", &kf)) f.fail("kernel", "required (an integer)");
  const auto kernel = single(f, "kernel", "kernel_size", 1);
  const auto stride = single(f, "strides", "stride", 1);
  const auto dilation = single(f, "dilation_rate", "", 1);
  if (stride > 1 && dilation > 1) {
    f.fail("dilation_rate", "strides > 1 together with dilation_rate > 1 is not supported");
  }
  if (f.integer("groups", "", 1, 1) != 1) f.fail("groups", "only 1 is supported");
  const std::string padding = padding_1d(f, true);
  const std::string act = activation_field(f, "activation", "linear");
  const json inits = kernel_and_bias(f, "Conv1D");  // Note [Spec initializers]
  sequence_format(f);
  f.finish({"batch_input_shape", "input_shape"});
  json j = {{"type", "conv1d"},  {"filters", filters},        {"kernel", kernel},
            {"strides", stride}, {"dilation_rate", dilation}, {"padding", padding},
            {"activation", act}};
  j.update(inits);
  return {j};
}

std::vector<json> ModelSpecParser::pool1d(Fields& f, const std::string& type) {
  const auto pool = single(f, "pool", "pool_size", 2);
  const auto stride = single(f, "strides", "stride", pool);
  const std::string padding = padding_1d(f, false);
  sequence_format(f);
  f.finish({"batch_input_shape", "input_shape"});
  return {{{"type", type}, {"pool", pool}, {"strides", stride}, {"padding", padding}}};
}

std::vector<json> ModelSpecParser::global_pool1d(Fields& f, const std::string& type) {
  f.require_bool("keepdims", false, "the pooled output is [C]");
  sequence_format(f);
  f.finish({"batch_input_shape", "input_shape"});
  return {{{"type", type}}};
}

std::vector<json> ModelSpecParser::global_maxpool1d(Fields& f, bool) {
  return global_pool1d(f, "global_maxpool1d");
}

std::vector<json> ModelSpecParser::global_avgpool1d(Fields& f, bool) {
  return global_pool1d(f, "global_avgpool1d");
}

std::vector<json> ModelSpecParser::activation(Fields& f, bool) {
  std::string field;
  const json* given = f.take("activation", "", &field);
  if (!given) f.fail("activation", "required");
  // relu6, leaky_relu, elu: Mirror's parametric activation layers (model_spec_layers_keras.cpp).
  if (given->is_string()) {
    if (auto layer = activation_layer_for(lower(given->get<std::string>()))) {
      f.finish({"batch_input_shape", "input_shape"});
      return {*layer};
    }
  }
  // GELU: the exact (erf) form, or Mirror's "approximate": true for the tanh form.
  if (given->is_string() && lower(given->get<std::string>()) == "gelu") {
    const bool approximate = f.boolean("approximate", "", false);
    f.finish({"batch_input_shape", "input_shape"});
    json j = {{"type", "activation"}, {"activation", "gelu"}};
    if (approximate) j["approximate"] = true;
    return {j};
  }
  const std::string act = activation_field(f, "activation", "linear");
  f.finish({"batch_input_shape", "input_shape"});
  return {{{"type", "activation"}, {"activation", act}}};
}

// Note [Positive channel axes]: Keras writes a channel axis as a positive index counting the
// batch axis (keras.applications' BatchNormalization(axis=3), Concatenate(axis=3),
// Normalization(axis=[3])), which is the channel axis only for an input of the matching rank:
// 3 of an image [N, H, W, C], 1 of features [N, F], 2 of sequences [N, T, F] (and 1 of an image
// [N, C, H, W] with channels_first). The parser does not know ranks, so the layer records the
// axis and the layout it counts in ("axis": 3, "data_format": "channels_last"); bind() checks it
// against the layer's input shape, refuses any other axis naming the layer and the shape, and
// then drops both fields, so the bound spec (what checkpoints, fingerprints and exports see) is
// the one written with -1.
json ModelSpecParser::channel_axis(Fields& f, const std::string& also) {
  std::string field;
  const json* v = f.take("axis", "", &field);
  std::string fmt_field;
  const json* fmt = f.take("data_format", "", &fmt_field);
  if (v == nullptr) {
    if (fmt != nullptr) f.fail(fmt_field, "only with a positive axis (the layout it counts in)");
    return json();
  }
  json a = *v;
  if (a.is_array() && a.size() == 1) a = a[0];
  const bool positive =
      a.is_number_integer() && a.get<std::int64_t>() >= 1 && a.get<std::int64_t>() <= 3;
  if (a != -1 && !positive) {
    f.fail(field,
           "only the channel axis is supported: -1, or its positive index counting the batch "
           "axis (3 of an image [N, H, W, C], 1 of features [N, F], 2 of sequences [N, T, F])" +
               also + ", got " + v->dump());
  }
  std::string layout;
  if (fmt != nullptr) {
    layout = fmt->is_string() ? lower(fmt->get<std::string>()) : "";
    if (layout != "channels_last" && layout != "channels_first") {
      f.fail(fmt_field,
             "expected channels_first or channels_last (the layout the axis counts "
             "in), got " +
                 fmt->dump());
    }
    if (a == -1) f.fail(fmt_field, "only with a positive axis (the layout it counts in)");
  }
  if (a == -1) return json();
  if (layout.empty()) layout = data_format;  // "" until an image layer says: resolve_axes()
  if (a == 1 && layout == "channels_first") return json();
  return {{"axis", a}, {"data_format", layout}};
}

void ModelSpecParser::record_axis(json& j, const json& axis) {
  if (axis.is_null()) return;
  j["axis"] = axis["axis"];
  j["data_format"] = axis["data_format"];
}

void ModelSpecParser::resolve_axes() {
  static const std::set<std::string> types = {"batch_normalization", "layer_normalization",
                                              "concatenate", "normalization"};
  const std::string fallback = !data_format.empty() ? data_format
                               : keras_entries      ? "channels_last"
                                                    : "channels_first";
  for (json& l : spec.layers_) {
    if (!types.count(l["type"].get<std::string>()) || !l.contains("data_format")) continue;
    if (l["data_format"] == "") l["data_format"] = fallback;
    if (l["axis"] == 1 && l["data_format"] == "channels_first") {
      l.erase("data_format");
      if (l["type"] == "normalization") {
        l["axis"] = -1;
      } else {
        l.erase("axis");
      }
    }
  }
}

std::vector<json> ModelSpecParser::batch_normalization(Fields& f, bool sync_class) {
  const json axis = channel_axis(f);
  const double momentum = f.number("momentum", "", 0.99);
  const double epsilon = f.number("epsilon", "", 1e-3);
  if (!(momentum >= 0 && momentum < 1)) f.fail("momentum", "expected a number in [0, 1)");
  if (!(epsilon > 0)) f.fail("epsilon", "expected a positive number");
  const bool center = f.boolean("center", "", true);
  const bool scale = f.boolean("scale", "", true);
  const bool sync = f.boolean("synchronized", "", false) || sync_class;
  f.initializer("beta_initializer", "Zeros");
  f.initializer("gamma_initializer", "Ones");
  f.initializer("moving_mean_initializer", "Zeros");
  f.initializer("moving_variance_initializer", "Ones");
  f.require_bool("renorm", false, "Mirror has no batch renormalization");
  f.require_null("virtual_batch_size", "Mirror normalises over the whole batch");
  f.require_null("adjustment", "Mirror has no adjustment function");
  no_regularizers(f,
                  {"beta_regularizer", "gamma_regularizer", "beta_constraint", "gamma_constraint"});
  f.finish({"batch_input_shape", "input_shape", "fused", "renorm_clipping", "renorm_momentum"});
  json j = {{"type", "batch_normalization"},
            {"momentum", momentum},
            {"epsilon", epsilon},
            {"center", center},
            {"scale", scale},
            {"synchronized", sync}};
  record_axis(j, axis);
  return {j};
}

std::vector<json> ModelSpecParser::sync_batch_normalization(Fields& f, bool) {
  return batch_normalization(f, true);
}

std::vector<json> ModelSpecParser::plain_batch_normalization(Fields& f, bool) {
  return batch_normalization(f, false);
}

std::vector<json> ModelSpecParser::layer_normalization(Fields& f, bool) {
  const json axis = channel_axis(f);
  const double epsilon = f.number("epsilon", "", 1e-3);
  if (!(epsilon > 0)) f.fail("epsilon", "expected a positive number");
  const bool center = f.boolean("center", "", true);
  const bool scale = f.boolean("scale", "", true);
  f.require_bool("rms_scaling", false, "Mirror's LayerNormalization centres and scales");
  f.initializer("beta_initializer", "Zeros");
  f.initializer("gamma_initializer", "Ones");
  no_regularizers(f,
                  {"beta_regularizer", "gamma_regularizer", "beta_constraint", "gamma_constraint"});
  const bool images = f.boolean("keras_channels_last", "", false);  // Note [Keras layers on ...]
  f.finish({"batch_input_shape", "input_shape"});
  json j = {
      {"type", "layer_normalization"}, {"epsilon", epsilon}, {"center", center}, {"scale", scale}};
  if (images) j["keras_channels_last"] = true;
  record_axis(j, axis);
  return {j};
}

std::vector<json> ModelSpecParser::add(Fields& f, bool) {
  if (auto scalar = scalar_operand(f, "add")) return {*scalar};  // Note [Scalar operands]
  f.finish();
  return {{{"type", "add"}}};
}

std::vector<json> ModelSpecParser::concatenate(Fields& f, bool) {
  const json axis = channel_axis(f);
  f.finish();
  json j = {{"type", "concatenate"}};
  record_axis(j, axis);
  return {j};
}

namespace {

/// keepdims: Keras's [N, 1, 1, C] (Mirror's [N, C, 1, 1]), the pooled [N, C] reshaped.
json keepdims_reshape(const std::string& data_format) {
  const bool last = data_format == "channels_last";
  return {{"type", "reshape"},
          {"target_shape", last ? json::array({1, 1, -1}) : json::array({-1, 1, 1})},
          {"channels_last", last}};
}

}  // namespace

std::vector<json> ModelSpecParser::global_average_pooling2d(Fields& f, bool keras) {
  image_format(f, keras);
  const bool keepdims = f.boolean("keepdims", "", false);
  f.finish({"batch_input_shape", "input_shape"});
  if (keepdims) return {{{"type", "global_average_pooling2d"}}, keepdims_reshape(data_format)};
  return {{{"type", "global_average_pooling2d"}}};
}

std::vector<json> ModelSpecParser::average_pooling2d(Fields& f, bool keras) {
  return pool2d(f, keras, "average_pooling2d");
}

/// padding: n, [rows, columns] or [[top, bottom], [left, right]] (Keras's three forms).
std::vector<json> ModelSpecParser::zero_padding2d(Fields& f, bool keras) {
  const std::array<std::int64_t, 4> p = four_sides(f, "padding", 1);
  image_format(f, keras);
  f.finish({"batch_input_shape", "input_shape"});
  return {{{"type", "zero_padding2d"}, {"padding", {{p[0], p[1]}, {p[2], p[3]}}}}};
}

}  // namespace mirror::nn
