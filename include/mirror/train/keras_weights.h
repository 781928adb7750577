// defines: Keras weights both ways: a model's Mirror tensors as the variables of the equivalent
// Keras 3 model, laid out as Model.save_weights writes them (and back), the .weights.h5 file
// that holds them, and the table of per-layer conversions every layer type registers in.
//
// Note [Keras weights]
// Keras 3's .weights.h5 is an HDF5 file with one group per object that owns variables, at the
// object's path in the model: "layers/<name>/vars/<i>" for a layer, "layers/<name>/cell/vars/<i>"
// for an RNN's cell, "layers/bidirectional/forward_layer/cell/vars/<i>", and so on. <name> is
// NOT the layer's own name: it is the snake_case class name ("conv2d", "gru", "re_lu"), counted
// per class in the order of model.layers ("dense", "dense_1", ...). model.layers is the list
// order for a Sequential and, for a functional model, the order Keras's map_graph gives:
// decreasing depth (the longest path to the output), ties by first visit of a depth-first walk
// from the output. Keras writes that very order into to_json(), so a Keras model read by Mirror
// keeps it; Mirror's own graph specs are ordered the same way here (keras_layer_order), so their
// files load into the Keras model built from the same graph.
// Variables are float32 arrays in Keras's layout (HWIO kernels, [F, 3H] GRU kernels with gates
// z, r, h, one LSTM bias, ...); every conversion is in one table, keyed by Mirror's canonical layer
// type (register_keras_conversion), and used by both directions, by mirror-export
// --keras-weights, mirror-train --init-weights and the Python bindings.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mirror/nn/models.h"
#include "mirror/tensor.h"
#include "mirror/train/checkpoint.h"

namespace mirror::train {

/// The variables of one Keras object, as save_weights writes them.
struct KerasVariables {
  /// The object's path in the file: "layers/conv2d", "layers/gru_1/cell", ... (the file holds
  /// "<path>/vars/0", "<path>/vars/1", ...).
  std::string path;
  /// The Mirror layer they belong to ("gru_2"), for messages; empty when read from a file.
  std::string layer;
  /// float32 CPU tensors in Keras's shapes and order.
  std::vector<Tensor> values;
};

/// A model's parameters and buffers by name ("dense_1/kernel", "batch_normalization_1/moving_mean")
/// -> the variables of the equivalent Keras model, in Keras's layer order. `tensors` may hold
/// more (a checkpoint's optimizer state is ignored). InvalidArgument naming the layer when a layer
/// type has no conversion (or its place in the graph has none: a Dense reading a Flatten of images
/// through an Add, say); DataError naming the tensor when one is missing or has another shape.
std::vector<KerasVariables> to_keras_weights(const nn::ModelSpec& bound,
                                             const NamedTensors& tensors);

/// The inverse: Keras variables (read from a file, or another tool's) -> every parameter and buffer
/// of the model built from `bound`, float32 on the CPU. Paths the model does not have are ignored
/// (as Keras's load_weights ignores them: an optimizer's state, say); a path the model needs that
/// is missing, or a variable count or shape that differs, is a DataError naming `source`, the path,
/// the Mirror layer and both shapes. A Keras LSTM's single bias goes to Mirror's `bias`, with zeros
/// in `recurrent_bias` (the same function).
NamedTensors from_keras_weights(const nn::ModelSpec& bound,
                                const std::vector<KerasVariables>& variables,
                                const std::string& source = "Keras weights");

/// The paths, variable counts and shapes the Keras twin of `bound` has (to_keras_weights of its
/// initial weights): what a .weights.h5 for it must contain.
std::vector<KerasVariables> keras_weights_layout(const nn::ModelSpec& bound);

/// Each layer's place in Keras's model.layers (Note [Keras weights]): indices into bound.layers().
std::vector<std::size_t> keras_layer_order(const nn::ModelSpec& bound);

/// Writes `variables` as a Keras 3 .weights.h5 file: the groups "vars" (the model's own, empty)
/// and "<path>/vars" with datasets "0", "1", ... (float32), written to a temporary file that is
/// flushed and renamed over `path`. Unavailable when this build has no HDF5 (install libhdf5-dev);
/// Error naming the file and the reason when it cannot be written.
void write_keras_weights_file(const std::filesystem::path& path,
                              const std::vector<KerasVariables>& variables);

/// Reads every variable group ("<path>/vars/<i>", numbers converted to float32) of a .weights.h5
/// file, in path order. DataError naming the file for what is not a Keras weights file (not HDF5,
/// a link out of the file, a dataset that is not numeric, variables not numbered 0..n-1, a declared
/// size far beyond the file's); Error when it cannot be opened; Unavailable without HDF5.
std::vector<KerasVariables> read_keras_weights_file(const std::filesystem::path& path);

/// Note [Adapted normalization]: Keras keeps the mean and variance that Normalization.adapt()
/// computed as the layer's variables (vars 0 and 1; 2 is the sample count), not in to_json().
/// Returns `spec` with those values written into each Normalization layer that states none,
/// read from the file's "layers/normalization", "layers/normalization_1", ... (Keras counts the
/// class in model.layers order; the spec's list order is taken for it, which is Keras's wherever
/// the normalizations come before any branching). DataError naming `source` and the layer when
/// the file lacks the variables or their size is not one value per feature (or one, for
/// axis null) of `features` (the last axis of the layer's input; 0: not checked).
nn::ModelSpec with_keras_normalization(const nn::ModelSpec& spec,
                                       const std::vector<KerasVariables>& variables,
                                       const std::string& source);

/// Whether this build reads and writes .weights.h5 files (HDF5 was found when it was built).
bool keras_weights_file_supported();

/// A built model's parameters and buffers by name (the tensors themselves, not copies).
NamedTensors model_tensors(nn::Sequential& model);
/// Copies `tensors` into every parameter and buffer of `model` (converting the dtype); DataError
/// naming `source` and the tensor when one is missing or has another shape.
void assign_model_tensors(nn::Sequential& model, const NamedTensors& tensors,
                          const std::string& source);

// ---------------------------------------------------------------- the conversion table

/// What a conversion sees of one layer.
struct KerasLayerInfo {
  const nlohmann::json* spec = nullptr;  // the canonical layer ({"type": "conv2d", ...})
  std::string name;                      // Mirror's layer name: its tensors are "<name>/<what>"
  std::string path;                      // its Keras path ("layers/conv2d_1")
  std::vector<Shape> input_shapes;       // per sample, Mirror's layout (NCHW images)
  Shape output_shape;
  /// When the input features are a Flatten of images (Mirror flattens C, H, W; Keras H, W, C):
  /// element j is the Mirror index of Keras's feature j. Empty: the same order.
  std::vector<std::int64_t> feature_order;
};

/// A layer's tensors by what follows its name ("kernel", "forward/bias"), float32 on the CPU.
using LayerTensors = std::map<std::string, Tensor>;

/// How a layer treats features whose order differs between Mirror and Keras (after a Flatten).
enum class FeatureOrder {
  kRefuse,   // cannot: an error names the layer
  kPass,     // element-wise or per feature: the output keeps the order (and per-feature
             // parameters follow it: the conversion applies KerasLayerInfo::feature_order)
  kConsume,  // a Dense: its kernel rows follow the order; its output is in Keras's order
  kFlatten,  // makes the order: a Flatten of [C, H, W] images
  kMerge,    // Add and the like: every input must have the same order, which passes on
  kConcat,   // Concatenate: the inputs' orders side by side
};

/// One layer type's conversion. Keras objects' paths in to_keras's result are relative to the
/// layer's ("" for the layer itself, "cell", "forward_layer/cell").
struct KerasConversion {
  /// Keras's snake_case class name, which names the layer in the file ("conv2d", "gru"); empty
  /// for a type without weights.
  std::string keras_class;
  FeatureOrder feature_order = FeatureOrder::kRefuse;
  /// Mirror -> Keras. Null for a type without weights.
  std::function<std::vector<KerasVariables>(const KerasLayerInfo&, const LayerTensors&)> to_keras;
  /// Keras -> Mirror: receives exactly the paths, counts and shapes to_keras gives (checked
  /// before), returns every tensor of the layer.
  std::function<LayerTensors(const KerasLayerInfo&, const std::vector<KerasVariables>&)> from_keras;
  /// Mirror -> Keras for a type whose Keras variables are values of its spec, not tensors (an
  /// adapted Normalization's mean, variance and count); null otherwise. Read back by
  /// with_keras_normalization, not from_keras.
  std::function<std::vector<KerasVariables>(const KerasLayerInfo&)> spec_variables;
};

/// Adds or replaces the conversion of a canonical layer type ("conv2d", "gru", ...). Built-in
/// types are registered on first use; call this before converting (it is not thread-safe).
void register_keras_conversion(const std::string& mirror_type, KerasConversion conversion);
/// The conversion of a type, or nullptr when none is registered.
const KerasConversion* find_keras_conversion(const std::string& mirror_type);

namespace keras_layout {
/// Host helpers for conversions: float32 CPU tensors.
/// Axes permuted: out.shape[i] = t.shape[axes[i]] (numpy's transpose(axes)).
Tensor transpose(const Tensor& t, const std::vector<int>& axes);
/// Blocks along dimension 0 reordered: t's dimension 0 is `order.size()` equal blocks, block i
/// of the result is block order[i] of t (GRU gates r, z, n <-> z, r, h).
Tensor reorder_blocks(const Tensor& t, const std::vector<int>& order);
/// Rows along dimension 0 picked: out[j] = t[rows[j]].
Tensor gather_rows(const Tensor& t, const std::vector<std::int64_t>& rows);
/// The inverse permutation of `order` (scatter).
std::vector<std::int64_t> inverse(const std::vector<std::int64_t>& order);
/// A float32 CPU copy of t (any dtype or device).
Tensor host_float(const Tensor& t);
}  // namespace keras_layout

}  // namespace mirror::train
