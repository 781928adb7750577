// ModelSpec parsing: Mirror's layer list, Keras's Sequential.to_json() and the legacy
// {"name": ...} form, all normalised to one canonical layer list (docs/model-spec.md).
#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>

#include "mirror/json_input.h"
#include "mirror/nn/bidirectional.h"
#include "mirror/nn/layers.h"
#include "mirror/nn/models.h"
#include "nn/model_spec_internal.h"

namespace mirror::nn {

using nlohmann::json;

namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

std::string join(const std::vector<std::string>& items) {
  std::string s;
  for (const auto& item : items) s += (s.empty() ? "" : ", ") + item;
  return s;
}

// Note [Ignored Keras fields]: these never change what the model computes. Names are Mirror's
// own (by kind and position), dtype comes from the trainer, Keras seeds cannot reproduce
// Mirror's initial weights anyway, unroll/implementation are performance choices, and
// build_config/input_length restate shapes that the data decides.
const std::set<std::string> kIgnoredEverywhere = {
    "name", "trainable", "dtype", "seed", "module", "registered_name", "build_config"};

/// The fields of one layer's config: hands them out one by one, then rejects what nobody took.
class Fields {
 public:
  Fields(std::string where, const json& config) : where_(std::move(where)), config_(config) {}

  [[noreturn]] void fail(const std::string& field, const std::string& what) const {
    throw InvalidArgument(where_ + ", field '" + field + "': " + what);
  }
  [[noreturn]] void fail_layer(const std::string& what) const {
    throw InvalidArgument(where_ + ": " + what);
  }

  /// The value under `name` or its Keras spelling `alias`; nullptr when absent or null.
  /// `field` receives the spelling found (for messages).
  const json* take(const std::string& name, const std::string& alias, std::string* field) {
    known_.push_back(name);
    if (!alias.empty()) known_.push_back(alias);
    const json* found = nullptr;
    for (const std::string& key : {name, alias}) {
      if (key.empty() || !config_.contains(key)) continue;
      if (found != nullptr) fail(key, "given twice (as '" + name + "' and '" + alias + "')");
      taken_.insert(key);
      found = &config_[key];
      *field = key;
    }
    if (found == nullptr) *field = name;
    return found != nullptr && !found->is_null() ? found : nullptr;
  }

  std::int64_t integer(const std::string& name, const std::string& alias, std::int64_t fallback,
                       std::int64_t min) {
    std::string f;
    const json* v = take(name, alias, &f);
    if (v == nullptr) return fallback;
    if (!v->is_number_integer()) fail(f, "expected an integer, got " + v->dump());
    const auto x = v->get<std::int64_t>();
    if (x < min || x > (1 << 30)) {
      fail(f, "expected an integer in [" + std::to_string(min) + ", 2^30], got " + v->dump());
    }
    return x;
  }
  /// An integer or a list of two ([height, width]).
  std::array<std::int64_t, 2> pair(const std::string& name, const std::string& alias,
                                   std::int64_t fallback) {
    std::string f;
    const json* v = take(name, alias, &f);
    if (v == nullptr) return {fallback, fallback};
    std::array<std::int64_t, 2> out{};
    const bool ok =
        v->is_number_integer() || (v->is_array() && v->size() == 2 && (*v)[0].is_number_integer() &&
                                   (*v)[1].is_number_integer());
    if (ok)
      out = v->is_array() ? std::array{(*v)[0].get<std::int64_t>(), (*v)[1].get<std::int64_t>()}
                          : std::array{v->get<std::int64_t>(), v->get<std::int64_t>()};
    if (!ok || out[0] < 1 || out[1] < 1 || out[0] > 65536 || out[1] > 65536) {
      fail(f, "expected a positive integer or [height, width], got " + v->dump());
    }
    return out;
  }
  double number(const std::string& name, const std::string& alias, double fallback) {
    std::string f;
    const json* v = take(name, alias, &f);
    if (v == nullptr) return fallback;
    if (!v->is_number()) fail(f, "expected a number, got " + v->dump());
    return v->get<double>();
  }
  bool boolean(const std::string& name, const std::string& alias, bool fallback) {
    std::string f;
    const json* v = take(name, alias, &f);
    if (v == nullptr) return fallback;
    if (!v->is_boolean()) fail(f, "expected true or false, got " + v->dump());
    return v->get<bool>();
  }
  std::string text(const std::string& name, const std::string& alias, const std::string& fallback) {
    std::string f;
    const json* v = take(name, alias, &f);
    if (v == nullptr) return fallback;
    if (!v->is_string()) fail(f, "expected a string, got " + v->dump());
    return v->get<std::string>();
  }
  /// A boolean field Mirror supports with one value only.
  void require_bool(const std::string& name, bool supported, const std::string& why) {
    if (boolean(name, "", supported) != supported) {
      fail(name,
           std::string("only ") + (supported ? "true" : "false") + " is supported (" + why + ")");
    }
  }
  /// Whether `name` is present with the value null (where null means something else than
  /// absent, e.g. Keras's Bidirectional merge_mode).
  bool is_null(const std::string& name) const {
    return config_.contains(name) && config_[name].is_null();
  }
  /// A field that must be absent or null (regularizers, constraints, ...).
  void require_null(const std::string& name, const std::string& why) {
    std::string f;
    if (const json* v = take(name, "", &f)) fail(f, "must be null: " + why + ", got " + v->dump());
  }
  /// An initializer field: absent, null, or the one Mirror uses (`kind`, e.g. "GlorotUniform").
  void initializer(const std::string& name, const std::string& kind);

  /// Throws for every key nobody took that is not in `ignored` or kIgnoredEverywhere.
  void finish(const std::set<std::string>& ignored = {}) const {
    for (const auto& item : config_.items()) {
      const std::string& key = item.key();
      if (taken_.count(key) || ignored.count(key) || kIgnoredEverywhere.count(key)) continue;
      std::vector<std::string> known = known_;
      known.insert(known.end(), ignored.begin(), ignored.end());
      std::sort(known.begin(), known.end());
      known.erase(std::unique(known.begin(), known.end()), known.end());
      fail(key, "unknown field; supported: " + join(known) +
                    " (and name, trainable, dtype, "
                    "seed, which do not change the model)");
    }
  }

 private:
  std::string where_;
  const json& config_;
  std::vector<std::string> known_;
  std::set<std::string> taken_;
};

void Fields::initializer(const std::string& name, const std::string& kind) {
  std::string f;
  const json* v = take(name, "", &f);
  if (v == nullptr) return;
  std::string cls;
  json cfg = json::object();
  if (v->is_string()) {
    cls = v->get<std::string>();
  } else if (v->is_object() && v->contains("class_name") && (*v)["class_name"].is_string()) {
    cls = (*v)["class_name"].get<std::string>();
    if (v->contains("config") && (*v)["config"].is_object()) cfg = (*v)["config"];
  } else {
    fail(f, "expected an initializer name or {\"class_name\": ...}, got " + v->dump());
  }
  std::string norm = lower(cls);
  norm.erase(std::remove(norm.begin(), norm.end(), '_'), norm.end());
  if (norm == "uniform") norm = "randomuniform";
  bool ok = norm == lower(kind);
  // Keras's defaults carry parameters; only Mirror's values are accepted.
  if (ok && norm == "orthogonal") ok = cfg.value("gain", 1.0) == 1.0;
  if (ok && norm == "randomuniform") {
    ok = cfg.value("minval", -0.05) == -0.05 && cfg.value("maxval", 0.05) == 0.05;
  }
  if (!ok) {
    fail(f, "Mirror initialises this with " + kind +
                (norm == "randomuniform" ? std::string("(-0.05, 0.05)") : std::string()) +
                " (its default) and supports no other initializer, got " + v->dump());
  }
}

// ---------------------------------------------------------------- per-layer fields

std::string activation_field(Fields& f, const std::string& name, const std::string& fallback) {
  std::string field;
  const json* v = f.take(name, "", &field);
  if (v == nullptr) return fallback;
  if (!v->is_string()) f.fail(field, "expected an activation name, got " + v->dump());
  const std::string a = lower(v->get<std::string>());
  // Note [Folded softmax]: a softmax on the model's last layer is folded into the
  // softmax-cross-entropy loss (ModelSpecParser::fold_softmax checks where it is).
  if (a == "softmax") return "softmax";
  if (a == "log_softmax") {
    f.fail(field, "'" + a +
                      "' is not a layer activation in Mirror: its losses take logits "
                      "(softmax-cross-entropy applies the softmax), so use \"linear\" here");
  }
  try {
    return activation_name(parse_activation(a));
  } catch (const InvalidArgument&) {
    f.fail(field, "unsupported activation '" + a + "'; supported: linear, relu, tanh, sigmoid");
  }
}

std::string padding_field(Fields& f) {
  const std::string p = lower(f.text("padding", "", "valid"));
  if (p != "same" && p != "valid") {
    f.fail("padding", "expected \"same\" or \"valid\", got \"" + p + "\"");
  }
  return p;
}

/// One stride for both axes (Mirror's Conv2D and MaxPool2D take a single stride).
std::int64_t square(Fields& f, const std::string& field, const std::array<std::int64_t, 2>& v) {
  if (v[0] != v[1]) {
    f.fail(field, "Mirror supports the same value for height and width only, got [" +
                      std::to_string(v[0]) + ", " + std::to_string(v[1]) + "]");
  }
  return v[0];
}

void no_regularizers(Fields& f, const std::vector<std::string>& names) {
  for (const auto& n : names) {
    const char* what = n.find("constraint") != std::string::npos    ? "constraints"
                       : n.find("regularizer") != std::string::npos ? "regularizers"
                       : n == "lora_rank"                           ? "LoRA adapters"
                                                                    : "quantization";
    f.require_null(n, std::string("Mirror has no ") + what);
  }
}

/// The fields of a layer with one kernel and one bias (Conv2D, Dense) that Mirror takes only at
/// their defaults: a bias, Glorot-uniform kernel, zero bias, no regularizers or constraints.
void kernel_and_bias_defaults(Fields& f, const std::string& layer, bool bias_optional = false) {
  if (!bias_optional) f.require_bool("use_bias", true, "Mirror's " + layer + " always has a bias");
  f.initializer("kernel_initializer", "GlorotUniform");
  f.initializer("bias_initializer", "Zeros");
  no_regularizers(f, {"kernel_regularizer", "bias_regularizer", "activity_regularizer",
                      "kernel_constraint", "bias_constraint", "lora_rank", "quantization_config"});
}

}  // namespace

// ---------------------------------------------------------------- the parser

struct ModelSpecParser {
  std::string source;
  ModelSpec spec;
  Shape stated;  // the input shape the spec states (-1: open), as written
  std::string stated_where;
  std::string data_format;  // of the image layers: "" (none yet), channels_first, channels_last
  std::vector<std::string> input_names;  // of InputLayers (a graph's model input)
  std::string output_name;               // a Keras functional model's output layer

  std::string where(std::size_t index, const std::string& type) const {
    return source + ": layer " + std::to_string(index) + " (" + type + ")";
  }

  void state_input(const json& shape, bool with_batch, const std::string& where_text,
                   const std::function<void(const std::string&)>& fail) {
    if (!shape.is_array() || shape.size() < (with_batch ? 2u : 1u)) {
      fail("expected a list of dimensions" + std::string(with_batch ? " (batch first)" : "") +
           ", got " + shape.dump());
    }
    Shape s;
    for (std::size_t i = with_batch ? 1 : 0; i < shape.size(); ++i) {
      const json& d = shape[i];
      if (d.is_null()) {
        s.push_back(-1);
      } else if (d.is_number_integer() && d.get<std::int64_t>() > 0) {
        s.push_back(d.get<std::int64_t>());
      } else {
        fail("dimensions must be positive integers or null, got " + shape.dump());
      }
    }
    if (!stated_where.empty() && s != stated) {
      fail("states input shape " + shape_str(s) + " but " + stated_where + " states " +
           shape_str(stated));
    }
    stated = s;
    stated_where = where_text;
  }

  void image_format(Fields& f, bool keras) {
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

  std::vector<json> conv2d(Fields& f, bool keras) {
    const auto filters = f.integer("filters", "", 0, 1);
    if (filters == 0) f.fail("filters", "required (a positive integer)");
    std::string kf;
    if (!f.take("kernel", "kernel_size", &kf)) f.fail("kernel", "required ([height, width])");
    const auto kernel = f.pair("kernel", "kernel_size", 1);
    const auto stride = square(f, "strides", f.pair("strides", "stride", 1));
    if (f.pair("dilation_rate", "", 1) != std::array<std::int64_t, 2>{1, 1}) {
      f.fail("dilation_rate", "only 1 (no dilation) is supported");
    }
    if (f.integer("groups", "", 1, 1) != 1) f.fail("groups", "only 1 is supported");
    const std::string padding = padding_field(f);
    const std::string act = activation_field(f, "activation", "linear");
    const bool use_bias = f.boolean("use_bias", "", true);
    kernel_and_bias_defaults(f, "Conv2D", true);
    image_format(f, keras);
    f.finish({"batch_input_shape", "input_shape"});
    json j = {{"type", "conv2d"},
              {"filters", filters},
              {"kernel", {kernel[0], kernel[1]}},
              {"strides", {stride, stride}},
              {"padding", padding},
              {"activation", act}};
    if (!use_bias) j["use_bias"] = false;  // written only when false: older specs stay as they were
    return {j};
  }

  std::vector<json> maxpool2d(Fields& f, bool keras) {
    const auto pool = square(f, "pool", f.pair("pool", "pool_size", 2));
    const auto stride = square(f, "strides", f.pair("strides", "stride", pool));
    const std::string padding = padding_field(f);
    image_format(f, keras);
    f.finish({"batch_input_shape", "input_shape"});
    return {{{"type", "maxpool2d"},
             {"pool", {pool, pool}},
             {"strides", {stride, stride}},
             {"padding", padding}}};
  }

  std::vector<json> flatten(Fields& f, bool keras) {
    if (f.text("data_format", "", "").size()) image_format(f, keras);
    f.finish({"batch_input_shape", "input_shape"});
    return {{{"type", "flatten"}}};
  }

  std::vector<json> dense(Fields& f, bool) {
    const auto units = f.integer("units", "", 0, 1);
    const std::string act = activation_field(f, "activation", "linear");
    kernel_and_bias_defaults(f, "Dense");
    f.finish({"batch_input_shape", "input_shape"});
    json j = {{"type", "dense"}};
    if (units > 0) j["units"] = units;
    j["activation"] = act;
    return {j};
  }

  std::vector<json> dropout(Fields& f, bool) {
    std::string field;
    if (!f.take("rate", "", &field)) f.fail("rate", "required (a number in [0, 1))");
    const double rate = f.number("rate", "", 0);
    if (!(rate >= 0 && rate < 1))
      f.fail("rate", "expected a number in [0, 1), got " + std::to_string(rate));
    f.require_null("noise_shape", "Mirror drops elements independently");
    f.finish({"batch_input_shape", "input_shape"});
    return {{{"type", "dropout"}, {"rate", rate}}};
  }

  std::vector<json> embedding(Fields& f, bool) {
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

  std::vector<json> masking(Fields& f, bool) {
    if (f.number("mask_value", "", 0.0) != 0.0) {
      f.fail("mask_value", "only 0 is supported (Mirror's padding value)");
    }
    f.finish({"batch_input_shape", "input_shape"});
    return {{{"type", "masking"}}};
  }

  std::vector<json> gru(Fields& f, bool) { return recurrent(f, "gru", false); }
  std::vector<json> lstm(Fields& f, bool) { return recurrent(f, "lstm", false); }

  /// GRU and LSTM (`kind`); `backwards`: the backward layer of a Bidirectional, which Keras
  /// writes with go_backwards = true.
  std::vector<json> recurrent(Fields& f, const std::string& kind, bool backwards) {
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
    no_regularizers(f, {"kernel_regularizer", "recurrent_regularizer", "bias_regularizer",
                        "activity_regularizer", "kernel_constraint", "recurrent_constraint",
                        "bias_constraint"});
    f.finish(
        {"batch_input_shape", "input_shape", "unroll", "implementation", "zero_output_for_mask"});
    return {j};
  }

  /// The recurrent layer inside a Bidirectional: a Keras {"class_name", "config"} or a Mirror
  /// {"type", ...} object, as canonical JSON.
  json wrapped_recurrent(Fields& outer, const std::string& field, const json& entry,
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

  std::vector<json> bidirectional(Fields& f, bool) {
    std::string field;
    const json* layer = f.take("layer", "", &field);
    if (layer == nullptr) f.fail("layer", "required (the GRU or LSTM to run both ways)");
    const json inner = wrapped_recurrent(f, "layer", *layer, false);
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
      const json backward = wrapped_recurrent(f, "backward_layer", *back, true);
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

  // ------------------------------------------------------------ 1-D layers over [T, C]

  /// An integer or a list of one (Keras writes kernel_size, strides, ... as [k]).
  std::int64_t single(Fields& f, const std::string& name, const std::string& alias,
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
  void sequence_format(Fields& f) {
    const std::string fmt = lower(f.text("data_format", "", "channels_last"));
    if (fmt != "channels_last") {
      f.fail("data_format",
             "1-D layers read sequences [T, C]: only channels_last, got \"" + fmt + "\"");
    }
  }

  std::string padding_1d(Fields& f, bool causal_ok) {
    const std::string p = lower(f.text("padding", "", "valid"));
    if (p != "valid" && p != "same" && (!causal_ok || p != "causal")) {
      f.fail("padding", std::string("expected \"valid\", \"same\"") +
                            (causal_ok ? " or \"causal\"" : "") + ", got \"" + p + "\"");
    }
    return p;
  }

  std::vector<json> conv1d(Fields& f, bool) {
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
    kernel_and_bias_defaults(f, "Conv1D");
    sequence_format(f);
    f.finish({"batch_input_shape", "input_shape"});
    return {{{"type", "conv1d"},
             {"filters", filters},
             {"kernel", kernel},
             {"strides", stride},
             {"dilation_rate", dilation},
             {"padding", padding},
             {"activation", act}}};
  }

  std::vector<json> pool1d(Fields& f, const std::string& type) {
    const auto pool = single(f, "pool", "pool_size", 2);
    const auto stride = single(f, "strides", "stride", pool);
    const std::string padding = padding_1d(f, false);
    sequence_format(f);
    f.finish({"batch_input_shape", "input_shape"});
    return {{{"type", type}, {"pool", pool}, {"strides", stride}, {"padding", padding}}};
  }
  std::vector<json> maxpool1d(Fields& f, bool) { return pool1d(f, "maxpool1d"); }
  std::vector<json> avgpool1d(Fields& f, bool) { return pool1d(f, "avgpool1d"); }

  std::vector<json> global_pool1d(Fields& f, const std::string& type) {
    f.require_bool("keepdims", false, "the pooled output is [C]");
    sequence_format(f);
    f.finish({"batch_input_shape", "input_shape"});
    return {{{"type", type}}};
  }
  std::vector<json> global_maxpool1d(Fields& f, bool) {
    return global_pool1d(f, "global_maxpool1d");
  }
  std::vector<json> global_avgpool1d(Fields& f, bool) {
    return global_pool1d(f, "global_avgpool1d");
  }

  std::vector<json> activation(Fields& f, bool) {
    std::string field;
    const json* given = f.take("activation", "", &field);
    if (!given) f.fail("activation", "required");
    // GELU is an Activation layer only (its gradient needs the layer's input).
    if (given->is_string() && lower(given->get<std::string>()) == "gelu") {
      f.require_bool("approximate", false, "Mirror's GELU is the exact (erf) form");
      f.finish({"batch_input_shape", "input_shape"});
      return {{{"type", "activation"}, {"activation", "gelu"}}};
    }
    const std::string act = activation_field(f, "activation", "linear");
    f.finish({"batch_input_shape", "input_shape"});
    return {{{"type", "activation"}, {"activation", act}}};
  }

  std::vector<json> relu(Fields& f, bool) {
    f.require_null("max_value", "Mirror's relu is unbounded");
    if (f.number("negative_slope", "", 0.0) != 0.0) f.fail("negative_slope", "only 0 is supported");
    if (f.number("threshold", "", 0.0) != 0.0) f.fail("threshold", "only 0 is supported");
    f.finish({"batch_input_shape", "input_shape"});
    return {{{"type", "activation"}, {"activation", "relu"}}};
  }

  // ---- the layers of residual and branching models (cnn_layers.h)

  /// Keras's axis -1 (channels_last) is Mirror's channel axis; NCHW users may write 1 with
  /// channels_first. Nothing else is supported.
  void channel_axis(Fields& f) {
    std::string field;
    const json* v = f.take("axis", "", &field);
    if (v == nullptr) return;
    json a = *v;
    if (a.is_array() && a.size() == 1) a = a[0];
    const bool ok = a == -1 || (a == 1 && data_format == "channels_first");
    if (!ok) f.fail(field, "only the channel axis (-1) is supported, got " + v->dump());
  }

  std::vector<json> batch_normalization(Fields& f, bool sync_class) {
    channel_axis(f);
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
    no_regularizers(
        f, {"beta_regularizer", "gamma_regularizer", "beta_constraint", "gamma_constraint"});
    f.finish({"batch_input_shape", "input_shape", "fused", "renorm_clipping", "renorm_momentum"});
    return {{{"type", "batch_normalization"},
             {"momentum", momentum},
             {"epsilon", epsilon},
             {"center", center},
             {"scale", scale},
             {"synchronized", sync}}};
  }
  std::vector<json> sync_batch_normalization(Fields& f, bool) {
    return batch_normalization(f, true);
  }
  std::vector<json> plain_batch_normalization(Fields& f, bool) {
    return batch_normalization(f, false);
  }

  std::vector<json> layer_normalization(Fields& f, bool) {
    channel_axis(f);
    const double epsilon = f.number("epsilon", "", 1e-3);
    if (!(epsilon > 0)) f.fail("epsilon", "expected a positive number");
    const bool center = f.boolean("center", "", true);
    const bool scale = f.boolean("scale", "", true);
    f.require_bool("rms_scaling", false, "Mirror's LayerNormalization centres and scales");
    f.initializer("beta_initializer", "Zeros");
    f.initializer("gamma_initializer", "Ones");
    no_regularizers(
        f, {"beta_regularizer", "gamma_regularizer", "beta_constraint", "gamma_constraint"});
    f.finish({"batch_input_shape", "input_shape"});
    return {{{"type", "layer_normalization"},
             {"epsilon", epsilon},
             {"center", center},
             {"scale", scale}}};
  }

  std::vector<json> add(Fields& f, bool) {
    f.finish();
    return {{{"type", "add"}}};
  }

  std::vector<json> concatenate(Fields& f, bool) {
    channel_axis(f);
    f.finish();
    return {{{"type", "concatenate"}}};
  }

  std::vector<json> global_average_pooling2d(Fields& f, bool keras) {
    image_format(f, keras);
    f.require_bool("keepdims", false, "the output is [N, C]");
    f.finish({"batch_input_shape", "input_shape"});
    return {{{"type", "global_average_pooling2d"}}};
  }

  std::vector<json> average_pooling2d(Fields& f, bool keras) {
    const auto pool = square(f, "pool", f.pair("pool", "pool_size", 2));
    const auto stride = square(f, "strides", f.pair("strides", "stride", pool));
    const std::string padding = padding_field(f);
    image_format(f, keras);
    f.finish({"batch_input_shape", "input_shape"});
    return {{{"type", "average_pooling2d"},
             {"pool", {pool, pool}},
             {"strides", {stride, stride}},
             {"padding", padding}}};
  }

  /// padding: n, [rows, columns] or [[top, bottom], [left, right]] (Keras's three forms).
  std::vector<json> zero_padding2d(Fields& f, bool keras) {
    std::string field;
    const json* v = f.take("padding", "", &field);
    std::array<std::int64_t, 4> p = {1, 1, 1, 1};
    if (v != nullptr) {
      auto nonneg = [](const json& x) {
        return x.is_number_integer() && x.get<std::int64_t>() >= 0;
      };
      const json& j = *v;
      if (nonneg(j)) {
        p.fill(j.get<std::int64_t>());
      } else if (j.is_array() && j.size() == 2 && nonneg(j[0]) && nonneg(j[1])) {
        p = {j[0].get<std::int64_t>(), j[0].get<std::int64_t>(), j[1].get<std::int64_t>(),
             j[1].get<std::int64_t>()};
      } else if (j.is_array() && j.size() == 2 && j[0].is_array() && j[1].is_array() &&
                 j[0].size() == 2 && j[1].size() == 2 && nonneg(j[0][0]) && nonneg(j[0][1]) &&
                 nonneg(j[1][0]) && nonneg(j[1][1])) {
        p = {j[0][0].get<std::int64_t>(), j[0][1].get<std::int64_t>(), j[1][0].get<std::int64_t>(),
             j[1][1].get<std::int64_t>()};
      } else {
        f.fail(field,
               "expected n, [rows, columns] or [[top, bottom], [left, right]] of "
               "non-negative integers, got " +
                   j.dump());
      }
    }
    image_format(f, keras);
    f.finish({"batch_input_shape", "input_shape"});
    return {{{"type", "zero_padding2d"}, {"padding", {{p[0], p[1]}, {p[2], p[3]}}}}};
  }

  /// InputLayer / {"type": "input"}: states the input shape, builds nothing.
  void input(Fields& f, std::size_t index) {
    std::string field1, field2;
    const json* shape = f.take("shape", "batch_shape", &field1);
    const json* keras2 = f.take("batch_input_shape", "input_shape", &field2);
    if (shape == nullptr && keras2 == nullptr) f.fail("shape", "required (the sample shape)");
    if (shape && keras2) f.fail(field2, "state the input shape once");
    const std::string field = shape ? field1 : field2;
    const bool with_batch = field != "shape" && field != "input_shape";
    state_input(shape ? *shape : *keras2, with_batch, "layer " + std::to_string(index),
                [&](const std::string& m) { f.fail(field, m); });
    f.require_bool("sparse", false, "inputs are dense");
    f.require_bool("ragged", false, "inputs are dense");
    f.finish({"optional"});
  }

  void layer(const json& entry, std::size_t index) {
    if (!entry.is_object()) {
      throw InvalidArgument(source + ": layer " + std::to_string(index) +
                            ": expected an object, got " + entry.dump());
    }
    const bool keras = entry.contains("class_name");
    std::string type;
    json config;
    if (keras) {
      // {"class_name": "Conv2D", "config": {...}, "module": ..., ...}
      for (const auto& item : entry.items()) {
        static const std::set<std::string> outer = {"class_name",      "config",       "module",
                                                    "registered_name", "build_config", "name",
                                                    "inbound_nodes"};
        if (!outer.count(item.key())) {
          throw InvalidArgument(where(index, entry["class_name"].dump()) + ", field '" +
                                item.key() +
                                "': unknown field; a Keras layer has class_name, "
                                "config, module, registered_name, build_config");
        }
      }
      if (!entry["class_name"].is_string()) {
        throw InvalidArgument(where(index, "?") + ", field 'class_name': expected a string, got " +
                              entry["class_name"].dump());
      }
      type = entry["class_name"].get<std::string>();
      config = entry.value("config", json::object());
    } else {
      if (!entry.contains("type") || !entry["type"].is_string()) {
        throw InvalidArgument(source + ": layer " + std::to_string(index) +
                              ": expected a \"type\" (Mirror) or \"class_name\" (Keras) string, "
                              "got " +
                              entry.dump());
      }
      type = entry["type"].get<std::string>();
      config = entry;
      config.erase("type");
    }
    if (!config.is_object()) {
      throw InvalidArgument(where(index, type) + ", field 'config': expected an object, got " +
                            config.dump());
    }
    // The layer's place in a model graph (Note [Spec graph]): Mirror's "name" and "inputs", or
    // Keras's name and inbound_nodes.
    json graph_name, graph_inputs;
    if (keras) {
      if (entry.contains("name"))
        graph_name = entry["name"];
      else if (config.contains("name"))
        graph_name = config["name"];
      if (entry.contains("inbound_nodes")) {
        graph_inputs = detail::keras_inbound_names(entry["inbound_nodes"], where(index, type));
        const std::string t = lower(type);
        if (graph_inputs.empty() && t != "inputlayer") {
          throw InvalidArgument(where(index, type) +
                                ", field 'inbound_nodes': empty, so the layer reads no tensor; "
                                "only an InputLayer has no inbound node");
        }
        if (graph_inputs.empty()) graph_inputs = json();
      }
    } else {
      if (config.contains("name")) graph_name = config["name"];
      if (config.contains("inputs")) {
        graph_inputs = config["inputs"];
        config.erase("inputs");
      }
    }
    const std::size_t first_new = spec.layers_.size();
    Fields f(where(index, type), config);
    const std::string t = lower(type);
    using Handler = std::vector<json> (ModelSpecParser::*)(Fields&, bool);
    static const std::vector<std::pair<std::vector<std::string>, Handler>> table = {
        {{"conv2d", "convolution2d"}, &ModelSpecParser::conv2d},
        {{"maxpool2d", "maxpooling2d", "max_pooling2d"}, &ModelSpecParser::maxpool2d},
        {{"flatten"}, &ModelSpecParser::flatten},
        {{"dense"}, &ModelSpecParser::dense},
        {{"dropout"}, &ModelSpecParser::dropout},
        {{"embedding"}, &ModelSpecParser::embedding},
        {{"masking"}, &ModelSpecParser::masking},
        {{"gru"}, &ModelSpecParser::gru},
        {{"lstm"}, &ModelSpecParser::lstm},
        {{"bidirectional"}, &ModelSpecParser::bidirectional},
        {{"conv1d", "convolution1d"}, &ModelSpecParser::conv1d},
        {{"maxpool1d", "maxpooling1d", "max_pooling1d"}, &ModelSpecParser::maxpool1d},
        {{"avgpool1d", "averagepooling1d", "average_pooling1d"}, &ModelSpecParser::avgpool1d},
        {{"global_maxpool1d", "globalmaxpooling1d", "global_max_pooling1d", "globalmaxpool1d"},
         &ModelSpecParser::global_maxpool1d},
        {{"global_avgpool1d", "globalaveragepooling1d", "global_average_pooling1d",
          "globalavgpool1d"},
         &ModelSpecParser::global_avgpool1d},
        {{"activation"}, &ModelSpecParser::activation},
        {{"relu"}, &ModelSpecParser::relu},
        {{"batch_normalization", "batchnormalization"},
         &ModelSpecParser::plain_batch_normalization},
        {{"syncbatchnormalization"}, &ModelSpecParser::sync_batch_normalization},
        {{"layer_normalization", "layernormalization"}, &ModelSpecParser::layer_normalization},
        {{"add"}, &ModelSpecParser::add},
        {{"concatenate"}, &ModelSpecParser::concatenate},
        {{"global_average_pooling2d", "globalaveragepooling2d"},
         &ModelSpecParser::global_average_pooling2d},
        {{"average_pooling2d", "averagepooling2d", "avgpool2d"},
         &ModelSpecParser::average_pooling2d},
        {{"zero_padding2d", "zeropadding2d"}, &ModelSpecParser::zero_padding2d},
    };
    if (t == "input" || t == "inputlayer") {
      input(f, index);
      input_names.push_back(graph_name.is_string() ? graph_name.get<std::string>() : "input");
      return;
    }
    for (const auto& [names, handler] : table) {
      if (std::find(names.begin(), names.end(), t) == names.end()) continue;
      // Keras 2 states the model input on the first layer itself.
      for (const char* key : {"batch_input_shape", "input_shape"}) {
        if (!config.contains(key) || config[key].is_null()) continue;
        if (!spec.layers_.empty()) f.fail(key, "only the first layer may state the input shape");
        state_input(config[key], std::string(key) == "batch_input_shape",
                    "layer " + std::to_string(index),
                    [&](const std::string& m) { f.fail(key, m); });
      }
      for (json& j : (this->*handler)(f, keras)) {
        spec.layers_.push_back(std::move(j));
        spec.origin_.push_back(index);
      }
      place_in_graph(first_new, graph_name, graph_inputs);
      return;
    }
    throw InvalidArgument(where(index, type) +
                          ": unknown layer type; supported: conv2d (Conv2D), "
                          "maxpool2d (MaxPooling2D), flatten, dense, dropout, embedding, "
                          "masking, gru, lstm, bidirectional, conv1d (Conv1D), maxpool1d "
                          "(MaxPooling1D), avgpool1d (AveragePooling1D), global_maxpool1d "
                          "(GlobalMaxPooling1D), global_avgpool1d (GlobalAveragePooling1D), "
                          "activation, relu (ReLU), input (InputLayer)");
  }

  /// Note [Folded softmax]: Mirror's losses take logits, so a softmax is accepted only on the
  /// model's last layer (Keras classifiers end so), from a dense (whose activation becomes
  /// linear) or an activation layer (dropped), and the spec remembers it (softmax_folded): the
  /// trainer then requires the softmax-cross-entropy loss, which applies it.
  void fold_softmax() {
    const std::size_t n = spec.layers_.size();
    for (std::size_t i = 0; i < n; ++i) {
      json& l = spec.layers_[i];
      if (!l.contains("activation") || l["activation"] != "softmax") continue;
      const std::string type = l["type"].get<std::string>();
      const std::string at = where(spec.origin_[i], type) + ", field 'activation': ";
      if (i + 1 != n || (type != "dense" && type != "activation")) {
        throw InvalidArgument(at +
                              "softmax is accepted only on the model's last layer, a dense or an "
                              "activation layer, where Mirror folds it into the "
                              "softmax-cross-entropy loss (its losses take logits); use "
                              "\"linear\" here");
      }
      spec.softmax_folded_ = true;
      if (type == "dense") {
        l["activation"] = "linear";
        continue;
      }
      const bool follows = n >= 2 && (!l.contains("inputs") ||
                                      l["inputs"] == json::array({spec.layers_[n - 2]["name"]}));
      if (!follows) {
        throw InvalidArgument(at +
                              "a softmax layer is folded into the loss only when it reads "
                              "the layer before it (the model's logits)");
      }
      spec.layers_.erase(n - 1);
      spec.origin_.pop_back();
    }
  }

  /// Names the layers one entry produced [first, end) and chains them: the first reads the
  /// entry's inputs (when given), each further one the layer before it (Note [Spec graph]).
  void place_in_graph(std::size_t first, const json& name, const json& inputs) {
    const std::size_t end = spec.layers_.size();
    for (std::size_t i = first; i < end; ++i) {
      json& l = spec.layers_[i];
      if (name.is_string()) {
        l["name"] = i + 1 == end ? name.get<std::string>()
                                 : name.get<std::string>() + "/" + l["type"].get<std::string>();
      } else if (!name.is_null()) {
        l["name"] = name;  // resolve_graph reports the bad type
      }
      if (i == first && !inputs.is_null()) l["inputs"] = inputs;
      if (i > first && spec.layers_[first].contains("inputs") && l.contains("name")) {
        l["inputs"] = json::array({spec.layers_[i - 1]["name"]});
      }
    }
  }

  void layers(const json& list) {
    if (!list.is_array() || list.empty()) {
      throw InvalidArgument(source + ": expected a non-empty list of layers, got " + list.dump());
    }
    for (std::size_t i = 0; i < list.size(); ++i) layer(list[i], i);
    if (spec.layers_.empty()) throw InvalidArgument(source + ": the spec has no layers");
    detail::resolve_graph(spec.layers_, spec.origin_, input_names, output_name, source);
    fold_softmax();
    // Only the last Dense may leave its units to the data.
    std::ptrdiff_t last_dense = -1;
    for (std::size_t i = 0; i < spec.layers_.size(); ++i) {
      if (spec.layers_[i]["type"] == "dense") last_dense = static_cast<std::ptrdiff_t>(i);
    }
    for (std::ptrdiff_t i = 0; i < last_dense; ++i) {
      const json& l = spec.layers_[static_cast<std::size_t>(i)];
      if (l["type"] == "dense" && !l.contains("units")) {
        throw InvalidArgument(where(spec.origin_[static_cast<std::size_t>(i)], "dense") +
                              ", field 'units': required (only the last dense layer may take "
                              "its units from the data)");
      }
    }
  }

  /// {"class_name": "Sequential", "config": {"layers": [...], ...}, ...}
  void keras_model(const json& j) {
    static const std::set<std::string> outer = {"class_name",   "config",        "keras_version",
                                                "backend",      "module",        "registered_name",
                                                "build_config", "compile_config"};
    for (const auto& item : j.items()) {
      if (!outer.count(item.key())) {
        throw InvalidArgument(source + ", field '" + item.key() +
                              "': unknown field of a Keras "
                              "model; known: " +
                              join({outer.begin(), outer.end()}));
      }
    }
    const bool functional = j["class_name"] == "Functional" || j["class_name"] == "Model";
    if (j["class_name"] != "Sequential" && !functional) {
      throw InvalidArgument(source +
                            ", field 'class_name': expected a Keras Sequential or Functional "
                            "model, got " +
                            j["class_name"].dump());
    }
    const json config = j.value("config", json::object());
    if (!config.is_object() || !config.contains("layers")) {
      throw InvalidArgument(source + ", field 'config': expected {\"layers\": [...]}, got " +
                            config.dump());
    }
    for (const auto& item : config.items()) {
      static const std::set<std::string> known = {
          "name",         "layers",       "trainable", "dtype", "build_input_shape",
          "input_layers", "output_layers"};
      if (!known.count(item.key())) {
        throw InvalidArgument(source + ", field 'config." + item.key() +
                              "': unknown field; "
                              "known: build_input_shape, layers, name, trainable, dtype, "
                              "input_layers, output_layers");
      }
    }
    if (functional) functional_io(config);
    if (config.contains("name") && config["name"].is_string()) {
      spec.name_ = config["name"].get<std::string>();
    }
    layers(config["layers"]);
    if (config.contains("build_input_shape") && !config["build_input_shape"].is_null()) {
      state_input(config["build_input_shape"], true, "build_input_shape",
                  [&](const std::string& m) {
                    throw InvalidArgument(source + ", field 'config.build_input_shape': " + m);
                  });
    }
  }

  /// A functional model's input_layers / output_layers: one of each ([name, 0, 0], or a list
  /// of one such; Keras 3 writes the single input unwrapped).
  void functional_io(const json& config) {
    auto one = [&](const char* key) -> std::string {
      json v = config.value(key, json());
      if (v.is_array() && v.size() == 1 && v[0].is_array()) v = v[0];
      if (!v.is_array() || v.empty() || !v[0].is_string()) {
        throw InvalidArgument(source + ", field 'config." + key +
                              "': expected one [layer_name, 0, 0] (Mirror models have one input "
                              "and one output), got " +
                              v.dump());
      }
      return v[0].get<std::string>();
    };
    one("input_layers");
    output_name = one("output_layers");
  }

  /// {"name": ..., "input_shape": [...], "layers": [...]} (Mirror; to_json() writes this).
  void mirror_model(const json& j) {
    for (const auto& item : j.items()) {
      static const std::set<std::string> known = {"name", "description", "input_shape", "layers",
                                                  "softmax_folded"};
      if (!known.count(item.key())) {
        throw InvalidArgument(source + ", field '" + item.key() +
                              "': unknown field; known: name, description, input_shape, layers, "
                              "softmax_folded");
      }
    }
    if (j.contains("name")) {
      if (!j["name"].is_string()) {
        throw InvalidArgument(source + ", field 'name': expected a string, got " +
                              j["name"].dump());
      }
      spec.name_ = j["name"].get<std::string>();
    }
    if (j.contains("description") && !j["description"].is_string()) {
      throw InvalidArgument(source + ", field 'description': expected a string");
    }
    if (j.contains("description")) spec.description_ = j["description"].get<std::string>();
    if (j.contains("input_shape") && !j["input_shape"].is_null()) {
      state_input(j["input_shape"], false, "input_shape", [&](const std::string& m) {
        throw InvalidArgument(source + ", field 'input_shape': " + m);
      });
    }
    if (j.contains("softmax_folded")) {
      if (!j["softmax_folded"].is_boolean()) {
        throw InvalidArgument(source + ", field 'softmax_folded': expected true or false, got " +
                              j["softmax_folded"].dump());
      }
      spec.softmax_folded_ = j["softmax_folded"].get<bool>();
    }
    layers(j["layers"]);
  }

  /// The stated shape in Mirror's layout: a channels_last image [H, W, C] becomes [C, H, W].
  Shape stated_nchw() const {
    if (data_format == "channels_last" && stated.size() == 3) {
      return {stated[2], stated[0], stated[1]};
    }
    return stated;
  }
};

// ---------------------------------------------------------------- ModelSpec

ModelSpec ModelSpec::from_json(const json& j, const std::string& source) {
  // Legacy checkpoints: {"name": "cnn" | "gru-rows" | "gru-words", "num_classes", ...}.
  if (j.is_object() && j.contains("name") && !j.contains("layers") && !j.contains("class_name")) {
    if (!j["name"].is_string()) {
      throw InvalidArgument(source + ", field 'name': expected a string, got " + j["name"].dump());
    }
    const std::string name = j["name"].get<std::string>();
    MIRROR_CHECK(name == "cnn" || name == "gru-rows" || name == "gru-words", InvalidArgument,
                 source + ": " + j.dump() +
                     " has no \"layers\"; as a legacy spec its name must "
                     "be cnn, gru-rows or gru-words, got '" +
                     name + "'");
    DataShape data;
    try {
      data.outputs = j.value("num_classes", 10);
      if (name == "cnn") data.sample_shape = {1, 28, 28};
      if (name == "gru-rows") data.sample_shape = {28, 28};
      if (name == "gru-words") {
        MIRROR_CHECK(j.contains("vocab"), InvalidArgument,
                     source + ": legacy gru-words spec needs \"vocab\", got " + j.dump());
        data.sample_shape = {j.value("max_len", 32)};
        data.input_dtype = DType::kInt32;
        data.vocab = j["vocab"].get<std::int64_t>();
      }
    } catch (const json::exception& e) {
      throw InvalidArgument(source + " " + j.dump() + ": " + e.what());
    }
    MIRROR_CHECK(data.outputs >= 2, InvalidArgument,
                 source + ": num_classes must be >= 2, got " + std::to_string(data.outputs));
    return builtin(name).bind(data);
  }
  ModelSpecParser p;
  p.source = source;
  if (j.is_array()) {
    p.layers(j);
  } else if (j.is_object() && j.contains("class_name")) {
    p.keras_model(j);
  } else if (j.is_object() && j.contains("layers")) {
    p.mirror_model(j);
  } else {
    throw InvalidArgument(source +
                          ": expected a list of layers, {\"layers\": [...]} or a Keras "
                          "{\"class_name\": \"Sequential\", ...}, got " +
                          j.dump().substr(0, 200));
  }
  p.spec.input_shape_ = p.stated_nchw();
  p.spec.bound_ = false;
  // A spec that states everything is bound already (checkpoints store bound specs).
  const bool complete =
      !p.spec.input_shape_.empty() &&
      std::none_of(p.spec.input_shape_.begin(), p.spec.input_shape_.end(),
                   [](std::int64_t d) { return d < 0; }) &&
      std::none_of(p.spec.layers_.begin(), p.spec.layers_.end(), [](const json& l) {
        return (l["type"] == "dense" && !l.contains("units")) ||
               (l["type"] == "embedding" && !l.contains("input_dim"));
      });
  if (complete) return p.spec.bind(DataShape{});
  return p.spec;
}

ModelSpec ModelSpec::from_file(const std::string& path) {
  errno = 0;
  std::ifstream in(path);
  const int open_errno = errno;  // ifstream keeps no reason; the failed open(2) left it here
  MIRROR_CHECK(in.good(), DataError,
               "model spec " + path + ": cannot open the file: " +
                   (open_errno != 0 ? std::strerror(open_errno) : "unknown reason"));
  std::error_code ec;
  MIRROR_CHECK(!std::filesystem::is_directory(path, ec), DataError,
               "model spec " + path + ": cannot read the file: " + std::strerror(EISDIR) +
                   "; give a JSON file");
  json j;
  try {
    j = parse_json_input(in, "model spec " + path);  // Note [Hostile input]
  } catch (const json::exception& e) {
    throw DataError("model spec " + path + ": not valid JSON: " + e.what());
  }
  ModelSpec spec = from_json(j, path);
  // The spec's own name (Mirror's "name", a Keras model's config.name) when it states one.
  const auto states = [](const json& o) {
    return o.is_object() && o.contains("name") && o["name"].is_string();
  };
  const bool named = states(j) || (j.is_object() && j.contains("config") && states(j["config"]));
  if (!named) spec.name_ = std::filesystem::path(path).stem().string();
  return spec;
}

std::vector<std::string> ModelSpec::builtin_names() {
  std::vector<std::string> names;
  for (const auto& [name, text] : detail::embedded_model_specs()) names.push_back(name);
  return names;
}

ModelSpec ModelSpec::builtin(const std::string& name) {
  for (const auto& [n, text] : detail::embedded_model_specs()) {
    if (n != name) continue;
    ModelSpec spec = from_json(json::parse(text), "built-in model " + name);
    spec.name_ = name;
    return spec;
  }
  throw InvalidArgument("unknown built-in model '" + name + "': expected one of " +
                        join(builtin_names()) + ", or a spec file (docs/model-spec.md)");
}

ModelSpec ModelSpec::with_synchronized_batchnorm() const {
  ModelSpec out = *this;
  for (json& l : out.layers_) {
    if (l["type"] == "batch_normalization") l["synchronized"] = true;
  }
  return out;
}

json ModelSpec::to_json() const {
  json j = {{"name", name_}};
  if (!input_shape_.empty()) {
    json shape = json::array();
    for (auto d : input_shape_) shape.push_back(d < 0 ? json(nullptr) : json(d));
    j["input_shape"] = shape;
  }
  j["layers"] = layers_;
  if (softmax_folded_) j["softmax_folded"] = true;  // Note [Folded softmax]
  return j;
}

}  // namespace mirror::nn
