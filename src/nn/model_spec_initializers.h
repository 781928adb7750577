// defines: the spec reader's initializer fields (Note [Spec initializers], nn/init.h): Keras's
// initializers read into canonical {"class_name", "config"} objects for the layers that draw
// them (Dense, Conv2D, Conv1D, Conv2DTranspose, DepthwiseConv2D, SeparableConv2D). Internal to
// src/nn.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "nn/model_spec_fields.h"

namespace mirror::nn::spec_fields {

/// Initializer field `name` of `f`: absent, null, a Keras name ("he_normal") or
/// {"class_name", "config"}. Returns null when it is the layer's default `kind` ("GlorotUniform",
/// "Zeros") with its default config, else the canonical {"class_name", "config"} (Keras's class
/// name, every parameter stated, no seed). Unknown classes, unknown or bad config fields, and
/// Orthogonal where `orthogonal` is false, are refused naming the field.
nlohmann::json initializer_spec(Fields& f, const std::string& name, const std::string& kind,
                                bool orthogonal = true);

/// The fields of a layer with one kernel and one bias (Conv2D, Dense, Conv1D, Conv2DTranspose):
/// use_bias must be true unless `bias_optional`, no regularizers or constraints, and any
/// initializers: the canonical layer's kernel_initializer / bias_initializer (only those that
/// differ from Glorot uniform and zeros), to merge into it.
nlohmann::json kernel_and_bias(Fields& f, const std::string& layer, bool bias_optional = false);

}  // namespace mirror::nn::spec_fields
