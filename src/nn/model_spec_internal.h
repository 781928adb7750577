// defines: what the model-spec sources share: the embedded built-in specs, the error prefix and
// the shape walk that bind() and from_json() use.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "mirror/nn/models.h"

namespace mirror::nn::detail {

/// (name, JSON text) of every examples/models/*.json, generated at build time
/// (cmake/EmbedModelSpecs.cmake).
const std::vector<std::pair<std::string, std::string>>& embedded_model_specs();

}  // namespace mirror::nn::detail
