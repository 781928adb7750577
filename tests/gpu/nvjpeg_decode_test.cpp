// --decode gpu: nvJPEG's decode of the same JPEG files agrees with libjpeg-turbo's (the CPU
// decoder is the oracle), for greyscale and colour images and 4:4:4 / 4:2:0 sampling; PNG files
// pass through to the CPU decoder bit for bit; a truncated JPEG is a DataError naming the file
// on both. IDCT and upsampling differ between the libraries, so pixels may differ by a few
// levels: mean |difference| <= 1.5 and max <= 24 (of 255). Without a usable GPU (or a build
// without nvJPEG) every test skips with the reason.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>

#include "gpu/gpu_test_util.h"
#include "mirror/data/image_decode.h"

namespace mirror {
namespace {

using data::DecodedImage;

class NvjpegDecode : public testing::GpuTest {
 protected:
  void SetUp() override {
    testing::GpuTest::SetUp();
    if (IsSkipped()) return;
    try {
      gpu_ = data::make_image_decoder(data::DecodeDevice::kGpu);
    } catch (const Unavailable& e) {
      GTEST_SKIP() << e.what();
    }
  }
  std::shared_ptr<const data::ImageDecoder> gpu_;
};

/// A smooth gradient with an edge: JPEG-friendly, but not trivially flat.
DecodedImage scene(int h, int w, int c) {
  DecodedImage im{h, w, c, std::vector<std::uint8_t>(static_cast<std::size_t>(h * w * c))};
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int k = 0; k < c; ++k)
        im.pixels[static_cast<std::size_t>((y * w + x) * c + k)] =
            static_cast<std::uint8_t>((x * 3 + y * 2 + k * 60 + (x > w / 2 ? 80 : 0)) % 256);
  return im;
}

TEST_F(NvjpegDecode, MatchesTheCpuDecoder) {
  EXPECT_NE(gpu_->name().find("nvJPEG"), std::string::npos) << gpu_->name();
  for (int c : {1, 3}) {
    for (int quality : {75, 95}) {
      const auto jpg = data::encode_jpeg(scene(37, 53, c), quality);
      const DecodedImage cpu = data::cpu_image_decoder()->decode(jpg, "scene.jpg");
      const DecodedImage gpu = gpu_->decode(jpg, "scene.jpg");
      ASSERT_EQ(gpu.height, cpu.height);
      ASSERT_EQ(gpu.width, cpu.width);
      ASSERT_EQ(gpu.channels, cpu.channels);
      ASSERT_EQ(gpu.pixels.size(), cpu.pixels.size());
      double sum = 0;
      int worst = 0;
      for (std::size_t i = 0; i < cpu.pixels.size(); ++i) {
        const int d = std::abs(int(gpu.pixels[i]) - int(cpu.pixels[i]));
        sum += d;
        worst = std::max(worst, d);
      }
      const double mean = sum / static_cast<double>(cpu.pixels.size());
      EXPECT_LE(mean, 1.5) << c << " channels, quality " << quality;
      EXPECT_LE(worst, 24) << c << " channels, quality " << quality;
    }
  }
}

TEST_F(NvjpegDecode, PngGoesToTheCpuAndBadFilesAreNamed) {
  const DecodedImage im = scene(9, 11, 3);
  const auto png = data::encode_png(im);
  EXPECT_EQ(gpu_->decode(png, "a.png").pixels, im.pixels);
  auto jpg = data::encode_jpeg(scene(64, 64, 3), 90);
  jpg.resize(jpg.size() / 2);
  for (const auto& decoder : {gpu_, data::cpu_image_decoder()}) {
    try {
      decoder->decode(jpg, "cut.jpg");
      ADD_FAILURE() << decoder->name() << " decoded a truncated JPEG";
    } catch (const DataError& e) {
      EXPECT_NE(std::string(e.what()).find("cut.jpg: corrupt or truncated JPEG"),
                std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace mirror
