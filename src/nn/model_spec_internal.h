// defines: what the model-spec sources share: the embedded built-in specs, the error prefix and
// the shape walk that bind() and from_json() use.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "mirror/nn/models.h"

namespace mirror::nn::detail {

/// (name, JSON text) of every examples/models/*.json, generated at build time
/// (cmake/EmbedModelSpecs.cmake).
const std::vector<std::pair<std::string, std::string>>& embedded_model_specs();

/// The producing layers' names of a Keras layer's "inbound_nodes" (Keras 3 keras_history or
/// Keras 2 lists); empty for an InputLayer. `where` prefixes errors.
nlohmann::json keras_inbound_names(const nlohmann::json& inbound_nodes, const std::string& where);
/// The mask a Keras 3 call is given (kwargs "mask", Note [Keras mask nodes]): the producing
/// node's name, "" for an explicit null, null when the call records no mask, or a list of names.
nlohmann::json keras_mask_argument(const nlohmann::json& inbound_nodes);
/// Note [Spec graph]: a spec is a graph when any layer has "inputs" (names of layers or of the
/// model input). Then every layer gets a "name" (default "layer_<index>") and "inputs" (default:
/// the layer listed before it), names are checked (unique, no dangling reference), the layers
/// are sorted topologically (stable; a cycle is an error naming its layers), every layer but
/// the last must be read, and the model input is renamed "input". Without "inputs" anywhere,
/// the spec is a plain stack and "name" fields are dropped. `origin` is permuted alike.
void resolve_graph(nlohmann::json& layers, std::vector<std::size_t>& origin,
                   const std::vector<std::string>& input_names, const std::string& output_name,
                   const std::string& source);

/// Note [Keras layer coverage] (model_spec_coverage.cpp): the parser's table of layer names (each
/// entry's names, the canonical type first), published by ModelSpecParser::layer.
void set_layer_names(std::vector<std::vector<std::string>> names);
template <class Table>
void publish_layer_table(const Table& table) {
  static const bool done = [&] {
    std::vector<std::vector<std::string>> names;
    for (const auto& entry : table) names.push_back(entry.first);
    set_layer_names(std::move(names));
    return true;
  }();
  (void)done;
}
std::vector<std::vector<std::string>> parser_layer_names();
/// One row of the coverage table: a Keras class, the canonical type that reads it ("" when
/// refused), supported | partly | refused, and what is missing or why it is refused.
struct LayerCoverage {
  std::string keras_class, type, status, note;
};
std::vector<LayerCoverage> keras_layer_coverage(const std::vector<std::string>& classes);
/// The table as docs/model-spec.md shows it.
std::string keras_layer_coverage_markdown(const std::vector<std::string>& classes,
                                          const std::string& keras_version);
/// The canonical layer `l` as a Layer (make_model's own mapping, models.cpp); `keras_masks`: the
/// model has Keras's masks (Note [Sequence masks]).
std::unique_ptr<Layer> make_canonical_layer(const nlohmann::json& l, bool keras_masks = false);
/// The layers of nn/keras_layers.h, nn/keras_ops_layers.h and nn/attention.h
/// (model_spec_bind_keras.cpp): a Layer for canonical `l`, or null for another type;
/// `make_inner` builds a wrapped layer (TimeDistributed's).
std::unique_ptr<Layer> make_keras_layer(
    const nlohmann::json& l,
    const std::function<std::unique_ptr<Layer>(const nlohmann::json&)>& make_inner);
/// Whether `type` is one of those layers taking several inputs (Multiply, ..., attention).
bool is_keras_merge(const std::string& type);
/// bind()'s shape walk for those layers: the output shape per sample, or std::nullopt for another
/// type; InvalidArgument prefixed with `where` when the input does not fit (their build() decides).
std::optional<Shape> bind_keras_layer(const std::string& where, const nlohmann::json& l,
                                      const Shape& input);
Shape bind_keras_merge(const std::string& where, const nlohmann::json& l,
                       const std::vector<Shape>& inputs);

}  // namespace mirror::nn::detail
