// What the GPU entry points do where no GPU can be used (this CI machine: no driver; or a
// build without CUDA): discovery gives the reason in words, CUDA tensors and NCCL throw
// Unavailable carrying it, host buffers fall back to ordinary memory. With a usable GPU these
// tests skip (the GPU suites cover that case), so they never pass vacuously.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "distributed/device_collectives.h"
#include "gpu/device_sleep.h"
#include "mirror/gpu.h"
#include "mirror/tensor.h"

namespace mirror {
namespace {

class NoGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (discover_gpus().usable()) GTEST_SKIP() << "a GPU is usable here; see the cuda_* suites";
  }
};

TEST(GpuDiscovery, ReportIsConsistent) {
  const GpuReport& r = discover_gpus();
  EXPECT_EQ(r.usable(), r.unavailable_reason.empty() && !r.devices.empty());
  EXPECT_EQ(&r, &discover_gpus()) << "discovery is cached";
  if (!r.built_with_cuda) return;
  EXPECT_GT(r.runtime_version_compiled, 0);
  // The cuDNN and NCCL libraries found at run time have the major version we compiled for.
  EXPECT_EQ(r.cudnn_loaded / 10000, r.cudnn_compiled / 10000) << r.cudnn_loaded;
  EXPECT_EQ(r.nccl_loaded / 10000, r.nccl_compiled / 10000) << r.nccl_loaded;
  EXPECT_GT(r.cublas_loaded, 0);
  for (const GpuDevice& d : r.devices) {
    EXPECT_FALSE(d.name.empty());
    EXPECT_GT(d.total_bytes, 0u);
  }
}

TEST_F(NoGpu, ReasonIsGivenInWords) {
  const GpuReport& r = discover_gpus();
  ASSERT_FALSE(r.unavailable_reason.empty());
  std::printf("discover_gpus: %s\n", r.unavailable_reason.c_str());
  if (r.built_with_cuda && r.driver_version == 0) {
    // No driver at all, as on CI: the CUDA runtime's own words, with the versions.
    EXPECT_NE(r.unavailable_reason.find("driver"), std::string::npos) << r.unavailable_reason;
  }
}

TEST_F(NoGpu, CudaTensorThrowsUnavailableWithTheReason) {
  try {
    Tensor::empty({4}, DType::kFloat32, Device::cuda(0));
    FAIL() << "allocating on cuda:0 without a usable GPU must throw";
  } catch (const Unavailable& e) {
    if (discover_gpus().built_with_cuda) {
      EXPECT_NE(std::string(e.what()).find(discover_gpus().unavailable_reason), std::string::npos)
          << e.what();
    }
  }
}

TEST_F(NoGpu, NcclIsUnavailable) {
  dist::NcclBootstrap boot;
  EXPECT_THROW(dist::make_nccl_communicators({Device::cuda(0)}, boot), Unavailable);
  EXPECT_THROW(testing::device_sleep(Device::cuda(0), std::chrono::microseconds(1)), Unavailable);
}

TEST_F(NoGpu, HostBufferFallsBackToOrdinaryMemory) {
  auto buf = dist::make_host_buffer(64, Device::cuda(0));
  EXPECT_FALSE(buf->pinned());
  ASSERT_GE(buf->bytes(), 64u);
  const float values[4] = {1.5f, -2.0f, 3.25f, 0.0f};
  std::memcpy(buf->data(), values, sizeof values);
  Tensor t = Tensor::zeros({4});
  buf->copy_to(t);
  EXPECT_TRUE(buf->ready());
  EXPECT_EQ(t.to_vector<float>(), std::vector<float>(values, values + 4));
  Tensor u = Tensor::from_vector(std::vector<float>{9, 8, 7, 6}, {4});
  buf->copy_from(u);
  buf->wait();
  EXPECT_EQ(std::memcmp(buf->data(), u.raw_data(), 16), 0);
}

TEST(CollectiveGroupTest, EmptyGroupOpensAndCloses) {
  // Without CUDA a no-op; with CUDA, ncclGroupStart/End of nothing needs no device.
  dist::CollectiveGroup g;
  EXPECT_NO_THROW(g.end());
  EXPECT_NO_THROW(g.end()) << "closing twice is harmless";
}

}  // namespace
}  // namespace mirror
