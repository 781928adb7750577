// choose_algo (src/cuda/algo_choice.h), the convolution algorithm choice of the CUDA backend,
// run on made-up cuDNN candidates: no GPU needed (Note [Algorithm choice]).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cuda/algo_choice.h"

namespace mirror::cuda {
namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

AlgoCandidate good(int algo, std::size_t workspace) {
  return {algo, "ALGO_" + std::to_string(algo), true, true, true, workspace};
}

const AlgoCandidate kFallback{1, "IMPLICIT_GEMM", true, true, true, 0};

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TEST(ConvAlgoChoice, TakesCuDnnsFastestQualifyingCandidateWhenItFits) {
  const std::vector<AlgoCandidate> c{good(6, 64 * kMiB), good(0, 0)};
  const AlgoChoice choice = choose_algo(c, 1024 * kMiB, kFallback);
  EXPECT_EQ(choice.algo, 6);
  EXPECT_EQ(choice.workspace, 64 * kMiB);
  EXPECT_FALSE(choice.fallback);
  EXPECT_EQ(choice.note, "");
}

TEST(ConvAlgoChoice, SkipsACandidateWhoseWorkspaceCannotBeAllocatedAndSaysSo) {
  const std::vector<AlgoCandidate> c{good(6, 2048 * kMiB), good(7, 900 * kMiB), good(2, 8 * kMiB)};
  const AlgoChoice choice = choose_algo(c, 512 * kMiB, kFallback);
  EXPECT_EQ(choice.algo, 2);
  EXPECT_EQ(choice.workspace, 8 * kMiB);
  EXPECT_FALSE(choice.fallback);
  EXPECT_TRUE(has(choice.note, "using ALGO_2 (8.0 MiB of workspace)")) << choice.note;
  EXPECT_TRUE(has(choice.note, "ALGO_6 (needs 2048.0 MiB), ALGO_7 (needs 900.0 MiB)"))
      << choice.note;
  EXPECT_TRUE(has(choice.note, "only 512.0 MiB can be allocated")) << choice.note;
}

TEST(ConvAlgoChoice, ExactFitIsAccepted) {
  const std::vector<AlgoCandidate> c{good(5, 100 * kMiB)};
  EXPECT_EQ(choose_algo(c, 100 * kMiB, kFallback).algo, 5);
  EXPECT_TRUE(choose_algo(c, 100 * kMiB - 1, kFallback).fallback);
}

TEST(ConvAlgoChoice, NonDeterministicTf32OrFailedCandidatesNeverQualify) {
  std::vector<AlgoCandidate> c{good(4, 0), good(5, 0), good(6, 0), good(0, 0)};
  c[0].deterministic = false;  // invariant 4: runs reproduce
  c[1].fma_math = false;       // TF32 would drift from the CPU results
  c[2].succeeded = false;      // cuDNN cannot run it for this problem
  const AlgoChoice choice = choose_algo(c, 1024 * kMiB, kFallback);
  EXPECT_EQ(choice.algo, 0);
  EXPECT_EQ(choice.note, "") << "skipping unqualified candidates is not a memory fallback";
}

TEST(ConvAlgoChoice, NothingFitsFallsBackLoudly) {
  const std::vector<AlgoCandidate> c{good(6, 300 * kMiB), good(2, 200 * kMiB)};
  const AlgoChoice choice = choose_algo(c, 100 * kMiB, kFallback);
  EXPECT_TRUE(choice.fallback);
  EXPECT_EQ(choice.algo, 1);
  EXPECT_EQ(choice.workspace, 0u);
  EXPECT_TRUE(has(choice.note, "falling back to IMPLICIT_GEMM")) << choice.note;
  EXPECT_TRUE(has(choice.note, "may be slower")) << choice.note;
  EXPECT_TRUE(has(choice.note, "ALGO_6 (needs 300.0 MiB), ALGO_2 (needs 200.0 MiB)"))
      << choice.note;
}

TEST(ConvAlgoChoice, NoQualifyingCandidateFallsBackLoudly) {
  std::vector<AlgoCandidate> c{good(6, 0), good(2, 0)};
  for (auto& x : c) x.deterministic = false;
  const AlgoChoice choice = choose_algo(c, 1024 * kMiB, kFallback);
  EXPECT_TRUE(choice.fallback);
  EXPECT_EQ(choice.algo, 1);
  EXPECT_TRUE(has(choice.note, "none of cuDNN's 2 candidates is deterministic with FMA math"))
      << choice.note;
  EXPECT_TRUE(choose_algo({}, 0, kFallback).fallback) << "no candidates at all";
}

}  // namespace
}  // namespace mirror::cuda
