// mirror-doctor's verdicts on fake GpuReports: no driver, old driver, usable GPUs, built without
// CUDA, CUDA_VISIBLE_DEVICES empty, more ranks than GPUs, several nodes; JSON round trips.
#include "tools/doctor.h"

#include <gtest/gtest.h>

#include "mirror/ops.h"

#include "mirror/error.h"

namespace mirror::doctor {
namespace {

constexpr const char* kH100 = "NVIDIA H100 80GB HBM3";

GpuReport cuda_build() {
  GpuReport g;
  g.built_with_cuda = true;
  g.runtime_version_compiled = 13000;
  g.cudnn_compiled = 91300;
  g.nccl_compiled = 22803;
  return g;
}

GpuReport no_driver() {
  GpuReport g = cuda_build();
  g.unavailable_reason =
      "CUDA driver version is insufficient for CUDA runtime version (driver none found, runtime "
      "13.0): install or update the NVIDIA driver to one that supports CUDA 13.0";
  return g;
}

GpuReport gpus(int n, const std::string& name = kH100) {
  GpuReport g = cuda_build();
  g.driver_version = 13000;
  g.runtime_version = 13000;
  g.cudnn_loaded = 91300;
  g.nccl_loaded = 22803;
  for (int i = 0; i < n; ++i) {
    GpuDevice d;
    d.index = i;
    d.name = name;
    d.cc_major = 9;
    d.cc_minor = 0;
    d.total_bytes = std::size_t{80} << 30;
    d.pci_bus_id = "0000:0" + std::to_string(i) + ":00.0";
    g.devices.push_back(d);
  }
  return g;
}

/// `per_node` ranks on each host, every rank seeing `gpu`.
std::vector<RankReport> job(const std::vector<std::pair<std::string, GpuReport>>& nodes,
                            int per_node) {
  std::vector<RankReport> out;
  const int world = static_cast<int>(nodes.size()) * per_node;
  for (const auto& [host, gpu] : nodes) {
    for (int l = 0; l < per_node; ++l) {
      RankReport r;
      r.world_rank = static_cast<int>(out.size());
      r.world_size = world;
      r.local_rank = l;
      r.local_size = per_node;
      r.host = host;
      r.mirror_version = "0.1.0";
      r.mpi_library = "Open MPI v4.1.4";
      r.mpi_standard = "3.1";
      r.gpu = gpu;
      out.push_back(r);
    }
  }
  return out;
}

Diagnosis one_node(const GpuReport& gpu, int ranks = 1, dist::DeviceRequest req = {}) {
  return diagnose(job({{"node-a", gpu}}, ranks), req);
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

/// The value of the report row "  <label> ....... <value>" ("" when there is no such row).
std::string row_value(const std::string& text, const std::string& label) {
  const auto at = text.find("\n  " + label + " ");
  if (at == std::string::npos) return "";
  const auto end = text.find('\n', at + 1);
  const std::string line = text.substr(at + 1, end - at - 1);
  const auto dots = line.find(". ", label.size() + 2);
  return dots == std::string::npos ? "" : line.substr(dots + 2);
}

TEST(Doctor, NoDriverFallsBackAndSaysWhy) {
  const Diagnosis d = one_node(no_driver());
  EXPECT_FALSE(d.gpu);
  EXPECT_EQ(d.nodes.at(0).kind, NodeVerdict::Kind::kCpuFallback);
  EXPECT_EQ(d.verdict.rfind("will fall back to the CPU because no NVIDIA driver was found", 0), 0u)
      << d.verdict;
  EXPECT_TRUE(contains(d.verdict, "CUDA driver version is insufficient for CUDA runtime version"));
  const std::string text = render_text(d);
  EXPECT_EQ(row_value(text, "NVIDIA driver"), "none found") << text;
  EXPECT_EQ(row_value(text, "cuDNN"), "built against 9.13.0, not loaded") << text;
}

TEST(Doctor, OldDriverIsNamedWithBothVersions) {
  GpuReport g = no_driver();
  g.driver_version = 12020;
  const Diagnosis d = one_node(g);
  EXPECT_FALSE(d.gpu);
  EXPECT_TRUE(contains(d.verdict,
                       "the NVIDIA driver supports CUDA up to 12.2, older than the CUDA "
                       "13.0 runtime Mirror was built with"))
      << d.verdict;
}

TEST(Doctor, UsableGpusOnePerRank) {
  const Diagnosis d = one_node(gpus(2), 2);
  EXPECT_TRUE(d.gpu);
  EXPECT_EQ(d.verdict, std::string("will train on 2 × ") + kH100);
  EXPECT_EQ(d.nodes.at(0).gpus_used, 2);
  EXPECT_TRUE(d.nodes.at(0).notes.empty());
  const std::string text = render_text(d);
  EXPECT_TRUE(contains(text, "cuda:1  NVIDIA H100 80GB HBM3, compute capability 9.0, 80.0 GiB"))
      << text;
  EXPECT_TRUE(contains(text, "2 rank(s) on this node, 2 usable GPU(s)")) << text;
}

TEST(Doctor, MixedPrecisionSupportPerDevice) {
  // GPUs: from the compute capability (bf16 and TF32 tensor cores 8.0, fast fp16 7.0).
  GpuReport g = gpus(3);
  g.devices[1].cc_major = 7;  // V100 / T4 class
  g.devices[2].cc_major = 6;  // P100 class
  std::vector<RankReport> ranks = job({{"node-a", g}}, 1);
  ranks[0].cpu_precision = cpu_precision_support();
  const std::string text = render_text(diagnose(ranks, {}));
  EXPECT_TRUE(contains(text,
                       "compute capability 9.0, 80.0 GiB, PCI 0000:00:00.0; bf16 yes, fast "
                       "fp16 yes, TF32 for float32 yes"))
      << text;
  EXPECT_TRUE(contains(text,
                       "7.0, 80.0 GiB, PCI 0000:01:00.0; bf16 no (needs compute capability "
                       "8.0), fast fp16 yes, TF32 for float32 no (needs compute capability 8.0)"))
      << text;
  EXPECT_TRUE(contains(text, "fast fp16 no (needs compute capability 7.0)")) << text;
  // The CPU: from the backend; this machine's answer, whatever it is, in words.
  const std::string cpu = row_value(text, "CPU mixed precision");
  EXPECT_EQ(cpu, ranks[0].cpu_precision) << text;
  EXPECT_TRUE(contains(cpu, "bf16 ") && contains(cpu, "fp16 emulated")) << cpu;
  EXPECT_EQ(contains(cpu, "bf16 yes"),
            ops::math_support(Device::cpu(), MathMode::kBFloat16).missing.empty());
  // It survives the JSON round trip the ranks' reports take.
  EXPECT_EQ(rank_report_from_json(to_json(ranks[0])).cpu_precision, ranks[0].cpu_precision);
}

TEST(Doctor, IdleGpusGetANote) {
  const Diagnosis d = one_node(gpus(2), 1);
  EXPECT_EQ(d.verdict, std::string("will train on 1 × ") + kH100);
  ASSERT_EQ(d.nodes.at(0).notes.size(), 1u);
  EXPECT_TRUE(contains(d.nodes[0].notes[0], "1 of 2 visible GPUs stay idle"));
}

TEST(Doctor, BuiltWithoutCuda) {
  GpuReport g;
  g.unavailable_reason = "this Mirror was built without CUDA (-DMIRROR_CUDA=OFF)";
  const Diagnosis d = one_node(g);
  EXPECT_FALSE(d.gpu);
  EXPECT_EQ(d.verdict,
            "will fall back to the CPU because this Mirror was built without CUDA "
            "(-DMIRROR_CUDA=OFF)");
  EXPECT_EQ(row_value(render_text(d), "CUDA backend"),
            "no: this Mirror was built without CUDA (-DMIRROR_CUDA=OFF)");
}

TEST(Doctor, EmptyCudaVisibleDevices) {
  GpuReport g = cuda_build();
  g.driver_version = 13000;
  g.cuda_visible_devices_set = true;
  g.cuda_visible_devices = "";
  g.unavailable_reason = "no CUDA-capable device is detected";
  const Diagnosis d = one_node(g);
  EXPECT_FALSE(d.gpu);
  EXPECT_EQ(d.verdict.rfind("will fall back to the CPU because CUDA_VISIBLE_DEVICES is set to an "
                            "empty string, which hides every GPU",
                            0),
            0u)
      << d.verdict;
  EXPECT_EQ(row_value(render_text(d), "CUDA_VISIBLE_DEVICES"), "''");
}

TEST(Doctor, MoreRanksThanGpusIsAnError) {
  const Diagnosis d = one_node(gpus(2), 3);
  EXPECT_FALSE(d.gpu);
  EXPECT_EQ(d.nodes.at(0).kind, NodeVerdict::Kind::kError);
  EXPECT_TRUE(contains(d.verdict, "will stop with an error on rank 0: 3 ranks run on this node"))
      << d.verdict;
  // With sharing allowed the same job trains, and the note says the GPUs are shared.
  dist::DeviceRequest share;
  share.allow_sharing = true;
  const Diagnosis shared = one_node(gpus(2), 3, share);
  EXPECT_TRUE(shared.gpu);
  EXPECT_EQ(shared.verdict, std::string("will train on 2 × ") + kH100);
  EXPECT_TRUE(contains(shared.nodes[0].notes.back(), "3 ranks share 2 GPU(s)"));
}

// Note [Per-rank GPU binding]: srun --gpus-per-task=1 shows each rank its own single GPU.
TEST(Doctor, EachRankSeeingItsOwnGpuTrainsOnAll) {
  std::vector<RankReport> reports = job({{"node-a", gpus(1)}}, 8);
  for (auto& r : reports)
    r.gpu.devices[0].pci_bus_id = "0000:1" + std::to_string(r.local_rank) + ":00.0";
  const Diagnosis d = diagnose(reports);
  EXPECT_TRUE(d.gpu) << d.verdict;
  EXPECT_EQ(d.verdict, std::string("will train on 8 × ") + kH100);
  EXPECT_EQ(d.nodes.at(0).gpus_used, 8);
  EXPECT_TRUE(d.nodes.at(0).notes.empty());
  // The same 8 ranks all seeing one and the same GPU is genuine sharing: an error naming it.
  const Diagnosis shared = one_node(gpus(1), 8);
  EXPECT_FALSE(shared.gpu);
  EXPECT_TRUE(contains(shared.verdict, "would all drive GPU 0000:00:00.0")) << shared.verdict;
}

TEST(Doctor, CpuOnPurpose) {
  dist::DeviceRequest cpu;
  cpu.devices = "cpu";
  const Diagnosis d = one_node(gpus(2), 1, cpu);
  EXPECT_FALSE(d.gpu);
  EXPECT_EQ(d.verdict, "will train on the CPU because --devices cpu asks for it");
  cpu.devices = "bogus";
  EXPECT_TRUE(contains(one_node(gpus(1), 1, cpu).verdict, "will stop with an error"));
}

TEST(Doctor, SeveralNodes) {
  const Diagnosis all = diagnose(job({{"a", gpus(2)}, {"b", gpus(2)}}, 2));
  EXPECT_TRUE(all.gpu);
  EXPECT_EQ(all.verdict, std::string("will train on 4 × ") + kH100 + " across 2 nodes");
  ASSERT_EQ(all.nodes.size(), 2u);
  EXPECT_EQ(all.nodes[1].ranks, (std::vector<int>{2, 3}));

  const Diagnosis mixed = diagnose(job({{"a", gpus(2)}, {"b", no_driver()}}, 2));
  EXPECT_FALSE(mixed.gpu);
  EXPECT_EQ(mixed.verdict.rfind("will fall back to the CPU on node b because no NVIDIA driver", 0),
            0u)
      << mixed.verdict;
  const std::string text = render_text(mixed);
  EXPECT_TRUE(contains(text, "Node a (ranks 0,1")) << text;
  EXPECT_TRUE(contains(text, "Node b (ranks 2,3")) << text;

  const Diagnosis none = diagnose(job({{"a", no_driver()}, {"b", no_driver()}}, 1));
  EXPECT_EQ(none.verdict.rfind("will fall back to the CPU on all 2 nodes because", 0), 0u)
      << none.verdict;
}

TEST(Doctor, TextEndsWithOneVerdictLine) {
  const std::string text = render_text(one_node(no_driver()));
  std::size_t count = 0;
  for (std::size_t at = text.find("verdict:"); at != std::string::npos;
       at = text.find("verdict:", at + 1)) {
    ++count;
  }
  EXPECT_EQ(count, 1u);
  const auto last = text.rfind("\nverdict: will fall back to the CPU because ");
  ASSERT_NE(last, std::string::npos) << text;
  EXPECT_EQ(text.find('\n', last + 1), text.size() - 1) << "the verdict is the last line";
}

TEST(Doctor, VersionMismatchNote) {
  GpuReport g = gpus(1);
  g.cudnn_loaded = 8907;
  const Diagnosis d = one_node(g);
  ASSERT_FALSE(d.nodes[0].notes.empty());
  EXPECT_TRUE(contains(d.nodes[0].notes.back(),
                       "cuDNN 8.9.7 is loaded but Mirror was built against 9.13.0"));
}

TEST(Doctor, JsonRoundTripAndRendering) {
  const auto reports = job({{"a", gpus(2)}}, 2);
  const RankReport back = rank_report_from_json(nlohmann::json::parse(to_json(reports[1]).dump()));
  EXPECT_EQ(back.world_rank, 1);
  EXPECT_EQ(back.local_size, 2);
  EXPECT_EQ(back.host, "a");
  EXPECT_EQ(back.mpi_library, "Open MPI v4.1.4");
  EXPECT_EQ(back.gpu.devices.size(), 2u);
  EXPECT_EQ(back.gpu.devices[1].name, kH100);
  EXPECT_EQ(back.gpu.devices[1].total_bytes, std::size_t{80} << 30);
  EXPECT_EQ(back.gpu.devices[1].pci_bus_id, "0000:01:00.0");
  EXPECT_EQ(back.gpu.nccl_loaded, 22803);
  EXPECT_TRUE(back.gpu.usable());

  const Diagnosis d = diagnose(reports);
  const nlohmann::json j = nlohmann::json::parse(render_json(d).dump());
  EXPECT_EQ(j["verdict"]["text"], d.verdict);
  EXPECT_EQ(j["verdict"]["gpu"], true);
  EXPECT_EQ(j["nodes"][0]["kind"], "gpu");
  EXPECT_EQ(j["nodes"][0]["gpus_used"], 2);
  EXPECT_EQ(j["ranks"].size(), 2u);
  EXPECT_EQ(j["ranks"][0]["gpu"]["devices"][0]["compute_capability"], "9.0");
}

TEST(Doctor, VersionStrings) {
  EXPECT_EQ(cuda_version_str(13000), "13.0");
  EXPECT_EQ(cuda_version_str(12040), "12.4");
  EXPECT_EQ(cuda_version_str(0), "none");
  EXPECT_EQ(cudnn_version_str(91300), "9.13.0");
  EXPECT_EQ(cudnn_version_str(8907), "8.9.7");
  EXPECT_EQ(nccl_version_str(22803), "2.28.3");
  EXPECT_EQ(nccl_version_str(2804), "2.8.4");
  EXPECT_EQ(cublas_version_str(130100), "13.1.0");
}

TEST(Doctor, RejectsIncompleteReports) {
  auto reports = job({{"a", gpus(1)}}, 2);
  reports.erase(reports.begin());
  EXPECT_THROW(diagnose(reports), InvalidArgument);
  EXPECT_THROW(diagnose({}), InvalidArgument);
}

}  // namespace
}  // namespace mirror::doctor
