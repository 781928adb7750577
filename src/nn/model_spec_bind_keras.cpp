// The canonical layers of nn/keras_layers.h (and the attention and depthwise layers) as Layers,
// and bind()'s shape walk for them: bind builds the layer once on the CPU, so its build() is the
// one place that decides output shapes and refuses inputs that do not fit.
#include <set>

#include "mirror/nn/attention.h"
#include "mirror/nn/image_channels.h"
#include "mirror/nn/stochastic_depth.h"
#include "mirror/nn/keras_layers.h"
#include "mirror/nn/keras_ops_layers.h"
#include "nn/model_spec_augment.h"
#include "nn/model_spec_internal.h"

namespace mirror::nn::detail {

using nlohmann::json;

namespace {

int as_int(const json& j) { return static_cast<int>(j.get<std::int64_t>()); }

Shape as_shape(const json& j) {
  Shape s;
  for (const json& d : j) s.push_back(d.get<std::int64_t>());
  return s;
}

/// A layer's error without its own "<name> (<kind>): " prefix (bind names the spec's layer).
std::string reason(const std::string& what, const Layer& layer) {
  const std::string prefix = layer.name() + " (" + layer.kind() + "): ";
  return what.rfind(prefix, 0) == 0 ? what.substr(prefix.size()) : what;
}

}  // namespace

std::unique_ptr<Layer> make_keras_layer(
    const json& l, const std::function<std::unique_ptr<Layer>(const json&)>& make_inner) {
  const std::string type = l["type"].get<std::string>();
  if (auto augment = make_augment_layer(l)) return augment;
  if (type == "reshape") {
    return std::make_unique<Reshape>(as_shape(l["target_shape"]), l["channels_last"].get<bool>());
  }
  if (type == "permute") {
    std::vector<int> dims;
    for (const json& d : l["dims"]) dims.push_back(as_int(d));
    return std::make_unique<Permute>(dims, l["channels_last"].get<bool>());
  }
  if (type == "repeat_vector") return std::make_unique<RepeatVector>(as_int(l["n"]));
  if (type == "cropping2d") {
    const json& c = l["cropping"];
    return std::make_unique<Cropping2D>(as_int(c[0][0]), as_int(c[0][1]), as_int(c[1][0]),
                                        as_int(c[1][1]));
  }
  if (type == "up_sampling2d") {
    return std::make_unique<UpSampling2D>(as_int(l["size"][0]), as_int(l["size"][1]));
  }
  if (type == "global_max_pooling2d") return std::make_unique<GlobalMaxPooling2D>();
  if (type == "spatial_dropout1d" || type == "spatial_dropout2d") {
    return std::make_unique<SpatialDropout>(l["rate"].get<double>(),
                                            type == "spatial_dropout1d" ? 2 : 3);
  }
  if (type == "time_distributed") return std::make_unique<TimeDistributed>(make_inner(l["layer"]));
  if (type == "conv2d_transpose") {
    return std::make_unique<Conv2DTranspose>(
        as_int(l["filters"]), as_int(l["kernel"][0]), as_int(l["kernel"][1]),
        as_int(l["strides"][0]), l["padding"] == "same" ? Padding::kSame : Padding::kValid,
        parse_activation(l["activation"].get<std::string>()), l["use_bias"].get<bool>());
  }
  if (type == "multiply")
    return std::make_unique<ElementwiseMerge>(ElementwiseMerge::Op::kMultiply);
  if (type == "subtract")
    return std::make_unique<ElementwiseMerge>(ElementwiseMerge::Op::kSubtract);
  if (type == "average") return std::make_unique<ElementwiseMerge>(ElementwiseMerge::Op::kAverage);
  if (type == "maximum" || type == "minimum") return std::make_unique<Extremum>(type == "minimum");
  if (type == "relu" || type == "leaky_relu" || type == "elu") {
    ops::Eltwise f;
    f.kind = type == "relu"         ? ops::Eltwise::Kind::kRelu
             : type == "leaky_relu" ? ops::Eltwise::Kind::kLeakyRelu
                                    : ops::Eltwise::Kind::kElu;
    f.negative_slope = l.value("negative_slope", 0.0);
    f.threshold = l.value("threshold", 0.0);
    f.alpha = l.value("alpha", 1.0);
    f.max_value =
        l.contains("max_value") && l["max_value"].is_number() ? l["max_value"].get<double>() : -1.0;
    return std::make_unique<ParametricActivation>(f);
  }
  if (type == "attention" || type == "additive_attention") {
    return std::make_unique<Attention>(
        type == "attention" ? Attention::Score::kDot : Attention::Score::kAdditive,
        l["use_scale"].get<bool>(), l["dropout"].get<double>(), l["causal"].get<bool>());
  }
  if (type == "multi_head_attention") {
    return std::make_unique<MultiHeadAttention>(as_int(l["num_heads"]), as_int(l["key_dim"]),
                                                as_int(l["value_dim"]), l["dropout"].get<double>(),
                                                l["use_bias"].get<bool>(), l.value("output_dim", 0),
                                                l["causal"].get<bool>());
  }
  if (type == "layer_scale") {
    return std::make_unique<LayerScale>(l["init_values"].get<double>(),
                                        l["projection_dim"].get<std::int64_t>());
  }
  if (type == "stochastic_depth") return std::make_unique<StochasticDepth>(l["rate"].get<double>());
  if (type == "depthwise_conv2d" || type == "separable_conv2d") {
    return std::make_unique<DepthwiseConv2D>(
        as_int(l["kernel"][0]), as_int(l["kernel"][1]), as_int(l["strides"][0]),
        l["padding"] == "same" ? Padding::kSame : Padding::kValid, as_int(l["depth_multiplier"]),
        parse_activation(l["activation"].get<std::string>()), l["use_bias"].get<bool>(),
        type == "separable_conv2d" ? as_int(l["filters"]) : 0);
  }
  return nullptr;
}

bool is_keras_merge(const std::string& type) {
  static const std::set<std::string> merges = {"multiply",
                                               "subtract",
                                               "average",
                                               "maximum",
                                               "minimum",
                                               "attention",
                                               "additive_attention",
                                               "multi_head_attention"};
  return merges.count(type) > 0;
}

std::optional<Shape> bind_keras_layer(const std::string& where, const json& given,
                                      const Shape& input) {
  // Note [Activations through the input]: a wrapper applies those; the shapes are the layer's.
  json l = given;
  if (l.contains("activation") && l["activation"].is_string() &&
      input_activation(l["activation"].get<std::string>())) {
    l["activation"] = "linear";
  }
  std::unique_ptr<Layer> layer =
      make_keras_layer(l, [](const nlohmann::json& w) { return make_canonical_layer(w); });
  if (layer == nullptr || is_keras_merge(l["type"].get<std::string>())) return std::nullopt;
  layer->set_name(l["type"].get<std::string>());
  InitRng rng(0);
  try {
    return layer->build(input, DType::kFloat32, Device::cpu(), rng);
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(where + ": " + reason(e.what(), *layer));
  }
}

Shape bind_keras_merge(const std::string& where, const json& l, const std::vector<Shape>& inputs) {
  std::unique_ptr<Layer> layer =
      make_keras_layer(l, [](const nlohmann::json& w) { return make_canonical_layer(w); });
  auto* merge = dynamic_cast<MergeLayer*>(layer.get());
  MIRROR_CHECK(merge != nullptr, InvalidArgument, where + ": not a merge layer");
  layer->set_name(l["type"].get<std::string>());
  std::vector<std::string> names;
  for (const json& n : l["inputs"]) names.push_back(n.get<std::string>());
  try {
    return merge->build_inputs(inputs, names, DType::kFloat32, Device::cpu());
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(where + ": " + reason(e.what(), *layer));
  }
}

}  // namespace mirror::nn::detail
