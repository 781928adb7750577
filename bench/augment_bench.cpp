// Keras's augmentation layers' ops (mirror/ops_augment.h) on the CPU: ms per forward and per
// backward (the adjoint) of each kind for a batch of images [N, C, H, W], median of --reps runs,
// at the OpenMP thread count given. keras.io's "image classification from scratch" trains on
// 180x180 RGB with RandomFlip and RandomRotation inside the model:
//   augment-bench --batch 32 --size 180 --threads 1
#include <omp.h>
#include <boost/program_options.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <iostream>
#include <vector>

#include "mirror/ops_augment.h"
#include "mirror/tensor.h"

namespace po = boost::program_options;
using namespace mirror;

namespace {

double median_ms(int reps, const std::function<void()>& f) {
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int batch = 32, size = 180, threads = 1, reps = 7;
  po::options_description opts("augment-bench options");
  opts.add_options()("help,h", "show this help")("batch", po::value(&batch)->default_value(batch),
                                                 "images per batch")(
      "size", po::value(&size)->default_value(size), "height and width")(
      "threads", po::value(&threads)->default_value(threads), "OpenMP threads")(
      "reps", po::value(&reps)->default_value(reps), "runs per measurement (median)");
  po::variables_map vm;
  po::store(po::parse_command_line(argc, argv, opts), vm);
  po::notify(vm);
  if (vm.count("help")) {
    std::cout << opts;
    return 0;
  }
  omp_set_num_threads(threads);
  std::vector<float> pixels(static_cast<std::size_t>(batch) * 3 * size * size);
  for (std::size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<float>(i % 251);
  const Tensor x = Tensor::from_vector(pixels, {batch, 3, size, size});
  std::vector<std::int64_t> id_list(static_cast<std::size_t>(batch));
  for (int i = 0; i < batch; ++i) id_list[static_cast<std::size_t>(i)] = i;
  const Tensor ids = Tensor::from_vector(id_list, {batch});
  using K = ops::ImageAugment::Kind;
  const std::pair<const char*, K> kinds[] = {
      {"flip", K::kFlip},         {"translation", K::kTranslation}, {"zoom", K::kZoom},
      {"rotation", K::kRotation}, {"contrast", K::kContrast},       {"brightness", K::kBrightness},
      {"crop", K::kCrop}};
  std::printf("%d x 3 x %d x %d float32, %d thread(s): ms per batch (median of %d)\n", batch, size,
              size, threads, reps);
  std::printf("%-12s %9s %9s\n", "kind", "forward", "backward");
  for (const auto& [name, kind] : kinds) {
    ops::ImageAugment a;
    a.kind = kind;
    a.flip_horizontal = true;
    a.lower[0] = a.lower[1] = -0.1;
    a.upper[0] = a.upper[1] = 0.1;
    a.crop_height = a.crop_width = size * 7 / 8;
    Tensor y;
    const double fwd = median_ms(reps, [&] { y = ops::augment_forward(a, x, 1, ids); });
    const double bwd = median_ms(reps, [&] { ops::augment_backward(a, x, y, 1, ids); });
    std::printf("%-12s %9.2f %9.2f\n", name, fwd, bwd);
  }
  return 0;
}
