// The photograph recipe: flag syntax and its errors, the random resized crop's geometry
// (deterministic from seed, epoch and sample; inside the image; torchvision's fallback), the
// evaluation resize + centre crop, flip and normalisation in the resample, the reduced-scale JPEG
// decode against the full one, the region decode and the resample of a window against the whole
// image's, and image folders served by the Loader with the recipe (the same
// batches for 1 and 2 replicas, resume repeats the crops).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cmath>
#include <filesystem>
#include <numbers>
#include <random>

#include "data_test_util.h"
#include "loader_test_util.h"
#include "mirror/data/augment.h"
#include "mirror/data/idx.h"
#include "mirror/data/image_decode.h"
#include "mirror/data/image_folder.h"
#include "mirror/data/loader.h"
#include "mirror/data/photo_transforms.h"
#include "temp_dir.h"

namespace mirror::data {
namespace {
namespace fs = std::filesystem;

void expect_invalid(const std::function<void()>& f, const std::string& part) {
  try {
    f();
    ADD_FAILURE() << "expected InvalidArgument with '" << part << "'";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST(PhotoRecipe, ParsesFlagsAndNamesBadOnes) {
  PhotoRecipe r;
  parse_crop("random-resized", r);
  EXPECT_TRUE(r.random_resized_crop);
  EXPECT_EQ(r.scale_min, 0.08);
  EXPECT_EQ(r.scale_max, 1.0);
  parse_crop("random-resized=0.25,0.5", r);
  EXPECT_EQ(r.scale_min, 0.25);
  EXPECT_EQ(r.scale_max, 0.5);
  parse_crop("none", r);
  EXPECT_FALSE(r.random_resized_crop);
  expect_invalid([&] { parse_crop("random-resized=0.9,0.2", r); }, "scale_min 0.9 > scale_max 0.2");
  expect_invalid([&] { parse_crop("random-resized=0,1", r); }, "in (0, 1]");
  expect_invalid([&] { parse_crop("random-resized=0.5", r); }, "two numbers MIN,MAX");
  expect_invalid([&] { parse_crop("center", r); }, "--crop 'center': unknown crop");

  parse_normalize("imagenet", r);
  EXPECT_EQ(r.mean, (std::vector<float>{0.485f, 0.456f, 0.406f}));
  EXPECT_EQ(r.std, (std::vector<float>{0.229f, 0.224f, 0.225f}));
  parse_normalize("0.5,0.25", r);
  EXPECT_EQ(r.mean, std::vector<float>{0.5f});
  EXPECT_EQ(r.std, std::vector<float>{0.25f});
  check_normalize_channels(r, 3);  // one pair: every channel
  parse_normalize("0.1,0.2,0.3,0.4", r);
  EXPECT_EQ(r.mean, (std::vector<float>{0.1f, 0.2f}));
  expect_invalid([&] { check_normalize_channels(r, 3); }, "gives 2 means and stds but the images have 3");
  expect_invalid([&] { parse_normalize("0.1,0.2,0.3", r); }, "an odd count");
  expect_invalid([&] { parse_normalize("0.5,0", r); }, "std 0 is not positive");
  expect_invalid([&] { parse_normalize("mean", r); }, "not a list of numbers");
}

TEST(PhotoRecipe, RandomResizedCropIsDrawnFromSeedEpochAndSample) {
  PhotoRecipe r;
  r.random_resized_crop = true;
  const int H = 375, W = 500;
  int distinct = 0;
  CropBox previous;
  for (std::int64_t sample = 0; sample < 500; ++sample) {
    auto rng = augment_rng(7, 2, sample);
    const CropBox b = random_resized_crop(H, W, r, rng);
    auto again = augment_rng(7, 2, sample);
    const CropBox c = random_resized_crop(H, W, r, again);
    EXPECT_EQ(b.top, c.top);
    EXPECT_EQ(b.left, c.left);
    EXPECT_EQ(b.height, c.height);
    EXPECT_EQ(b.width, c.width);
    // Whole pixels inside the image.
    EXPECT_EQ(b.top, std::floor(b.top));
    EXPECT_GE(b.top, 0);
    EXPECT_GE(b.left, 0);
    EXPECT_GE(b.height, 1);
    EXPECT_GE(b.width, 1);
    EXPECT_LE(b.top + b.height, H);
    EXPECT_LE(b.left + b.width, W);
    // Area and aspect within the ranges, up to the rounding of each side to whole pixels
    // (w, h = round(sqrt(area * aspect)), round(sqrt(area / aspect)): each off by <= 0.5), or
    // the fallback (the whole image: 500/375 is inside 3/4..4/3).
    const bool fallback = b.height == H && b.width == W;
    if (!fallback) {
      // With w, h the rounded sides of sqrt(T a), sqrt(T / a): w h >= T - (w + h) / 2 - 1/4,
      // and w / h within a -+ (a / 2 + 1/2) / h for a in [3/4, 4/3].
      const double area = b.height * b.width, full = static_cast<double>(H) * W;
      EXPECT_GE(area, 0.08 * full - (b.height + b.width) / 2 - 0.25) << sample;
      EXPECT_LE(area, full);
      EXPECT_GE(b.width / b.height, 0.75 - 0.875 / b.height) << sample;
      EXPECT_LE(b.width / b.height, 4.0 / 3 + (7.0 / 6) / b.height) << sample;
    }
    if (sample > 0 && (b.top != previous.top || b.width != previous.width)) ++distinct;
    previous = b;
  }
  EXPECT_GT(distinct, 450) << "the crops barely change from sample to sample";
  // Another epoch draws another crop for the same sample.
  auto e2 = augment_rng(7, 2, 3), e3 = augment_rng(7, 3, 3);
  const CropBox a = random_resized_crop(H, W, r, e2), b = random_resized_crop(H, W, r, e3);
  EXPECT_FALSE(a.top == b.top && a.left == b.left && a.height == b.height);
}

TEST(PhotoRecipe, FallsBackToTheCentreCropClampedToTheAspectRange) {
  // No crop of at least 90% of a 10 x 500 strip's area has an aspect within 3/4..4/3: all ten
  // attempts miss; the fallback keeps the height and cuts the width to 10 * 4/3 = 13.33 -> 13,
  // centred at (500 - 13) / 2 = 243 (floor).
  PhotoRecipe r;
  r.random_resized_crop = true;
  r.scale_min = 0.9;
  for (std::int64_t sample = 0; sample < 20; ++sample) {
    auto rng = augment_rng(1, 0, sample);
    const CropBox b = random_resized_crop(10, 500, r, rng);
    EXPECT_EQ(b.top, 0);
    EXPECT_EQ(b.height, 10);
    EXPECT_EQ(b.width, 13);
    EXPECT_EQ(b.left, 243);
  }
  auto tall = augment_rng(1, 0, 0);
  const CropBox t = random_resized_crop(500, 10, r, tall);  // width 10, height 10 / (3/4) = 13
  EXPECT_EQ(t.width, 10);
  EXPECT_EQ(t.height, 13);
  EXPECT_EQ(t.top, 243);
}

TEST(PhotoRecipe, EvalResizeThenCentreCropAsTorchvision) {
  // 375 x 500 -> Resize(256): 256 x int(256 * 500 / 375) = 256 x 341; CenterCrop(224): the
  // corner round(16) = 16, round(58.5) = 58 (half to even, as Python).
  const CropBox b = eval_crop_box(375, 500, 256, 224, 224);
  const double sy = 375.0 / 256, sx = 500.0 / 341;
  EXPECT_DOUBLE_EQ(b.top, 16 * sy);
  EXPECT_DOUBLE_EQ(b.left, 58 * sx);
  EXPECT_DOUBLE_EQ(b.height, 224 * sy);
  EXPECT_DOUBLE_EQ(b.width, 224 * sx);
  const CropBox whole = eval_crop_box(375, 500, 0, 224, 224);
  EXPECT_EQ(whole.height, 375);
  EXPECT_EQ(whole.width, 500);
}

TEST(PhotoRecipe, ResampleCopiesFlipsNormalisesAndAntialiases) {
  const int h = 6, w = 8, c = 3;
  std::vector<std::uint8_t> px(static_cast<std::size_t>(h * w * c));
  for (std::size_t i = 0; i < px.size(); ++i) px[i] = static_cast<std::uint8_t>(i * 7 % 251);
  const float one[3] = {1, 1, 1}, zero[3] = {0, 0, 0};
  std::vector<float> out(static_cast<std::size_t>(h * w * c)), flipped(out.size());
  const CropBox all{0, 0, h, w};
  resample_to_chw(px.data(), h, w, c, all, h, w, false, one, zero, out.data());
  resample_to_chw(px.data(), h, w, c, all, h, w, true, one, zero, flipped.data());
  for (int k = 0; k < c; ++k)
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x) {
        const float v = px[static_cast<std::size_t>((y * w + x) * c + k)];
        EXPECT_EQ(out[static_cast<std::size_t>((k * h + y) * w + x)], v);
        EXPECT_EQ(flipped[static_cast<std::size_t>((k * h + y) * w + (w - 1 - x))], v);
      }
  // A crop at whole pixels without scaling copies the window; normalisation is x * scale + bias.
  const float scale[3] = {1 / (255 * 0.5f), 1 / (255 * 0.25f), 1 / 255.0f};
  const float bias[3] = {-1, -2, 0};
  std::vector<float> win(2 * 3 * 3);
  resample_to_chw(px.data(), h, w, c, {2, 4, 2, 3}, 2, 3, false, scale, bias, win.data());
  for (int k = 0; k < c; ++k)
    for (int y = 0; y < 2; ++y)
      for (int x = 0; x < 3; ++x) {
        const float v = px[static_cast<std::size_t>(((y + 2) * w + x + 4) * c + k)];
        EXPECT_NEAR(win[static_cast<std::size_t>((k * 2 + y) * 3 + x)], v * scale[k] + bias[k], 1e-5);
      }
  // Shrinking alternating black and white columns 4x: an antialiased filter sees grey (plain
  // bilinear would read two neighbouring columns and alias to stripes).
  const int sw = 64;
  std::vector<std::uint8_t> stripes(static_cast<std::size_t>(4 * sw));
  for (int y = 0; y < 4; ++y)
    for (int x = 0; x < sw; ++x) stripes[static_cast<std::size_t>(y * sw + x)] = x % 2 ? 255 : 0;
  std::vector<float> small(static_cast<std::size_t>(sw / 4));
  resample_to_chw(stripes.data(), 4, sw, 1, {0, 0, 4, sw}, 1, sw / 4, false, one, zero, small.data());
  for (int x = 1; x + 1 < sw / 4; ++x) EXPECT_NEAR(small[static_cast<std::size_t>(x)], 127.5, 1.0) << x;
}

/// A smooth photograph stand-in: two sinusoids per channel, amplitude A, periods P pixels.
DecodedImage waves(int h, int w) {
  DecodedImage im{h, w, 3, std::vector<std::uint8_t>(static_cast<std::size_t>(h * w * 3))};
  const double tau = 2 * std::numbers::pi;
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int k = 0; k < 3; ++k) {
        const double v = 128 + 60 * std::sin(tau * x / (64 + 8 * k)) + 40 * std::cos(tau * y / 48.0);
        im.pixels[static_cast<std::size_t>((y * w + x) * 3 + k)] = static_cast<std::uint8_t>(std::lround(v));
      }
  return im;
}

/// How far libjpeg's 1/d decode of one 8-pixel block row `f` is from the means of its d-pixel
/// groups: the scaled IDCT is the (8/d)-point inverse DCT of the block's first 8/d DCT
/// coefficients times sqrt(1/d) (libjpeg's jidctred.c / jidctint.c), a linear map we can apply
/// exactly here.
double truncation_error(int d, const std::array<double, 8>& f) {
  const int m = 8 / d;
  auto alpha = [](int k, int n) { return std::sqrt((k == 0 ? 1.0 : 2.0) / n); };
  std::vector<double> coef(static_cast<std::size_t>(m));
  for (int k = 0; k < m; ++k) {
    double sum = 0;
    for (int i = 0; i < 8; ++i) sum += f[static_cast<std::size_t>(i)] * std::cos(std::numbers::pi * (2 * i + 1) * k / 16.0);
    coef[static_cast<std::size_t>(k)] = alpha(k, 8) * sum * std::sqrt(1.0 / d);
  }
  double worst = 0;
  for (int j = 0; j < m; ++j) {
    double y = 0, mean = 0;
    for (int k = 0; k < m; ++k)
      y += alpha(k, m) * coef[static_cast<std::size_t>(k)] * std::cos(std::numbers::pi * (2 * j + 1) * k / (2.0 * m));
    for (int i = 0; i < d; ++i) mean += f[static_cast<std::size_t>(j * d + i)] / d;
    worst = std::max(worst, std::fabs(y - mean));
  }
  return worst;
}

TEST(PhotoRecipe, ReducedScaleDecodeMatchesTheFullDecodeWithinTheDerivedBound) {
  const auto jpg = encode_jpeg(waves(384, 512), 100);
  const auto decoder = cpu_image_decoder();
  const DecodedImage full = decoder->decode(jpg, "w.jpg");
  const float one[3] = {1, 1, 1}, zero[3] = {0, 0, 0};
  const CropBox box{24, 40, 320, 320};  // -> 64 x 64: 5 source pixels per output pixel
  std::vector<float> a(3 * 64 * 64), b(a.size());
  resample_to_chw(full.pixels.data(), full.height, full.width, 3, box, 64, 64, false, one, zero, a.data());
  // The image's slopes and curvatures (levels per pixel): 60 sin(2 pi x / 64) and
  // 40 cos(2 pi y / 48) at their steepest channel.
  const double slope = 60 * 2 * std::numbers::pi / 64 + 40 * 2 * std::numbers::pi / 48;
  const double curve = 60 * std::pow(2 * std::numbers::pi / 64, 2) + 40 * std::pow(2 * std::numbers::pi / 48, 2);
  for (int d : {2, 4}) {
    const DecodedImage reduced = decoder->decode_reduced(jpg, "w.jpg", d);
    ASSERT_EQ(reduced.height, 384 / d);
    ASSERT_EQ(reduced.width, 512 / d);
    const CropBox scaled{box.top / d, box.left / d, box.height / d, box.width / d};
    resample_to_chw(reduced.pixels.data(), reduced.height, reduced.width, 3, scaled, 64, 64, false,
                    one, zero, b.data());
    // The bound, in levels, by a second-order Taylor expansion per axis:
    //  - the reduced decode of a block is its d-pixel means up to the DCT truncation, whose
    //    error on a unit ramp and on a unit-curvature parabola (x - 3.5)^2 / 2 is computed
    //    exactly by truncation_error (0.10 and 0.23 for d = 2; 0.28 and 0 for d = 4);
    //  - taking d-pixel means before the (symmetric, same-centred) resample adds a variance of
    //    d^2 / 12 per axis to its kernel, which moves a value by (d^2 / 12) / 2 times the
    //    curvature;
    //  - plus half a level of rounding in each decode and half a level of quantisation error at
    //    quality 100.
    std::array<double, 8> ramp{}, parabola{};
    for (int i = 0; i < 8; ++i) {
      ramp[static_cast<std::size_t>(i)] = i;
      parabola[static_cast<std::size_t>(i)] = (i - 3.5) * (i - 3.5) / 2;
    }
    const double bound = truncation_error(d, ramp) * slope + truncation_error(d, parabola) * curve +
                         (d * d / 12.0) / 2 * curve + 0.5 + 0.5 + 0.5;
    double worst = 0;
    for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(double{a[i]} - b[i]));
    EXPECT_LE(worst, bound) << "1/" << d << " scale";
    EXPECT_GT(worst, 0) << "1/" << d << ": no reduced decode happened";
    std::printf("1/%d scale: largest difference %.2f levels, bound %.2f\n", d, worst, bound);
  }
  // PNG has no reduced decode: the whole image comes back.
  const DecodedImage png = decoder->decode_reduced(encode_png(waves(16, 16)), "w.png", 4);
  EXPECT_EQ(png.height, 16);
}

/// A test pattern with detail at every scale: waves plus a hash of the position, so a pixel
/// taken from the wrong place or upsampled from the wrong neighbour shows.
DecodedImage textured(int h, int w, int channels) {
  DecodedImage im = waves(h, w);
  if (channels == 1) im = DecodedImage{h, w, 1, std::vector<std::uint8_t>(im.pixels.begin(), im.pixels.begin() + h * w)};
  for (std::size_t i = 0; i < im.pixels.size(); ++i)
    im.pixels[i] = static_cast<std::uint8_t>(im.pixels[i] / 2 + (i * 2654435761u >> 27));
  return im;
}

TEST(PhotoRecipe, RegionDecodeGivesTheWholeDecodesPixels) {
  const auto decoder = cpu_image_decoder();
  struct Case {
    const char* what;
    int channels;
    JpegEncoding encoding;
  };
  const Case cases[] = {{"4:4:4", 3, {90, false, false}},
                        {"4:2:0", 3, {90, true, false}},
                        {"4:2:0 progressive", 3, {90, true, true}},
                        {"greyscale", 1, {90, false, false}}};
  std::mt19937_64 rng(7);
  for (const Case& c : cases) {
    // Odd sizes: partial blocks and partial chroma pairs at the right and bottom edges.
    const auto jpg = encode_jpeg(textured(203, 317, c.channels), c.encoding);
    for (int d : {1, 2, 4, 8}) {
      const DecodedImage full = decoder->decode_reduced(jpg, "t.jpg", d);
      std::vector<PixelRegion> regions = {{0, 0, full.height, full.width},
                                          {0, 0, 1, 1},
                                          {full.height - 1, full.width - 1, 1, 1},
                                          {full.height / 3, 1, full.height / 3, full.width - 2}};
      for (int k = 0; k < 12; ++k) {
        const int top = static_cast<int>(rng() % static_cast<std::uint64_t>(full.height));
        const int left = static_cast<int>(rng() % static_cast<std::uint64_t>(full.width));
        regions.push_back({top, left, 1 + static_cast<int>(rng() % static_cast<std::uint64_t>(full.height - top)),
                           1 + static_cast<int>(rng() % static_cast<std::uint64_t>(full.width - left))});
      }
      for (const PixelRegion& want : regions) {
        const DecodedRegion got = decoder->decode_region(jpg, "t.jpg", d, want);
        const std::string where = std::string(c.what) + ", 1/" + std::to_string(d) + ", region " +
                                  std::to_string(want.top) + "," + std::to_string(want.left) + " " +
                                  std::to_string(want.height) + "x" + std::to_string(want.width);
        ASSERT_EQ(got.full_height, full.height) << where;
        ASSERT_EQ(got.full_width, full.width) << where;
        ASSERT_EQ(got.image.channels, c.channels) << where;
        // Exactly the region.
        ASSERT_EQ(got.top, want.top) << where;
        ASSERT_EQ(got.left, want.left) << where;
        ASSERT_EQ(got.image.height, want.height) << where;
        ASSERT_EQ(got.image.width, want.width) << where;
        int wrong = 0;
        for (int y = 0; y < got.image.height; ++y)
          for (int x = 0; x < got.image.width * c.channels; ++x)
            wrong += got.image.pixels[static_cast<std::size_t>(y * got.image.width * c.channels + x)] !=
                     full.pixels[static_cast<std::size_t>(((got.top + y) * full.width + got.left) * c.channels + x)];
        EXPECT_EQ(wrong, 0) << where;
      }
    }
  }
  // PNG has no region decode: the whole image, at (0, 0).
  const DecodedRegion png = decoder->decode_region(encode_png(waves(16, 16)), "w.png", 1, {4, 4, 2, 2});
  EXPECT_EQ(png.image.height, 16);
  EXPECT_EQ(png.top, 0);
}

TEST(PhotoRecipe, RegionDecodeOfATruncatedJpegFailsWhereverTheRegionIs) {
  auto jpg = encode_jpeg(textured(160, 160, 3), JpegEncoding{90, true, false});
  jpg.resize(jpg.size() * 2 / 3);  // the bottom third of the image is gone
  try {
    cpu_image_decoder()->decode_region(jpg, "cut.jpg", 1, {0, 0, 8, 8});
    FAIL() << "expected DataError";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("cut.jpg: corrupt or truncated JPEG"), std::string::npos)
        << e.what();
  }
}

TEST(PhotoRecipe, ResampleFromTheSourceRegionEqualsTheWholeImages) {
  const DecodedImage im = textured(120, 150, 3);
  const float scale[3] = {0.5f, 1, 2}, bias[3] = {0, -1, 1};
  PhotoRecipe recipe;
  recipe.random_resized_crop = true;
  std::mt19937_64 rng(3);
  for (int k = 0; k < 20; ++k) {
    const CropBox box = random_resized_crop(im.height, im.width, recipe, rng);
    const bool flip = k % 2 != 0;
    const int out = k % 3 == 0 ? 160 : 24;  // enlarging and shrinking
    std::vector<float> whole(3 * out * out), part(whole.size());
    resample_to_chw(im.pixels.data(), im.height, im.width, 3, box, out, out, flip, scale, bias,
                    whole.data());
    const PixelRegion r = resample_source_region(im.height, im.width, box, out, out);
    ASSERT_GE(r.top, 0);
    ASSERT_LE(r.top + r.height, im.height);
    ASSERT_GE(r.left, 0);
    ASSERT_LE(r.left + r.width, im.width);
    EXPECT_LE(r.height, static_cast<int>(box.height) + 2 * static_cast<int>(box.height / out) + 4);
    std::vector<std::uint8_t> window(static_cast<std::size_t>(r.height * r.width * 3));
    for (int y = 0; y < r.height; ++y)
      std::copy_n(im.pixels.begin() + ((r.top + y) * im.width + r.left) * 3, r.width * 3,
                  window.begin() + y * r.width * 3);
    resample_window_to_chw(window.data(), r, im.height, im.width, 3, box, out, out, flip, scale,
                           bias, part.data());
    EXPECT_EQ(part, whole) << "crop " << k;
    // A window short of one row the resample reads is refused, not read out of bounds.
    const PixelRegion short_one{r.top + 1, r.left, r.height - 1, r.width};
    EXPECT_THROW(resample_window_to_chw(window.data() + r.width * 3, short_one, im.height,
                                        im.width, 3, box, out, out, flip, scale, bias, part.data()),
                 InvalidArgument);
  }
}

/// `jpeg` with an EXIF segment (APP1) after its SOI marker whose Orientation tag is `orientation`
/// (6: the camera was turned 90 degrees clockwise), as phones write them.
std::vector<std::uint8_t> with_exif_orientation(const std::vector<std::uint8_t>& jpeg,
                                                int orientation) {
  const std::vector<std::uint8_t> tiff = {
      'M', 'M', 0, 42, 0, 0, 0, 8,  // big-endian TIFF header, first IFD at 8
      0, 1,                          // one entry
      0x01, 0x12, 0, 3, 0, 0, 0, 1,  // Orientation, SHORT, count 1
      0, static_cast<std::uint8_t>(orientation), 0, 0,
      0, 0, 0, 0};  // no next IFD
  std::vector<std::uint8_t> app1 = {0xFF, 0xE1, 0, 0, 'E', 'x', 'i', 'f', 0, 0};
  app1.insert(app1.end(), tiff.begin(), tiff.end());
  const std::size_t length = app1.size() - 2;
  app1[2] = static_cast<std::uint8_t>(length >> 8);
  app1[3] = static_cast<std::uint8_t>(length & 0xFF);
  std::vector<std::uint8_t> out(jpeg.begin(), jpeg.begin() + 2);
  out.insert(out.end(), app1.begin(), app1.end());
  out.insert(out.end(), jpeg.begin() + 2, jpeg.end());
  return out;
}

TEST(PhotoRecipe, PhotographsAsCamerasAndEditorsWriteThem) {
  const auto decoder = cpu_image_decoder();
  // EXIF orientation is metadata Mirror does not apply, as torchvision's ImageFolder (PIL's
  // open) and Keras's image_dataset_from_directory do not: the stored pixels, so a model sees
  // what it would see there. The segment is read past, not mistaken for the frame.
  const DecodedImage stored = textured(24, 40, 3);
  const auto plain = encode_jpeg(stored, JpegEncoding{90, true, false});
  const auto rotated = with_exif_orientation(plain, 6);
  const ImageHeader h = read_image_header(rotated, "phone.jpg");
  EXPECT_EQ(h.height, 24);
  EXPECT_EQ(h.width, 40);
  EXPECT_EQ(decoder->decode(rotated, "phone.jpg").pixels, decoder->decode(plain, "p.jpg").pixels);
  EXPECT_EQ(decoder->decode_region(rotated, "phone.jpg", 2, {3, 4, 5, 6}).image.pixels,
            decoder->decode_region(plain, "p.jpg", 2, {3, 4, 5, 6}).image.pixels);
  // Progressive JPEGs decode as the baseline ones do (the same coefficients, another order).
  const auto progressive = encode_jpeg(stored, JpegEncoding{90, true, true});
  EXPECT_NE(progressive, plain);
  EXPECT_EQ(decoder->decode(progressive, "prog.jpg").pixels, decoder->decode(plain, "p.jpg").pixels);
  // 16-bit PNGs (tests/data/images/make_png16.py) keep each sample's high byte (PIL's convert
  // would clip them).
  const fs::path fixtures = fs::path(MIRROR_SOURCE_DIR) / "tests/data/images";
  const DecodedImage rgb = decoder->decode(read_file_bytes((fixtures / "rgb16.png").string()), "rgb16.png");
  ASSERT_EQ(rgb.channels, 3);
  ASSERT_EQ(rgb.width, 5);
  ASSERT_EQ(rgb.height, 3);
  for (int y = 0; y < 3; ++y)
    for (int x = 0; x < 5; ++x) {
      const std::size_t at = static_cast<std::size_t>((y * 5 + x) * 3);
      EXPECT_EQ(rgb.pixels[at], ((x * 13000 + y * 700) % 65536) >> 8) << x << "," << y;
      EXPECT_EQ(rgb.pixels[at + 1], ((x * 300 + y * 21000) % 65536) >> 8) << x << "," << y;
      EXPECT_EQ(rgb.pixels[at + 2], (65535 - x * 9000) >> 8) << x << "," << y;
    }
  const DecodedImage gray = decoder->decode(read_file_bytes((fixtures / "gray16.png").string()), "gray16.png");
  ASSERT_EQ(gray.channels, 1);
  for (int y = 0; y < 3; ++y)
    for (int x = 0; x < 5; ++x)
      EXPECT_EQ(gray.pixels[static_cast<std::size_t>(y * 5 + x)], ((x * 16000 + y * 5000 + 255) % 65536) >> 8);
}

/// Records the denominators asked of the CPU decoder.
class SpyDecoder final : public ImageDecoder {
 public:
  std::string name() const override { return "spy"; }
  DecodedImage decode(std::span<const std::uint8_t> bytes, const std::string& n) const override {
    return cpu_image_decoder()->decode(bytes, n);
  }
  DecodedImage decode_reduced(std::span<const std::uint8_t> bytes, const std::string& n,
                              int d) const override {
    largest = std::max(largest.load(), d);
    return cpu_image_decoder()->decode_reduced(bytes, n, d);
  }
  mutable std::atomic<int> largest{0};
};

class PhotoFolder : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int i = 0; i < 12; ++i) {
      DecodedImage im = waves(96 + 8 * (i % 3), 128);
      for (std::size_t p = 0; p < im.pixels.size(); p += 3) im.pixels[p] = static_cast<std::uint8_t>(i * 20);
      const fs::path path = tmp_.path() / (i % 2 ? "b" : "a") / (std::to_string(i) + ".jpg");
      fs::create_directories(path.parent_path());
      test::write_bytes(path, encode_jpeg(im, 90));
    }
  }
  ImageFolderOptions options() const {
    ImageFolderOptions o;
    o.height = o.width = 32;
    parse_crop("random-resized", o.photo);
    parse_normalize("imagenet", o.photo);
    o.photo.flip = true;
    o.photo.eval_resize = 36;
    return o;
  }
  testing_util::TempDir tmp_{"mirror-photos"};
};

TEST_F(PhotoFolder, SameBatchesForEveryReplicaCountAndResumeRepeatsTheCrops) {
  const auto ds = load_image_folder(tmp_.path().string(), options());
  EXPECT_NE(ds->describe().find("photograph recipe: crop random-resized=0.08,1, flip, normalize"),
            std::string::npos)
      << ds->describe();
  LoaderOptions lo;
  lo.global_batch = 4;
  lo.seed = 5;
  lo.num_workers = 2;
  const auto one = test::run_epochs(ds, 1, lo, 2);
  const auto two = test::run_epochs(ds, 2, lo, 2);
  EXPECT_EQ(one.inputs, two.inputs);
  EXPECT_EQ(one.ids, two.ids);
  // Resume at epoch 1, step 1: what the uninterrupted run saw from there.
  const auto resumed = test::run_epochs(ds, 2, lo, 1, 1, 1);
  const std::size_t per = 3 * 32 * 32;
  EXPECT_EQ(resumed.inputs, std::vector<float>(one.inputs.begin() + 4 * per * 4, one.inputs.end()));
  // The same sample is cropped differently in another epoch, and another seed changes epoch 0.
  std::vector<float> e0(per), e1(per);
  ds->decode_float_drawn(3, 5, 0, e0.data());
  ds->decode_float_drawn(3, 5, 1, e1.data());
  EXPECT_NE(e0, e1);
  lo.seed = 6;
  EXPECT_NE(test::run_epochs(ds, 1, lo, 1).inputs,
            std::vector<float>(one.inputs.begin(), one.inputs.begin() + 12 * per));
  // Normalised: channel 0 of sample 3 (a/4.jpg) is the constant 80, so (80 / 255 - 0.485) /
  // 0.229, up to the JPEG's chroma error (a few levels at quality 90).
  for (std::size_t i = 0; i < 32 * 32; ++i)
    ASSERT_NEAR(e0[i], (80 / 255.0 - 0.485) / 0.229, 4 / 255.0 / 0.229) << i;
  EXPECT_LE(*std::max_element(e0.begin(), e0.end()), *ds->input_bound());
}

TEST_F(PhotoFolder, TheRegionDecodeServesTheWholeDecodesBatches) {
  // Larger 4:2:0 photographs (as cameras write them), so crops skip rows and columns at every
  // reduced scale.
  testing_util::TempDir dir{"mirror-photo-regions"};
  for (int i = 0; i < 8; ++i) {
    const fs::path path = dir.path() / (i % 2 ? "b" : "a") / (std::to_string(i) + ".jpg");
    fs::create_directories(path.parent_path());
    test::write_bytes(path, encode_jpeg(textured(200 + 8 * i, 264, 3), JpegEncoding{90, true, false}));
  }
  for (bool evaluation : {false, true}) {
    ImageFolderOptions o = options();
    o.height = o.width = 24;
    o.evaluation = evaluation;
    o.region_decode = false;
    const auto whole = load_image_folder(dir.path().string(), o);
    o.region_decode = true;
    const auto region = load_image_folder(dir.path().string(), o);
    LoaderOptions lo;
    lo.global_batch = 4;
    lo.seed = 11;
    EXPECT_EQ(test::run_epochs(region, 1, lo, 3).inputs, test::run_epochs(whole, 1, lo, 3).inputs)
        << (evaluation ? "evaluation" : "training");
  }
}

TEST_F(PhotoFolder, EvaluationResizesAndCentreCropsAtAReducedScale) {
  ImageFolderOptions o = options();
  o.evaluation = true;
  auto spy = std::make_shared<SpyDecoder>();
  o.decoder = spy;
  o.photo.eval_resize = 64;  // 96 x 128 -> 64 x 85, centre 32 x 32 = a 48 x 48 box: 1/2 scale
  const auto ds = load_image_folder(tmp_.path().string(), o);
  std::vector<float> a(3 * 32 * 32), b(a.size());
  ds->decode_float_drawn(0, 1, 0, a.data());
  ds->decode_float_drawn(0, 2, 7, b.data());
  EXPECT_EQ(a, b) << "evaluation draws nothing";
  EXPECT_EQ(spy->largest.load(), 1) << "a 48-pixel crop to 32 pixels cannot halve";
  o.photo.eval_resize = 32;  // the centre 32 x 32 of 32 x 42: a 96 x 96 box: 1/2 scale
  const auto half = load_image_folder(tmp_.path().string(), o);
  half->decode_float(0, a.data());
  EXPECT_EQ(spy->largest.load(), 2);
}

TEST_F(PhotoFolder, ATruncatedJpegIsABadSampleNamedOrReplaced) {
  // Cut inside the image data: the header is read at load, the decode fails at the batch.
  const fs::path victim = tmp_.path() / "a" / "0.jpg";
  const auto bytes = encode_jpeg(waves(96, 128), 90);
  test::write_bytes(victim, std::vector<std::uint8_t>(bytes.begin(), bytes.begin() + bytes.size() / 2));
  const auto ds = load_image_folder(tmp_.path().string(), options());
  std::vector<float> out(3 * 32 * 32);
  test::expect_data_error([&] { ds->decode_float_drawn(0, 1, 0, out.data()); },
                          {"a/0.jpg", "corrupt or truncated JPEG", "(sample 0)"});
  LoaderOptions lo;
  lo.global_batch = 12;
  lo.shuffle = false;
  lo.skip_bad_samples = true;
  const auto e = test::run_epochs(ds, 1, lo, 1);
  EXPECT_EQ(e.ids[0], 1) << "sample 0 is replaced by the next good one";
  EXPECT_EQ(std::vector<float>(e.inputs.begin(), e.inputs.begin() + 3 * 32 * 32),
            std::vector<float>(e.inputs.begin() + 3 * 32 * 32, e.inputs.begin() + 2 * 3 * 32 * 32))
      << "the replacement is drawn as sample 1 is";
}

TEST_F(PhotoFolder, RecipeNeedsASizeAndMatchingChannels) {
  ImageFolderOptions o = options();
  o.height = o.width = 0;
  expect_invalid([&] { load_image_folder(tmp_.path().string(), o); }, "give --image-size");
  o = options();
  o.color = ColorMode::kGrayscale;
  expect_invalid([&] { load_image_folder(tmp_.path().string(), o); },
                 "gives 3 means and stds but the images have 1 channel(s)");
  o = options();
  o.scale_to_unit = false;
  expect_invalid([&] { load_image_folder(tmp_.path().string(), o); }, "drop --normalize");
}

}  // namespace
}  // namespace mirror::data
