// Keras models nested in a Keras model (a Sequential or a Functional used as a layer, as
// keras.applications' ConvNeXt does for its stem and downsampling blocks): their layers are read
// into the outer model's graph (Note [Nested models]).
#include <map>
#include <set>
#include <string>

#include "nn/model_spec_internal.h"
#include "nn/model_spec_parser.h"

namespace mirror::nn {

using nlohmann::json;
using namespace spec_fields;  // NOLINT(google-build-using-namespace): the parser's helpers

// Note [Nested models]
// A Keras model called as a layer computes what its layers compute, so Mirror inlines them: each
// inner layer becomes a layer of the outer graph named "<model>/<layer>" (names of different
// nested models cannot clash), and the layer that gives the nested model's output takes the
// nested model's own name, so the outer layers that read the model read it unchanged. The
// nested model's input is the tensor the outer call passes it: a nested Sequential's first layer
// reads it, and a nested Functional's InputLayer is replaced by it. Inner InputLayers state no
// model input (their shape is the one the outer graph gives them, which bind() checks layer by
// layer). In a plain outer Sequential (no graph) a nested Sequential's layers are simply listed in
// its place. Errors inside name the nested model and the inner layer's index. Keras keeps a
// nested layer's weights under its model's ("layers/sequential/layers/conv2d/vars/0", each class
// counted within its model), so each inlined layer records its models, outermost first, as
// "keras_scope": [[class, name], ...] (snake_case class: sequential, functional), which
// train/keras_weights.cpp turns into those paths.

namespace {

/// Renames every layer reference (Keras 3 "keras_history", Keras 2 [name, node, tensor, kwargs])
/// in `j` by `names`; references not in `names` are left as they are.
void rename_history(json& j, const std::map<std::string, std::string>& names, bool keras2_list) {
  if (j.is_object()) {
    if (j.contains("keras_history")) {
      json& h = j["keras_history"];
      if (h.is_array() && !h.empty() && h[0].is_string()) {
        const auto it = names.find(h[0].get<std::string>());
        if (it != names.end()) h[0] = it->second;
      }
      return;
    }
    for (auto& item : j.items()) rename_history(item.value(), names, false);
  } else if (j.is_array()) {
    if (keras2_list && !j.empty() && j[0].is_string()) {
      const auto it = names.find(j[0].get<std::string>());
      if (it != names.end()) j[0] = it->second;
      return;
    }
    for (json& e : j) rename_history(e, names, keras2_list);
  }
}

/// A Keras 3 inbound node that reads layer `from`.
json reads(const std::string& from) {
  return json::array({{{"args", json::array({{{"class_name", "__keras_tensor__"},
                                              {"config", {{"keras_history", {from, 0, 0}}}}}})},
                       {"kwargs", json::object()}}});
}

std::string entry_name(const json& entry) {
  if (entry.contains("name") && entry["name"].is_string()) return entry["name"].get<std::string>();
  const json& c = entry.value("config", json::object());
  if (c.is_object() && c.contains("name") && c["name"].is_string())
    return c["name"].get<std::string>();
  return "";
}

bool is_input_layer(const json& entry) {
  return entry.is_object() && entry.value("class_name", json()) == "InputLayer";
}

}  // namespace

bool ModelSpecParser::nested_model(const json& entry, std::size_t index) {
  const std::string cls =
      lower(entry["class_name"].is_string() ? entry["class_name"].get<std::string>() : "");
  if (cls != "sequential" && cls != "functional" && cls != "model") return false;
  const std::string name = entry_name(entry);
  const std::string at = where(
      index, entry["class_name"].get<std::string>() + (name.empty() ? "" : " '" + name + "'"));
  for (const auto& item : entry.items()) {
    static const std::set<std::string> outer = {
        "class_name",   "config",         "module", "registered_name",
        "build_config", "compile_config", "name",   "inbound_nodes"};
    if (!outer.count(item.key())) {
      throw InvalidArgument(
          at + ", field '" + item.key() +
          "': unknown field of a nested Keras model; known: " + join({outer.begin(), outer.end()}));
    }
  }
  const json config = entry.value("config", json::object());
  if (!config.is_object() || !config.contains("layers") || !config["layers"].is_array()) {
    throw InvalidArgument(at + ", field 'config': expected {\"layers\": [...]}, got " +
                          config.dump().substr(0, 200));
  }
  for (const auto& item : config.items()) {
    static const std::set<std::string> known = {
        "name",         "layers",       "trainable", "dtype", "build_input_shape",
        "input_layers", "output_layers"};
    if (!known.count(item.key())) {
      throw InvalidArgument(at + ", field 'config." + item.key() +
                            "': unknown field; known: " + join({known.begin(), known.end()}));
    }
  }
  if (name.empty()) throw InvalidArgument(at + ", field 'name': required (a nested model's name)");
  // Its name in the outer graph, and Keras's own (different when an outer nested model renamed
  // it), which the weight paths record.
  const std::string keras_name = config.contains("name") && config["name"].is_string()
                                     ? config["name"].get<std::string>()
                                     : name;
  const bool graph = entry.contains("inbound_nodes");
  const bool functional = cls != "sequential";
  // What the nested model's input is in the outer graph: the tensor its call passes.
  std::string outer_input;
  if (graph) {
    const json ins = detail::keras_inbound_names(entry["inbound_nodes"], at);
    if (ins.size() != 1) {
      throw InvalidArgument(at + ", field 'inbound_nodes': a nested model reads one tensor, got " +
                            ins.dump());
    }
    outer_input = ins[0].get<std::string>();
  } else if (functional) {
    // In a plain stack the nested Functional reads the layer before it, which gets a name.
    if (spec.layers_.empty()) {
      outer_input = input_names.empty() ? "input" : input_names.back();
    } else {
      json& prev = spec.layers_.back();
      if (!prev.contains("name")) prev["name"] = name + "/input";
      outer_input = prev["name"].get<std::string>();
    }
  }
  // The inner entries, renamed (Note [Nested models]).
  const json& inner = config["layers"];
  std::map<std::string, std::string> names;
  std::string output;
  if (functional) {
    ModelSpecParser io;
    io.source = at;
    io.functional_io(config);
    output = io.output_name;
  }
  for (const json& l : inner) {
    const std::string n = entry_name(l);
    if (n.empty()) continue;
    if (functional && is_input_layer(l)) {
      names[n] = outer_input;
    } else {
      names[n] = n == output || (!functional && &l == &inner.back()) ? name : name + "/" + n;
    }
  }
  const std::string saved_source = source;
  source = at + ", inside";  // "...: layer 2 (Sequential 'stem'), inside: layer 1 (Conv2D)"
  std::string previous = outer_input;
  bool first = true;
  for (std::size_t k = 0; k < inner.size(); ++k) {
    if (is_input_layer(inner[k])) continue;  // states no model input (Note [Nested models])
    json l = inner[k];
    if (l.is_object() && l.contains("config") && l["config"].is_object()) {
      l["config"].erase("batch_input_shape");  // Keras 2's input shape of the nested model
      l["config"].erase("input_shape");
    }
    const std::string n = entry_name(l);
    if (l.is_object() && !n.empty()) l["name"] = names.at(n);  // config.name stays Keras's
    if (functional) {
      if (l.is_object() && l.contains("inbound_nodes")) {
        const bool keras2 = l["inbound_nodes"].is_array() && !l["inbound_nodes"].empty() &&
                            l["inbound_nodes"][0].is_array();
        rename_history(l["inbound_nodes"], names, keras2);
      }
    } else if (graph && l.is_object()) {
      // A Sequential's layers read the layer before them; the first reads the call's input (with
      // its kwargs: the mask Keras passes, Note [Keras mask nodes]).
      l["inbound_nodes"] = first ? entry["inbound_nodes"] : reads(previous);
      if (!n.empty()) previous = names.at(n);
    }
    first = false;
    const std::size_t before = spec.layers_.size();
    layer(l, k);
    for (std::size_t i = before; i < spec.origin_.size(); ++i) {
      spec.origin_[i] = index;
      // Where Keras keeps the layer's weights: outermost model first (train/keras_weights.cpp).
      json& scope = spec.layers_[i]["keras_scope"];
      if (!scope.is_array()) scope = json::array();
      scope.insert(scope.begin(),
                   json::array({functional ? "functional" : "sequential", keras_name}));
    }
  }
  source = saved_source;
  if (first) throw InvalidArgument(at + ": the nested model has no layers");
  return true;
}

}  // namespace mirror::nn
