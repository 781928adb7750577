// What the parser adds for keras.applications' ConvNeXt: its LayerScale and StochasticDepth
// layers, and the mark that lets a Keras Dense or LayerNormalization read an image (Note [Keras
// layers on image channels], nn/image_channels.h).
#include <string>
#include <vector>

#include "nn/model_spec_parser.h"

namespace mirror::nn {

using nlohmann::json;
using namespace spec_fields;  // NOLINT(google-build-using-namespace): the parsers' own helpers

/// keras.applications' LayerScale (ConvNeXt): {"init_values": 1e-6, "projection_dim": C}.
std::vector<json> ModelSpecParser::layer_scale(Fields& f, bool) {
  std::string field;
  if (!f.take("init_values", "", &field)) f.fail("init_values", "required (gamma's initial value)");
  const double init = f.number("init_values", "", 0.0);
  const auto dim = f.integer("projection_dim", "", 0, 1);
  if (dim == 0) f.fail("projection_dim", "required (the number of channels)");
  f.finish({"batch_input_shape", "input_shape"});
  return {{{"type", "layer_scale"}, {"init_values", init}, {"projection_dim", dim}}};
}

/// keras.applications' StochasticDepth: {"drop_path_rate": r} (Mirror: "rate").
std::vector<json> ModelSpecParser::stochastic_depth(Fields& f, bool) {
  const double rate = f.number("rate", "drop_path_rate", 0.0);
  if (!(rate >= 0 && rate < 1)) {
    f.fail("drop_path_rate", "expected a number in [0, 1), got " + std::to_string(rate));
  }
  f.finish({"batch_input_shape", "input_shape"});
  return {{{"type", "stochastic_depth"}, {"rate", rate}}};
}

/// After the last layer, for a Keras spec whose images are channels_last: every Dense and
/// LayerNormalization may read an image (its last axis is C), so it is marked; bind() keeps the
/// mark only where the input is an image.
void ModelSpecParser::mark_keras_channels_last() {
  if (!keras_entries || data_format == "channels_first") return;
  for (json& l : spec.layers_) {
    const std::string type = l["type"].get<std::string>();
    if (type == "dense" || type == "layer_normalization") l["keras_channels_last"] = true;
  }
}

}  // namespace mirror::nn
