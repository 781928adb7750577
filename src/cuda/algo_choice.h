// defines: AlgoCandidate and choose_algo, the convolution algorithm choice of conv.cpp as a pure
// function of cuDNN's candidates, the math the precision policy allows and the workspace the
// allocator can give; EngineNotes, engine_candidate and pick_engine, the same choice among the
// graph API's engines (conv_plan.cpp). Plain C++ (no cuDNN header), so
// tests/ops_conv_algo_choice_test.cpp runs it without a GPU.
//
// Note [Algorithm choice]: per problem shape and math mode, cuDNN's heuristics
// (cudnnGet*Algorithm_v7, no trial runs) list candidates, each with the math type it runs in. A
// candidate qualifies when it succeeded for this problem, is DETERMINISTIC (docs/architecture.md
// invariant 4) and its math is allowed by the math mode in force (allowed_math): float32 keeps
// exact FMA math, so results track the CPU; mixed_bfloat16 also allows tensor cores on float32
// data (TF32, at least as precise as bf16); mixed_float16 also allows converting the operands to
// fp16 for the tensor cores. Among the qualifying candidates whose workspace fits in what the
// device allocator can give right now (`budget`), the fastest wins: by the time cuDNN reports
// when it reports one for every qualifying candidate, else by cuDNN's own order (fastest
// expected first). A fast algorithm with a huge workspace thus never turns into an OutOfMemory.
// The chosen candidate's math type must be set on the convolution descriptor before the
// algorithm runs (cuDNN's rule for the _v7 results). When no qualifying candidate fits, the
// always-available deterministic fallback (implicit GEMM / ALGO_1, FMA math, small or no
// workspace) runs. Both departures from the fastest qualifying candidate (one skipped for its
// workspace, or the fallback) come with a note, printed once per shape, since they can make the
// convolution slower.
#pragma once

#include <cstddef>
#include <cstdio>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace mirror::cuda {

/// What a candidate computes in: exact FMA, tensor cores on float32 data (TF32), or tensor cores
/// on operands converted to fp16.
enum class AlgoMath { kFma, kTf32, kFp16 };

/// The math each precision policy allows (Note [Algorithm choice]).
struct MathAllowance {
  bool tf32 = false;
  bool fp16 = false;
  bool allows(AlgoMath m) const {
    return m == AlgoMath::kFma || (m == AlgoMath::kTf32 && tf32) || (m == AlgoMath::kFp16 && fp16);
  }
};

struct AlgoCandidate {
  int algo = 0;
  std::string name;        // "IMPLICIT_PRECOMP_GEMM", for the note
  bool succeeded = false;  // cuDNN's status for this problem was success
  bool deterministic = false;
  AlgoMath math = AlgoMath::kFma;
  int math_type = 0;          // cuDNN's cudnnMathType_t of the candidate, set before it runs
  std::size_t workspace = 0;  // bytes this algorithm needs for this problem
  float time_ms = -1;         // cuDNN's time for it; negative: not reported
};

struct AlgoChoice {
  int algo = 0;
  int math_type = 0;  // to set on the convolution descriptor
  std::size_t workspace = 0;
  bool fallback = false;  // no qualifying candidate fitted
  std::string note;       // "" when the fastest qualifying candidate was taken
};

inline std::string algo_bytes(std::size_t bytes) {
  char text[32];
  if (bytes >= (std::size_t{1} << 20)) {
    std::snprintf(text, sizeof text, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  } else {
    std::snprintf(text, sizeof text, "%zu bytes", bytes);
  }
  return text;
}

inline const char* algo_math_name(AlgoMath m) {
  switch (m) {
    case AlgoMath::kTf32:
      return "TF32";
    case AlgoMath::kFp16:
      return "fp16";
    case AlgoMath::kFma:
      break;
  }
  return "FMA";
}

/// Note [Convolution plans] (conv_plan.h): what one engine of cuDNN's graph API says of itself,
/// read from its numerical and behaviour notes.
struct EngineNotes {
  bool tensor_core = false;        // CUDNN_NUMERICAL_NOTE_TENSOR_CORE: TF32 on float32 data
  bool down_convert = false;       // ..._DOWN_CONVERT_INPUTS: operands rounded to 16 bits
  bool reduced_reduction = false;  // ..._REDUCED_PRECISION_REDUCTION: sums in 16 bits
  bool nondeterministic = false;   // ..._NONDETERMINISTIC
  bool runtime_compiled = false;   // CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION: built with NVRTC
};

/// The candidate an engine makes for choose_algo. Its math: fp16 when it rounds the operands or
/// its sums to 16 bits, TF32 when it uses tensor cores on float32 data, else FMA. A runtime-
/// compiled engine never qualifies (NVRTC may be missing, and its first build takes seconds):
/// it is marked as not succeeded.
inline AlgoCandidate engine_candidate(int index, std::string name, const EngineNotes& n) {
  AlgoCandidate c;
  c.algo = index;
  c.name = std::move(name);
  c.succeeded = !n.runtime_compiled;
  c.deterministic = !n.nondeterministic;
  c.math = n.down_convert || n.reduced_reduction ? AlgoMath::kFp16
           : n.tensor_core                       ? AlgoMath::kTf32
                                                 : AlgoMath::kFma;
  return c;
}

/// Note [Algorithm choice]. `candidates` in cuDNN's order; `allowed`: the math of the mode in
/// force; `budget`: the workspace bytes the allocator can give; `fallback`: the algorithm to run
/// when no qualifying candidate fits (FMA math).
inline AlgoChoice choose_algo(std::span<const AlgoCandidate> candidates, MathAllowance allowed,
                              std::size_t budget, const AlgoCandidate& fallback) {
  auto qualifies = [&](const AlgoCandidate& c) {
    return c.succeeded && c.deterministic && allowed.allows(c.math);
  };
  bool timed = false;  // every qualifying candidate has a time
  for (const AlgoCandidate& c : candidates) {
    if (!qualifies(c)) continue;
    if (c.time_ms < 0) {
      timed = false;
      break;
    }
    timed = true;
  }
  // Earlier = faster: by the reported times, else by position in cuDNN's list.
  auto faster = [&](const AlgoCandidate& a, const AlgoCandidate& b) {
    return timed ? a.time_ms < b.time_ms : &a < &b;
  };
  const AlgoCandidate* best = nullptr;
  for (const AlgoCandidate& c : candidates) {
    if (qualifies(c) && c.workspace <= budget && (best == nullptr || faster(c, *best))) best = &c;
  }
  std::string skipped;  // qualifying candidates faster than `best` that do not fit
  for (const AlgoCandidate& c : candidates) {
    if (!qualifies(c) || c.workspace <= budget || (best != nullptr && !faster(c, *best))) continue;
    skipped += (skipped.empty() ? "" : ", ") + c.name + " (needs " + algo_bytes(c.workspace) + ")";
  }
  if (best != nullptr) {
    AlgoChoice choice{best->algo, best->math_type, best->workspace, false, ""};
    if (!skipped.empty()) {
      choice.note = "using " + best->name + " (" + algo_math_name(best->math) + ", " +
                    algo_bytes(best->workspace) + " of workspace) instead of the faster " +
                    skipped + "; only " + algo_bytes(budget) + " can be allocated";
    }
    return choice;
  }
  AlgoChoice choice{fallback.algo, fallback.math_type, fallback.workspace, true, ""};
  choice.note = "falling back to " + fallback.name + " (" + algo_bytes(fallback.workspace) +
                " of workspace), which may be slower: ";
  choice.note += skipped.empty()
                     ? "none of cuDNN's " + std::to_string(candidates.size()) +
                           " candidates is deterministic with an allowed math type"
                     : "the deterministic candidates " + skipped + " need more than the " +
                           algo_bytes(budget) + " that can be allocated";
  return choice;
}

/// Note [Convolution plans]: the engine a graph-API plan is made with. `ranked`: the engines in
/// cuDNN's order (engine_candidate); `make_plan(i)` makes ranked[i]'s plan and returns its
/// workspace in bytes, or nothing when the plan does not finalize. Plans are made only for
/// qualifying engines (succeeded, deterministic, math allowed), in order; the first whose plan is
/// made and whose workspace fits in `budget` wins, and choose_algo over the engines up to it
/// names a faster one skipped for its workspace.
struct EnginePick {
  int index = -1;  // into ranked; -1: none
  std::size_t workspace = 0;
  std::string note;  // a faster qualifying engine was skipped for its workspace
  std::string why;   // none: each engine and why it was not taken
};

template <class MakePlan>
EnginePick pick_engine(std::vector<AlgoCandidate> ranked, MathAllowance allowed, std::size_t budget,
                       MakePlan&& make_plan) {
  EnginePick pick;
  std::vector<std::string> reasons(ranked.size());
  for (std::size_t i = 0; i < ranked.size(); ++i) {
    AlgoCandidate& c = ranked[i];
    if (!c.succeeded) {
      reasons[i] = "runtime-compiled";
      continue;
    }
    if (!c.deterministic) {
      reasons[i] = "nondeterministic";
      continue;
    }
    if (!allowed.allows(c.math)) {
      reasons[i] = std::string(algo_math_name(c.math)) + " not allowed";
      continue;
    }
    const std::optional<std::size_t> workspace = make_plan(i);
    c.succeeded = workspace.has_value();
    c.workspace = workspace.value_or(0);
    if (!c.succeeded) {
      reasons[i] = "no plan";
      continue;
    }
    if (c.workspace > budget) {
      reasons[i] = "needs " + algo_bytes(c.workspace);
      continue;
    }
    AlgoCandidate none;
    none.algo = -1;
    const AlgoChoice choice =
        choose_algo(std::span<const AlgoCandidate>(ranked.data(), i + 1), allowed, budget, none);
    pick.index = static_cast<int>(i);
    pick.workspace = c.workspace;
    pick.note = choice.fallback ? "" : choice.note;
    return pick;
  }
  pick.why = std::to_string(ranked.size()) + " engines ranked, none taken:";
  for (std::size_t i = 0; i < ranked.size(); ++i)
    pick.why += " " + ranked[i].name + " (" + reasons[i] + ")";
  return pick;
}

}  // namespace mirror::cuda
