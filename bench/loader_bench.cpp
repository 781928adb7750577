// Loader throughput: samples/s (images/s) that one replica's Loader delivers for Fashion-MNIST
// (images and rows), the word lists, synthetic data, and Fashion-MNIST stored the other ways
// Mirror reads: a mapped .npy (npy-mmap), .npy shards (shards) and an image folder of PNG files
// (images, or --images DIR), with 0 (synchronous), 1, 2 ... decoding threads: as mirror-train
// decodes, the samples of each batch in parallel (Note [Sample pool]), or with --whole-batches
// each thread a whole batch.
// By default the consumer does no work, so samples/s is the ceiling the input pipeline puts on
// training. With --step-ms the consumer busy-works that long per batch, like a training step,
// and "wait ms/step" (after the first batch) shows how much of the batch preparation the
// prefetch hides; "first ms" is the wait for the first batch (epoch order + one batch).
// With --images DIR, --image-size H,W and the photograph recipe's --crop, --flip and --normalize
// (mirror-train's flags) measure the training input of photographs: bench/photos.sh compares it
// with PyTorch's RandomResizedCrop pipeline on the same files.
// --write-images DIR writes Fashion-MNIST as an image folder (one subfolder per class) and exits:
// the files bench/image_folders.sh compares with PyTorch and tf.data.
#include <boost/program_options.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "mirror/data/arrays.h"
#include "mirror/data/fashion_mnist.h"
#include "mirror/data/image_folder.h"
#include "mirror/data/loader.h"
#include "mirror/data/npy.h"
#include "mirror/data/photo_transforms.h"
#include "mirror/data/sample_pool.h"
#include "mirror/data/synthetic.h"
#include "mirror/data/tar_shards.h"
#include "mirror/data/words.h"
#include "mirror/error.h"

namespace po = boost::program_options;
namespace fs = std::filesystem;
using namespace mirror::data;

namespace {

struct Result {
  double samples_per_s;
  double first_ms;          // wait for the first batch (epoch order + one batch)
  double wait_ms_per_step;  // mean wait over the later batches: the steady state
  std::int64_t batches;
};

/// Keeps the CPU busy like a training step would (a sleep would free the core for the workers
/// and flatter the prefetch on a machine with few cores).
void busy_for(double ms) {
  const auto until =
      std::chrono::steady_clock::now() + std::chrono::duration<double, std::milli>(ms);
  volatile double sink = 0;
  while (std::chrono::steady_clock::now() < until) {
    for (int i = 0; i < 100; ++i) sink = sink + i;
  }
}

Result measure(const std::shared_ptr<const Dataset>& ds, const LoaderOptions& o, ShardSpec shard,
               double seconds, double step_ms) {
  Loader loader(ds, shard, o);
  loader.start(0, 1000000);
  const auto t0 = std::chrono::steady_clock::now();
  std::int64_t samples = 0, batches = 0;
  double elapsed = 0, first = 0;
  while (elapsed < seconds) {
    auto b = loader.next();
    if (!b) break;
    if (batches == 0) first = loader.wait_seconds();
    samples += b->size();
    ++batches;
    if (step_ms > 0) busy_for(step_ms);
    elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  const double later = batches > 1 ? (loader.wait_seconds() - first) / (batches - 1) : 0.0;
  return {samples / elapsed, 1e3 * first, 1e3 * later, batches};
}

/// Fashion-MNIST's training images as uint8 [N, 1, 28, 28] and int64 labels [N].
std::pair<NumericArray, NumericArray> fashion_arrays(const std::string& data_dir, Split split) {
  const auto ds = FashionMnist::load(data_dir, split, Layout::kNCHW);
  NumericArray x, y;
  x.shape = {ds->size(), 1, 28, 28};
  y.type = ElementType::kInt64;
  y.shape = {ds->size()};
  std::vector<float> pixels(784);
  for (std::int64_t i = 0; i < ds->size(); ++i) {
    ds->decode_float(i, pixels.data());
    for (float v : pixels) x.bytes.push_back(static_cast<std::uint8_t>(v * 255.0f + 0.5f));
    const std::int64_t label = ds->label(i);
    const auto* p = reinterpret_cast<const std::uint8_t*>(&label);
    y.bytes.insert(y.bytes.end(), p, p + 8);
  }
  return {std::move(x), std::move(y)};
}

void write_file(const fs::path& path, const std::vector<std::uint8_t>& bytes) {
  fs::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  MIRROR_CHECK(out.good(), mirror::Error, "cannot write " + path.string());
}

/// An image folder DIR/<label>/<index>.<ext> (classes 0..9) of the first `limit` images.
void write_images(const NumericArray& x, const NumericArray& y, const fs::path& dir,
                  const std::string& format, std::int64_t limit) {
  const std::int64_t n = limit > 0 ? std::min(limit, x.shape[0]) : x.shape[0];
  for (std::int64_t i = 0; i < n; ++i) {
    DecodedImage im{28, 28, 1, std::vector<std::uint8_t>(x.bytes.begin() + i * 784,
                                                         x.bytes.begin() + (i + 1) * 784)};
    char name[32];
    std::snprintf(name, sizeof name, "%05lld.%s", static_cast<long long>(i),
                  format == "png" ? "png" : "jpg");
    write_file(dir / std::to_string(y.integer(i)) / name,
               format == "png" ? encode_png(im) : encode_jpeg(im, 95));
  }
}

/// npy-mmap, shards and images: Fashion-MNIST written under `work` once, then read back.
std::shared_ptr<const Dataset> stored_dataset(const std::string& name, const fs::path& work,
                                              const std::string& data_dir,
                                              const std::string& images,
                                              const ImageFolderOptions& image_options) {
  if (name == "images" && !images.empty()) return load_image_input(images, image_options);
  const fs::path marker = work / (name + ".done");
  if (!fs::exists(marker)) {
    const auto [x, y] = fashion_arrays(data_dir, Split::kTrain);
    if (name == "npy-mmap") {
      write_file(work / "x.npy", encode_npy(x));
      write_file(work / "y.npy", encode_npy(y));
    } else if (name == "shards") {
      const std::int64_t per = 10000;
      for (std::int64_t s = 0; s * per < x.shape[0]; ++s) {
        const std::int64_t rows = std::min(per, x.shape[0] - s * per);
        NumericArray xs{x.type, {rows, 1, 28, 28}, {}}, ys{y.type, {rows}, {}};
        xs.bytes.assign(x.bytes.begin() + s * per * 784, x.bytes.begin() + (s * per + rows) * 784);
        ys.bytes.assign(y.bytes.begin() + s * per * 8, y.bytes.begin() + (s * per + rows) * 8);
        char n[32];
        std::snprintf(n, sizeof n, "%05lld.npy", static_cast<long long>(s));
        write_file(work / "shards" / ("x-" + std::string(n)), encode_npy(xs));
        write_file(work / "shards" / ("y-" + std::string(n)), encode_npy(ys));
      }
    } else {
      write_images(x, y, work / "images", "png", 0);
    }
    std::ofstream(marker) << "written\n";
  }
  if (name == "npy-mmap") return load_arrays((work / "x.npy").string(), (work / "y.npy").string());
  if (name == "shards")
    return load_arrays((work / "shards").string(), (work / "shards").string());
  return load_image_folder((work / "images").string());
}

std::shared_ptr<const Dataset> make_dataset(const std::string& name, const std::string& data_dir,
                                            const std::string& dict_dir, const fs::path& work,
                                            const std::string& images,
                                            const ImageFolderOptions& image_options) {
  if (name == "fashion") return FashionMnist::load(data_dir, Split::kTrain, Layout::kNCHW);
  if (name == "fashion-rows") return FashionMnist::load(data_dir, Split::kTrain, Layout::kRows);
  if (name == "synthetic") return Synthetic::images(60000, 1);
  if (name == "words") {
    WordOptions wo;
    wo.dict_dir = dict_dir;
    return WordLanguages::load(wo);
  }
  if (name == "npy-mmap" || name == "shards" || name == "images")
    return stored_dataset(name, work, data_dir, images, image_options);
  return nullptr;
}

}  // namespace

int main(int argc, char** argv) {
  po::options_description desc("loader-bench: input pipeline throughput");
  std::string datasets, data_dir, dict_dir, work_dir, images, write_dir, format, split;
  std::string image_size, crop, normalize;
  std::int64_t batch = 0, limit = 0;
  int replicas = 1;
  double seconds = 0, step_ms = 0;
  std::vector<int> threads;
  desc.add_options()("help,h", "show this help")(
      "datasets", po::value(&datasets)->default_value("fashion,fashion-rows,words,synthetic"),
      "comma-separated: fashion, fashion-rows, words, synthetic, npy-mmap, shards, images")(
      "batch", po::value(&batch)->default_value(256), "global batch")(
      "replicas", po::value(&replicas)->default_value(1),
      "world size; replica 0's share (batch/replicas) is measured")(
      "threads", po::value(&threads)->multitoken()->default_value({0, 1, 2}, "0 1 2"),
      "decoding thread counts to measure (0 = synchronous)")(
      "whole-batches",
      "each thread assembles whole batches (no sample pool; prefetch 2 x threads), as Mirror "
      "did before Note [Sample pool]")(
      "seconds", po::value(&seconds)->default_value(2.0), "time per measurement")(
      "step-ms", po::value(&step_ms)->default_value(0.0),
      "simulated training step per batch (busy CPU), to measure the hidden wait")(
      "data-dir", po::value(&data_dir)->default_value(kFashionMnistDir), "Fashion-MNIST folder")(
      "dict-dir", po::value(&dict_dir)->default_value(kDictDir), "word list folder")(
      "work-dir", po::value(&work_dir),
      "where npy-mmap, shards and images write Fashion-MNIST (default: a temporary folder)")(
      "images", po::value(&images),
      "the image folder, or tar shards (a .tar, a folder of them or a glob), the `images` dataset "
      "reads")(
      "image-size", po::value(&image_size),
      "with --images: HEIGHT,WIDTH of the samples (default: the first image's size)")(
      "crop", po::value(&crop)->default_value("none"),
      "with --images: none | random-resized[=MIN,MAX] (mirror-train --crop)")(
      "flip", "with --images: mirror half the images (mirror-train --flip)")(
      "full-decode", "with --images: decode every JPEG whole (no reduced-scale decode)")(
      "whole-image",
      "with --images: decode the whole (reduced) JPEG, not only the region the crop reads")(
      "normalize", po::value(&normalize)->default_value("none"),
      "with --images: none | imagenet | MEAN,STD (mirror-train --normalize)")(
      "write-images", po::value(&write_dir),
      "write Fashion-MNIST as an image folder DIR/<class>/<n>.png|jpg and exit")(
      "format", po::value(&format)->default_value("png"), "with --write-images: png | jpeg | npy (x.npy, y.npy)")(
      "split", po::value(&split)->default_value("train"), "with --write-images: train | test")(
      "limit", po::value(&limit)->default_value(0), "with --write-images: the first N images");
  po::variables_map vm;
  try {
    po::store(po::parse_command_line(argc, argv, desc), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    std::cerr << "error: " << e.what() << "\n" << desc;
    return 2;
  }
  if (vm.count("help")) {
    std::cout << desc;
    return 0;
  }
  const bool own_work = work_dir.empty();
  try {
    if (!write_dir.empty()) {
      MIRROR_CHECK(format == "png" || format == "jpeg" || format == "npy", mirror::InvalidArgument,
                   "--format must be png, jpeg or npy, got '" + format + "'");
      const auto [x, y] = fashion_arrays(data_dir, split == "test" ? Split::kTest : Split::kTrain);
      if (format == "npy") {  // the same images as arrays: DIR/x.npy, DIR/y.npy
        write_file(fs::path(write_dir) / "x.npy", encode_npy(x));
        write_file(fs::path(write_dir) / "y.npy", encode_npy(y));
        std::cout << "wrote " << x.shape[0] << " images into " << write_dir << "/x.npy\n";
        return 0;
      }
      write_images(x, y, write_dir, format, limit);
      std::cout << "wrote " << (limit > 0 ? std::min(limit, x.shape[0]) : x.shape[0]) << " "
                << format << " images into " << write_dir << "\n";
      return 0;
    }
    ImageFolderOptions image_options;
    if (!image_size.empty()) {
      MIRROR_CHECK(std::sscanf(image_size.c_str(), "%d,%d", &image_options.height,
                               &image_options.width) == 2 &&
                       image_options.height > 0 && image_options.width > 0,
                   mirror::InvalidArgument,
                   "--image-size must be HEIGHT,WIDTH, got '" + image_size + "'");
    }
    parse_crop(crop, image_options.photo);
    parse_normalize(normalize, image_options.photo);
    image_options.photo.flip = vm.count("flip") > 0;
    image_options.reduced_decode = vm.count("full-decode") == 0;
    image_options.region_decode = vm.count("whole-image") == 0 && image_options.reduced_decode;
    const bool whole_batches = vm.count("whole-batches") > 0;
    if (own_work) {
      std::string tmpl = (fs::temp_directory_path() / "loader-bench-XXXXXX").string();
      MIRROR_CHECK(::mkdtemp(tmpl.data()) != nullptr, mirror::Error, "mkdtemp failed");
      work_dir = tmpl;
    }
    std::printf("%-14s %7s %8s %12s %10s %14s\n", "dataset", "workers", "batch", "samples/s",
                "first ms", "wait ms/step");
    std::size_t pos = 0;
    while (pos <= datasets.size()) {
      std::size_t end = datasets.find(',', pos);
      if (end == std::string::npos) end = datasets.size();
      const std::string name = datasets.substr(pos, end - pos);
      pos = end + 1;
      LoaderOptions o;
      o.global_batch = batch;
      o.bucket_by_length = name == "words";
      const auto ds = make_dataset(name, data_dir, dict_dir, work_dir, images, image_options);
      if (!ds) {
        std::cerr << "error: unknown dataset '" << name << "'\n";
        return 2;
      }
      for (int t : threads) {
        if (whole_batches || t == 0) {
          o.prefetch_depth = t == 0 ? 0 : std::max(4, 2 * t);
          o.num_workers = t == 0 ? 1 : t;
          o.sample_pool = nullptr;
        } else {  // as mirror-train: t decoding threads (Note [Sample pool])
          o.prefetch_depth = 4;
          o.num_workers = 2;
          o.sample_pool = std::make_shared<SamplePool>(t);
        }
        const Result r = measure(ds, o, {0, replicas}, seconds, step_ms);
        std::printf("%-14s %7d %8lld %12.0f %10.2f %14.4f\n", name.c_str(), t,
                    static_cast<long long>(batch / replicas), r.samples_per_s, r.first_ms,
                    r.wait_ms_per_step);
        std::fflush(stdout);
      }
    }
  } catch (const mirror::Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    if (own_work && !work_dir.empty()) fs::remove_all(work_dir);
    return 1;
  }
  if (own_work) fs::remove_all(work_dir);
  return 0;
}
