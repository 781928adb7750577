// Note [Per-rank GPU binding] across real ranks (mpiexec -np 2|3, one node): every rank pretends
// to see one GPU, and Runtime::node_gpu_views must give each rank what every local rank sees,
// in local-rank order, so that select_devices accepts distinct GPUs and refuses a shared one.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "mirror/distributed/device_selection.h"
#include "mirror/distributed/runtime.h"
#include "mirror/error.h"
#include "mirror/gpu.h"

namespace mirror::dist {
namespace {

Runtime& rt() { return Runtime::get(); }

/// One visible GPU (cuda:0 for this rank) with the given UUID.
GpuReport one_gpu(const std::string& uuid) {
  GpuReport r;
  r.built_with_cuda = true;
  GpuDevice d;
  d.name = "Fake GPU";
  d.uuid = uuid;
  d.pci_bus_id = "0000:17:00.0";  // all alike: the UUID must be what tells them apart
  r.devices.push_back(d);
  return r;
}

std::string own_uuid(int world_rank) { return "GPU-fake-" + std::to_string(world_rank); }

TEST(NodeGpuViews, EveryLocalRankSeesWhatEachOtherSees) {
  const NodeGpuViews node = rt().node_gpu_views(one_gpu(own_uuid(rt().world_rank())));
  ASSERT_EQ(static_cast<int>(node.size()), rt().local_size());
  // Local ranks follow world ranks on one node (MPI_Comm_split_type keyed by world rank).
  const auto ranks = rt().all_gather_value<int>(rt().world_rank());
  const auto locals = rt().all_gather_value<int>(rt().local_rank());
  const auto hosts = rt().all_gather_string(rt().host());
  for (std::size_t w = 0; w < ranks.size(); ++w) {
    if (hosts[w] != rt().host()) continue;
    EXPECT_EQ(node.at(static_cast<std::size_t>(locals[w])),
              std::vector<std::string>{own_uuid(ranks[w])})
        << "local rank " << locals[w];
  }
}

TEST(NodeGpuViews, DistinctGpusPerRankAreAcceptedSharedOnesRefused) {
  DeviceRequest auto_request;  // "auto"
  const GpuReport mine = one_gpu(own_uuid(rt().world_rank()));
  const DeviceSelection sel = select_devices(auto_request, rt().local_rank(), rt().local_size(),
                                             mine, rt().node_gpu_views(mine));
  EXPECT_EQ(sel.devices, std::vector<Device>{Device::cuda(0)});

  const GpuReport shared = one_gpu("GPU-fake-shared");
  const NodeGpuViews node = rt().node_gpu_views(shared);
  try {
    select_devices(auto_request, rt().local_rank(), rt().local_size(), shared, node);
    ADD_FAILURE() << "a GPU shared by " << rt().local_size() << " local ranks was accepted";
  } catch (const Unavailable& e) {
    EXPECT_NE(std::string(e.what()).find("would all drive GPU GPU-fake-shared (cuda:0 Fake GPU)"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace mirror::dist
