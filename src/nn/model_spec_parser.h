// defines: ModelSpecParser, which reads Mirror's layer lists and Keras's Sequential and
// functional JSON into ModelSpec's canonical layers. The model-level reading is in
// model_spec.cpp, the per-layer parsers in model_spec_layers.cpp. Internal to src/nn.
#pragma once

#include <array>
#include <cstddef>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "mirror/nn/models.h"
#include "nn/model_spec_fields.h"

namespace mirror::nn {

struct ModelSpecParser {
  using json = nlohmann::json;
  using Fields = spec_fields::Fields;

  std::string source;
  ModelSpec spec;
  Shape stated;  // the input shape the spec states (-1: open), as written
  std::string stated_where;
  std::string data_format;  // of the image layers: "" (none yet), channels_first, channels_last
  std::vector<std::string> input_names;  // of InputLayers (a graph's model input)
  std::string output_name;               // a Keras functional model's output layer
  std::string input_layer_name;          // and its input layer (config.input_layers)

  // ---- Keras 3's mask computations (model_spec_masks.cpp, Note [Keras mask nodes])
  struct MaskNode {
    std::string op;                   // lower-case class: notequal, any, logicalor, ...
    std::vector<std::string> inputs;  // the nodes or layers it reads
    nlohmann::json value;             // NotEqual's constant
    std::string where;                // for messages
  };
  std::map<std::string, MaskNode> mask_nodes;  // by name
  /// (the reading layer's name, keras_mask_argument of its call, its index in the file)
  std::vector<std::tuple<std::string, nlohmann::json, std::size_t>> passed_masks;
  /// Records `entry` when it is one of the ops Keras 3 writes to compute a mask; true then (the
  /// entry builds no layer).
  bool mask_node(const nlohmann::json& entry, const std::string& type, const nlohmann::json& name,
                 const nlohmann::json& inputs, std::size_t index);
  /// The tensors whose trailing padding a mask node masks (a union: Keras 3 ORs merged masks).
  std::set<std::string> mask_sources(const std::string& node, int depth) const;
  /// After resolve_graph, for Keras's masks: every mask a call is given must be the one Mirror
  /// computes for its input, and no BatchNormalization may read a masked sequence.
  void check_masks();

  // ---- reading a model (model_spec.cpp)
  std::string where(std::size_t index, const std::string& type) const;
  void state_input(const json& shape, bool with_batch, const std::string& where_text,
                   const std::function<void(const std::string&)>& fail);
  /// InputLayer / {"type": "input"}: states the input shape, builds nothing.
  void input(Fields& f, std::size_t index);
  void layer(const json& entry, std::size_t index);
  /// Note [Nested models] (model_spec_nested.cpp): a Keras Sequential or Functional used as a
  /// layer has its layers read into this model's graph; false for any other entry.
  bool nested_model(const json& entry, std::size_t index);
  /// Note [Folded softmax]: Mirror's losses take logits, so a softmax is accepted only on the
  /// model's last layer (Keras classifiers end so), from a dense (whose activation becomes
  /// linear) or an activation layer (dropped), and the spec remembers it (softmax_folded): the
  /// trainer then requires the softmax-cross-entropy loss, which applies it.
  void fold_softmax();
  /// Names the layers one entry produced [first, end) and chains them: the first reads the
  /// entry's inputs (when given), each further one the layer before it (Note [Spec graph]).
  void place_in_graph(std::size_t first, const json& name, const json& inputs);
  void layers(const json& list);
  /// {"class_name": "Sequential", "config": {"layers": [...], ...}, ...}
  void keras_model(const json& j);
  /// A functional model's input_layers / output_layers: one of each ([name, 0, 0], or a list
  /// of one such; Keras 3 writes the single input unwrapped).
  void functional_io(const json& config);
  /// {"name": ..., "input_shape": [...], "layers": [...]} (Mirror; to_json() writes this).
  void mirror_model(const json& j);
  /// The stated shape in Mirror's layout: a channels_last image [H, W, C] becomes [C, H, W].
  Shape stated_nchw() const;

  // ---- one layer each, returning its canonical layers (model_spec_layers.cpp)
  void image_format(Fields& f, bool keras);
  std::vector<json> conv2d(Fields& f, bool keras);
  /// Max and average pooling share their fields: pool, strides, padding, data_format.
  std::vector<json> pool2d(Fields& f, bool keras, const char* type);
  std::vector<json> maxpool2d(Fields& f, bool keras);
  std::vector<json> flatten(Fields& f, bool keras);
  std::vector<json> dense(Fields& f, bool);
  std::vector<json> dropout(Fields& f, bool);
  std::vector<json> embedding(Fields& f, bool);
  std::vector<json> masking(Fields& f, bool);
  /// GRU and LSTM (`kind`); `backwards`: the backward layer of a Bidirectional, which Keras
  /// writes with go_backwards = true.
  std::vector<json> recurrent(Fields& f, const std::string& kind, bool backwards);
  /// The recurrent layer inside a Bidirectional: a Keras {"class_name", "config"} or a Mirror
  /// {"type", ...} object, as canonical JSON.
  json wrapped_recurrent(Fields& outer, const std::string& field, const json& entry,
                         bool backwards);
  std::vector<json> gru(Fields& f, bool) { return recurrent(f, "gru", false); }
  std::vector<json> lstm(Fields& f, bool) { return recurrent(f, "lstm", false); }
  std::vector<json> bidirectional(Fields& f, bool);
  // 1-D layers over [T, C]
  /// An integer or a list of one (Keras writes kernel_size, strides, ... as [k]).
  std::int64_t single(Fields& f, const std::string& name, const std::string& alias,
                      std::int64_t fallback);
  /// Mirror's sequences are [T, C]: only Keras's channels_last.
  void sequence_format(Fields& f);
  std::string padding_1d(Fields& f, bool causal_ok);
  std::vector<json> conv1d(Fields& f, bool);
  std::vector<json> pool1d(Fields& f, const std::string& type);
  std::vector<json> maxpool1d(Fields& f, bool) { return pool1d(f, "maxpool1d"); }
  std::vector<json> avgpool1d(Fields& f, bool) { return pool1d(f, "avgpool1d"); }
  std::vector<json> global_pool1d(Fields& f, const std::string& type);
  std::vector<json> global_maxpool1d(Fields& f, bool);
  std::vector<json> global_avgpool1d(Fields& f, bool);
  std::vector<json> activation(Fields& f, bool);
  std::vector<json> relu(Fields& f, bool);
  // the layers of residual and branching models (cnn_layers.h)
  /// Note [Positive channel axes]: Keras's axis -1 is Mirror's channel axis; NCHW users may
  /// write 1 with channels_first. A positive axis (Keras's `axis=3` / `[3]`, counting the batch
  /// axis) is returned for the layer to record ("axis", "data_format"), and bind() checks it
  /// against the layer's input shape; null when there is nothing to record.
  json channel_axis(Fields& f, const std::string& also = "");
  /// Records a positive axis from channel_axis() on canonical layer `j`.
  void record_axis(json& j, const json& axis);
  /// After the last layer: the layout a recorded axis counts in, when no image layer had said it
  /// yet; channels_first's 1 is the channel axis and is dropped, as it always was.
  void resolve_axes();
  bool keras_entries = false;  // a layer was written in Keras's form (the layout defaults differ)
  std::vector<json> batch_normalization(Fields& f, bool sync_class);
  std::vector<json> sync_batch_normalization(Fields& f, bool);
  std::vector<json> plain_batch_normalization(Fields& f, bool);
  std::vector<json> layer_normalization(Fields& f, bool);
  std::vector<json> add(Fields& f, bool);
  std::vector<json> concatenate(Fields& f, bool);
  std::vector<json> global_average_pooling2d(Fields& f, bool keras);
  std::vector<json> average_pooling2d(Fields& f, bool keras);
  /// padding: n, [rows, columns] or [[top, bottom], [left, right]] (Keras's three forms).
  std::vector<json> zero_padding2d(Fields& f, bool keras);
  // preprocessing layers (model_spec_preprocessing.cpp, nn/preprocessing.h)
  std::vector<json> rescaling(Fields& f, bool keras);
  std::vector<json> normalization(Fields& f, bool keras);
  std::pair<std::int64_t, std::int64_t> target_size(Fields& f);
  std::vector<json> resizing(Fields& f, bool keras);
  std::vector<json> center_crop(Fields& f, bool keras);

  // ---- the layers Keras users combine with GRUs and CNNs (model_spec_layers_keras.cpp)
  std::size_t current_index = 0;  // the layer being read (layer() sets it; for nested layers)
  /// Keras's three forms of four sides (ZeroPadding2D's padding, Cropping2D's cropping): n,
  /// [rows, columns] or [[top, bottom], [left, right]]; top, bottom, left, right.
  std::array<std::int64_t, 4> four_sides(Fields& f, const std::string& name, std::int64_t fallback);
  std::vector<json> reshape(Fields& f, bool keras);
  std::vector<json> permute(Fields& f, bool keras);
  std::vector<json> repeat_vector(Fields& f, bool);
  std::vector<json> cropping2d(Fields& f, bool keras);
  std::vector<json> up_sampling2d(Fields& f, bool keras);
  std::vector<json> global_max_pooling2d(Fields& f, bool keras);
  std::vector<json> spatial_dropout(Fields& f, bool keras, int rank);
  std::vector<json> spatial_dropout1d(Fields& f, bool keras);
  std::vector<json> spatial_dropout2d(Fields& f, bool keras);
  std::vector<json> time_distributed(Fields& f, bool);
  /// A 2-D convolution's kernel / kernel_size (required) and one stride (dilation 1 only).
  struct Window {
    std::array<std::int64_t, 2> kernel;
    std::int64_t stride;
  };
  Window window(Fields& f);
  std::vector<json> conv2d_transpose(Fields& f, bool keras);
  /// Multiply, Subtract, Average, Maximum, Minimum (Multiply and Subtract with a number:
  /// scalar_operand).
  std::vector<json> merge(Fields& f, const char* type);
  std::vector<json> multiply(Fields& f, bool) { return merge(f, "multiply"); }
  std::vector<json> subtract(Fields& f, bool) { return merge(f, "subtract"); }
  std::vector<json> average(Fields& f, bool) { return merge(f, "average"); }
  std::vector<json> maximum(Fields& f, bool) { return merge(f, "maximum"); }
  std::vector<json> minimum(Fields& f, bool) { return merge(f, "minimum"); }
  /// Keras's ReLU(max_value, negative_slope, threshold) as its canonical layer (max_value < 0:
  /// none).
  json relu_layer(double max_value, double slope, double threshold);
  std::vector<json> leaky_relu(Fields& f, bool);
  std::vector<json> elu(Fields& f, bool);
  /// The layer an Activation(name) makes when `name` is a parametric activation (relu6,
  /// leaky_relu, elu); std::nullopt otherwise.
  std::optional<json> activation_layer_for(const std::string& name);
  std::vector<json> depthwise(Fields& f, bool keras, bool separable);
  /// The functional node's keyword arguments of the layer being read (Keras 3 "kwargs": the
  /// attention layers' use_causal_mask); empty for other sources.
  json call_kwargs = json::object();
  /// ... and its positional arguments (Keras 3 "args"); empty for other sources.
  json call_args = json::array();
  /// Note [Scalar operands] (model_spec_scalar_ops.cpp): the layer being read is Keras's x + c,
  /// x - c, c - x, x * c or x / c (`op`: add, subtract, multiply, divide) with a number c among
  /// its call arguments: the rescaling layer computing it; std::nullopt without a number.
  std::optional<json> scalar_operand(Fields& f, const std::string& op);
  std::vector<json> divide(Fields& f, bool);
  std::vector<json> attention(Fields& f, bool additive);
  std::vector<json> dot_attention(Fields& f, bool) { return attention(f, false); }
  std::vector<json> additive_attention(Fields& f, bool) { return attention(f, true); }
  std::vector<json> multi_head_attention(Fields& f, bool);
  // ---- keras.applications' ConvNeXt (model_spec_convnext.cpp)
  std::vector<json> layer_scale(Fields& f, bool);
  std::vector<json> stochastic_depth(Fields& f, bool);
  /// Note [Keras layers on image channels]: marks a channels_last Keras spec's Dense and
  /// LayerNormalization layers (bind() keeps the mark on those reading images).
  void mark_keras_channels_last();
  std::vector<json> depthwise_conv2d(Fields& f, bool keras) { return depthwise(f, keras, false); }
  std::vector<json> separable_conv2d(Fields& f, bool keras) { return depthwise(f, keras, true); }
};

}  // namespace mirror::nn
