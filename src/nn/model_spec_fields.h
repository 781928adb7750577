// defines: the pieces every model-spec layer parser uses: Fields (a layer config's fields, handed
// out one by one, the rest rejected) and the shared field readers (activation, padding, sizes,
// initializers, regularizers). Internal to src/nn.
#pragma once

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mirror/error.h"
#include "mirror/nn/keras_ops_layers.h"
#include "mirror/nn/layers.h"

namespace mirror::nn::spec_fields {

using json = nlohmann::json;
inline std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

inline std::string join(const std::vector<std::string>& items) {
  std::string s;
  for (const auto& item : items) s += (s.empty() ? "" : ", ") + item;
  return s;
}

// Note [Ignored Keras fields]: these never change what the model computes. Names are Mirror's
// own (by kind and position), dtype comes from the trainer, Keras seeds cannot reproduce
// Mirror's initial weights anyway, unroll/implementation are performance choices, and
// build_config/input_length restate shapes that the data decides.
inline const std::set<std::string> kIgnoredEverywhere = {
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
  /// The value under `name` as written (null included), without taking it; nullptr when absent.
  const json* peek(const std::string& name) const {
    return config_.contains(name) ? &config_[name] : nullptr;
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

inline void Fields::initializer(const std::string& name, const std::string& kind) {
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

inline std::string activation_field(Fields& f, const std::string& name,
                                    const std::string& fallback) {
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
  // Note [Activations through the input] (nn/keras_ops_layers.h): silu, hard_silu, ...
  if (a != "gelu_tanh") {
    if (const auto post = input_activation(a)) return input_activation_name(*post);
  }
  try {
    return activation_name(parse_activation(a));
  } catch (const InvalidArgument&) {
    f.fail(field, "unsupported activation '" + a +
                      "'; supported: linear, relu, tanh, sigmoid, silu (swish), hard_silu "
                      "(hard_swish), hard_sigmoid, gelu, relu6, elu, leaky_relu");
  }
}

inline std::string padding_field(Fields& f) {
  const std::string p = lower(f.text("padding", "", "valid"));
  if (p != "same" && p != "valid") {
    f.fail("padding", "expected \"same\" or \"valid\", got \"" + p + "\"");
  }
  return p;
}

/// One stride for both axes (Mirror's Conv2D and MaxPool2D take a single stride).
inline std::int64_t square(Fields& f, const std::string& field,
                           const std::array<std::int64_t, 2>& v) {
  if (v[0] != v[1]) {
    f.fail(field, "Mirror supports the same value for height and width only, got [" +
                      std::to_string(v[0]) + ", " + std::to_string(v[1]) + "]");
  }
  return v[0];
}

inline void no_regularizers(Fields& f, const std::vector<std::string>& names) {
  for (const auto& n : names) {
    const char* what = n.find("constraint") != std::string::npos    ? "constraints"
                       : n.find("regularizer") != std::string::npos ? "regularizers"
                       : n == "lora_rank"                           ? "LoRA adapters"
                                                                    : "quantization";
    f.require_null(n, std::string("Mirror has no ") + what);
  }
}

}  // namespace mirror::nn::spec_fields
