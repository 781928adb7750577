// defines: what the two halves of export_onnx share (tools/onnx_export.cpp: images, dense and
// merges; tools/onnx_export_sequence.cpp: lengths, recurrent and 1-D layers).
#pragma once

#include <string>
#include <vector>

#include "mirror/nn/layer.h"
#include "tools/onnx/graph.h"

namespace mirror::onnx::detail {

/// The export's state: the builder and the current lengths (Note [Export lengths]): the name of
/// an int64 [N] tensor, or "" when every sequence has the full length.
struct Ctx {
  GraphBuilder& b;
  std::string lengths;
  bool dynamic_steps = false;  // T is a graph dimension (token data), not the built one
  bool keras_masks = false;    // Note [Sequence masks] (nn/layer.h): the model's mask semantics
};

std::vector<float> values_of(const Tensor& t);
std::vector<std::int64_t> dims_of(const Tensor& t);
/// A parameter as a float initializer named after it.
std::string weight(Ctx& c, const nn::Parameter& p);
/// Keras's activation `name` applied to x ("linear" is x itself).
std::string activation(Ctx& c, const std::string& x, const std::string& name,
                       const std::string& hint);
std::string transpose(Ctx& c, const std::string& x, std::vector<std::int64_t> perm);

/// Masking's lengths of x: ids [N, T] (`tokens`) or floats [N, T, F]: 1 + the last step with a
/// non-zero id / feature, at least 1. int64 [N].
std::string lengths_of_input(Ctx& c, const std::string& x, bool tokens);
/// T of x [N, T, ...] as an int64 scalar.
std::string steps_of(Ctx& c, const std::string& x);
/// bool [N, T, 1]: step t < lengths[n] of x [N, T, C].
std::string valid_steps(Ctx& c, const std::string& x, const std::string& lengths);
/// x with every step at or past its sequence's length replaced by `fill`.
std::string fill_past(Ctx& c, const std::string& x, const std::string& lengths, float fill);
/// Any layer (export_onnx's own mapping): a wrapped layer's (TimeDistributed's).
std::string export_any_layer(Ctx& c, nn::Layer& l, const std::vector<std::string>& xs,
                             const Shape& in);
/// The layers of nn/keras_layers.h, nn/keras_ops_layers.h and nn/attention.h
/// (onnx_export_keras.cpp); false for other kinds.
bool export_keras_layer(Ctx& c, nn::Layer& l, const std::vector<std::string>& xs, const Shape& in,
                        std::string& y);
/// Rescaling, Normalization, Resizing and CenterCrop (onnx_export_preprocessing.cpp); false for
/// other kinds.
bool export_preprocessing_layer(Ctx& c, nn::Layer& l, const std::string& x, const Shape& in,
                                std::string& y);
/// The GRU, LSTM, Bidirectional, Conv1D and 1-D pooling layers; false for other kinds.
bool export_sequence_layer(Ctx& c, nn::Layer& l, const std::string& x, const Shape& in,
                           std::string& y);

}  // namespace mirror::onnx::detail
