// defines: ModelSpec, a Sequential model described as data (a JSON layer list in Mirror's or
// Keras's field names), the DataShape it is bound to, and make_model, which builds it. The
// reference models (cnn, gru-rows, gru-words) are built-in specs; see docs/model-spec.md.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mirror/nn/sequential.h"

namespace mirror::nn {

/// What the data determines about a model.
struct DataShape {
  Shape sample_shape;                   // one sample, e.g. [1,28,28], [28,28], [max_len]
  DType input_dtype = DType::kFloat32;  // kInt32 for token ids
  std::int64_t outputs = 0;             // classes (class labels) or target elements (float targets)
  std::int64_t vocab = 0;               // token data only
  // Note [Dense labels] (mirror/data/dataset.h): class labels per step [T] or per pixel [H, W]
  // (the model then outputs [T, outputs] or [outputs, H, W]); empty for one per sample.
  Shape label_shape{};
  // Float targets of more than one axis (an autoencoder's images, in Mirror's layout): the model
  // outputs exactly this shape; empty otherwise.
  Shape target_shape{};
};

/// A Sequential layer list. Parsing validates every layer and field and normalises it to
/// Mirror's canonical form (to_json()); bind() fills what the data decides; make_model builds it.
/// Errors are InvalidArgument (DataError for an unreadable file) naming the source, the layer
/// index and type, the field, what was found and what is supported.
class ModelSpec {
 public:
  ModelSpec() = default;

  /// A spec shipped with the library (embedded from examples/models/*.json at build time):
  /// "cnn", "gru-rows", "gru-words", "cnn-stride2". InvalidArgument listing them otherwise.
  static ModelSpec builtin(const std::string& name);
  static std::vector<std::string> builtin_names();
  /// Reads a JSON file: Mirror's format, a Keras Sequential.to_json(), or a bare layer list.
  /// name() is the spec's own name (Mirror's "name", a Keras model's config.name), or the file's
  /// stem when it states none.
  static ModelSpec from_file(const std::string& path);
  /// Accepts everything from_file does, to_json()'s output (checkpoints), and the legacy
  /// {"name": "cnn" | "gru-rows" | "gru-words", "num_classes", "vocab", "max_len"} (bound).
  /// `source` names the JSON in error messages.
  static ModelSpec from_json(const nlohmann::json& json, const std::string& source = "model spec");

  /// Canonical form: {"name", "input_shape" (when stated or bound), "layers": [...]} with
  /// Mirror's field names and every default written out. from_json(to_json()) is the identity.
  nlohmann::json to_json() const;

  /// Fills what the spec leaves to the data (input shape, the Embedding's input_dim = vocab, the
  /// last Dense's units = outputs) and checks what it states (InvalidArgument naming both
  /// values), then checks every layer's input shape and that the model outputs [outputs].
  ModelSpec bind(const DataShape& data) const;
  bool bound() const { return bound_; }
  /// The spec ended in a softmax, folded into the softmax-cross-entropy loss (Note [Folded
  /// softmax] in src/nn/model_spec.cpp): the model outputs logits, and only that loss fits it.
  bool softmax_folded() const { return softmax_folded_; }
  /// Note [Folded sigmoid] (src/nn/model_spec_sigmoid.cpp): whether the spec ends in a sigmoid
  /// (a last Dense with activation sigmoid, or a last sigmoid Activation reading the layer
  /// before it), which binary cross-entropy takes over; sigmoid_folded() once it has.
  bool ends_in_sigmoid() const;
  bool sigmoid_folded() const { return sigmoid_folded_; }
  /// A copy whose final sigmoid is folded into the binary-cross-entropy loss: the Dense becomes
  /// linear or the Activation layer is dropped, and to_json() records "sigmoid_folded": true.
  /// InvalidArgument when the spec does not end in a sigmoid.
  ModelSpec with_sigmoid_folded() const;
  /// Note [Sequence masks] (nn/layer.h): true for Keras's masks (every Keras model, or a Mirror
  /// spec with "masks": "keras"): padding is masked only where Keras masks it; false for Mirror's
  /// (the data's lengths reach every sequence layer).
  bool keras_masks() const { return keras_masks_; }
  /// Note [Keras's image layout]: the model states a channels_last image input [H, W, C] (a Keras
  /// CNN), which input_shape() gives as Mirror's [C, H, W]. Samples given in Keras's order
  /// [H, W, C] (NHWC arrays, as Keras reads them) are then transposed per batch by mirror-train,
  /// mirror-predict and the Python module; NCHW samples are read as they are. Canonical JSON:
  /// "input_layout": "channels_last".
  bool channels_last_input() const { return channels_last_input_; }
  /// Note [Raw values]: whether the model's first layer is a Rescaling or a Normalization (a Keras
  /// tutorial's Rescaling(1/255)): such a model reads uint8 data as stored (0..255), as Keras
  /// gives them to it, where Mirror otherwise scales uint8 to [0, 1].
  bool reads_raw_values() const;
  /// The units the last Dense states (a TimeDistributed one too), or the filters of a last
  /// Conv2D (a segmentation); 0 when it leaves them to the data or the spec has none.
  std::int64_t output_units() const;

  /// A copy whose every batch_normalization is synchronized across replicas (mirror-train's
  /// --sync-batchnorm, like PyTorch's convert_sync_batchnorm).
  ModelSpec with_synchronized_batchnorm() const;

  /// The builtin name, the "name" the JSON states, or (from_file) the file's stem.
  const std::string& name() const { return name_; }
  /// A Mirror spec's free-text "description" ("" when none; not part of to_json(), so it never
  /// decides whether a checkpoint fits).
  const std::string& description() const { return description_; }
  /// Canonical layers ({"type": ..., fields...}), in order.
  const nlohmann::json& layers() const { return layers_; }
  /// The input shape without batch (NCHW for images); -1 for a dimension left open. Empty when
  /// neither stated nor bound.
  const Shape& input_shape() const { return input_shape_; }

 private:
  std::string name_ = "model";
  std::string description_;
  nlohmann::json layers_ = nlohmann::json::array();
  Shape input_shape_;
  bool bound_ = false;
  bool softmax_folded_ = false;
  bool sigmoid_folded_ = false;
  bool keras_masks_ = false;
  bool channels_last_input_ = false;
  std::vector<std::size_t> origin_;  // each layer's index in the parsed JSON (for messages)

  friend struct ModelSpecParser;
};

/// Builds a bound spec (InvalidArgument otherwise), initialised from `seed`.
Sequential make_model(const ModelSpec& bound, DType dtype = DType::kFloat32,
                      Device device = Device::cpu(), std::uint64_t seed = 0);
/// The built-in image models bound to Fashion-MNIST's shape and 10 classes:
/// make_model("cnn") ([1,28,28]) / make_model("gru-rows") ([28,28]).
Sequential make_model(const std::string& name, DType dtype = DType::kFloat32,
                      Device device = Device::cpu(), std::uint64_t seed = 0);

/// The CNN of the TensorFlow "layers" tutorial (builtin "cnn") for [1, 28, 28] images:
///   Conv2D(32, 5x5, same, relu) -> MaxPool 2x2 -> Conv2D(64, 5x5, same, relu) -> MaxPool 2x2
///   -> Flatten -> Dense(1024, relu) -> Dropout(0.4) -> Dense(num_classes)
/// 3,274,634 parameters for 10 classes.
Sequential make_cnn(DType dtype = DType::kFloat32, Device device = Device::cpu(),
                    std::uint64_t seed = 0, int num_classes = 10);

/// Builtin "gru-rows": a 28x28 image read as 28 steps of 28 features: GRU(64) -> Dense.
Sequential make_row_gru(DType dtype = DType::kFloat32, Device device = Device::cpu(),
                        std::uint64_t seed = 0, int num_classes = 10);

/// Builtin "gru-words": padded int32 ids [max_len] (0 = padding, trailing):
///   Masking -> Embedding(vocab, 32) -> GRU(64) -> Dense(num_classes)
/// Batches may use any T (Embedding and GRU accept it); max_len is the built/summary length.
Sequential make_word_gru(std::int64_t vocab, int num_classes, int max_len = 32,
                         DType dtype = DType::kFloat32, Device device = Device::cpu(),
                         std::uint64_t seed = 0);

}  // namespace mirror::nn
