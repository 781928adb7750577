// Keras's masks in a model spec: the ops Keras 3 writes into a functional model to compute masks,
// and the check that every mask a layer is given is the one Mirror computes (Note [Sequence
// masks] in include/mirror/nn/layer.h).
//
// Note [Keras mask nodes]: Keras 3 computes masks with ops on symbolic tensors, so a functional
// model's to_json() holds them as nodes beside the layers: Embedding(mask_zero=True) adds
// NotEqual(ids, 0); Masking adds NotEqual(x, 0) and Any(axis=-1); a merge of masked inputs adds
// LogicalOr (Add, ...) or ExpandDims, ZerosLike, LogicalOr, Concatenate and Any (Concatenate).
// A layer whose call takes a mask records it in kwargs "mask" (null when its input has none).
// Mirror's masks are lengths (trailing padding), which Sequential passes from layer to layer by
// Keras's rules, so the nodes build nothing: the parser reads each mask as the set of tensors
// whose trailing padding it masks (NotEqual(x, 0) masks x's; the merges OR theirs: a union) and
// checks that it equals what the rules give the layer's input. A mask made otherwise (by hand,
// another value than 0, LogicalAnd) is an error naming the layer, never a silent difference.
#include <algorithm>

#include "nn/model_spec_parser.h"

namespace mirror::nn {

using nlohmann::json;
using namespace spec_fields;  // NOLINT(google-build-using-namespace): the parser's helpers

namespace {

/// The op classes Keras 3 writes for masks (module keras.src.ops.*), lower case.
const std::set<std::string>& mask_ops() {
  static const std::set<std::string> ops = {"notequal",   "any",       "logicalor",  "logicaland",
                                            "expanddims", "zeroslike", "concatenate"};
  return ops;
}

/// Layers that pass their input's mask on unchanged in Keras (supports_masking). Recurrent
/// layers pass it when they return sequences; merges OR their inputs'; Masking makes one; every
/// other layer ends it. A new canonical layer that supports masking in Keras is added here.
const std::set<std::string>& passes_mask() {
  static const std::set<std::string> types = {
      "embedding",           "dense",     "dropout",      "activation", "layer_normalization",
      "batch_normalization", "rescaling", "normalization", "spatial_dropout1d", "time_distributed",
      "leaky_relu",          "elu",       "relu"};
  return types;
}

std::string show(const std::set<std::string>& s) {
  if (s.empty()) return "no mask";
  std::string out = "the trailing padding of ";
  bool first = true;
  for (const auto& x : s) {
    out += (first ? "'" : " or '") + x + "'";
    first = false;
  }
  return out;
}

}  // namespace

bool ModelSpecParser::mask_node(const json& entry, const std::string& type, const json& name,
                                const json& inputs, std::size_t index) {
  const std::string module = entry.value("module", "");
  if (module.rfind("keras.src.ops", 0) != 0 || !mask_ops().count(type)) return false;
  const std::string where_text = where(index, entry["class_name"].get<std::string>());
  if (!name.is_string() || !inputs.is_array()) {
    throw InvalidArgument(where_text + ": a Keras op node needs a name and inbound_nodes");
  }
  MaskNode node{type, {}, json(), where_text};
  for (const json& in : inputs) node.inputs.push_back(in.get<std::string>());
  const json& config = entry.value("config", json::object());
  if (type == "notequal") {
    const json& args = entry["inbound_nodes"][0].value("args", json::array());
    node.value = args.size() == 2 ? args[1] : json();
  }
  if (type == "any" &&
      (config.value("axis", json(-1)) != json(-1) || config.value("keepdims", false) != false)) {
    throw InvalidArgument(where_text +
                          ": a mask reduced other than over the last axis (axis -1, keepdims "
                          "false) is not one Mirror can compute");
  }
  mask_nodes.emplace(name.get<std::string>(), std::move(node));
  return true;
}

std::set<std::string> ModelSpecParser::mask_sources(const std::string& name, int depth) const {
  const auto it = mask_nodes.find(name);
  const auto unsupported = [&](const std::string& why) -> std::set<std::string> {
    throw InvalidArgument(source + ": the mask '" + name + "' " + why +
                          "; Mirror's masks are the trailing padding (0) of a sequence, made by "
                          "Masking or Embedding(mask_zero=True) and passed on as Keras does "
                          "(docs/model-spec.md, masks)");
  };
  if (it == mask_nodes.end() || depth > 64) return unsupported("is not computed by Keras's masks");
  const MaskNode& n = it->second;
  const auto input_name = [&](const std::string& x) {
    return std::find(input_names.begin(), input_names.end(), x) != input_names.end()
               ? std::string("input")
               : x;
  };
  if (n.op == "notequal") {
    if (n.inputs.size() != 1 || !n.value.is_number() || n.value.get<double>() != 0.0) {
      return unsupported("compares with " + n.value.dump() + " (" + n.where +
                         "), where Mirror masks padding of value 0 only");
    }
    return {input_name(n.inputs[0])};
  }
  if (n.op == "zeroslike") return {};  // ORed with a mask: it only broadcasts it
  if (n.op == "logicaland") return unsupported("ANDs masks (" + n.where + ")");
  std::set<std::string> all;
  for (const std::string& in : n.inputs) {
    const std::set<std::string> s = mask_sources(in, depth + 1);
    all.insert(s.begin(), s.end());
  }
  return all;  // any, expanddims, logicalor, concatenate
}

void ModelSpecParser::check_masks() {
  json& layers = spec.layers_;
  const std::size_t n = layers.size();
  // Each output's mask by Keras's rules (Note [Sequence masks]), as source tensors.
  std::map<std::string, std::set<std::string>> mask_of = {{"input", {}}};
  const auto tensor = [&](std::size_t i) {
    return layers[i].contains("name") ? layers[i]["name"].get<std::string>()
                                      : "#" + std::to_string(i);
  };
  const auto input_tensors = [&](std::size_t i) {
    std::vector<std::string> ins;
    if (layers[i].contains("inputs")) {
      for (const json& x : layers[i]["inputs"]) ins.push_back(x.get<std::string>());
    } else {
      ins.push_back(i == 0 ? std::string("input") : tensor(i - 1));
    }
    return ins;
  };
  std::map<std::string, std::set<std::string>> input_mask;  // by layer tensor name
  for (std::size_t i = 0; i < n; ++i) {
    const json& l = layers[i];
    const std::string type = l["type"].get<std::string>();
    const std::vector<std::string> ins = input_tensors(i);
    std::set<std::string> in_mask;
    bool unmasked = false;
    for (const std::string& x : ins) {
      const std::set<std::string>& m = mask_of[x];
      unmasked = unmasked || m.empty();
      in_mask.insert(m.begin(), m.end());
    }
    if (unmasked) in_mask.clear();
    input_mask[tensor(i)] = in_mask;
    std::set<std::string> out;
    if (type == "masking") {
      out = {ins[0]};
    } else if (passes_mask().count(type) || type == "add" || type == "concatenate" ||
               type == "multiply" || type == "subtract" || type == "average" ||
               type == "maximum" || type == "minimum") {
      out = in_mask;  // a Keras merge ORs its inputs' masks
    } else if (type == "attention" || type == "additive_attention" ||
               type == "multi_head_attention") {
      out = mask_of[ins[0]];  // Keras's attention layers pass the query's mask on
    } else if (type == "gru" || type == "lstm" || type == "bidirectional") {
      const json& rnn = type == "bidirectional" ? l["layer"] : l;
      if (rnn["return_sequences"].get<bool>()) out = in_mask;
    }
    mask_of[tensor(i)] = out;
    if (type == "batch_normalization" && !in_mask.empty()) {
      throw InvalidArgument(where(spec.origin_[i], type) + ": normalises a masked sequence (" +
                            show(in_mask) +
                            "), whose statistics Keras takes over the unmasked steps only and "
                            "Mirror over every step; move it before the masking, or use "
                            "LayerNormalization (the same on every step)");
    }
  }
  // Every mask Keras recorded for a call: the one the rules give the layer's input.
  for (const auto& [name, mask, index] : passed_masks) {
    const auto it = input_mask.find(name);
    if (it == input_mask.end()) continue;  // an entry that built several layers names its last
    std::set<std::string> given;
    if (mask.is_string() && !mask.get<std::string>().empty()) {
      given = mask_sources(mask.get<std::string>(), 0);
    } else if (mask.is_array()) {
      throw InvalidArgument(where(index, name) + ": is given several masks " + mask.dump() +
                            "; Mirror's layers read one");
    }
    if (given != it->second) {
      throw InvalidArgument(where(index, name) + ": Keras gives this call " + show(given) +
                            ", but masks passed on as Keras does give its input " +
                            show(it->second) +
                            " (a mask passed by hand is not supported; Masking or "
                            "Embedding(mask_zero=True) make the masks Mirror computes)");
    }
  }
}

}  // namespace mirror::nn
