// defines: gpu_sharing_advice, what to tell a user whose NCCL communicators could not be created,
// when the cause may be several ranks on one GPU (docs/gpu-kit.md, "Two replicas on one GPU").
#pragma once

#include <string>

namespace mirror::dist {

/// The first NCCL that can put several ranks of one communicator on one GPU (when
/// NCCL_MULTI_RANK_GPU_ENABLE=1), as ncclGetVersion encodes it (major*10000 + minor*100 + patch).
inline constexpr int kNcclMultiRankGpuVersion = 23000;

/// "" unless `error` (the failure of creating NCCL communicators) looks like NCCL refusing two
/// ranks on one GPU; then the two ways out for the `loaded` NCCL version, ending in ". ".
inline std::string gpu_sharing_advice(int loaded, const std::string& error) {
  const bool duplicate = error.find("Duplicate GPU") != std::string::npos ||
                         error.find("invalid usage") != std::string::npos;
  if (!duplicate) return "";
  const std::string mpi =
      "--comm mpi runs the replicas over MPI with the GPU buffers staged through pinned host "
      "memory, on any NCCL";
  if (loaded >= kNcclMultiRankGpuVersion) {
    return "If several ranks share one GPU (--allow-gpu-sharing), set "
           "NCCL_MULTI_RANK_GPU_ENABLE=1 (this NCCL supports it), or use " +
           mpi + ". ";
  }
  return "If several ranks share one GPU (--allow-gpu-sharing): the loaded NCCL " +
         std::to_string(loaded / 10000) + "." + std::to_string(loaded / 100 % 100) + "." +
         std::to_string(loaded % 100) +
         " refuses that (NCCL 2.30 or newer accepts it with NCCL_MULTI_RANK_GPU_ENABLE=1); " + mpi +
         ". ";
}

}  // namespace mirror::dist
