#include "tools/rank_gpu.h"

#include "mirror/distributed/device_selection.h"
#include "mirror/error.h"

namespace mirror::dist {

Device rank_gpu(Runtime& runtime, bool allow_sharing, const std::string& program) {
  DeviceRequest request;
  request.devices = "gpu";
  request.require_gpu = true;
  request.allow_sharing = allow_sharing;
  const DeviceSelection selection = runtime.setup_devices(request);
  MIRROR_CHECK(selection.devices.size() == 1, InvalidArgument,
               program + ": expected one GPU per rank, got " + selection.devices_str());
  return selection.devices[0];
}

}  // namespace mirror::dist
