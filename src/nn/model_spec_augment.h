// defines: the model-spec side of Keras's augmentation layers (model_spec_augment.cpp): their
// class names for the parser and the coverage table, and the canonical layer as a Layer.
// Internal to src/nn.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mirror/nn/layer.h"

namespace mirror::nn {
struct ModelSpecParser;
namespace spec_fields {
class Fields;
}
}  // namespace mirror::nn

namespace mirror::nn::detail {

/// The canonical layer of Keras class `type` (canonical, from augment_type) with `f`'s fields,
/// checked and normalised; `p` checks the image layout against the model's other layers.
std::vector<nlohmann::json> random_augment(ModelSpecParser& p, spec_fields::Fields& f, bool keras,
                                           const std::string& type);

/// The parser's spellings of each augmentation layer it reads, canonical type first (as the
/// parser's layer table lists them: Note [Keras layer coverage]).
const std::vector<std::vector<std::string>>& augment_layer_names();
/// The canonical type of lower-case class `type`, or "" when it is none of them.
std::string augment_type(const std::string& type);
/// A RandomAugment for canonical `l`, or null for another type.
std::unique_ptr<Layer> make_augment_layer(const nlohmann::json& l);

}  // namespace mirror::nn::detail
