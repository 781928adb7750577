// Image folders: JPEG (libjpeg-turbo) and PNG (libpng) decoding, colour and size conversion, the
// folder convention (sorted classes, labels, recursion), the same samples as the equivalent
// arrays (PNG: bit for bit), exact sharding and resume, and every bad file named with its sample
// index: at load for what a header shows, at the batch for what only decoding shows.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>

#include "data_test_util.h"
#include "loader_test_util.h"
#include "mirror/data/arrays.h"
#include "mirror/data/image_decode.h"
#include "mirror/data/image_folder.h"
#include "mirror/data/loader.h"
#include "temp_dir.h"

namespace mirror::data {
namespace {
namespace fs = std::filesystem;
using test::expect_data_error;
using test::write_bytes;

DecodedImage pattern(int h, int w, int c, int seed) {
  DecodedImage im{h, w, c, std::vector<std::uint8_t>(static_cast<std::size_t>(h * w * c))};
  for (std::size_t i = 0; i < im.pixels.size(); ++i)
    im.pixels[i] = static_cast<std::uint8_t>((i * 37 + static_cast<std::size_t>(seed) * 101) % 256);
  return im;
}

/// Folder contents: (relative path, file size, modification time): nothing is written there.
std::map<std::string, std::pair<std::uintmax_t, fs::file_time_type>> listing(const fs::path& dir) {
  std::map<std::string, std::pair<std::uintmax_t, fs::file_time_type>> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    std::error_code ec;
    out[e.path().string()] = {e.is_regular_file(ec) ? e.file_size(ec) : 0,
                              e.symlink_status(ec).type() == fs::file_type::symlink
                                  ? fs::file_time_type{}
                                  : e.last_write_time(ec)};
  }
  return out;
}

class ImageTest : public ::testing::Test {
 protected:
  std::string put(const std::string& rel, const std::vector<std::uint8_t>& bytes) {
    const fs::path path = tmp_.path() / rel;
    fs::create_directories(path.parent_path());
    return write_bytes(path, bytes);
  }
  std::string p(const std::string& rel) const { return (tmp_.path() / rel).string(); }
  testing_util::TempDir tmp_{"mirror-images"};
};

TEST_F(ImageTest, PngRoundTripsExactlyAndJpegClosely) {
  for (int c : {1, 3}) {
    const DecodedImage im = pattern(5, 7, c, c);
    const auto png = encode_png(im);
    const ImageHeader h = read_image_header(png, "a.png");
    EXPECT_EQ(h.format, ImageFormat::kPng);
    EXPECT_EQ(h.height, 5);
    EXPECT_EQ(h.width, 7);
    EXPECT_EQ(h.channels, c);
    const DecodedImage back = cpu_image_decoder()->decode(png, "a.png");
    EXPECT_EQ(back.pixels, im.pixels);
    EXPECT_EQ(back.channels, c);
    // A smooth image survives JPEG at quality 100 within a few levels.
    DecodedImage smooth = im;
    for (int y = 0; y < 5; ++y)
      for (int x = 0; x < 7; ++x)
        for (int k = 0; k < c; ++k) smooth.pixels[(y * 7 + x) * c + k] = static_cast<std::uint8_t>(100 + 10 * x + 5 * y + 20 * k);
    const auto jpg = encode_jpeg(smooth, 100);
    EXPECT_EQ(read_image_header(jpg, "a.jpg").channels, c);
    const DecodedImage j = cpu_image_decoder()->decode(jpg, "a.jpg");
    ASSERT_EQ(j.pixels.size(), smooth.pixels.size());
    for (std::size_t i = 0; i < j.pixels.size(); ++i)
      EXPECT_NEAR(j.pixels[i], smooth.pixels[i], 6) << "byte " << i;
  }
}

TEST_F(ImageTest, ColourAndSizeConversions) {
  DecodedImage rgb{1, 2, 3, {255, 0, 0, 10, 20, 30}};
  float out[6];
  image_to_chw(rgb, 1, 1, 2, out);
  EXPECT_EQ(out[0], 76.0f / 255.0f);  // (299 * 255 + 500) / 1000 = 76
  EXPECT_EQ(out[1], 18.0f / 255.0f);  // (2990 + 11740 + 3420 + 500) / 1000 = 18
  DecodedImage grey{1, 2, 1, {7, 200}};
  image_to_chw(grey, 3, 1, 2, out);
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ(out[2 * k], 7.0f / 255.0f);
    EXPECT_EQ(out[2 * k + 1], 200.0f / 255.0f);
  }
  // Bilinear with half-pixel centres: 2 -> 4 samples at 0, 0.25, 0.75, 1 (clamped at the edges).
  DecodedImage row{1, 2, 1, {0, 200}};
  float wide[4];
  image_to_chw(row, 1, 1, 4, wide);
  EXPECT_FLOAT_EQ(wide[0] * 255, 0);
  EXPECT_FLOAT_EQ(wide[1] * 255, 50);
  EXPECT_FLOAT_EQ(wide[2] * 255, 150);
  EXPECT_FLOAT_EQ(wide[3] * 255, 200);
}

TEST_F(ImageTest, AFolderIsTheSameDataAsItsArraysAndShardsExactly) {
  // Classes out of order on disk; files nested one level in class "b".
  std::vector<std::uint8_t> pixels;
  std::vector<std::int64_t> labels;
  const std::vector<std::pair<std::string, int>> files = {
      {"a/0.png", 0}, {"a/1.png", 0}, {"b/deep/x.png", 1}, {"b/y.png", 1}, {"c/z.png", 2}};
  int seed = 0;
  for (const auto& [rel, label] : files) {
    const DecodedImage im = pattern(4, 3, 1, seed++);
    put("data/" + rel, encode_png(im));
    pixels.insert(pixels.end(), im.pixels.begin(), im.pixels.end());
    labels.push_back(label);
  }
  put("data/b/notes.txt", {'h', 'i'});
  const auto before = listing(p("data"));
  ImageFolderOptions o;
  o.check_threads = 3;
  const auto folder = load_image_folder(p("data"), o);
  EXPECT_EQ(folder->size(), 5);
  EXPECT_EQ(folder->class_names(), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(folder->sample_shape(), (Shape{1, 4, 3}));
  ASSERT_EQ(folder->notes().size(), 1u);
  EXPECT_NE(folder->notes()[0].find("ignored 1 file(s)"), std::string::npos) << folder->notes()[0];
  EXPECT_EQ(image_file_of(*folder, 2), p("data/b/deep/x.png"));
  const auto arrays = arrays_dataset(test::make_array(pixels, {5, 1, 4, 3}),
                                     test::make_array(labels, {5}), {});
  for (std::int64_t i = 0; i < 5; ++i) {
    float a[12], b[12];
    arrays->decode_float(i, a);
    folder->decode_float(i, b);
    EXPECT_EQ(0, std::memcmp(a, b, sizeof a)) << "sample " << i;
    EXPECT_EQ(arrays->label(i), folder->label(i));
  }
  LoaderOptions lo;
  lo.global_batch = 4;
  lo.seed = 9;
  lo.num_workers = 2;
  lo.augment.flip_horizontal = true;
  const auto reference = test::run_epochs(arrays, 1, lo, 2);
  for (int replicas : {1, 2}) {
    const auto e = test::run_epochs(folder, replicas, lo, 2);
    EXPECT_EQ(e.inputs, reference.inputs) << replicas << " replicas";
    EXPECT_EQ(e.labels, reference.labels) << replicas << " replicas";
  }
  const auto resumed = test::run_epochs(folder, 2, lo, 1, 1, 1);
  EXPECT_EQ(resumed.inputs, std::vector<float>(reference.inputs.begin() + 3 * 4 * 12, reference.inputs.end()));
  EXPECT_EQ(listing(p("data")), before) << "the data folder was written to";

  // The test split takes the training classes: a folder with only "c" labels it 2.
  put("test/c/q.png", encode_png(pattern(4, 3, 1, 1)));
  ImageFolderOptions t;
  t.classes = folder->class_names();
  EXPECT_EQ(load_image_folder(p("test"), t)->label(0), 2);
  put("test/d/q.png", encode_png(pattern(4, 3, 1, 1)));
  expect_data_error([&] { load_image_folder(p("test"), t); },
                    {"test/d is a class the training images do not have"});
}

TEST_F(ImageTest, SizeAndModeOptions) {
  put("mix/a/grey.png", encode_png(pattern(4, 4, 1, 1)));
  put("mix/b/colour.jpg", encode_jpeg(pattern(8, 6, 3, 2), 90));
  expect_data_error([&] { load_image_folder(p("mix")); },
                    {"colour.jpg is RGB", "grey.png, is grayscale", "an image of another mode",
                     "--color", "(sample 1)"});
  ImageFolderOptions o;
  o.color = ColorMode::kRgb;
  o.height = 5;
  o.width = 5;
  const auto rgb = load_image_folder(p("mix"), o);
  EXPECT_EQ(rgb->sample_shape(), (Shape{3, 5, 5}));
  std::vector<float> s(75);
  rgb->decode_float(0, s.data());
  rgb->decode_float(1, s.data());
  o.color = ColorMode::kGrayscale;
  const auto grey = load_image_folder(p("mix"), o);
  EXPECT_EQ(grey->sample_shape(), (Shape{1, 5, 5}));
  EXPECT_NE(grey->describe().find("1 JPEG, 1 PNG"), std::string::npos) << grey->describe();
  EXPECT_THROW(parse_color_mode("cmyk"), InvalidArgument);
}

TEST_F(ImageTest, BadFilesAreNamedWithTheirSampleIndex) {
  const auto good = encode_png(pattern(4, 4, 1, 1));
  const auto jpg = encode_jpeg(pattern(16, 16, 1, 3), 90);
  auto corrupt_header = good;
  corrupt_header[12] = 'X';  // the IHDR tag
  auto cut_png = good;
  cut_png.resize(good.size() - 20);  // inside the image data
  auto cut_jpg = jpg;
  cut_jpg.resize(jpg.size() / 2);
  struct Case {
    std::string name;
    std::vector<std::uint8_t> bytes;
    std::vector<const char*> message;
    bool at_load;
  };
  const std::vector<Case> cases = {
      {"header.png", corrupt_header, {"header.png", "not a 13-byte IHDR", "(sample 1)"}, true},
      {"text.png", {'h', 'e', 'l', 'l', 'o'}, {"text.png", "not a JPEG or PNG"}, true},
      {"empty.png", {}, {"empty.png is empty"}, true},
      {"cut.png", cut_png, {"cut.png", "corrupt or truncated PNG", "(sample 1)"}, false},
      {"cut.jpg", cut_jpg, {"cut.jpg", "corrupt or truncated JPEG", "(sample 1)"}, false},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string dir = "bad-" + c.name;
    put(dir + "/k/0.png", good);
    put(dir + "/k/1" + c.name, c.bytes);
    put(dir + "/k/2.png", good);
    if (c.at_load) {
      try {
        load_image_folder(p(dir));
        ADD_FAILURE() << "loaded";
      } catch (const DataError& e) {
        for (const char* part : c.message) EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
      }
    } else {
      const auto ds = load_image_folder(p(dir));
      float s[16];
      ds->decode_float(0, s);
      try {
        ds->decode_float(1, s);
        ADD_FAILURE() << "decoded";
      } catch (const BadSample& e) {
        EXPECT_EQ(e.index(), 1);
        for (const char* part : c.message) EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
      }
    }
    // --skip-bad-samples: loaded, and the loader serves sample 2 in its place.
    ImageFolderOptions skip;
    skip.skip_bad_samples = true;
    const auto ds = load_image_folder(p(dir), skip);
    EXPECT_EQ(ds->notes().size(), c.at_load ? 1u : 0u);
    LoaderOptions lo;
    lo.global_batch = 3;
    lo.shuffle = false;
    lo.skip_bad_samples = true;
    const auto e = test::run_epochs(ds, 1, lo, 1);
    EXPECT_EQ(e.ids, (std::vector<std::int64_t>{0, 2, 2}));
  }
  // A CMYK JPEG is another image mode; an unreadable file, an empty class, no class at all.
  std::vector<std::uint8_t> cmyk;
  {
    DecodedImage c4{8, 8, 3, std::vector<std::uint8_t>(8 * 8 * 3, 90)};
    cmyk = encode_jpeg(c4, 90);
    // The frame header's component count: SOF0 at the first FF C0.
    for (std::size_t i = 0; i + 10 < cmyk.size(); ++i) {
      if (cmyk[i] == 0xFF && cmyk[i + 1] == 0xC0) {
        cmyk[i + 9] = 4;
        break;
      }
    }
  }
  put("cmyk/k/a.jpg", cmyk);
  expect_data_error([&] { load_image_folder(p("cmyk")); }, {"a.jpg", "4 colour components (CMYK or YCCK)"});
  put("dangling/k/a.png", good);
  fs::create_symlink(p("nowhere.png"), p("dangling/k/b.png"));
  expect_data_error([&] { load_image_folder(p("dangling")); }, {"cannot open", "b.png", "(sample 1)"});
  put("hollow/a/x.png", good);
  fs::create_directories(p("hollow/b"));
  expect_data_error([&] { load_image_folder(p("hollow")); }, {"hollow/b is an empty class folder"});
  put("flat/x.png", good);
  expect_data_error([&] { load_image_folder(p("flat")); }, {"holds no class folder"});
  expect_data_error([&] { load_image_folder(p("missing")); }, {"missing is not a folder"});
}

TEST_F(ImageTest, FileListsForPrediction) {
  put("pred/one.png", encode_png(pattern(4, 4, 1, 1)));
  put("pred/sub/two.jpg", encode_jpeg(pattern(4, 4, 1, 2), 95));
  put("other.png", encode_png(pattern(4, 4, 1, 3)));
  const auto ds = load_image_files({p("pred"), p("other.png")});
  ASSERT_EQ(ds->size(), 3);
  EXPECT_EQ(image_file_of(*ds, 0), p("pred/one.png"));
  EXPECT_EQ(image_file_of(*ds, 1), p("pred/sub/two.jpg"));
  EXPECT_EQ(image_file_of(*ds, 2), p("other.png"));
  EXPECT_EQ(ds->label(2), 0);
}

TEST(ImageDecoders, GpuDecodeWithoutNvjpegOrDeviceSaysWhy) {
  EXPECT_EQ(parse_decode_device("cpu"), DecodeDevice::kCpu);
  EXPECT_THROW(parse_decode_device("tpu"), InvalidArgument);
  try {
    const auto gpu = make_image_decoder(DecodeDevice::kGpu);
    EXPECT_NE(gpu->name().find("nvJPEG"), std::string::npos);  // a machine with a GPU
  } catch (const Unavailable& e) {
    EXPECT_NE(std::string(e.what()).find("--decode gpu"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace mirror::data
