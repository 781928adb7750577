// The pinned HostBuffer refuses tensors of another device with a message naming both, instead
// of CUDA's "invalid resource handle" (distributed/host_transfer_check.h). Skips without a GPU.
#include <gtest/gtest.h>

#include <string>

#include "distributed/device_collectives.h"
#include "gpu/gpu_test_util.h"

namespace mirror {
namespace {

class PinnedHostBuffer : public testing::GpuTest {};

TEST_F(PinnedHostBuffer, RejectsACpuTensor) {
  auto buf = dist::make_host_buffer(64, gpu());
  ASSERT_TRUE(buf->pinned());
  Tensor t = Tensor::zeros({4});
  try {
    buf->copy_to(t);
    ADD_FAILURE() << "a CPU tensor was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("made for cuda:0"), std::string::npos) << e.what();
  }
}

TEST_F(PinnedHostBuffer, RejectsATensorOnAnotherGpuNamingBoth) {
  if (discover_gpus().devices.size() < 2) GTEST_SKIP() << "needs 2 GPUs";
  auto buf = dist::make_host_buffer(64, Device::cuda(0));
  Tensor t = Tensor::zeros({4}, DType::kFloat32, Device::cuda(1));
  try {
    buf->copy_from(t);
    ADD_FAILURE() << "a tensor on cuda:1 was accepted by a buffer of cuda:0";
  } catch (const InvalidArgument& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("made for cuda:0"), std::string::npos) << msg;
    EXPECT_NE(msg.find("is on cuda:1"), std::string::npos) << msg;
  }
  auto right = dist::make_host_buffer(64, Device::cuda(1));
  right->copy_from(t);
  right->wait();
}

}  // namespace
}  // namespace mirror
