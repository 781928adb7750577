// The neutral half of the device collectives (Note [Device collectives]): the table, the
// CollectiveGroup bookkeeping and the ordinary-memory HostBuffer fallback.
#include "distributed/device_collectives.h"

#include <array>
#include <cstdio>
#include <string>

#include "backend.h"
#include "mirror/error.h"

namespace mirror::dist {
namespace {

std::array<DeviceCollectives, 2>& table() {  // DeviceType::kCpu, DeviceType::kCuda
  static std::array<DeviceCollectives, 2> entries;
  return entries;
}

const DeviceCollectives& entry(DeviceType type) {
  ensure_builtin_backends();  // the factory file fills this table too
  return table().at(static_cast<std::size_t>(type));
}

/// Ordinary host memory: the fallback when no GPU is usable (copies are synchronous).
class PlainHostBuffer final : public HostBuffer {
 public:
  explicit PlainHostBuffer(std::size_t bytes) : data_(bytes ? bytes : 1), bytes_(bytes) {}
  void* data() const override { return const_cast<unsigned char*>(data_.data()); }
  std::size_t bytes() const override { return bytes_; }
  bool pinned() const override { return false; }
  void copy_to(Tensor& dst) override {
    check(dst, "copy_to");
    kernels_for(dst.device())
        .copy(dst.raw_data(), dst.device(), data(), Device::cpu(), dst.nbytes());
  }
  void copy_from(const Tensor& src) override {
    check(src, "copy_from");
    kernels_for(src.device())
        .copy(data(), Device::cpu(), src.raw_data(), src.device(), src.nbytes());
  }
  bool ready() override { return true; }
  void wait() override {}

 private:
  void check(const Tensor& t, const char* op) const {
    MIRROR_CHECK(t.nbytes() <= bytes_, InvalidArgument,
                 std::string("HostBuffer::") + op + ": " + t.str() + " does not fit in " +
                     std::to_string(bytes_) + " bytes");
  }
  std::vector<unsigned char> data_;
  std::size_t bytes_;
};

}  // namespace

void register_device_collectives(DeviceType type, DeviceCollectives collectives) {
  table().at(static_cast<std::size_t>(type)) = collectives;
}

std::unique_ptr<HostBuffer> make_host_buffer(std::size_t bytes, Device device) {
  const DeviceCollectives& c = entry(device.type);
  if (c.pinned_host_buffer) {
    if (auto pinned = c.pinned_host_buffer(bytes, device.index)) return pinned;
  }
  return std::make_unique<PlainHostBuffer>(bytes);
}

std::vector<std::unique_ptr<Communicator>> make_nccl_communicators(
    const std::vector<Device>& devices, const NcclBootstrap& bootstrap) {
  const DeviceCollectives& c = entry(DeviceType::kCuda);
  if (!c.make_communicators) {
    throw Unavailable(
        "an NCCL communicator needs the CUDA backend, but this Mirror was built without CUDA "
        "(rebuild with -DMIRROR_CUDA=ON on a machine with the CUDA toolkit)");
  }
  return c.make_communicators(devices, bootstrap);
}

CollectiveGroup::CollectiveGroup() {
  const DeviceCollectives& c = entry(DeviceType::kCuda);
  if (c.group_start) {
    c.group_start();
    open_ = true;
  }
}

CollectiveGroup::~CollectiveGroup() {
  if (!open_) return;
  try {
    end();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mirror: error closing a collective group: %s\n", e.what());
  }
}

void CollectiveGroup::end() {
  if (!open_) return;
  open_ = false;
  entry(DeviceType::kCuda).group_end();
}

}  // namespace mirror::dist
