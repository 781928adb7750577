// The spec reader's initializer fields (model_spec_initializers.h, Note [Spec initializers] in
// nn/init.h): Keras's class names and configs, checked and written in one canonical form.
#include "nn/model_spec_initializers.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace mirror::nn::spec_fields {

using nlohmann::json;

namespace {

/// Keras's initializer classes by their lower-case name without underscores (Keras's own
/// aliases included: normal, uniform, zero, one, OrthogonalInitializer).
const std::map<std::string, std::string>& classes() {
  static const std::map<std::string, std::string> table = {{"variancescaling", "VarianceScaling"},
                                                           {"glorotuniform", "GlorotUniform"},
                                                           {"glorotnormal", "GlorotNormal"},
                                                           {"heuniform", "HeUniform"},
                                                           {"henormal", "HeNormal"},
                                                           {"lecununiform", "LecunUniform"},
                                                           {"lecunnormal", "LecunNormal"},
                                                           {"truncatednormal", "TruncatedNormal"},
                                                           {"randomnormal", "RandomNormal"},
                                                           {"normal", "RandomNormal"},
                                                           {"randomuniform", "RandomUniform"},
                                                           {"uniform", "RandomUniform"},
                                                           {"constant", "Constant"},
                                                           {"zeros", "Zeros"},
                                                           {"zero", "Zeros"},
                                                           {"ones", "Ones"},
                                                           {"one", "Ones"},
                                                           {"orthogonal", "Orthogonal"},
                                                           {"orthogonalinitializer", "Orthogonal"}};
  return table;
}

std::string supported_list() {
  return "VarianceScaling, GlorotUniform, GlorotNormal, HeUniform, HeNormal, LecunUniform, "
         "LecunNormal, TruncatedNormal, RandomNormal, RandomUniform, Constant, Zeros, Ones, "
         "Orthogonal";
}

/// Reads a class's config into canonical form; `bad(what)` throws naming the field.
class ConfigReader {
 public:
  ConfigReader(const json& config, std::function<void(const std::string&)> bad)
      : config_(config), bad_(std::move(bad)) {}

  double number(const std::string& key, double fallback) {
    known_.insert(key);
    if (!config_.contains(key) || config_[key].is_null()) return fallback;
    const json& v = config_[key];
    if (!v.is_number() || !std::isfinite(v.get<double>())) {
      bad_("config '" + key + "': expected a finite number, got " + v.dump());
    }
    return v.get<double>();
  }
  std::string text(const std::string& key, const std::string& fallback) {
    known_.insert(key);
    if (!config_.contains(key) || config_[key].is_null()) return fallback;
    const json& v = config_[key];
    if (!v.is_string()) bad_("config '" + key + "': expected a string, got " + v.dump());
    return v.get<std::string>();
  }
  /// A field Mirror takes only as null (VarianceScaling's input_axes / output_axes).
  void null_only(const std::string& key, const std::string& why) {
    known_.insert(key);
    if (config_.contains(key) && !config_[key].is_null()) {
      bad_("config '" + key + "': must be null (" + why + "), got " + config_[key].dump());
    }
  }
  void finish() const {
    for (const auto& item : config_.items()) {
      if (known_.count(item.key()) || item.key() == "seed") continue;
      std::string known;
      for (const std::string& k : known_) known += (known.empty() ? "" : ", ") + k;
      bad_("config '" + item.key() + "': unknown field; known: " +
           (known.empty() ? std::string("none") : known) + " (and seed, which Mirror ignores)");
    }
  }

 private:
  const json& config_;
  std::function<void(const std::string&)> bad_;
  std::set<std::string> known_;
};

}  // namespace

json initializer_spec(Fields& f, const std::string& name, const std::string& kind,
                      bool orthogonal) {
  std::string field;
  const json* v = f.take(name, "", &field);
  if (v == nullptr) return json();
  std::string given;
  json config = json::object();
  if (v->is_string()) {
    given = v->get<std::string>();
  } else if (v->is_object() && v->contains("class_name") && (*v)["class_name"].is_string()) {
    given = (*v)["class_name"].get<std::string>();
    if (v->contains("config") && !(*v)["config"].is_null()) config = (*v)["config"];
    if (!config.is_object()) f.fail(field, "expected a config object, got " + v->dump());
  } else {
    f.fail(field, "expected an initializer name or {\"class_name\": ...}, got " + v->dump());
  }
  std::string key = lower(given);
  key.erase(std::remove(key.begin(), key.end(), '_'), key.end());
  const auto it = classes().find(key);
  if (it == classes().end()) {
    f.fail(field, "unsupported initializer '" + given + "'; supported: " + supported_list());
  }
  const std::string cls = it->second;
  ConfigReader r(config, [&](const std::string& what) {
    f.fail(field, cls + " " + what + " (in " + v->dump() + ")");
  });
  json out = json::object();
  if (cls == "VarianceScaling") {
    const double scale = r.number("scale", 1.0);
    if (!(scale > 0)) f.fail(field, "VarianceScaling's scale must be positive, got " + v->dump());
    const std::string mode = r.text("mode", "fan_in");
    std::string distribution = lower(r.text("distribution", "truncated_normal"));
    if (distribution == "normal") distribution = "truncated_normal";  // Keras's alias
    if (mode != "fan_in" && mode != "fan_out" && mode != "fan_avg") {
      f.fail(field, "VarianceScaling's mode must be fan_in, fan_out or fan_avg, got " + v->dump());
    }
    if (distribution != "truncated_normal" && distribution != "untruncated_normal" &&
        distribution != "uniform") {
      f.fail(field,
             "VarianceScaling's distribution must be truncated_normal (normal), "
             "untruncated_normal or uniform, got " +
                 v->dump());
    }
    out = {{"scale", scale}, {"mode", mode}, {"distribution", distribution}};
  }
  if (cls == "VarianceScaling" || cls.rfind("Glorot", 0) == 0 || cls.rfind("He", 0) == 0 ||
      cls.rfind("Lecun", 0) == 0) {
    r.null_only("input_axes", "the fans are Keras's default ones");
    r.null_only("output_axes", "the fans are Keras's default ones");
  } else if (cls == "TruncatedNormal" || cls == "RandomNormal") {
    const double stddev = r.number("stddev", 0.05);
    if (!(stddev >= 0)) f.fail(field, cls + "'s stddev must be >= 0, got " + v->dump());
    out = {{"mean", r.number("mean", 0.0)}, {"stddev", stddev}};
  } else if (cls == "RandomUniform") {
    const double low = r.number("minval", -0.05), high = r.number("maxval", 0.05);
    if (!(low <= high)) f.fail(field, "RandomUniform needs minval <= maxval, got " + v->dump());
    out = {{"minval", low}, {"maxval", high}};
  } else if (cls == "Constant") {
    out = {{"value", r.number("value", 0.0)}};
  } else if (cls == "Orthogonal") {
    if (!orthogonal) {
      f.fail(field,
             "Orthogonal initialises matrices: Mirror draws it for Dense, Conv1D, Conv2D and "
             "Conv2DTranspose kernels only, got " +
                 v->dump());
    }
    out = {{"gain", r.number("gain", 1.0)}};
  }
  r.finish();
  const json canonical = {{"class_name", cls}, {"config", out}};
  const json fallback = {{"class_name", kind}, {"config", json::object()}};
  return canonical == fallback ? json() : canonical;
}

json kernel_and_bias(Fields& f, const std::string& layer, bool bias_optional) {
  if (!bias_optional) f.require_bool("use_bias", true, "Mirror's " + layer + " always has a bias");
  json out = json::object();
  const json kernel = initializer_spec(f, "kernel_initializer", "GlorotUniform");
  const json bias = initializer_spec(f, "bias_initializer", "Zeros", false);
  if (!kernel.is_null()) out["kernel_initializer"] = kernel;
  if (!bias.is_null()) out["bias_initializer"] = bias;
  no_regularizers(f, {"kernel_regularizer", "bias_regularizer", "activity_regularizer",
                      "kernel_constraint", "bias_constraint", "lora_rank", "quantization_config"});
  return out;
}

}  // namespace mirror::nn::spec_fields
