// check_pinned_transfer (distributed/host_transfer_check.h): what a pinned HostBuffer checks
// before each copy, run here without a GPU on plain Device values.
#include <gtest/gtest.h>

#include <string>

#include "distributed/host_transfer_check.h"

namespace mirror::dist::detail {
namespace {

std::string message(Device where, std::size_t nbytes, Device home, std::size_t capacity) {
  try {
    check_pinned_transfer("copy_to", "float32[16]@" + where.str(), where, nbytes, home, capacity);
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "NO THROW";
}

TEST(HostTransferCheck, TensorOnTheBuffersDeviceThatFitsIsAccepted) {
  EXPECT_NO_THROW(check_pinned_transfer("copy_to", "t", Device::cuda(1), 64, Device::cuda(1), 64));
  EXPECT_NO_THROW(check_pinned_transfer("copy_from", "t", Device::cuda(0), 0, Device::cuda(0), 0));
}

TEST(HostTransferCheck, TensorOnAnotherGpuNamesBothDevices) {
  const std::string msg = message(Device::cuda(1), 64, Device::cuda(0), 128);
  EXPECT_NE(msg.find("HostBuffer::copy_to"), std::string::npos) << msg;
  EXPECT_NE(msg.find("made for cuda:0"), std::string::npos) << msg;
  EXPECT_NE(msg.find("float32[16]@cuda:1 is on cuda:1"), std::string::npos) << msg;
  EXPECT_NE(msg.find("make_host_buffer(bytes, cuda:1)"), std::string::npos) << msg;
}

TEST(HostTransferCheck, CpuTensorIsRejected) {
  const std::string msg = message(Device::cpu(), 64, Device::cuda(0), 128);
  EXPECT_NE(msg.find("is on cpu"), std::string::npos) << msg;
}

TEST(HostTransferCheck, TooLargeTensorNamesBothSizes) {
  const std::string msg = message(Device::cuda(0), 129, Device::cuda(0), 128);
  EXPECT_NE(msg.find("129 bytes, more than the buffer's 128"), std::string::npos) << msg;
}

}  // namespace
}  // namespace mirror::dist::detail
