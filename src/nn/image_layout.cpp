// DataFormat and the [H, W, C] test (Note [Keras's image layout], mirror/nn/models.h).
#include "mirror/nn/image_layout.h"

#include "mirror/error.h"

namespace mirror::nn {

DataFormat parse_data_format(const std::string& text) {
  if (text == "auto") return DataFormat::kAuto;
  if (text == "channels_last") return DataFormat::kChannelsLast;
  if (text == "channels_first") return DataFormat::kChannelsFirst;
  throw InvalidArgument("--data-format must be auto, channels_last or channels_first, got '" +
                        text + "'");
}

const char* data_format_name(DataFormat format) {
  switch (format) {
    case DataFormat::kChannelsLast:
      return "channels_last";
    case DataFormat::kChannelsFirst:
      return "channels_first";
    case DataFormat::kAuto:
      break;
  }
  return "auto";
}

bool samples_channels_last(DataFormat format, bool keras_channels_last, const Shape& stated,
                           const Shape& sample) {
  if (format == DataFormat::kChannelsFirst) return false;
  bool hwc = stated.size() == 3 && sample.size() == 3;
  if (hwc) {
    const Shape order = {stated[1], stated[2], stated[0]};
    for (std::size_t i = 0; i < 3; ++i) hwc = hwc && (order[i] < 0 || order[i] == sample[i]);
  }
  if (format == DataFormat::kAuto) return keras_channels_last && hwc;
  MIRROR_CHECK(stated.size() == 3, InvalidArgument,
               "--data-format channels_last is for image models; this model reads " +
                   shape_str(stated) + " per sample");
  MIRROR_CHECK(hwc, InvalidArgument,
               "--data-format channels_last: the samples are " + shape_str(sample) +
                   ", not the model's image " + shape_str(stated) + " ([C, H, W]) in [H, W, C] "
                   "order; give [H, W, C] samples, or --data-format channels_first for [C, H, W]");
  return true;
}

}  // namespace mirror::nn
