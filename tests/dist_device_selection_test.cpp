// select_devices with fake GpuReports: every rule of device_selection.h, no GPU or MPI needed.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>

#include "mirror/distributed/device_selection.h"
#include "mirror/error.h"

namespace mirror::dist {
namespace {

GpuReport gpus(int n) {
  GpuReport r;
  r.built_with_cuda = true;
  for (int i = 0; i < n; ++i) {
    GpuDevice d;
    d.index = i;
    d.name = "Fake GPU " + std::to_string(i);
    r.devices.push_back(d);
  }
  return r;
}

GpuReport no_gpu() {
  GpuReport r;
  r.built_with_cuda = true;
  r.unavailable_reason =
      "CUDA driver version is insufficient for CUDA runtime version (driver 0, runtime 13.0)";
  return r;
}

DeviceRequest req(const std::string& devices) {
  DeviceRequest r;
  r.devices = devices;
  return r;
}

template <class E>
std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("WRONG TYPE: ") + e.what();
  }
  return "NO THROW";
}

std::vector<Device> cuda(std::initializer_list<int> idx) {
  std::vector<Device> v;
  for (int i : idx) v.push_back(Device::cuda(i));
  return v;
}

TEST(DeviceSelection, AutoGivesOneGpuPerLocalRank) {
  for (int local = 0; local < 4; ++local) {
    const auto sel = select_devices(req("auto"), local, 4, gpus(4));
    EXPECT_EQ(sel.devices, cuda({local}));
    EXPECT_TRUE(sel.warning.empty());
    EXPECT_FALSE(sel.cpu_fallback);
  }
}

TEST(DeviceSelection, AutoUsesTheReportedIndex) {
  GpuReport r = gpus(2);
  r.devices[1].index = 1;
  const auto sel = select_devices(req("auto"), 1, 2, r);
  EXPECT_EQ(sel.devices_str(), "cuda:1");
}

TEST(DeviceSelection, AutoFallsBackToCpuWithLoudReason) {
  for (int local : {0, 1}) {
    const auto sel = select_devices(req("auto"), local, 2, no_gpu());
    EXPECT_EQ(sel.devices, std::vector<Device>{Device::cpu(0)});
    EXPECT_TRUE(sel.cpu_fallback);
    EXPECT_NE(sel.warning.find("WARNING"), std::string::npos);
    EXPECT_NE(sel.warning.find("CUDA driver version is insufficient"), std::string::npos);
    EXPECT_NE(sel.warning.find("--require-gpu"), std::string::npos);
    EXPECT_GE(std::count(sel.warning.begin(), sel.warning.end(), '\n'), 3);
  }
}

TEST(DeviceSelection, FallbackWithoutReasonStillSaysWhy) {
  GpuReport empty;  // built with CUDA, driver fine, but zero devices and no reason given
  const auto sel = select_devices(req("auto"), 0, 1, empty);
  EXPECT_TRUE(sel.cpu_fallback);
  EXPECT_NE(sel.warning.find("no CUDA device is visible"), std::string::npos);
}

TEST(DeviceSelection, FallbackMentionsCudaVisibleDevices) {
  GpuReport r = no_gpu();
  r.cuda_visible_devices_set = true;
  r.cuda_visible_devices = "";
  const auto sel = select_devices(req("auto"), 0, 1, r);
  EXPECT_NE(sel.warning.find("CUDA_VISIBLE_DEVICES=''"), std::string::npos);
}

TEST(DeviceSelection, RequireGpuWithoutGpuNamesTheReason) {
  DeviceRequest r = req("auto");
  r.require_gpu = true;
  const auto msg = message_of<Unavailable>([&] { select_devices(r, 0, 1, no_gpu()); });
  EXPECT_NE(msg.find("--require-gpu"), std::string::npos) << msg;
  EXPECT_NE(msg.find("CUDA driver version is insufficient"), std::string::npos) << msg;
}

TEST(DeviceSelection, BareGpuMeansAutoButRequired) {
  EXPECT_EQ(select_devices(req("gpu"), 1, 2, gpus(2)).devices, cuda({1}));
  EXPECT_EQ(select_devices(req("cuda"), 0, 1, gpus(1)).devices, cuda({0}));
  const auto msg = message_of<Unavailable>([&] { select_devices(req("gpu"), 0, 1, no_gpu()); });
  EXPECT_NE(msg.find("CUDA driver version is insufficient"), std::string::npos) << msg;
}

TEST(DeviceSelection, MoreLocalRanksThanGpusNamesBothNumbers) {
  const auto msg = message_of<Unavailable>([&] { select_devices(req("auto"), 0, 3, gpus(2)); });
  EXPECT_NE(msg.find("3 ranks"), std::string::npos) << msg;
  EXPECT_NE(msg.find("2 GPU"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--allow-gpu-sharing"), std::string::npos) << msg;
}

TEST(DeviceSelection, SharingWrapsAroundWhenAllowed) {
  DeviceRequest r = req("auto");
  r.allow_sharing = true;
  EXPECT_EQ(select_devices(r, 0, 3, gpus(2)).devices, cuda({0}));
  EXPECT_EQ(select_devices(r, 1, 3, gpus(2)).devices, cuda({1}));
  EXPECT_EQ(select_devices(r, 2, 3, gpus(2)).devices, cuda({0}));
}

TEST(DeviceSelection, ExplicitGpuList) {
  EXPECT_EQ(select_devices(req("gpu:0,gpu:1"), 0, 1, gpus(2)).devices, cuda({0, 1}));
  EXPECT_EQ(select_devices(req("cuda:1"), 0, 1, gpus(2)).devices, cuda({1}));
  EXPECT_EQ(select_devices(req(" gpu:1 , cuda:0 "), 0, 1, gpus(2)).devices, cuda({1, 0}));
}

TEST(DeviceSelection, CpuItemsInAListSayWhatToWrite) {
  auto msg = message_of<InvalidArgument>([&] { select_devices(req("cpu,cpu"), 0, 1, gpus(2)); });
  EXPECT_NE(msg.find("write cpu:2"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("mixes"), std::string::npos) << msg;
  msg = message_of<InvalidArgument>([&] { select_devices(req("cpu:2,gpu:0"), 0, 1, gpus(2)); });
  EXPECT_NE(msg.find("mixes CPU and GPU devices"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("1024"), std::string::npos) << msg;
}

TEST(DeviceSelection, MissingGpuIndexIsAnError) {
  const auto msg =
      message_of<InvalidArgument>([&] { select_devices(req("gpu:0,gpu:2"), 0, 1, gpus(2)); });
  EXPECT_NE(msg.find("cuda:2 does not exist"), std::string::npos) << msg;
  EXPECT_NE(msg.find("sees 2 GPU"), std::string::npos) << msg;
}

TEST(DeviceSelection, IndicesAreAfterCudaVisibleDevices) {
  GpuReport r = gpus(1);
  r.cuda_visible_devices_set = true;
  r.cuda_visible_devices = "3";
  EXPECT_EQ(select_devices(req("gpu:0"), 0, 1, r).devices, cuda({0}));
  const auto msg = message_of<InvalidArgument>([&] { select_devices(req("gpu:3"), 0, 1, r); });
  EXPECT_NE(msg.find("CUDA_VISIBLE_DEVICES='3'"), std::string::npos) << msg;
}

TEST(DeviceSelection, ExplicitGpuWithoutGpuIsAnErrorNotAFallback) {
  const auto msg = message_of<Unavailable>([&] { select_devices(req("gpu:0"), 0, 1, no_gpu()); });
  EXPECT_NE(msg.find("CUDA driver version is insufficient"), std::string::npos) << msg;
}

TEST(DeviceSelection, ExplicitListSharedByLocalRanksNeedsSharing) {
  const auto msg =
      message_of<Unavailable>([&] { select_devices(req("gpu:0,gpu:1"), 0, 2, gpus(2)); });
  EXPECT_NE(msg.find("2 ranks on this node"), std::string::npos) << msg;
  DeviceRequest r = req("gpu:0,gpu:1");
  r.allow_sharing = true;
  EXPECT_EQ(select_devices(r, 1, 2, gpus(2)).devices, cuda({0, 1}));
}

TEST(DeviceSelection, CpuReplicas) {
  EXPECT_EQ(select_devices(req("cpu"), 0, 1, gpus(2)).devices, std::vector<Device>{Device::cpu(0)});
  const auto sel = select_devices(req("cpu:3"), 1, 2, no_gpu());
  EXPECT_EQ(sel.devices, (std::vector<Device>{Device::cpu(0), Device::cpu(1), Device::cpu(2)}));
  EXPECT_TRUE(sel.warning.empty()) << "an explicit CPU choice is not a fallback";
  EXPECT_FALSE(sel.cpu_fallback);
  EXPECT_EQ(sel.devices_str(), "cpu:0,cpu:1,cpu:2");
}

TEST(DeviceSelection, BadTextIsInvalidArgument) {
  for (const char* text : {"", "cpu:0", "cpu:x", "cpu:-1", "cpu:0,cpu:1", "tpu:0", "gpu:0,cpu",
                           "gpu:0,gpu:0", "gpu:0,,gpu:1", "gpu:0,gpu", "cuda:-1"}) {
    EXPECT_THROW(select_devices(req(text), 0, 1, gpus(2)), InvalidArgument) << "'" << text << "'";
  }
}

TEST(DeviceSelection, RequireGpuContradictsCpu) {
  DeviceRequest r = req("cpu:2");
  r.require_gpu = true;
  EXPECT_THROW(select_devices(r, 0, 1, gpus(1)), InvalidArgument);
}

TEST(DeviceSelection, MemoryPolicyIsParsedAndValidated) {
  DeviceRequest r = req("cpu");
  r.memory_policy = "limit=512M";
  const auto sel = select_devices(r, 0, 1, no_gpu());
  EXPECT_EQ(sel.memory_policy.kind, MemoryPolicy::Kind::kLimit);
  EXPECT_EQ(sel.memory_policy.limit_bytes, std::size_t{512} << 20);
  r.memory_policy = "lots";
  EXPECT_THROW(select_devices(r, 0, 1, no_gpu()), InvalidArgument);
}

// ---- Note [Per-rank GPU binding]: ranks that each see their own GPU(s) ----

/// One visible GPU (cuda:0 for its rank) with the given PCI bus id and UUID.
GpuReport one_gpu(const std::string& pci, const std::string& uuid = "") {
  GpuReport r = gpus(1);
  r.devices[0].pci_bus_id = pci;
  r.devices[0].uuid = uuid;
  return r;
}

std::string pci(int i) { return "0000:" + std::to_string(10 + i) + ":00.0"; }

TEST(DeviceSelection, IdentityIsTheUuidElseThePciBusId) {
  GpuDevice d;
  EXPECT_EQ(gpu_identity(d), "");
  d.pci_bus_id = "0000:17:00.0";
  EXPECT_EQ(gpu_identity(d), "0000:17:00.0");
  d.uuid = "GPU-6a1e0c7d-0000-1111-2222-333344445555";
  EXPECT_EQ(gpu_identity(d), "GPU-6a1e0c7d-0000-1111-2222-333344445555");
}

TEST(DeviceSelection, EightRanksEachSeeingTheirOwnGpuAreAccepted) {
  NodeGpuViews node;  // srun --gpus-per-task=1: every rank sees one GPU, each a different one
  for (int r = 0; r < 8; ++r) node.push_back({pci(r)});
  for (const char* text : {"auto", "gpu", "gpu:0"}) {
    for (int local = 0; local < 8; ++local) {
      const auto sel = select_devices(req(text), local, 8, one_gpu(pci(local)), node);
      EXPECT_EQ(sel.devices, cuda({0})) << text << " local rank " << local;
      EXPECT_FALSE(sel.cpu_fallback);
    }
  }
}

TEST(DeviceSelection, EightRanksSharingOneGpuAreRefusedNamingIt) {
  const std::string uuid = "GPU-6a1e0c7d-0000-1111-2222-333344445555";
  const NodeGpuViews node(8, std::vector<std::string>{uuid});
  for (const char* text : {"auto", "gpu:0"}) {
    for (int local : {0, 5}) {
      const auto msg = message_of<Unavailable>(
          [&] { select_devices(req(text), local, 8, one_gpu(pci(0), uuid), node); });
      EXPECT_NE(msg.find("local ranks 0, 1, 2, 3, 4, 5, 6 and 7 would all drive GPU " + uuid +
                         " (cuda:0 Fake GPU 0)"),
                std::string::npos)
          << msg;
      EXPECT_NE(msg.find("8 ranks"), std::string::npos) << msg;
      EXPECT_NE(msg.find("--allow-gpu-sharing"), std::string::npos) << msg;
    }
  }
  DeviceRequest shared = req("auto");
  shared.allow_sharing = true;
  EXPECT_EQ(select_devices(shared, 3, 8, one_gpu(pci(0), uuid), node).devices, cuda({0}));
}

TEST(DeviceSelection, SomeRanksSharingIsStillSharing) {
  NodeGpuViews node;  // four GPUs, two ranks each (a per-rank wrapper with a wrong mapping)
  for (int r = 0; r < 8; ++r) node.push_back({pci(r / 2)});
  const auto msg =
      message_of<Unavailable>([&] { select_devices(req("auto"), 2, 8, one_gpu(pci(1)), node); });
  EXPECT_NE(msg.find("local ranks 0 and 1 would all drive GPU " + pci(0)), std::string::npos)
      << msg;
}

TEST(DeviceSelection, UuidsTellApartGpusThatShareABusId) {
  NodeGpuViews node;  // MIG slices: one PCI device, a UUID each
  for (int r = 0; r < 4; ++r) node.push_back({"MIG-slice-" + std::to_string(r)});
  const auto sel = select_devices(req("auto"), 2, 4, one_gpu("0000:17:00.0", "MIG-slice-2"), node);
  EXPECT_EQ(sel.devices, cuda({0}));
}

TEST(DeviceSelection, RanksSeeingAPairOfGpusEachTakeTheirLocalRankModuloTwo) {
  NodeGpuViews node;
  for (int r = 0; r < 4; ++r) node.push_back({pci(2 * (r / 2)), pci(2 * (r / 2) + 1)});
  for (int local = 0; local < 4; ++local) {
    GpuReport r = gpus(2);
    r.devices[0].pci_bus_id = node[local][0];
    r.devices[1].pci_bus_id = node[local][1];
    EXPECT_EQ(select_devices(req("auto"), local, 4, r, node).devices, cuda({local % 2}));
  }
}

TEST(DeviceSelection, RanksThatSeeTheSameGpusInAnotherOrderCanCollide) {
  // Enough GPUs for every rank, but rank 1's second GPU is rank 0's first.
  const NodeGpuViews node{{pci(0), pci(1)}, {pci(1), pci(0)}};
  GpuReport r = gpus(2);
  r.devices[0].pci_bus_id = pci(1);
  r.devices[1].pci_bus_id = pci(0);
  const auto msg = message_of<Unavailable>([&] { select_devices(req("auto"), 1, 2, r, node); });
  EXPECT_NE(msg.find("local ranks 0 and 1 would all drive GPU " + pci(0) + " (cuda:1 Fake GPU 1)"),
            std::string::npos)
      << msg;
}

TEST(DeviceSelection, GpusWithoutIdentityCannotBeToldApart) {
  const NodeGpuViews node(2, std::vector<std::string>{""});
  const auto msg =
      message_of<Unavailable>([&] { select_devices(req("auto"), 0, 2, gpus(1), node); });
  EXPECT_NE(msg.find("cannot be told"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--allow-gpu-sharing"), std::string::npos) << msg;
}

TEST(DeviceSelection, BadLocalRankIsRejected) {
  EXPECT_THROW(select_devices(req("auto"), 2, 2, gpus(2)), InvalidArgument);
  EXPECT_THROW(select_devices(req("auto"), 0, 0, gpus(2)), InvalidArgument);
}

}  // namespace
}  // namespace mirror::dist
