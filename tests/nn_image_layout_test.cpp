// nn::samples_channels_last (Note [Keras's image layout]): when image samples are read as
// [H, W, C] under each --data-format, and the refusals naming the shapes.
#include <gtest/gtest.h>

#include <string>

#include "mirror/error.h"
#include "mirror/nn/image_layout.h"

namespace mirror::nn {
namespace {

std::string refusal(DataFormat f, bool keras, const Shape& stated, const Shape& sample) {
  try {
    samples_channels_last(f, keras, stated, sample);
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "";
}

TEST(ImageLayout, ParsesTheThreeFormatsAndNamesABadOne) {
  EXPECT_EQ(parse_data_format("auto"), DataFormat::kAuto);
  EXPECT_EQ(parse_data_format("channels_last"), DataFormat::kChannelsLast);
  EXPECT_EQ(parse_data_format("channels_first"), DataFormat::kChannelsFirst);
  for (DataFormat f : {DataFormat::kAuto, DataFormat::kChannelsLast, DataFormat::kChannelsFirst})
    EXPECT_EQ(parse_data_format(data_format_name(f)), f);
  try {
    parse_data_format("NHWC");
    FAIL() << "NHWC was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_STREQ(e.what(),
                 "--data-format must be auto, channels_last or channels_first, got 'NHWC'");
  }
}

TEST(ImageLayout, AutoTransposesAKerasModelsSamplesInKerasOrderOnly) {
  const Shape stated = {3, 28, 20};  // [C, H, W]
  EXPECT_TRUE(samples_channels_last(DataFormat::kAuto, true, stated, {28, 20, 3}));
  EXPECT_FALSE(samples_channels_last(DataFormat::kAuto, true, stated, {3, 28, 20}));
  EXPECT_FALSE(samples_channels_last(DataFormat::kAuto, false, stated, {28, 20, 3}));  // Mirror spec
  EXPECT_FALSE(samples_channels_last(DataFormat::kAuto, true, {784}, {784}));
  // Sizes the spec leaves open (-1) match any; H = W = C is taken in Keras's order.
  EXPECT_TRUE(samples_channels_last(DataFormat::kAuto, true, {3, -1, -1}, {40, 50, 3}));
  EXPECT_TRUE(samples_channels_last(DataFormat::kAuto, true, {4, 4, 4}, {4, 4, 4}));
}

TEST(ImageLayout, ExplicitFormatsDecideForAnyImageModel) {
  const Shape stated = {3, 28, 20};
  EXPECT_TRUE(samples_channels_last(DataFormat::kChannelsLast, false, stated, {28, 20, 3}));
  EXPECT_FALSE(samples_channels_last(DataFormat::kChannelsFirst, true, stated, {28, 20, 3}));
  EXPECT_FALSE(samples_channels_last(DataFormat::kChannelsFirst, true, {4, 4, 4}, {4, 4, 4}));
  EXPECT_EQ(refusal(DataFormat::kChannelsLast, false, stated, {3, 28, 20}),
            "--data-format channels_last: the samples are [3,28,20], not the model's image "
            "[3,28,20] ([C, H, W]) in [H, W, C] order; give [H, W, C] samples, or --data-format "
            "channels_first for [C, H, W]");
  EXPECT_EQ(refusal(DataFormat::kChannelsLast, false, {784}, {784}),
            "--data-format channels_last is for image models; this model reads [784] per sample");
}

}  // namespace
}  // namespace mirror::nn
