// gpu_sharing_advice (distributed/gpu_sharing.h): what a failed NCCL communicator creation tells
// the user when NCCL refused several ranks on one GPU, for NCCL before and from 2.30.
#include <gtest/gtest.h>

#include <string>

#include "distributed/gpu_sharing.h"

namespace mirror::dist {
namespace {

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TEST(GpuSharingAdvice, NcclBefore230NamesTheVersionAndCommMpi) {
  const std::string a = gpu_sharing_advice(22809,
                                           "ncclGroupEnd: invalid usage [Duplicate GPU detected : "
                                           "rank 1 and rank 0 both on CUDA device 1a000]");
  EXPECT_TRUE(has(a, "the loaded NCCL 2.28.9 refuses that")) << a;
  EXPECT_TRUE(has(a, "NCCL 2.30 or newer accepts it with NCCL_MULTI_RANK_GPU_ENABLE=1")) << a;
  EXPECT_TRUE(has(a, "--comm mpi")) << a;
}

TEST(GpuSharingAdvice, NcclFrom230SuggestsTheEnvironmentVariable) {
  const std::string a = gpu_sharing_advice(23000, "Duplicate GPU detected");
  EXPECT_TRUE(has(a, "set NCCL_MULTI_RANK_GPU_ENABLE=1 (this NCCL supports it)")) << a;
  EXPECT_TRUE(has(a, "--comm mpi")) << a;
}

TEST(GpuSharingAdvice, OtherFailuresGetNoSharingAdvice) {
  EXPECT_EQ(gpu_sharing_advice(22809, "joining the other 3 replicas (600000 ms) did not finish"),
            "");
  EXPECT_EQ(gpu_sharing_advice(23000, "ncclCommInitRankConfig: unhandled system error"), "");
}

}  // namespace
}  // namespace mirror::dist
