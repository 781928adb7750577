// The model graph of a spec (Note [Model graph] in sequential.h): reads Keras functional
// inbound nodes, then checks a spec's names and inputs once and puts its layers in topological
// order, so make_model only maps names to indices.
#include <algorithm>
#include <map>
#include <set>

#include "mirror/error.h"
#include "nn/model_spec_internal.h"

namespace mirror::nn::detail {

using nlohmann::json;

namespace {

/// A tensor reference [layer, node_index, tensor_index] (Keras 3's keras_history, Keras 2's
/// inbound list): Mirror's layers are called once and have one output, so both indices must be
/// 0 (absent counts as 0); anything else names a tensor the model does not have.
void check_tensor_indices(const json& h, const std::string& where) {
  for (std::size_t k = 1; k < 3 && k < h.size(); ++k) {
    if (h[k].is_number_integer() && h[k].get<std::int64_t>() == 0) continue;
    throw InvalidArgument(where + ", field 'inbound_nodes': " + h.dump().substr(0, 120) +
                          " refers to " + (k == 1 ? "call " : "output ") + h[k].dump() +
                          " of layer '" + h[0].get<std::string>() + "', which the model does not "
                          "have (each layer is called once and has one output: [name, 0, 0])");
  }
}

/// Collects the layer name of every "keras_history" (Keras 3) in `j`, in document order.
void collect_history(const json& j, json& names, const std::string& where) {
  if (j.is_object()) {
    if (j.contains("keras_history")) {
      const json& h = j["keras_history"];
      if (h.is_array() && !h.empty() && h[0].is_string()) {
        check_tensor_indices(h, where);
        names.push_back(h[0]);
      }
      return;
    }
    for (const auto& item : j.items()) collect_history(item.value(), names, where);
  } else if (j.is_array()) {
    for (const json& e : j) collect_history(e, names, where);
  }
}

}  // namespace

json keras_inbound_names(const json& nodes, const std::string& where) {
  json names = json::array();
  if (!nodes.is_array()) {
    throw InvalidArgument(where + ", field 'inbound_nodes': expected a list, got " + nodes.dump());
  }
  if (nodes.empty()) return names;
  if (nodes.size() > 1) {
    throw InvalidArgument(where + ", field 'inbound_nodes': the layer is called " +
                          std::to_string(nodes.size()) +
                          " times; Mirror supports each layer once (no shared layers)");
  }
  const json& node = nodes[0];
  if (node.is_object()) {
    // Keras 3: {"args": [...], "kwargs": {...}}; a mask passed in kwargs is no input (Note
    // [Keras mask nodes], model_spec_masks.cpp).
    json inputs = node;
    if (inputs.contains("kwargs") && inputs["kwargs"].is_object()) inputs["kwargs"].erase("mask");
    collect_history(inputs, names, where);
  } else if (node.is_array()) {
    for (const json& t : node) {  // Keras 2: [["conv2d", 0, 0, {}], ...]
      if (t.is_array() && !t.empty() && t[0].is_string()) {
        check_tensor_indices(t, where);
        names.push_back(t[0]);
      }
    }
  }
  if (names.empty()) {
    throw InvalidArgument(
        where + ", field 'inbound_nodes': names no input tensor: " + node.dump().substr(0, 200));
  }
  return names;
}

json keras_mask_argument(const json& nodes) {
  if (!nodes.is_array() || nodes.size() != 1 || !nodes[0].is_object()) return json();
  const json& kwargs = nodes[0].value("kwargs", json::object());
  if (!kwargs.is_object() || !kwargs.contains("mask")) return json();
  json names = json::array();
  collect_history(kwargs["mask"], names, "the mask argument of a Keras layer");
  if (names.empty()) return "";  // mask: null
  return names.size() == 1 ? names[0] : names;
}

void resolve_graph(json& layers, std::vector<std::size_t>& origin,
                   const std::vector<std::string>& input_names, const std::string& output_name,
                   const std::string& source) {
  const std::size_t n = layers.size();
  bool graph = false;
  for (const json& l : layers) graph = graph || l.contains("inputs");
  if (!graph) {
    for (json& l : layers) l.erase("name");  // a plain stack: names are Mirror's own
    return;
  }
  auto where = [&](std::size_t i) {
    return source + ": layer " + std::to_string(origin[i]) + " (" +
           layers[i]["type"].get<std::string>() + ")";
  };
  std::set<std::string> inputs(input_names.begin(), input_names.end());
  if (inputs.empty()) inputs.insert("input");
  // Default names and inputs: an unnamed layer is "layer_<index>"; a layer without inputs reads
  // the layer listed before it (the model input for the first).
  std::map<std::string, std::size_t> index;
  for (std::size_t i = 0; i < n; ++i) {
    json& l = layers[i];
    if (!l.contains("name")) {
      // One JSON entry may become several layers (Embedding(mask_zero) adds its Masking): the
      // later ones get a suffix, so the default names stay unique.
      std::string name = "layer_" + std::to_string(origin[i]);
      for (int k = 1; index.count(name) != 0; ++k) {
        name = "layer_" + std::to_string(origin[i]) + "_" + std::to_string(k);
      }
      l["name"] = name;
    }
    if (!l["name"].is_string()) {
      throw InvalidArgument(where(i) + ", field 'name': expected a string, got " +
                            l["name"].dump());
    }
    const std::string name = l["name"].get<std::string>();
    if (inputs.count(name) || !index.emplace(name, i).second) {
      throw InvalidArgument(where(i) + ", field 'name': '" + name +
                            "' names two layers (or the model input); names must be unique");
    }
    if (!l.contains("inputs")) {
      l["inputs"] = json::array({i == 0 ? json(*inputs.begin()) : layers[i - 1]["name"]});
    }
    const json& in = l["inputs"];
    bool ok = in.is_array() && !in.empty();
    for (std::size_t k = 0; ok && k < in.size(); ++k) ok = in[k].is_string();
    if (!ok) {
      throw InvalidArgument(where(i) + ", field 'inputs': expected a list of layer names, got " +
                            in.dump());
    }
  }
  // Dangling names, then Kahn's algorithm, taking ready layers in listed order (stable).
  std::vector<std::vector<std::size_t>> readers(n);
  std::vector<int> missing(n, 0);
  for (std::size_t i = 0; i < n; ++i) {
    for (const json& in : layers[i]["inputs"]) {
      const std::string name = in.get<std::string>();
      if (inputs.count(name)) continue;
      auto it = index.find(name);
      if (it == index.end()) {
        std::string known = "the model input '" + *inputs.begin() + "'";
        for (const auto& [k, v] : index) known += ", " + k;
        throw InvalidArgument(where(i) + ", field 'inputs': no layer is named '" + name +
                              "'; known: " + known);
      }
      readers[it->second].push_back(i);
      ++missing[i];
    }
  }
  std::vector<std::size_t> order;
  std::vector<bool> done(n, false);
  while (order.size() < n) {
    std::size_t next = n;
    for (std::size_t i = 0; i < n && next == n; ++i) {
      if (!done[i] && missing[i] == 0) next = i;
    }
    if (next == n) {
      std::string cycle;
      for (std::size_t i = 0; i < n; ++i) {
        if (!done[i]) cycle += (cycle.empty() ? "" : ", ") + layers[i]["name"].get<std::string>();
      }
      throw InvalidArgument(source + ": the layers " + cycle +
                            " form a cycle (each waits for another's output); a model is a "
                            "directed acyclic graph");
    }
    done[next] = true;
    order.push_back(next);
    for (std::size_t r : readers[next]) --missing[r];
  }
  // One output: the last layer in order; every other layer must be read.
  const std::size_t last = order.back();
  for (std::size_t i = 0; i < n; ++i) {
    if (i != last && readers[i].empty()) {
      throw InvalidArgument(where(i) + ": its output '" + layers[i]["name"].get<std::string>() +
                            "' is read by no layer, and the model has one output ('" +
                            layers[last]["name"].get<std::string>() +
                            "'); connect it or remove it");
    }
  }
  if (!output_name.empty() && layers[last]["name"] != output_name) {
    throw InvalidArgument(source + ": the model output is '" + output_name +
                          "' but the graph ends at '" + layers[last]["name"].get<std::string>() +
                          "'");
  }
  json sorted = json::array();
  std::vector<std::size_t> sorted_origin;
  for (std::size_t i : order) {
    json l = layers[i];
    for (json& in : l["inputs"]) {
      if (inputs.count(in.get<std::string>())) in = "input";  // canonical model-input name
    }
    sorted.push_back(std::move(l));
    sorted_origin.push_back(origin[i]);
  }
  layers = std::move(sorted);
  origin = std::move(sorted_origin);
}

}  // namespace mirror::nn::detail
