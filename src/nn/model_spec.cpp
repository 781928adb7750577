// ModelSpec parsing: Mirror's layer list, Keras's Sequential.to_json() and the legacy
// {"name": ...} form, all normalised to one canonical layer list (docs/model-spec.md).
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "mirror/json_input.h"
#include "mirror/nn/models.h"
#include "nn/model_spec_augment.h"
#include "nn/model_spec_internal.h"
#include "nn/model_spec_parser.h"

namespace mirror::nn {

using nlohmann::json;

using namespace spec_fields;  // NOLINT(google-build-using-namespace): the parser's helpers

// ---------------------------------------------------------------- the parser

std::string ModelSpecParser::where(std::size_t index, const std::string& type) const {
  return source + ": layer " + std::to_string(index) + " (" + type + ")";
}

void ModelSpecParser::state_input(const json& shape, bool with_batch, const std::string& where_text,
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

/// InputLayer / {"type": "input"}: states the input shape, builds nothing.
void ModelSpecParser::input(Fields& f, std::size_t index) {
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

void ModelSpecParser::layer(const json& entry, std::size_t index) {
  if (!entry.is_object()) {
    throw InvalidArgument(source + ": layer " + std::to_string(index) +
                          ": expected an object, got " + entry.dump());
  }
  const bool keras = entry.contains("class_name");
  if (keras) keras_entries = true;
  if (keras && nested_model(entry, index)) return;  // Note [Nested models]
  std::string type;
  json config;
  if (keras) {
    // {"class_name": "Conv2D", "config": {...}, "module": ..., ...}
    for (const auto& item : entry.items()) {
      static const std::set<std::string> outer = {"class_name",      "config",       "module",
                                                  "registered_name", "build_config", "name",
                                                  "inbound_nodes"};
      if (!outer.count(item.key())) {
        throw InvalidArgument(where(index, entry["class_name"].dump()) + ", field '" + item.key() +
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
      const json mask = detail::keras_mask_argument(entry["inbound_nodes"]);
      if (!mask.is_null() && graph_name.is_string())
        passed_masks.emplace_back(graph_name.get<std::string>(), mask, index);
    }
  } else {
    if (config.contains("name")) graph_name = config["name"];
    if (config.contains("inputs")) {
      graph_inputs = config["inputs"];
      config.erase("inputs");
    }
  }
  // Note [Nested models]: the nested Keras models a canonical layer was read from.
  json scope;
  if (!keras && config.contains("keras_scope")) {
    scope = config["keras_scope"];
    config.erase("keras_scope");
  }
  const std::size_t first_new = spec.layers_.size();
  current_index = index;
  call_kwargs = json::object();
  call_args = json::array();
  if (keras && entry.contains("inbound_nodes") && entry["inbound_nodes"].is_array() &&
      !entry["inbound_nodes"].empty() && entry["inbound_nodes"][0].is_object()) {
    call_kwargs = entry["inbound_nodes"][0].value("kwargs", json::object());
    call_args = entry["inbound_nodes"][0].value("args", json::array());
  }
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
      {{"batch_normalization", "batchnormalization"}, &ModelSpecParser::plain_batch_normalization},
      {{"syncbatchnormalization"}, &ModelSpecParser::sync_batch_normalization},
      {{"layer_normalization", "layernormalization"}, &ModelSpecParser::layer_normalization},
      {{"add"}, &ModelSpecParser::add},
      {{"concatenate"}, &ModelSpecParser::concatenate},
      {{"global_average_pooling2d", "globalaveragepooling2d"},
       &ModelSpecParser::global_average_pooling2d},
      {{"average_pooling2d", "averagepooling2d", "avgpool2d"}, &ModelSpecParser::average_pooling2d},
      {{"zero_padding2d", "zeropadding2d"}, &ModelSpecParser::zero_padding2d},
      {{"rescaling"}, &ModelSpecParser::rescaling},
      {{"normalization"}, &ModelSpecParser::normalization},
      {{"resizing"}, &ModelSpecParser::resizing},
      {{"center_crop", "centercrop"}, &ModelSpecParser::center_crop},
      // The layers Keras users combine with GRUs and CNNs (model_spec_layers_keras.cpp).
      {{"reshape"}, &ModelSpecParser::reshape},
      {{"permute"}, &ModelSpecParser::permute},
      {{"repeat_vector", "repeatvector"}, &ModelSpecParser::repeat_vector},
      {{"cropping2d"}, &ModelSpecParser::cropping2d},
      {{"up_sampling2d", "upsampling2d"}, &ModelSpecParser::up_sampling2d},
      {{"global_max_pooling2d", "globalmaxpooling2d", "globalmaxpool2d"},
       &ModelSpecParser::global_max_pooling2d},
      {{"spatial_dropout1d", "spatialdropout1d"}, &ModelSpecParser::spatial_dropout1d},
      {{"spatial_dropout2d", "spatialdropout2d"}, &ModelSpecParser::spatial_dropout2d},
      {{"time_distributed", "timedistributed"}, &ModelSpecParser::time_distributed},
      {{"conv2d_transpose", "conv2dtranspose", "convolution2dtranspose"},
       &ModelSpecParser::conv2d_transpose},
      {{"multiply"}, &ModelSpecParser::multiply},
      {{"subtract"}, &ModelSpecParser::subtract},
      {{"divide", "truedivide", "true_divide"}, &ModelSpecParser::divide},
      {{"average"}, &ModelSpecParser::average},
      {{"maximum"}, &ModelSpecParser::maximum},
      {{"minimum"}, &ModelSpecParser::minimum},
      {{"leaky_relu", "leakyrelu"}, &ModelSpecParser::leaky_relu},
      {{"elu"}, &ModelSpecParser::elu},
      {{"depthwise_conv2d", "depthwiseconv2d"}, &ModelSpecParser::depthwise_conv2d},
      {{"separable_conv2d", "separableconv2d", "separableconvolution2d"},
       &ModelSpecParser::separable_conv2d},
      {{"attention"}, &ModelSpecParser::dot_attention},
      {{"additive_attention", "additiveattention"}, &ModelSpecParser::additive_attention},
      {{"multi_head_attention", "multiheadattention"}, &ModelSpecParser::multi_head_attention},
      {{"layer_scale", "layerscale"}, &ModelSpecParser::layer_scale},
      {{"stochastic_depth", "stochasticdepth"}, &ModelSpecParser::stochastic_depth},
  };
  detail::publish_layer_table(table);  // Note [Keras layer coverage]
  if (keras && mask_node(entry, t, graph_name, graph_inputs, index)) return;
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
                  "layer " + std::to_string(index), [&](const std::string& m) { f.fail(key, m); });
    }
    for (json& j : (this->*handler)(f, keras)) {
      if (!scope.is_null()) j["keras_scope"] = scope;
      spec.layers_.push_back(std::move(j));
      spec.origin_.push_back(index);
    }
    place_in_graph(first_new, graph_name, graph_inputs);
    return;
  }
  // Keras's augmentation layers run in the model, in training only (model_spec_augment.cpp).
  if (const std::string aug = detail::augment_type(t); !aug.empty()) {
    for (const char* key : {"batch_input_shape", "input_shape"}) {
      if (!config.contains(key) || config[key].is_null()) continue;
      if (!spec.layers_.empty()) f.fail(key, "only the first layer may state the input shape");
      state_input(config[key], std::string(key) == "batch_input_shape",
                  "layer " + std::to_string(index), [&](const std::string& m) { f.fail(key, m); });
    }
    for (json& j : detail::random_augment(*this, f, keras, aug)) {
      if (!scope.is_null()) j["keras_scope"] = scope;
      spec.layers_.push_back(std::move(j));
      spec.origin_.push_back(index);
    }
    place_in_graph(first_new, graph_name, graph_inputs);
    return;
  }
  std::string supported = "input (InputLayer)";
  for (const auto& [names, handler] : table) supported += ", " + names.front();
  throw InvalidArgument(where(index, type) + ": unknown layer type; supported: " + supported +
                        " (Keras class names too, e.g. Conv2D, MaxPooling2D); docs/model-spec.md's "
                        "Keras layer coverage says for every Keras layer what Mirror reads and "
                        "why it refuses the others");
}

/// Note [Folded softmax]: Mirror's losses take logits, so a softmax is accepted only on the
/// model's last layer (Keras classifiers end so), from a dense (whose activation becomes
/// linear) or an activation layer (dropped), and the spec remembers it (softmax_folded): the
/// trainer then requires the softmax-cross-entropy loss, which applies it. Dense prediction
/// (Note [Dense labels], mirror/data/dataset.h) ends so too: a TimeDistributed(Dense(k,
/// softmax)) or a dense over each step of [T, F] (softmax per step), or a conv2d with a softmax
/// (per pixel, over the channels): the loss applies it per step or pixel.
void ModelSpecParser::fold_softmax() {
  const std::size_t n = spec.layers_.size();
  for (std::size_t i = 0; i < n; ++i) {
    json& outer = spec.layers_[i];
    const bool wrapped = outer["type"] == "time_distributed" && outer.contains("layer");
    json& l = wrapped ? outer["layer"] : outer;
    if (!l.contains("activation") || l["activation"] != "softmax") continue;
    const std::string type = l["type"].get<std::string>();
    const std::string at = where(spec.origin_[i], type) + ", field 'activation': ";
    const bool foldable = type == "dense" || type == "conv2d" || (type == "activation" && !wrapped);
    if (i + 1 != n || !foldable) {
      throw InvalidArgument(at +
                            "softmax is accepted only on the model's last layer, a dense (or "
                            "TimeDistributed dense), a conv2d or an activation layer, where "
                            "Mirror folds it into the softmax-cross-entropy loss (its losses "
                            "take logits); use \"linear\" here");
    }
    spec.softmax_folded_ = true;
    if (type != "activation") {
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
void ModelSpecParser::place_in_graph(std::size_t first, const json& name, const json& inputs) {
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

void ModelSpecParser::layers(const json& list) {
  if (!list.is_array() || list.empty()) {
    throw InvalidArgument(source + ": expected a non-empty list of layers, got " + list.dump());
  }
  for (std::size_t i = 0; i < list.size(); ++i) layer(list[i], i);
  resolve_axes();              // Note [Positive channel axes]
  mark_keras_channels_last();  // Note [Keras layers on image channels]
  if (spec.layers_.empty()) throw InvalidArgument(source + ": the spec has no layers");
  detail::resolve_graph(spec.layers_, spec.origin_, input_names, output_name, source);
  if (spec.keras_masks_) check_masks();
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
void ModelSpecParser::keras_model(const json& j) {
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
  spec.keras_masks_ = true;  // Note [Sequence masks]: a Keras model means what Keras computes
  if (config.contains("name") && config["name"].is_string()) {
    spec.name_ = config["name"].get<std::string>();
  }
  layers(config["layers"]);
  if (functional &&
      std::find(input_names.begin(), input_names.end(), input_layer_name) == input_names.end()) {
    std::string known;
    for (const std::string& n : input_names) known += (known.empty() ? "'" : ", '") + n + "'";
    throw InvalidArgument(source + ", field 'config.input_layers': names '" + input_layer_name +
                          "', which is not an InputLayer of the model (" +
                          (known.empty() ? std::string("it has none") : "its InputLayer: " + known) +
                          ")");
  }
  if (config.contains("build_input_shape") && !config["build_input_shape"].is_null()) {
    state_input(config["build_input_shape"], true, "build_input_shape", [&](const std::string& m) {
      throw InvalidArgument(source + ", field 'config.build_input_shape': " + m);
    });
  }
}

/// A functional model's input_layers / output_layers: one of each ([name, 0, 0], or a list
/// of one such; Keras 3 writes the single input unwrapped).
void ModelSpecParser::functional_io(const json& config) {
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
  input_layer_name = one("input_layers");
  output_name = one("output_layers");
}

/// {"name": ..., "input_shape": [...], "layers": [...]} (Mirror; to_json() writes this).
void ModelSpecParser::mirror_model(const json& j) {
  for (const auto& item : j.items()) {
    static const std::set<std::string> known = {"name",   "description",    "input_shape",
                                                "layers", "softmax_folded", "sigmoid_folded",
                                                "masks",  "input_layout"};
    if (!known.count(item.key())) {
      throw InvalidArgument(source + ", field '" + item.key() +
                            "': unknown field; known: name, description, input_shape, layers, "
                            "masks, softmax_folded, sigmoid_folded, input_layout");
    }
  }
  if (j.contains("input_layout")) {  // Note [Keras's image layout]
    if (j["input_layout"] != "channels_last") {
      throw InvalidArgument(source + ", field 'input_layout': expected \"channels_last\" (or no "
                            "field: Mirror's NCHW), got " + j["input_layout"].dump());
    }
    spec.channels_last_input_ = true;
  }
  if (j.contains("name")) {
    if (!j["name"].is_string()) {
      throw InvalidArgument(source + ", field 'name': expected a string, got " + j["name"].dump());
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
  if (j.contains("masks")) {  // Note [Sequence masks]
    if (j["masks"] != "data" && j["masks"] != "keras") {
      throw InvalidArgument(source +
                            ", field 'masks': expected \"data\" (Mirror's: every sequence "
                            "layer knows the data's lengths) or \"keras\" (padding masked where "
                            "Keras masks it), got " +
                            j["masks"].dump());
    }
    spec.keras_masks_ = j["masks"] == "keras";
  }
  if (j.contains("sigmoid_folded")) {  // Note [Folded sigmoid]
    if (!j["sigmoid_folded"].is_boolean()) {
      throw InvalidArgument(source + ", field 'sigmoid_folded': expected true or false, got " +
                            j["sigmoid_folded"].dump());
    }
    spec.sigmoid_folded_ = j["sigmoid_folded"].get<bool>();
  }
  layers(j["layers"]);
}

/// The stated shape in Mirror's layout: a channels_last image [H, W, C] becomes [C, H, W].
Shape ModelSpecParser::stated_nchw() const {
  if (data_format == "channels_last" && stated.size() == 3) {
    return {stated[2], stated[0], stated[1]};
  }
  return stated;
}

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
  // Note [Keras's image layout]: the stated [H, W, C] was turned into [C, H, W] above.
  if (p.data_format == "channels_last" && p.stated.size() == 3) p.spec.channels_last_input_ = true;
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
  if (keras_masks_) j["masks"] = "keras";           // Note [Sequence masks]
  if (softmax_folded_) j["softmax_folded"] = true;  // Note [Folded softmax]
  if (sigmoid_folded_) j["sigmoid_folded"] = true;  // Note [Folded sigmoid]
  if (channels_last_input_) j["input_layout"] = "channels_last";  // Note [Keras's image layout]
  return j;
}

}  // namespace mirror::nn
