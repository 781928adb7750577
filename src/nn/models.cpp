// make_model (a bound ModelSpec -> Sequential) and the reference models as built-in specs.
#include "mirror/nn/models.h"

#include <algorithm>
#include <map>
#include <optional>

#include "mirror/nn/bidirectional.h"
#include "mirror/nn/cnn_layers.h"
#include "mirror/nn/conv1d.h"
#include "mirror/nn/image_channels.h"
#include "mirror/nn/keras_ops_layers.h"
#include "mirror/nn/layers.h"
#include "mirror/nn/preprocessing.h"
#include "mirror/nn/recurrent.h"
#include "nn/model_spec_internal.h"

namespace mirror::nn {

using nlohmann::json;

namespace {

int as_int(const json& j) { return static_cast<int>(j.get<std::int64_t>()); }

Padding as_padding(const json& j) { return j == "same" ? Padding::kSame : Padding::kValid; }

/// The layers of residual and branching models (cnn_layers.h); null for other types.
std::unique_ptr<Layer> make_graph_layer(const json& l) {
  const std::string type = l["type"].get<std::string>();
  if (type == "batch_normalization") {
    return std::make_unique<BatchNormalization>(
        l["momentum"].get<double>(), l["epsilon"].get<double>(), l["center"].get<bool>(),
        l["scale"].get<bool>(), l["synchronized"].get<bool>());
  }
  if (type == "layer_normalization") {
    return std::make_unique<LayerNormalization>(l["epsilon"].get<double>(), l["center"].get<bool>(),
                                                l["scale"].get<bool>());
  }
  if (type == "add") return std::make_unique<Add>();
  if (type == "concatenate") return std::make_unique<Concatenate>();
  if (type == "global_average_pooling2d") return std::make_unique<GlobalAveragePooling2D>();
  if (type == "average_pooling2d") {
    return std::make_unique<AveragePooling2D>(as_int(l["pool"][0]), as_int(l["strides"][0]),
                                              as_padding(l["padding"]));
  }
  if (type == "zero_padding2d") {
    const json& p = l["padding"];
    return std::make_unique<ZeroPadding2D>(as_int(p[0][0]), as_int(p[0][1]), as_int(p[1][0]),
                                           as_int(p[1][1]));
  }
  return nullptr;
}

std::vector<double> doubles(const json& v) {
  std::vector<double> out;
  for (const json& x : v.is_array() ? v : json::array({v})) out.push_back(x.get<double>());
  return out;
}

/// The preprocessing layers (preprocessing.h); null for other types.
std::unique_ptr<Layer> make_preprocessing_layer(const json& l) {
  const std::string type = l["type"].get<std::string>();
  if (type == "rescaling")
    return std::make_unique<Rescaling>(doubles(l["scale"]), doubles(l["offset"]));
  if (type == "normalization") {
    // Note [Unstated normalization] (train_data.cpp): the trainer refuses it before this.
    MIRROR_CHECK(l.contains("mean"), InvalidArgument,
                 "make_model: a normalization layer needs its mean and variance, got " + l.dump());
    return std::make_unique<Normalization>(doubles(l["mean"]), doubles(l["variance"]),
                                           l["invert"].get<bool>());
  }
  if (type == "resizing") {
    return std::make_unique<Resizing>(as_int(l["height"]), as_int(l["width"]),
                                      l["interpolation"] == "nearest"
                                          ? Resizing::Interpolation::kNearest
                                          : Resizing::Interpolation::kBilinear,
                                      l["crop_to_aspect_ratio"].get<bool>());
  }
  if (type == "center_crop")
    return std::make_unique<CenterCrop>(as_int(l["height"]), as_int(l["width"]));
  return nullptr;
}

std::unique_ptr<Layer> make_layer(const json& l, bool keras);

/// make_layer without the spec's initializers and input activations.
std::unique_ptr<Layer> make_plain_layer(const json& l, bool keras) {
  const std::string type = l["type"].get<std::string>();
  const auto inner = [keras](const json& wrapped) { return make_layer(wrapped, keras); };
  if (l.value("keras_channels_last", false)) {  // Note [Keras layers on image channels]
    json plain = l;
    plain.erase("keras_channels_last");
    return std::make_unique<ChannelsLastImage>(make_layer(plain, keras));
  }
  if (auto layer = detail::make_keras_layer(l, inner)) return layer;
  if (type == "conv2d") {
    return std::make_unique<Conv2D>(as_int(l["filters"]), as_int(l["kernel"][0]),
                                    as_int(l["kernel"][1]), as_int(l["strides"][0]),
                                    as_padding(l["padding"]), parse_activation(l["activation"]),
                                    l.value("use_bias", true), l.value("groups", 1));
  }
  if (auto layer = make_graph_layer(l)) return layer;
  if (auto layer = make_preprocessing_layer(l)) return layer;
  if (type == "maxpool2d") {
    return std::make_unique<MaxPool2D>(as_int(l["pool"][0]), as_int(l["strides"][0]),
                                       as_padding(l["padding"]));
  }
  if (type == "flatten") return std::make_unique<Flatten>();
  if (type == "dense") {
    return std::make_unique<Dense>(as_int(l["units"]), parse_activation(l["activation"]));
  }
  if (type == "dropout") {
    std::vector<std::int64_t> noise_shape;
    for (const json& d : l.value("noise_shape", json::array())) {
      noise_shape.push_back(d.is_null() ? -1 : d.get<std::int64_t>());
    }
    return std::make_unique<Dropout>(l["rate"].get<double>(), noise_shape,
                                     l.value("channels_last", false));
  }
  if (type == "embedding") {
    return std::make_unique<Embedding>(l["input_dim"].get<std::int64_t>(), as_int(l["output_dim"]),
                                       !keras);
  }
  if (type == "masking") return std::make_unique<Masking>();
  if (type == "gru" || type == "lstm") {
    std::unique_ptr<Recurrent> rnn;
    if (type == "gru") rnn = std::make_unique<GRU>(as_int(l["units"]), l["return_sequences"]);
    if (type == "lstm") {
      rnn = std::make_unique<LSTM>(as_int(l["units"]), l["return_sequences"],
                                   l.value("unit_forget_bias", true));
    }
    rnn->set_zero_output_for_mask(l.value("zero_output_for_mask", true));  // Note [Carried outputs]
    return rnn;
  }
  if (type == "bidirectional") {
    auto inner = make_layer(l["layer"], keras);
    auto* rnn = dynamic_cast<Recurrent*>(inner.get());
    MIRROR_CHECK(rnn != nullptr, InvalidArgument,
                 "make_model: a bidirectional wraps gru or lstm, got " + l["layer"].dump());
    inner.release();
    return std::make_unique<Bidirectional>(std::unique_ptr<Recurrent>(rnn),
                                           parse_merge_mode(l["merge_mode"]));
  }
  if (type == "conv1d") {
    return std::make_unique<Conv1D>(as_int(l["filters"]), as_int(l["kernel"]), as_int(l["strides"]),
                                    l["padding"].get<std::string>(), as_int(l["dilation_rate"]),
                                    parse_activation(l["activation"]));
  }
  if (type == "maxpool1d" || type == "avgpool1d") {
    return std::make_unique<Pool1D>(type == "maxpool1d" ? ops::Pool1D::kMax : ops::Pool1D::kAverage,
                                    as_int(l["pool"]), as_int(l["strides"]),
                                    l["padding"].get<std::string>());
  }
  if (type == "global_maxpool1d") return std::make_unique<GlobalPool1D>(ops::Pool1D::kMax);
  if (type == "global_avgpool1d") return std::make_unique<GlobalPool1D>(ops::Pool1D::kAverage);
  if (type == "activation" && l["activation"] == "gelu" && !l.value("approximate", false)) {
    return ActivationLayer::gelu();
  }
  if (type == "activation") {
    const std::string name = l["activation"] == "gelu" ? "gelu_tanh" : l["activation"];
    if (auto f = input_activation(name)) return std::make_unique<ParametricActivation>(*f);
  }
  if (type == "activation")
    return std::make_unique<ActivationLayer>(parse_activation(l["activation"]));
  throw InvalidArgument("make_model: unknown canonical layer " + l.dump());
}

/// One canonical layer (already validated by the parser and bind) as a Layer; `keras`: the
/// model has Keras's masks (Note [Sequence masks]), whose embeddings have no padding row. The
/// layer is told the spec's initializers (Note [Spec initializers], nn/init.h) and wrapped to
/// apply an activation differentiated through its input (Note [Activations through the input],
/// nn/keras_ops_layers.h).
std::unique_ptr<Layer> make_layer(const json& l, bool keras) {
  const std::string type = l["type"].get<std::string>();
  std::optional<ops::Eltwise> post;
  if (type != "activation" && l.contains("activation") && l["activation"].is_string()) {
    post = input_activation(l["activation"].get<std::string>());
  }
  std::unique_ptr<Layer> layer;
  if (post) {
    json linear = l;
    linear["activation"] = "linear";
    layer = make_plain_layer(linear, keras);
  } else {
    layer = make_plain_layer(l, keras);
  }
  const std::string suffix = "_initializer";
  for (const auto& [key, value] : l.items()) {
    if (key.size() > suffix.size() && key.ends_with(suffix)) {
      layer->set_initializer(key.substr(0, key.size() - suffix.size()), value);
    }
  }
  if (post) return std::make_unique<ActivatedLayer>(std::move(layer), *post);
  return layer;
}

}  // namespace

std::unique_ptr<Layer> detail::make_canonical_layer(const json& l, bool keras_masks) {
  return make_layer(l, keras_masks);
}

namespace {

DataShape image_data(const std::string& name, int num_classes) {
  DataShape d;
  const bool rows = name.size() > 5 && name.compare(name.size() - 5, 5, "-rows") == 0;
  d.sample_shape = rows ? Shape{28, 28} : Shape{1, 28, 28};
  d.outputs = num_classes;
  return d;
}

}  // namespace

Sequential make_model(const ModelSpec& bound, DType dtype, Device device, std::uint64_t seed) {
  MIRROR_CHECK(bound.bound(), InvalidArgument,
               "make_model: model '" + bound.name() +
                   "' is not bound to data; call spec.bind(DataShape{...}) first");
  Sequential m;
  // A graph spec names each layer's inputs (already sorted and checked, Note [Spec graph]).
  std::map<std::string, int> index = {{"input", Sequential::kModelInput}};
  for (const json& l : bound.layers()) {
    if (!l.contains("inputs")) {
      m.add(make_layer(l, bound.keras_masks()));
      continue;
    }
    std::vector<int> inputs;
    for (const json& name : l["inputs"]) inputs.push_back(index.at(name.get<std::string>()));
    m.add(make_layer(l, bound.keras_masks()), std::move(inputs));
    index[l["name"].get<std::string>()] = static_cast<int>(m.layers().size()) - 1;
  }
  m.set_keras_masks(bound.keras_masks());
  m.set_channels_last_input(bound.channels_last_input());
  m.build(bound.input_shape(), seed, dtype, device);
  return m;
}

Sequential make_model(const std::string& name, DType dtype, Device device, std::uint64_t seed) {
  const auto names = ModelSpec::builtin_names();
  MIRROR_CHECK(name != "gru-words" && std::find(names.begin(), names.end(), name) != names.end(),
               InvalidArgument,
               "make_model(\"" + name +
                   "\"): this shorthand builds the built-in image models (cnn, cnn-stride2, "
                   "resnet, inception, gru-rows) for 28x28 images; use "
                   "make_model(ModelSpec::builtin(name).bind(DataShape{...}))");
  return make_model(ModelSpec::builtin(name).bind(image_data(name, 10)), dtype, device, seed);
}

Sequential make_cnn(DType dtype, Device device, std::uint64_t seed, int num_classes) {
  return make_model(ModelSpec::builtin("cnn").bind(image_data("cnn", num_classes)), dtype, device,
                    seed);
}

Sequential make_row_gru(DType dtype, Device device, std::uint64_t seed, int num_classes) {
  return make_model(ModelSpec::builtin("gru-rows").bind(image_data("gru-rows", num_classes)), dtype,
                    device, seed);
}

Sequential make_word_gru(std::int64_t vocab, int num_classes, int max_len, DType dtype,
                         Device device, std::uint64_t seed) {
  MIRROR_CHECK(max_len > 0, InvalidArgument,
               "make_word_gru: max_len must be positive, got " + std::to_string(max_len));
  DataShape d{{max_len}, DType::kInt32, num_classes, vocab};
  return make_model(ModelSpec::builtin("gru-words").bind(d), dtype, device, seed);
}

}  // namespace mirror::nn
