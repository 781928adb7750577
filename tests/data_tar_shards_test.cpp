// Tar shards in WebDataset's layout: the tar headers (ustar prefix, GNU long names, pax paths,
// checksums, truncation), the same samples, labels and pixels as the equivalent image folder
// (plain and with the photograph recipe), integer and named classes with the test split taking
// the training classes, the shard set a path names, the bad-sample policy, and every bad input
// named with its shard and member.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>

#include "data_test_util.h"
#include "loader_test_util.h"
#include "mirror/data/image_decode.h"
#include "mirror/data/image_folder.h"
#include "mirror/data/loader.h"
#include "mirror/data/tar_shards.h"
#include "temp_dir.h"

namespace mirror::data {
namespace {
namespace fs = std::filesystem;
using test::Bytes;
using test::expect_data_error;
using test::write_bytes;

/// A tar written by hand, so the tests control every header field.
class TarWriter {
 public:
  /// A regular file; a name over 100 bytes goes into the ustar prefix when `prefix` is set
  /// (split at a '/'), else into a GNU long name ('L') member before it.
  void file(const std::string& name, const Bytes& data, bool prefix = false) {
    if (name.size() > 100 && prefix) {
      const std::size_t cut = name.rfind('/', 154);
      header(name.substr(cut + 1), data.size(), '0', name.substr(0, cut));
    } else if (name.size() > 100) {
      header("././@LongLink", name.size() + 1, 'L');
      Bytes n(name.begin(), name.end());
      n.push_back(0);
      body(n);
      header(name.substr(0, 100), data.size(), '0');
    } else {
      header(name, data.size(), '0');
    }
    body(data);
  }
  void text(const std::string& name, const std::string& s) {
    file(name, Bytes(s.begin(), s.end()));
  }
  /// A regular file named by a pax extended header's path record (the header's own name differs).
  void pax_file(const std::string& name, const Bytes& data) {
    std::string record = " path=" + name + "\n";
    std::size_t len = record.size() + 1;
    while (std::to_string(len).size() + record.size() != len) ++len;
    record = std::to_string(len) + record;
    header("PaxHeaders/x", record.size(), 'x');
    body(Bytes(record.begin(), record.end()));
    header("short-name", data.size(), '0');
    body(data);
  }
  void directory(const std::string& name) { header(name, 0, '5'); }
  Bytes finish() {
    Bytes out = bytes_;
    out.resize(out.size() + 1024, 0);
    return out;
  }
  const Bytes& so_far() const { return bytes_; }

 private:
  void header(const std::string& name, std::size_t size, char type,
              const std::string& prefix = "") {
    std::uint8_t h[512] = {};
    std::memcpy(h, name.data(), std::min<std::size_t>(name.size(), 100));
    std::snprintf(reinterpret_cast<char*>(h + 100), 8, "%07o", 0644);
    std::snprintf(reinterpret_cast<char*>(h + 108), 8, "%07o", 0);
    std::snprintf(reinterpret_cast<char*>(h + 116), 8, "%07o", 0);
    std::snprintf(reinterpret_cast<char*>(h + 124), 12, "%011o", static_cast<unsigned>(size));
    std::snprintf(reinterpret_cast<char*>(h + 136), 12, "%011o", 0);
    h[156] = static_cast<std::uint8_t>(type);
    static constexpr char kMagic[8] = {'u', 's', 't', 'a', 'r', '\0', '0', '0'};  // POSIX ustar
    std::memcpy(h + 257, kMagic, 8);
    std::memcpy(h + 345, prefix.data(), std::min<std::size_t>(prefix.size(), 155));
    std::memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (std::uint8_t b : h) sum += b;
    std::snprintf(reinterpret_cast<char*>(h + 148), 8, "%06o", sum);
    bytes_.insert(bytes_.end(), h, h + 512);
  }
  void body(const Bytes& data) {
    bytes_.insert(bytes_.end(), data.begin(), data.end());
    bytes_.resize((bytes_.size() + 511) / 512 * 512, 0);
  }
  Bytes bytes_;
};

DecodedImage pattern(int h, int w, int c, int seed) {
  DecodedImage im{h, w, c, std::vector<std::uint8_t>(static_cast<std::size_t>(h * w * c))};
  for (std::size_t i = 0; i < im.pixels.size(); ++i)
    im.pixels[i] = static_cast<std::uint8_t>(
        (i * 37 + static_cast<std::size_t>(seed) * 101 + (i / 7) * (i % 5)) % 256);
  return im;
}

class TarShardsTest : public ::testing::Test {
 protected:
  std::string put(const std::string& rel, const Bytes& bytes) {
    const fs::path path = tmp_.path() / rel;
    fs::create_directories(path.parent_path());
    return write_bytes(path, bytes);
  }
  std::string p(const std::string& rel) const { return (tmp_.path() / rel).string(); }
  /// A shard of `samples`: (key, image extension, image bytes, label text).
  struct Sample {
    std::string key, ext;
    Bytes image;
    std::string label;
  };
  std::string shard(const std::string& rel, const std::vector<Sample>& samples) {
    TarWriter w;
    for (const Sample& s : samples) {
      w.file(s.key + s.ext, s.image);
      w.text(s.key + ".cls", s.label);
    }
    return put(rel, w.finish());
  }
  testing_util::TempDir tmp_{"mirror-tar"};
};

std::vector<float> decoded(const Dataset& ds, std::int64_t i, std::uint64_t seed, int epoch) {
  std::vector<float> out(static_cast<std::size_t>(shape_numel(ds.sample_shape())));
  ds.decode_float_drawn(i, seed, epoch, out.data());
  return out;
}

TEST_F(TarShardsTest, ShardsOfAFolderAreTheSameSamplesLabelsAndPixels) {
  // Three classes, JPEG and PNG, one file nested; the shards hold them in the folder's order,
  // split over two shards, labelled by index in one set and by name in the other.
  const std::vector<std::pair<std::string, int>> files = {{"cat/0.jpg", 0},      {"cat/1.png", 0},
                                                          {"dog/deep/x.jpg", 1}, {"dog/y.png", 1},
                                                          {"eel/z.jpg", 2},      {"eel/zz.jpg", 2}};
  const std::vector<std::string> names = {"cat", "dog", "eel"};
  std::vector<Sample> samples;
  int seed = 0;
  for (const auto& [rel, label] : files) {
    const DecodedImage im = pattern(40, 52, 3, seed++);
    const bool png = rel.ends_with(".png");
    const Bytes bytes = png ? encode_png(im) : encode_jpeg(im, 90);
    put("folder/" + rel, bytes);
    samples.push_back(
        {rel.substr(0, rel.size() - 4), png ? ".png" : ".jpg", bytes, std::to_string(label)});
  }
  std::vector<Sample> named = samples;
  for (std::size_t i = 0; i < named.size(); ++i)
    named[i].label = names[static_cast<std::size_t>(files[i].second)];
  shard("ints/a-0.tar", {samples.begin(), samples.begin() + 4});
  shard("ints/a-1.tar", {samples.begin() + 4, samples.end()});
  shard("names/a-0.tar", {named.begin(), named.begin() + 3});
  shard("names/a-1.tar", {named.begin() + 3, named.end()});

  for (bool recipe : {false, true}) {
    SCOPED_TRACE(recipe ? "photograph recipe" : "plain");
    ImageFolderOptions o;
    o.check_threads = 2;
    o.height = 24;
    o.width = 20;
    if (recipe) {
      parse_crop("random-resized=0.3,1", o.photo);
      o.photo.flip = true;
      parse_normalize("imagenet", o.photo);
    }
    const auto folder = load_image_folder(p("folder"), o);
    const auto ints = load_tar_shards(p("ints"), o);
    const auto by_name = load_image_input(p("names") + "/a-*.tar", o);
    EXPECT_EQ(ints->class_names(), (std::vector<std::string>{"0", "1", "2"}));
    EXPECT_EQ(by_name->class_names(), names);
    for (const auto& shards : {ints, by_name}) {
      ASSERT_EQ(shards->size(), folder->size());
      EXPECT_EQ(shards->num_classes(), 3);
      EXPECT_EQ(shards->sample_shape(), folder->sample_shape());
      EXPECT_EQ(shards->input_bound(), folder->input_bound());
      for (std::int64_t i = 0; i < folder->size(); ++i) {
        EXPECT_EQ(shards->label(i), folder->label(i)) << i;
        for (int epoch : {0, 3})
          EXPECT_EQ(decoded(*shards, i, 7, epoch), decoded(*folder, i, 7, epoch)) << i;
      }
    }
    EXPECT_NE(ints->describe().find("6 images in 2 tar shard(s) (4 JPEG, 2 PNG), 3 classes"),
              std::string::npos)
        << ints->describe();
    EXPECT_EQ(image_file_of(*ints, 2), p("ints/a-0.tar") + ":dog/deep/x.jpg");
    EXPECT_EQ(image_file_of(*ints, 5), p("ints/a-1.tar") + ":eel/zz.jpg");
  }
  // Through the loader, shuffled: the folder at 1 replica, the shards at 2, and the shards
  // resumed at epoch 1's second step give the same global batches (Note [Exact sharding]).
  LoaderOptions lo;
  lo.global_batch = 4;
  lo.seed = 3;
  ImageFolderOptions o;
  o.height = o.width = 16;
  parse_crop("random-resized", o.photo);
  o.photo.flip = true;
  const auto folder = test::run_epochs(load_image_folder(p("folder"), o), 1, lo, 2);
  const auto shards = test::run_epochs(load_image_input(p("ints"), o), 2, lo, 2);
  EXPECT_EQ(shards.ids, folder.ids);
  EXPECT_EQ(shards.labels, folder.labels);
  EXPECT_EQ(shards.inputs, folder.inputs);
  const auto resumed = test::run_epochs(load_image_input(p("ints"), o), 2, lo, 1, 1, 1);
  ASSERT_EQ(resumed.ids.size(), 4u);
  EXPECT_EQ(resumed.ids, std::vector<std::int64_t>(folder.ids.end() - 4, folder.ids.end()));
  EXPECT_EQ(
      resumed.inputs,
      std::vector<float>(folder.inputs.end() - static_cast<std::ptrdiff_t>(resumed.inputs.size()),
                         folder.inputs.end()));
}

TEST_F(TarShardsTest, HeadersLongNamesPaxPathsAndUstarPrefixes) {
  const std::string deep = "very/" + std::string(120, 'd') + "/sample";
  const Bytes png = encode_png(pattern(6, 5, 1, 1));
  TarWriter w;
  w.directory("top/");
  w.file(deep + ".png", png);  // GNU long name
  w.text(deep + ".cls", "1");
  w.file("pre/" + std::string(110, 'p') + "/k.png", png, true);  // ustar prefix
  w.text("pre/" + std::string(110, 'p') + "/k.cls", "0");
  w.pax_file("pax/sample.with.dots.png", png);  // pax path; extension "with.dots.png"
  w.text("pax/sample.cls", "1");
  w.text("./dot/s.png.json", "{}");  // another extension: passed over
  w.pax_file("pax/q.png", png);
  w.text("./pax/q.cls", " 1\n");  // "./" dropped, whitespace trimmed
  const std::string path = put("t.tar", w.finish());
  const auto members = list_tar_members(path);
  ASSERT_EQ(members.size(), 9u);
  EXPECT_EQ(members[0].name, deep + ".png");
  EXPECT_EQ(members[0].size, png.size());
  EXPECT_EQ(members[2].name, "pre/" + std::string(110, 'p') + "/k.png");
  EXPECT_EQ(members[4].name, "pax/sample.with.dots.png");
  EXPECT_EQ(members[6].name, "dot/s.png.json");
  EXPECT_EQ(members[8].name, "pax/q.cls");
  // The offsets point at the data.
  FILE* f = std::fopen(path.c_str(), "rb");
  ASSERT_NE(f, nullptr);
  Bytes got(png.size());
  std::fseek(f, static_cast<long>(members[2].offset), SEEK_SET);
  ASSERT_EQ(std::fread(got.data(), 1, got.size(), f), got.size());
  std::fclose(f);
  EXPECT_EQ(got, png);
  // "pax/sample" has an image whose extension is not an image's ("with.dots.png"): its label
  // has no image. The other three are samples.
  expect_data_error([&] { load_tar_shards(path); },
                    {"t.tar: the label pax/sample.cls has no image member (pax/sample.jpg"});
  ImageFolderOptions skip;
  skip.skip_bad_samples = true;
  const auto ds = load_tar_shards(path, skip);
  ASSERT_EQ(ds->size(), 3);
  EXPECT_EQ(image_file_of(*ds, 0), path + ":" + deep + ".png");
  EXPECT_EQ(ds->label(0), 1);
  EXPECT_EQ(ds->label(1), 0);
  EXPECT_EQ(ds->label(2), 1);
  const std::vector<std::string> notes = ds->notes();
  ASSERT_EQ(notes.size(), 2u);
  EXPECT_NE(notes[0].find("passed over 2 member(s)"), std::string::npos) << notes[0];
  EXPECT_NE(notes[1].find("left out 1 sample(s) without a label or without an image"),
            std::string::npos)
      << notes[1];
}

TEST_F(TarShardsTest, IntegerAndNamedClassesAndTheTestSplit) {
  const Bytes png = encode_png(pattern(4, 4, 1, 2));
  shard("gap/s.tar", {{"a", ".png", png, "0"}, {"b", ".png", png, "2"}, {"c", ".png", png, "2"}});
  const auto gap = load_tar_shards(p("gap/s.tar"));
  EXPECT_EQ(gap->num_classes(), 3);  // 0..max, class 1 has no sample
  EXPECT_EQ(gap->label(1), 2);
  ImageFolderOptions test;
  test.classes = gap->class_names();
  shard("gap-test/s.tar", {{"a", ".png", png, "1"}});
  EXPECT_EQ(load_tar_shards(p("gap-test/s.tar"), test)->label(0), 1);
  shard("gap-big/s.tar", {{"a", ".png", png, "0"}, {"b", ".png", png, "3"}});
  expect_data_error([&] { load_tar_shards(p("gap-big/s.tar"), test); },
                    {"gap-big/s.tar:b.cls holds the class 3, but the training labels have 3 "
                     "classes (0..2)"});
  shard("gap-name/s.tar", {{"a", ".png", png, "cat"}});
  expect_data_error([&] { load_tar_shards(p("gap-name/s.tar"), test); },
                    {"gap-name/s.tar:a.cls holds 'cat', not an integer class"});

  shard("named/s.tar", {{"a", ".png", png, "zebra"}, {"b", ".png", png, "ant"}});
  const auto named = load_tar_shards(p("named/s.tar"));
  EXPECT_EQ(named->class_names(), (std::vector<std::string>{"ant", "zebra"}));
  EXPECT_EQ(named->label(0), 1);
  test.classes = named->class_names();
  shard("named-test/s.tar", {{"a", ".png", png, "ant"}, {"b", ".png", png, "cow"}});
  expect_data_error([&] { load_tar_shards(p("named-test/s.tar"), test); },
                    {"named-test/s.tar:b.cls holds the class 'cow', which the training labels "
                     "do not have (their 2 classes: ant, zebra)"});
  // A folder's classes for shards of the test split, and shards' for a test folder.
  put("folder-test/zebra/x.png", png);
  EXPECT_EQ(load_image_folder(p("folder-test"), test)->label(0), 1);

  shard("mixed/s.tar", {{"a", ".png", png, "3"}, {"b", ".png", png, "cat"}});
  expect_data_error([&] { load_tar_shards(p("mixed/s.tar")); },
                    {"mix integer classes (", "mixed/s.tar:a.cls: 3", "mixed/s.tar:b.cls: 'cat'"});
  shard("negative/s.tar", {{"a", ".png", png, "-1"}});
  expect_data_error([&] { load_tar_shards(p("negative/s.tar")); },
                    {"negative/s.tar:a.cls holds the class -1; classes are 0 or more"});
  shard("empty-label/s.tar", {{"a", ".png", png, " \n"}});
  expect_data_error([&] { load_tar_shards(p("empty-label/s.tar")); },
                    {"empty-label/s.tar: the label a.cls is empty"});
}

TEST_F(TarShardsTest, BadShardsAreNamedWithTheShardAndMember) {
  const Bytes png = encode_png(pattern(4, 4, 1, 3));
  TarWriter w;
  w.file("k/one.png", png);
  w.text("k/one.cls", "0");
  w.file("k/two.png", Bytes(2000, 7));
  w.text("k/two.cls", "0");
  const Bytes whole = w.finish();
  // Truncated inside a member's data, at a member's end (no end-of-archive block), inside a
  // header.
  put("cut-data.tar", Bytes(whole.begin(), whole.begin() + 512 * 6));
  expect_data_error([&] { load_tar_shards(p("cut-data.tar")); },
                    {"cut-data.tar: the member k/two.png (header at byte 2048) has 2000 bytes",
                     "the tar is truncated"});
  put("cut-member.tar", Bytes(whole.begin(), whole.begin() + 2048));
  expect_data_error([&] { load_tar_shards(p("cut-member.tar")); },
                    {"cut-member.tar ends at byte 2048 without the end-of-archive block (after "
                     "the member k/one.cls): the tar is truncated"});
  put("cut-header.tar", Bytes(whole.begin(), whole.begin() + 2100));
  expect_data_error([&] { load_tar_shards(p("cut-header.tar")); },
                    {"cut-header.tar ends at byte 2100 inside a 512-byte header"});
  Bytes corrupt = whole;
  corrupt[1024 + 3] ^= 0x20;  // the second member's name
  put("checksum.tar", corrupt);
  expect_data_error([&] { load_tar_shards(p("checksum.tar")); },
                    {"checksum.tar: the header at byte 1024 (after the member k/one.png) has a "
                     "bad checksum: the file is corrupt or not a tar archive"});
  put("not-a-tar.tar", Bytes(4096, 'x'));
  expect_data_error([&] { load_tar_shards(p("not-a-tar.tar")); }, {"bad checksum"});

  // An image without a label, a label without an image, two images under one key.
  TarWriter unlabelled;
  unlabelled.file("a.png", png);
  unlabelled.text("a.cls", "0");
  unlabelled.file("b.png", png);
  unlabelled.file("c.png", png);
  unlabelled.text("c.cls", "0");
  put("unlabelled.tar", unlabelled.finish());
  expect_data_error(
      [&] { load_tar_shards(p("unlabelled.tar")); },
      {"unlabelled.tar: the image b.png has no label member (b.cls)", "--skip-bad-samples"});
  TarWriter orphan;
  orphan.text("a.cls", "0");
  put("orphan.tar", orphan.finish());
  expect_data_error([&] { load_tar_shards(p("orphan.tar")); },
                    {"orphan.tar: the label a.cls has no image member"});
  TarWriter twice;
  twice.file("a.png", png);
  twice.file("a.jpg", encode_jpeg(pattern(4, 4, 1, 3)));
  twice.text("a.cls", "0");
  put("twice.tar", twice.finish());
  expect_data_error([&] { load_tar_shards(p("twice.tar")); },
                    {"twice.tar: the key a has two images (a.png and a.jpg)"});

  // A member that is not an image: named at load, or left bad and replaced under the policy.
  expect_data_error([&] { load_tar_shards(p("bad-image.tar")); }, {"bad-image.tar does not exist"});
  put("bad-image.tar", whole);
  expect_data_error([&] { load_tar_shards(p("bad-image.tar")); },
                    {"bad-image.tar:k/two.png", "not a JPEG or PNG", "(sample 1)"});
  ImageFolderOptions skip;
  skip.skip_bad_samples = true;
  const auto ds = load_tar_shards(p("bad-image.tar"), skip);
  ASSERT_EQ(ds->size(), 2);
  ASSERT_EQ(ds->notes().size(), 1u);
  EXPECT_NE(ds->notes()[0].find("bad-image.tar:k/two.png"), std::string::npos);
  float out[16];
  EXPECT_THROW(ds->decode_float(1, out), BadSample);
  // An image whose header reads but whose data is cut: BadSample at the batch, named.
  Bytes cut_png = encode_png(pattern(4, 4, 1, 4));
  cut_png.resize(cut_png.size() - 20);
  shard("cut-png.tar", {{"x", ".png", png, "0"}, {"y", ".png", cut_png, "0"}});
  const auto cut = load_tar_shards(p("cut-png.tar"));
  try {
    cut->decode_float(1, out);
    ADD_FAILURE() << "decoded";
  } catch (const BadSample& e) {
    EXPECT_EQ(e.index(), 1);
    EXPECT_NE(std::string(e.what()).find("cut-png.tar:y.png"), std::string::npos) << e.what();
  }
  LoaderOptions lo;
  lo.global_batch = 2;
  lo.shuffle = false;
  lo.skip_bad_samples = true;
  EXPECT_EQ(test::run_epochs(cut, 1, lo, 1).ids, (std::vector<std::int64_t>{0, 0}));
}

TEST_F(TarShardsTest, TheShardSetAPathNames) {
  const Bytes png = encode_png(pattern(4, 4, 1, 5));
  shard("set/b.tar", {{"b", ".png", png, "1"}});
  shard("set/a.tar", {{"a", ".png", png, "0"}});
  put("set/readme.txt", {'h', 'i'});
  EXPECT_EQ(tar_shard_files(p("set")), (std::vector<std::string>{p("set/a.tar"), p("set/b.tar")}));
  EXPECT_EQ(tar_shard_files(p("set/*.tar")),
            (std::vector<std::string>{p("set/a.tar"), p("set/b.tar")}));
  EXPECT_EQ(tar_shard_files(p("set/b.tar")), (std::vector<std::string>{p("set/b.tar")}));
  EXPECT_TRUE(is_tar_shards(p("set")));
  EXPECT_TRUE(is_tar_shards(p("set/b.tar")));
  EXPECT_TRUE(is_tar_shards(p("x/train-*")));
  put("images/cat/x.png", png);
  EXPECT_FALSE(is_tar_shards(p("images")));
  EXPECT_EQ(load_image_input(p("images"))->size(), 1);
  const auto ds = load_image_input(p("set"));
  EXPECT_EQ(ds->label(0), 0);  // a.tar first
  EXPECT_EQ(ds->label(1), 1);
  expect_data_error([&] { load_image_input(p("set/train-*.tar")); },
                    {"the shard pattern", "set/train-*.tar matches no file"});
  fs::create_directories(p("none"));
  put("none/readme.txt", {'h'});
  expect_data_error([&] { load_tar_shards(p("none")); }, {"none holds no .tar shard"});
  put("both/cat/x.png", png);
  shard("both/s.tar", {{"a", ".png", png, "0"}});
  expect_data_error([&] { load_image_input(p("both")); },
                    {"both holds both .tar shards and the folder cat"});
  TarWriter other;
  other.text("a.txt", "just text");
  put("other/s.tar", other.finish());
  expect_data_error([&] { load_tar_shards(p("other")); },
                    {"(1 shard(s), the first", "other/s.tar) holds no sample"});
  // A path that exists as written is not a pattern, even with '[' in it.
  shard("lit[1]/s.tar", {{"a", ".png", png, "0"}});
  EXPECT_EQ(load_image_input(p("lit[1]"))->size(), 1);
  EXPECT_EQ(tar_shard_files(p("lit[1]/s.tar")), (std::vector<std::string>{p("lit[1]/s.tar")}));
  // Prediction: every image, labelled or not; label members are not read.
  TarWriter mixed;
  mixed.file("a.png", png);
  mixed.file("b.png", png);
  mixed.text("b.cls", "not even a class");
  mixed.text("c.cls", "0");
  put("predict/s.tar", mixed.finish());
  const auto images = load_tar_shard_images(p("predict"));
  ASSERT_EQ(images->size(), 2);
  EXPECT_EQ(images->class_names(), (std::vector<std::string>{"images"}));
  EXPECT_EQ(image_file_of(*images, 1), p("predict/s.tar") + ":b.png");
  expect_data_error([&] { load_tar_shard_images(p("other")); },
                    {"holds no sample: no key with an image member (.jpg, .jpeg or .png), as"});
  // A shard rewritten while the data is in use: the next epoch's check names it.
  shard("changing/s.tar", {{"a", ".png", png, "0"}});
  const auto changing = load_tar_shards(p("changing"));
  changing->check_unchanged();
  shard("changing/s.tar", {{"a", ".png", png, "0"}, {"b", ".png", png, "0"}});
  expect_data_error([&] { changing->check_unchanged(); },
                    {"changing/s.tar was modified or replaced since training started"});
}

}  // namespace
}  // namespace mirror::data
