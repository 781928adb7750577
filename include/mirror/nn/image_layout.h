// defines: DataFormat (--data-format) and the one test of whether image samples come in Keras's
// [H, W, C] order (Note [Keras's image layout], mirror/nn/models.h), which mirror-train,
// mirror-predict and the Python module share.
#pragma once

#include <string>

#include "mirror/tensor.h"

namespace mirror::nn {

/// How image arrays are laid out. kAuto: a channels_last (Keras) model's samples are read as
/// [H, W, C] when they have that shape, everything else as it is; kChannelsLast: the samples are
/// [H, W, C] whatever the model (a Mirror spec too); kChannelsFirst: they are [C, H, W] already.
enum class DataFormat { kAuto, kChannelsLast, kChannelsFirst };
/// "auto", "channels_last", "channels_first"; InvalidArgument naming --data-format otherwise.
DataFormat parse_data_format(const std::string& text);
const char* data_format_name(DataFormat format);

/// Whether samples of shape `sample` are to be transposed from [H, W, C] for a model whose image
/// input is `stated` [C, H, W] (-1: any size). `keras_channels_last`: the model is a Keras
/// channels_last one (ModelSpec::channels_last_input). Samples that fit both orders (H = W = C)
/// are taken in Keras's under kAuto, as a Keras user gives them. InvalidArgument when
/// kChannelsLast is asked of samples that are not the stated image in [H, W, C] order, or of a
/// model without an image input.
bool samples_channels_last(DataFormat format, bool keras_channels_last, const Shape& stated,
                           const Shape& sample);

}  // namespace mirror::nn
