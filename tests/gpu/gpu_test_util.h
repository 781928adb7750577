// defines: helpers of the GPU suites: the skip-with-reason fixture, seeded random CPU tensors,
// a CPU-vs-CUDA comparison with a stated tolerance, and the path of a test fixture.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "mirror/gpu.h"
#include "mirror/tensor.h"

namespace mirror::testing {

/// Skips (never passes) when this process cannot use a GPU, printing discover_gpus()'s reason.
class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const GpuReport& r = discover_gpus();
    if (!r.usable()) GTEST_SKIP() << "no usable GPU: " << r.unavailable_reason;
  }
  static Device gpu() { return Device::cuda(0); }
};

/// Note [Kit fixtures]: the gpu tests also run from the GPU kit (scripts/gpu_kit.sh) on a machine
/// without this source tree, so they read their files through fixture_path(): under
/// $MIRROR_TEST_DATA when set (gpu_check.sh points it at the tests/data the kit carries), else
/// the source tree's tests/data. A binary that reads fixtures names them all in a KitFixtures
/// test that needs no GPU (expect_fixtures_readable); gpu_kit.sh runs those tests against the
/// staged kit and refuses to pack one that lacks a file.
inline std::string fixture_path(const std::string& relative) {
  const char* dir = std::getenv("MIRROR_TEST_DATA");
  return (dir != nullptr && *dir != '\0' ? std::string(dir)
                                         : std::string(MIRROR_SOURCE_DIR) + "/tests/data") +
         "/" + relative;
}

/// Each file (relative to the fixture folder) opens and is not empty.
inline void expect_fixtures_readable(const std::vector<std::string>& files) {
  for (const std::string& f : files) {
    std::ifstream in(fixture_path(f), std::ios::binary);
    EXPECT_TRUE(in.good() && in.peek() != std::ifstream::traits_type::eof())
        << "the fixture " << fixture_path(f) << " cannot be read (or is empty)";
  }
}

/// Uniform values in [-scale, scale) from a seeded generator (reproducible across runs).
inline std::vector<float> random_floats(std::size_t n, float scale, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

inline Tensor random_tensor(const Shape& shape, std::uint64_t seed, float scale = 1.0f) {
  return Tensor::from_vector(
      random_floats(static_cast<std::size_t>(shape_numel(shape)), scale, seed), shape);
}

/// |gpu - cpu| <= atol + rtol * |cpu| element-wise; reports the worst element.
inline void expect_close(const Tensor& gpu, const Tensor& cpu, double rtol, double atol,
                         const std::string& what) {
  ASSERT_EQ(gpu.shape(), cpu.shape()) << what;
  const std::vector<float> g = gpu.to(Device::cpu()).to_vector<float>();
  const std::vector<float> c = cpu.to_vector<float>();
  std::size_t worst = 0;
  double worst_excess = -1;
  for (std::size_t i = 0; i < c.size(); ++i) {
    const double err = std::fabs(static_cast<double>(g[i]) - c[i]);
    const double excess = err - (atol + rtol * std::fabs(static_cast<double>(c[i])));
    if (excess > worst_excess || std::isnan(g[i]) != std::isnan(c[i])) {
      worst_excess = std::isnan(g[i]) != std::isnan(c[i]) ? 1e30 : excess;
      worst = i;
    }
  }
  if (!c.empty()) {
    EXPECT_LE(worst_excess, 0.0) << what << ": element " << worst << " gpu " << g[worst] << " cpu "
                                 << c[worst] << " (rtol " << rtol << ", atol " << atol << ")";
  }
}

/// Bitwise equality of two float tensors (for kernels that run the same float operations).
inline void expect_equal(const Tensor& gpu, const Tensor& cpu, const std::string& what) {
  expect_close(gpu, cpu, 0.0, 0.0, what);
}

}  // namespace mirror::testing
