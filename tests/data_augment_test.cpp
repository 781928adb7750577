// ImageAugment: the flag syntax, what a crop and a flip do to one image, the draws
// (Note [Augmentation draws]), and the Loader: augmented batches keep exact sharding, evaluation
// and padding samples are left alone, and non-image data is refused.
#include <gtest/gtest.h>

#include <numeric>
#include <set>
#include <tuple>

#include "mirror/data/augment.h"
#include "mirror/data/loader.h"
#include "mirror/data/synthetic.h"
#include "mirror/error.h"

namespace mirror::data {
namespace {

void expect_invalid(const std::string& spec, const std::string& part) {
  try {
    parse_image_augment(spec);
    ADD_FAILURE() << "expected '" << spec << "' to be refused";
  } catch (const InvalidArgument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("--augment"), std::string::npos) << what;
    EXPECT_NE(what.find(part), std::string::npos) << what;
  }
}

TEST(DataAugment, ParsesAndPrintsTheFlagSyntax) {
  EXPECT_FALSE(parse_image_augment("none").enabled());
  EXPECT_EQ(parse_image_augment("crop=4,flip"), (ImageAugment{4, true}));
  EXPECT_EQ(parse_image_augment("flip,crop=2"), (ImageAugment{2, true}));
  EXPECT_EQ(parse_image_augment("flip"), (ImageAugment{0, true}));
  EXPECT_EQ(to_string(parse_image_augment("flip,crop=2")), "crop=2,flip");
  EXPECT_EQ(to_string(parse_image_augment("crop=3")), "crop=3");
  EXPECT_EQ(to_string(ImageAugment{}), "none");
  expect_invalid("", "empty");
  expect_invalid("rotate", "unknown item 'rotate'");
  expect_invalid("flip,", "unknown item ''");
  expect_invalid("crop=0", "got '0'");
  expect_invalid("crop=65", "got '65'");
  expect_invalid("crop=x", "got 'x'");
  expect_invalid("crop=2,crop=3", "'crop' given twice");
  expect_invalid("flip,flip", "'flip' given twice");
}

/// A [C, 5, 7] image whose pixels are all distinct and non-zero.
std::vector<float> distinct_image(std::int64_t C, std::int64_t H, std::int64_t W) {
  std::vector<float> v(static_cast<std::size_t>(C * H * W));
  std::iota(v.begin(), v.end(), 1.0f);
  return v;
}

/// Recovers the shift and flip of `out` from where the input's centre pixel went, then checks
/// every pixel of every channel against a translation (zeros outside) followed by a mirror.
std::tuple<int, int, bool> decode_transform(const std::vector<float>& in,
                                            const std::vector<float>& out, std::int64_t C,
                                            std::int64_t H, std::int64_t W) {
  const std::int64_t cy = H / 2, cx = W / 2;
  const float centre = in[static_cast<std::size_t>(cy * W + cx)];
  std::int64_t at = -1;
  for (std::int64_t i = 0; i < H * W; ++i) {
    if (out[static_cast<std::size_t>(i)] == centre) at = i;
  }
  EXPECT_GE(at, 0) << "the centre pixel left the image";
  const std::int64_t oy = at / W, ox = at % W;
  const int dy = static_cast<int>(cy - oy);
  // Unflipped: out(y, x) = in(y + dy, x + dx); flipped: out(y, x) = in(y + dy, W - 1 - x + dx).
  for (bool flip : {false, true}) {
    const int dx = static_cast<int>(flip ? cx - (W - 1 - ox) : cx - ox);
    bool all = true;
    for (std::int64_t c = 0; c < C && all; ++c) {
      for (std::int64_t y = 0; y < H && all; ++y) {
        for (std::int64_t x = 0; x < W && all; ++x) {
          const std::int64_t sy = y + dy, sx = (flip ? W - 1 - x : x) + dx;
          const float want =
              sy >= 0 && sy < H && sx >= 0 && sx < W ? in[(c * H + sy) * W + sx] : 0.0f;
          all = out[(c * H + y) * W + x] == want;
        }
      }
    }
    if (all) return {dy, dx, flip};
  }
  ADD_FAILURE() << "the output is no shift-and-mirror of the input";
  return {0, 0, false};
}

TEST(DataAugment, CropShiftsWithZerosAndFlipMirrorsEveryChannelAlike) {
  const std::int64_t C = 3, H = 5, W = 7;
  const Shape chw{C, H, W};
  const auto in = distinct_image(C, H, W);
  const ImageAugment a{2, true};
  std::set<std::tuple<int, int, bool>> seen;
  int flips = 0;
  for (std::int64_t id = 0; id < 1000; ++id) {
    auto out = in;
    augment_image(a, 7, 0, id, chw, out.data());
    const auto t = decode_transform(in, out, C, H, W);
    EXPECT_LE(std::abs(std::get<0>(t)), 2);
    EXPECT_LE(std::abs(std::get<1>(t)), 2);
    seen.insert(t);
    flips += std::get<2>(t);
  }
  EXPECT_EQ(seen.size(), 5u * 5u * 2u);  // every shift in [-2, 2]^2, mirrored or not
  EXPECT_GT(flips, 400);                 // about half
  EXPECT_LT(flips, 600);
  // flip alone never shifts; crop alone never mirrors.
  for (std::int64_t id = 0; id < 50; ++id) {
    auto f = in, c = in;
    augment_image(ImageAugment{0, true}, 7, 0, id, chw, f.data());
    augment_image(ImageAugment{1, false}, 7, 0, id, chw, c.data());
    const auto tf = decode_transform(in, f, C, H, W), tc = decode_transform(in, c, C, H, W);
    EXPECT_EQ(std::get<0>(tf), 0);
    EXPECT_EQ(std::get<1>(tf), 0);
    EXPECT_FALSE(std::get<2>(tc));
  }
  auto same = in;
  augment_image(ImageAugment{}, 7, 0, 3, chw, same.data());
  EXPECT_EQ(same, in);
}

TEST(DataAugment, DrawsDependOnSeedEpochAndSampleOnly) {
  const Shape chw{1, 6, 6};
  const auto in = distinct_image(1, 6, 6);
  auto draw = [&](std::uint64_t seed, int epoch, std::int64_t id) {
    auto out = in;
    augment_image(ImageAugment{3, true}, seed, epoch, id, chw, out.data());
    return out;
  };
  int epoch_changes = 0, seed_changes = 0;
  for (std::int64_t id = 0; id < 20; ++id) {
    EXPECT_EQ(draw(1, 2, id), draw(1, 2, id));
    epoch_changes += draw(1, 2, id) != draw(1, 3, id);
    seed_changes += draw(1, 2, id) != draw(2, 2, id);
  }
  EXPECT_GE(epoch_changes, 15);  // 98 outcomes: a repeat is rare
  EXPECT_GE(seed_changes, 15);
}

LoaderOptions augmented(std::int64_t global_batch, int prefetch = 0) {
  LoaderOptions o;
  o.global_batch = global_batch;
  o.seed = 11;
  o.prefetch_depth = prefetch;
  o.num_workers = 2;
  o.augment = ImageAugment{2, true};
  return o;
}

/// The pixels of every global batch of an epoch, replicas' slices concatenated in order.
std::vector<float> epoch_pixels(const std::shared_ptr<const Dataset>& ds, int R,
                                const LoaderOptions& o, int epoch) {
  std::vector<std::unique_ptr<Loader>> loaders;
  for (int r = 0; r < R; ++r) loaders.push_back(std::make_unique<Loader>(ds, ShardSpec{r, R}, o));
  std::vector<float> all;
  for (std::int64_t s = 0; s < loaders[0]->steps_per_epoch(); ++s) {
    for (auto& l : loaders) {
      const auto px = l->make_batch(epoch, s).inputs.span<float>();
      all.insert(all.end(), px.begin(), px.end());
    }
  }
  return all;
}

TEST(DataAugment, AugmentedBatchesAreTheSameForAnyReplicaCount) {
  auto ds = Synthetic::images(50, 4, {2, 8, 8});  // 50 = 4 batches of 12 + 2: padded last batch
  const auto one = epoch_pixels(ds, 1, augmented(12), 1);
  EXPECT_EQ(epoch_pixels(ds, 2, augmented(12), 1), one);
  EXPECT_EQ(epoch_pixels(ds, 3, augmented(12), 1), one);
  EXPECT_NE(epoch_pixels(ds, 1, augmented(12), 2), one);  // new epoch, new draws
  LoaderOptions plain = augmented(12);
  plain.augment = {};
  EXPECT_NE(epoch_pixels(ds, 1, plain, 1), one);
  // The prefetch threads assemble the same batches as make_batch.
  Loader threaded(ds, ShardSpec{1, 2}, augmented(12, 3)), direct(ds, ShardSpec{1, 2}, augmented(12));
  threaded.start(0, 2);
  for (int epoch = 0; epoch < 2; ++epoch) {
    for (std::int64_t s = 0; s < direct.steps_per_epoch(); ++s) {
      const Batch b = *threaded.next(), want = direct.make_batch(epoch, s);
      const auto got = b.inputs.span<float>(), expected = want.inputs.span<float>();
      EXPECT_TRUE(std::equal(got.begin(), got.end(), expected.begin(), expected.end()));
      // The last batch's padding samples (ids < 0) stay all zero.
      const auto ids = b.sample_ids.span<std::int64_t>();
      for (std::int64_t j = 0; j < b.size(); ++j) {
        if (ids[j] >= 0) continue;
        for (std::int64_t i = 0; i < 128; ++i) EXPECT_EQ(got[j * 128 + i], 0.0f);
      }
    }
  }
}

TEST(DataAugment, LoaderRefusesDataThatIsNotImages) {
  auto expect_refused = [](const std::shared_ptr<const Dataset>& ds, ImageAugment a,
                           const std::string& part) {
    LoaderOptions o;
    o.global_batch = 4;
    o.augment = a;
    try {
      Loader l(ds, ShardSpec{0, 1}, o);
      ADD_FAILURE() << "expected the loader to refuse --augment on " << ds->describe();
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(ds->describe()), std::string::npos) << e.what();
    }
  };
  expect_refused(Synthetic::rows(8, 0, {28, 28}), ImageAugment{0, true}, "--augment flip");
  expect_refused(Synthetic::tokens(8), ImageAugment{2, false}, "--augment crop=2");
  expect_refused(Synthetic::images(8, 0, {1, 4, 4}), ImageAugment{4, false},
                 "a crop padding of 4 pixels");
  LoaderOptions ok;
  ok.global_batch = 4;
  ok.augment = ImageAugment{3, true};
  EXPECT_NO_THROW(Loader(Synthetic::images(8, 0, {1, 4, 4}), ShardSpec{0, 1}, ok));
}

}  // namespace
}  // namespace mirror::data
