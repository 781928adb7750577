// defines: the mirror-doctor report: what each rank knows about its build, GPUs and MPI
// (RankReport), the per-node and overall verdict in plain words (diagnose), and the text and
// JSON renderings. Pure functions over reports, so they are tested with fake GpuReports.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mirror/distributed/device_selection.h"
#include "mirror/gpu.h"

namespace mirror::doctor {

/// Everything one rank reports (gathered to rank 0 as JSON under mpirun).
struct RankReport {
  int world_rank = 0, world_size = 1;
  int local_rank = 0, local_size = 1;
  std::string host;
  std::string mirror_version;
  std::string mpi_library;       // MPI_Get_library_version, first line
  std::string mpi_standard;      // MPI_Get_version, "3.1"
  std::string mpi_thread_level;  // "multiple", ...
  // The CPU's mixed-precision support in words (cpu_precision_support()), e.g. "bf16 yes
  // (AVX-512 BF16); fp16 emulated (...)".
  std::string cpu_precision;
  // The instruction set the CPU kernels run (ops::instruction_set), e.g. "AVX2
  // (ONEDNN_MAX_CPU_ISA=AVX2; the CPU has AVX-512 VNNI); Mirror's vector loops: x86-64-v3 (AVX2)".
  std::string cpu_isa;
  GpuReport gpu;
};

/// What the ranks of one node will do.
struct NodeVerdict {
  std::string host;
  std::vector<int> ranks;  // world ranks on the node
  enum class Kind { kGpu, kCpuFallback, kCpuChosen, kError } kind = Kind::kCpuFallback;
  /// "will train on 2 × NVIDIA H100" / "will fall back to the CPU because ..." / ...
  std::string text;
  /// Extra advice (unused GPUs, version mismatches); may be empty.
  std::vector<std::string> notes;
  int gpus_used = 0;
  std::map<std::string, int> gpus;  // GPU name -> number of distinct GPUs used on this node
};

struct Diagnosis {
  std::vector<RankReport> ranks;  // in world-rank order
  std::vector<NodeVerdict> nodes;
  bool gpu = false;  // every rank will train on a GPU
  std::string
      verdict;  // the one line: "will train on ..." / "will fall back to the CPU because ..."
};

/// Decides per node and overall what a training program started with `request` (the same
/// --devices rules as mirror-train, via dist::select_devices) would run on, and why.
Diagnosis diagnose(std::vector<RankReport> ranks, const dist::DeviceRequest& request = {});

/// The reason in plain words why `gpu` offers no usable GPU ("" when it does).
std::string plain_reason(const GpuReport& gpu);

/// Human-readable report ending with the line "verdict: <verdict>".
std::string render_text(const Diagnosis& diagnosis);
/// This process's CPU: what --precision mixed_bfloat16 / mixed_float16 get (from the CPU
/// backend's math_support).
std::string cpu_precision_support();
/// A GPU's mixed-precision support from its compute capability: "bf16 yes, fast fp16 yes, TF32
/// for float32 yes" or what it lacks.
std::string gpu_precision_support(const GpuDevice& d);
/// The same as JSON: {"mirror_version", "verdict": {"gpu", "text"}, "nodes": [...], "ranks":
/// [...]}.
nlohmann::json render_json(const Diagnosis& diagnosis);

nlohmann::json to_json(const RankReport& report);
RankReport rank_report_from_json(const nlohmann::json& j);
nlohmann::json to_json(const GpuReport& gpu);
GpuReport gpu_report_from_json(const nlohmann::json& j);

/// Version numbers in words: CUDA 13000 -> "13.0"; cuDNN 91300 -> "9.13.0" (and 8.x's older
/// encoding 8907 -> "8.9.7"); NCCL 22803 -> "2.28.3"; cuBLAS 130100 -> "13.1.0"; 0 -> "none".
std::string cuda_version_str(int v);
std::string cudnn_version_str(int v);
std::string nccl_version_str(int v);
std::string cublas_version_str(int v);

}  // namespace mirror::doctor
