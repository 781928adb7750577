// Sigmoid heads: a spec that ends in a sigmoid, and its fold into the binary-cross-entropy loss.
//
// Note [Folded sigmoid]: Mirror's losses take logits. A Keras binary classifier ends in
// Dense(1, activation="sigmoid") (or a final sigmoid Activation) and is trained with
// binary_crossentropy on labels 0/1; a multi-label one ends in Dense(K, sigmoid) with K float
// targets. Both compute sigmoid then cross-entropy, which is binary cross-entropy on the logits
// (the stable form, ops::binary_cross_entropy). The spec cannot decide alone whether to fold:
// the same sigmoid in front of a mean squared error is part of the model. So the parser keeps
// the sigmoid, and the trainer folds it (with_sigmoid_folded) when the run's loss is binary
// cross-entropy; the canonical spec then records "sigmoid_folded": true, the model outputs
// logits, and mirror-predict --output-kind probabilities applies the sigmoid again.
#include "mirror/nn/models.h"

namespace mirror::nn {

using nlohmann::json;

namespace {

/// Index of the layer that applies the final sigmoid, or -1: the last layer when it is a dense
/// with activation sigmoid, or a sigmoid activation layer reading the layer before it.
std::ptrdiff_t final_sigmoid(const json& layers) {
  const std::size_t n = layers.size();
  if (n == 0) return -1;
  const json& l = layers[n - 1];
  if (l.value("activation", "") != "sigmoid") return -1;
  const std::string type = l["type"].get<std::string>();
  if (type == "dense") return static_cast<std::ptrdiff_t>(n - 1);
  if (type != "activation" || n < 2) return -1;
  const bool reads_previous =
      !l.contains("inputs") ||
      (layers[n - 2].contains("name") && l["inputs"] == json::array({layers[n - 2]["name"]}));
  return reads_previous ? static_cast<std::ptrdiff_t>(n - 1) : -1;
}

}  // namespace

bool ModelSpec::ends_in_sigmoid() const { return final_sigmoid(layers_) >= 0; }

ModelSpec ModelSpec::with_sigmoid_folded() const {
  const std::ptrdiff_t at = final_sigmoid(layers_);
  MIRROR_CHECK(at >= 0, InvalidArgument,
               "model '" + name_ +
                   "': only a spec that ends in a sigmoid (a last dense with activation "
                   "sigmoid, or a sigmoid activation layer reading the layer before it) can "
                   "fold it into the binary-cross-entropy loss");
  ModelSpec out = *this;
  json& l = out.layers_[static_cast<std::size_t>(at)];
  if (l["type"] == "dense") {
    l["activation"] = "linear";
  } else {
    out.layers_.erase(static_cast<std::size_t>(at));
    if (!out.origin_.empty()) out.origin_.pop_back();
  }
  out.sigmoid_folded_ = true;
  return out;
}

std::int64_t ModelSpec::output_units() const {
  // Note [Dense labels]: a segmentation's classes are its last conv2d's filters.
  if (!layers_.empty() && layers_.back()["type"] == "conv2d" && layers_.back().contains("filters"))
    return layers_.back()["filters"].get<std::int64_t>();
  for (std::size_t i = layers_.size(); i-- > 0;) {
    const bool wrapped = layers_[i]["type"] == "time_distributed" && layers_[i].contains("layer");
    const json& l = wrapped ? layers_[i]["layer"] : layers_[i];  // a tagger's TimeDistributed(Dense)
    if (l["type"] != "dense") continue;
    return l.contains("units") ? l["units"].get<std::int64_t>() : 0;
  }
  return 0;
}

}  // namespace mirror::nn
