// choose_algo (src/cuda/algo_choice.h), the convolution algorithm choice of the CUDA backend,
// run on made-up cuDNN candidates: no GPU needed (Note [Algorithm choice]). The math types are
// cuDNN's values (0 default, 1 tensor op, 2 tensor op with conversion, 3 FMA).
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "cuda/algo_choice.h"

namespace mirror::cuda {
namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

constexpr int kDefaultMath = 0, kTensorOpMath = 1, kConversionMath = 2, kFmaMath = 3;

AlgoCandidate good(int algo, std::size_t workspace) {
  return {algo, "ALGO_" + std::to_string(algo), true, true, AlgoMath::kFma, kFmaMath, workspace};
}

/// A tensor-core candidate: TF32 on float32 data, or fp16 after converting the operands.
AlgoCandidate tensor_op(int algo, std::size_t workspace, AlgoMath math) {
  AlgoCandidate c = good(algo, workspace);
  c.name = "TC_" + std::to_string(algo);
  c.math = math;
  c.math_type = math == AlgoMath::kFp16 ? kConversionMath : kTensorOpMath;
  return c;
}

AlgoCandidate timed(AlgoCandidate c, float ms) {
  c.time_ms = ms;
  return c;
}

const AlgoCandidate kFallback{1, "IMPLICIT_GEMM", true, true, AlgoMath::kFma, kFmaMath, 0};
const MathAllowance kFloat32{false, false}, kMixedBf16{true, false}, kMixedFp16{true, true};

AlgoChoice choose_algo(std::span<const AlgoCandidate> c, std::size_t budget,
                       const AlgoCandidate& fallback) {
  return mirror::cuda::choose_algo(c, kFloat32, budget, fallback);
}

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
  EXPECT_TRUE(has(choice.note, "using ALGO_2 (FMA, 8.0 MiB of workspace)")) << choice.note;
  EXPECT_TRUE(has(choice.note, "ALGO_6 (needs 2048.0 MiB), ALGO_7 (needs 900.0 MiB)"))
      << choice.note;
  EXPECT_TRUE(has(choice.note, "only 512.0 MiB can be allocated")) << choice.note;
}

TEST(ConvAlgoChoice, ExactFitIsAccepted) {
  const std::vector<AlgoCandidate> c{good(5, 100 * kMiB)};
  EXPECT_EQ(choose_algo(c, 100 * kMiB, kFallback).algo, 5);
  EXPECT_TRUE(choose_algo(c, 100 * kMiB - 1, kFallback).fallback);
}

TEST(ConvAlgoChoice, NonDeterministicTf32OrFailedCandidatesNeverQualifyInFloat32) {
  std::vector<AlgoCandidate> c{good(4, 0), tensor_op(5, 0, AlgoMath::kTf32), good(6, 0),
                               good(0, 0)};
  c[0].deterministic = false;  // invariant 4: runs reproduce
  // c[1]: TF32 would drift from the CPU results
  c[2].succeeded = false;  // cuDNN cannot run it for this problem
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
  EXPECT_TRUE(
      has(choice.note, "none of cuDNN's 2 candidates is deterministic with an allowed math type"))
      << choice.note;
  EXPECT_TRUE(choose_algo({}, 0, kFallback).fallback) << "no candidates at all";
}

// ---- math modes (Note [Algorithm choice]): tensor cores under mixed precision

TEST(ConvAlgoChoice, MixedFloat16TakesTheFasterTensorOpCandidateWithItsMathType) {
  const std::vector<AlgoCandidate> c{tensor_op(1, 4 * kMiB, AlgoMath::kFp16), good(0, 0)};
  const AlgoChoice choice = choose_algo(c, kMixedFp16, 1024 * kMiB, kFallback);
  EXPECT_EQ(choice.algo, 1);
  EXPECT_EQ(choice.math_type, kConversionMath) << "the math type to set on the descriptor";
  EXPECT_EQ(choice.note, "");
  // The same list in float32: the fp16 candidate is not allowed, FMA ALGO_0 runs.
  const AlgoChoice exact = choose_algo(c, kFloat32, 1024 * kMiB, kFallback);
  EXPECT_EQ(exact.algo, 0);
  EXPECT_EQ(exact.math_type, kFmaMath);
}

TEST(ConvAlgoChoice, MixedBfloat16AllowsTf32ButNotFp16Conversion) {
  const std::vector<AlgoCandidate> c{tensor_op(7, 0, AlgoMath::kFp16),
                                     tensor_op(1, 0, AlgoMath::kTf32), good(0, 0)};
  const AlgoChoice choice = choose_algo(c, kMixedBf16, 1024 * kMiB, kFallback);
  EXPECT_EQ(choice.algo, 1);
  EXPECT_EQ(choice.math_type, kTensorOpMath);
  // cuDNN's default math on float32 data may use TF32 as well: the same rule.
  std::vector<AlgoCandidate> d{tensor_op(6, 0, AlgoMath::kTf32), good(0, 0)};
  d[0].math_type = kDefaultMath;
  EXPECT_EQ(choose_algo(d, kMixedBf16, 1024 * kMiB, kFallback).math_type, kDefaultMath);
  EXPECT_EQ(choose_algo(d, kFloat32, 1024 * kMiB, kFallback).algo, 0);
}

TEST(ConvAlgoChoice, ReportedTimesPickTheFastestAllowedCandidate) {
  // cuDNN's order puts FMA first, but its times say the tensor-op candidate is faster.
  const std::vector<AlgoCandidate> c{timed(good(0, 0), 3.0f),
                                     timed(tensor_op(1, 8 * kMiB, AlgoMath::kTf32), 1.0f),
                                     timed(tensor_op(6, 0, AlgoMath::kFp16), 0.5f)};
  EXPECT_EQ(choose_algo(c, kMixedBf16, 1024 * kMiB, kFallback).algo, 1) << "fp16 not allowed";
  EXPECT_EQ(choose_algo(c, kMixedFp16, 1024 * kMiB, kFallback).algo, 6);
  EXPECT_EQ(choose_algo(c, kFloat32, 1024 * kMiB, kFallback).algo, 0);
}

TEST(ConvAlgoChoice, WithoutTimesCuDnnsOrderDecides) {
  // One candidate without a time: the times cannot be compared, cuDNN's order stands.
  const std::vector<AlgoCandidate> c{timed(good(0, 0), 3.0f), tensor_op(1, 0, AlgoMath::kTf32)};
  EXPECT_EQ(choose_algo(c, kMixedBf16, 1024 * kMiB, kFallback).algo, 0);
}

TEST(ConvAlgoChoice, AFasterCandidateThatDoesNotFitIsNamedOnlyWhenFaster) {
  const std::vector<AlgoCandidate> c{timed(good(0, 0), 5.0f),
                                     timed(tensor_op(1, 900 * kMiB, AlgoMath::kTf32), 3.0f),
                                     timed(tensor_op(2, 0, AlgoMath::kTf32), 1.0f),
                                     timed(tensor_op(3, 900 * kMiB, AlgoMath::kTf32), 0.5f)};
  const AlgoChoice choice = choose_algo(c, kMixedBf16, 512 * kMiB, kFallback);
  EXPECT_EQ(choice.algo, 2);
  EXPECT_TRUE(has(choice.note, "using TC_2 (TF32, 0 bytes of workspace) instead of the faster "
                               "TC_3 (needs 900.0 MiB)"))
      << choice.note;
  EXPECT_FALSE(has(choice.note, "TC_1")) << "TC_1 is slower than the choice: " << choice.note;
}

TEST(ConvAlgoChoice, TheFallbackRunsInFmaMath) {
  const std::vector<AlgoCandidate> c{tensor_op(1, 900 * kMiB, AlgoMath::kFp16)};
  const AlgoChoice choice = choose_algo(c, kMixedFp16, 512 * kMiB, kFallback);
  EXPECT_TRUE(choice.fallback);
  EXPECT_EQ(choice.math_type, kFmaMath);
}

// Note [Convolution plans]: a graph-API engine's notes decide its math and whether it may run.
TEST(ConvAlgoChoice, EngineNotesGiveTheMathAndRuleOutWhatMirrorNeverRuns) {
  const AlgoCandidate plain = engine_candidate(0, "engine 1", {});
  EXPECT_EQ(plain.math, AlgoMath::kFma);
  EXPECT_TRUE(plain.succeeded && plain.deterministic);
  EXPECT_EQ(engine_candidate(0, "e", {.tensor_core = true}).math, AlgoMath::kTf32);
  EXPECT_EQ(engine_candidate(0, "e", {.tensor_core = true, .down_convert = true}).math,
            AlgoMath::kFp16);
  EXPECT_EQ(engine_candidate(0, "e", {.reduced_reduction = true}).math, AlgoMath::kFp16);
  EXPECT_FALSE(engine_candidate(0, "e", {.nondeterministic = true}).deterministic);
  EXPECT_FALSE(engine_candidate(0, "e", {.runtime_compiled = true}).succeeded);
  // What each precision policy may take, through choose_algo: the fastest allowed engine.
  const std::vector<AlgoCandidate> ranked{
      engine_candidate(0, "fp16", {.tensor_core = true, .down_convert = true}),
      engine_candidate(1, "tf32", {.tensor_core = true}),
      engine_candidate(2, "nondeterministic", {.nondeterministic = true}),
      engine_candidate(3, "rtc", {.runtime_compiled = true}), engine_candidate(4, "fma", {})};
  AlgoCandidate none;
  none.algo = -1;
  EXPECT_EQ(choose_algo(ranked, kFloat32, 0, none).algo, 4);
  EXPECT_EQ(choose_algo(ranked, kMixedBf16, 0, none).algo, 1);
  EXPECT_EQ(choose_algo(ranked, kMixedFp16, 0, none).algo, 0);
}

// pick_engine (Note [Convolution plans]): plans are made only for qualifying engines, in cuDNN's
// order, until one finalizes within the budget.
TEST(ConvAlgoChoice, PickEngineMakesPlansInOrderUntilOneFits) {
  const std::vector<AlgoCandidate> ranked{
      engine_candidate(0, "engine 7", {.nondeterministic = true}),
      engine_candidate(1, "engine 8", {.tensor_core = true}),
      engine_candidate(2, "engine 9", {}),    // its plan does not finalize
      engine_candidate(3, "engine 10", {}),   // needs 900 MiB
      engine_candidate(4, "engine 11", {}),   // fits: the winner
      engine_candidate(5, "engine 12", {})};  // never looked at
  std::vector<std::size_t> made;
  auto make_plan = [&](std::size_t i) -> std::optional<std::size_t> {
    made.push_back(i);
    if (i == 2) return std::nullopt;
    return i == 3 ? 900 * kMiB : 4 * kMiB;
  };
  const EnginePick pick = pick_engine(ranked, kFloat32, 512 * kMiB, make_plan);
  EXPECT_EQ(pick.index, 4);
  EXPECT_EQ(pick.workspace, 4 * kMiB);
  EXPECT_EQ(made, (std::vector<std::size_t>{2, 3, 4}));
  EXPECT_TRUE(has(pick.note, "instead of the faster engine 10 (needs 900.0 MiB)")) << pick.note;
  EXPECT_FALSE(has(pick.note, "engine 9")) << pick.note;
  // Under mixed_bfloat16 the TF32 engine qualifies and comes first.
  made.clear();
  const EnginePick bf16 = pick_engine(ranked, kMixedBf16, 512 * kMiB, make_plan);
  EXPECT_EQ(bf16.index, 1);
  EXPECT_EQ(made, (std::vector<std::size_t>{1}));
  EXPECT_EQ(bf16.note, "");
}

TEST(ConvAlgoChoice, PickEngineWithoutAWinnerSaysWhyForEachEngine) {
  const std::vector<AlgoCandidate> ranked{
      engine_candidate(0, "engine 1", {.runtime_compiled = true}),
      engine_candidate(1, "engine 2", {.nondeterministic = true}),
      engine_candidate(2, "engine 3", {.tensor_core = true, .down_convert = true}),
      engine_candidate(3, "engine 4", {}), engine_candidate(4, "engine 5", {})};
  auto make_plan = [](std::size_t i) -> std::optional<std::size_t> {
    if (i == 3) return std::nullopt;
    return 64 * kMiB;
  };
  const EnginePick pick = pick_engine(ranked, kMixedBf16, kMiB, make_plan);
  EXPECT_EQ(pick.index, -1);
  EXPECT_EQ(pick.why,
            "5 engines ranked, none taken: engine 1 (runtime-compiled) engine 2 "
            "(nondeterministic) engine 3 (fp16 not allowed) engine 4 (no plan) engine 5 (needs "
            "64.0 MiB)");
  EXPECT_EQ(pick_engine({}, kFloat32, kMiB, make_plan).index, -1);
}

}  // namespace
}  // namespace mirror::cuda
