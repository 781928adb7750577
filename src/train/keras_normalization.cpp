// Note [Adapted normalization] (include/mirror/train/keras_weights.h): the values Keras's
// Normalization.adapt() keeps as variables, written into the spec's normalization layers.
#include "mirror/error.h"
#include "mirror/train/keras_weights.h"

namespace mirror::train {

nn::ModelSpec with_keras_normalization(const nn::ModelSpec& spec,
                                       const std::vector<KerasVariables>& variables,
                                       const std::string& source) {
  nlohmann::json j = spec.to_json();
  int k = 0;  // normalization layers so far: Keras's per-class count names the path
  bool changed = false;
  for (nlohmann::json& l : j["layers"]) {
    if (l.value("type", "") != "normalization") continue;
    const std::string path = "layers/normalization" + (k > 0 ? "_" + std::to_string(k) : "");
    ++k;
    if (l.contains("mean")) continue;  // stated in the model: Keras has no variables for it
    const KerasVariables* found = nullptr;
    for (const KerasVariables& v : variables) {
      if (v.path == path) found = &v;
    }
    MIRROR_CHECK(found != nullptr && found->values.size() >= 2, DataError,
                 source + " holds no adapted values for normalization layer " + std::to_string(k) +
                     " (Keras keeps them at " + path +
                     "/vars/0 and 1 after adapt()): save the weights of the adapted model");
    const std::vector<float> mean = found->values[0].to_vector<float>();
    const std::vector<float> variance = found->values[1].to_vector<float>();
    MIRROR_CHECK(!mean.empty() && mean.size() == variance.size(), DataError,
                 source + ": " + path + " holds " + std::to_string(mean.size()) + " means and " +
                     std::to_string(variance.size()) + " variances");
    MIRROR_CHECK(!l["axis"].is_null() || mean.size() == 1, DataError,
                 source + ": " + path + " holds " + std::to_string(mean.size()) +
                     " means for a normalization with axis null (one mean)");
    l["mean"] = mean;
    l["variance"] = variance;
    l["adapted"] = true;  // Keras's variables again on export (keras_weights_layers.cpp)
    l["count"] = found->values.size() > 2 && found->values[2].numel() == 1
                     ? static_cast<std::int64_t>(found->values[2].to_vector<float>()[0])
                     : 0;
    changed = true;
  }
  return changed ? nn::ModelSpec::from_json(j, source + " (its model with adapted normalization)")
                 : spec;
}

}  // namespace mirror::train
