// defines: AlgoCandidate and choose_algo, the convolution algorithm choice of conv.cpp as a pure
// function of cuDNN's candidates and the workspace the allocator can give. Plain C++ (no cuDNN
// header), so tests/ops_conv_algo_choice_test.cpp runs it without a GPU.
//
// Note [Algorithm choice]: per problem shape, cuDNN's heuristics (cudnnGet*Algorithm_v7, no
// trial runs) list candidates from the fastest expected down. A candidate qualifies when it
// succeeded for this problem, is DETERMINISTIC (docs/architecture.md invariant 4) and uses FMA
// math (no TF32 rounding, so results track the CPU). The choice is the first qualifying candidate
// whose workspace fits in what the device allocator can give right now (`budget`), so a fast
// algorithm with a huge workspace never turns into an OutOfMemory. When no qualifying candidate
// fits, the always-available deterministic fallback (implicit GEMM / ALGO_1, small or no
// workspace) runs. Both departures from cuDNN's first choice (a faster candidate skipped for its
// workspace, or the fallback) come with a note, printed once per shape, since they can make
// the convolution slower.
#pragma once

#include <cstddef>
#include <cstdio>
#include <span>
#include <string>

namespace mirror::cuda {

struct AlgoCandidate {
  int algo = 0;
  std::string name;        // "IMPLICIT_PRECOMP_GEMM", for the note
  bool succeeded = false;  // cuDNN's status for this problem was success
  bool deterministic = false;
  bool fma_math = false;
  std::size_t workspace = 0;  // bytes this algorithm needs for this problem
};

struct AlgoChoice {
  int algo = 0;
  std::size_t workspace = 0;
  bool fallback = false;  // no qualifying candidate fitted
  std::string note;       // "" when cuDNN's fastest qualifying candidate was taken
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

/// Note [Algorithm choice]. `candidates` in cuDNN's order; `budget`: the workspace bytes the
/// allocator can give; `fallback`: the algorithm to run when no qualifying candidate fits.
inline AlgoChoice choose_algo(std::span<const AlgoCandidate> candidates, std::size_t budget,
                              const AlgoCandidate& fallback) {
  std::string skipped;  // qualifying candidates that did not fit
  for (const AlgoCandidate& c : candidates) {
    if (!c.succeeded || !c.deterministic || !c.fma_math) continue;
    if (c.workspace <= budget) {
      AlgoChoice choice{c.algo, c.workspace, false, ""};
      if (!skipped.empty()) {
        choice.note = "using " + c.name + " (" + algo_bytes(c.workspace) +
                      " of workspace) instead of the faster " + skipped + "; only " +
                      algo_bytes(budget) + " can be allocated";
      }
      return choice;
    }
    skipped += (skipped.empty() ? "" : ", ") + c.name + " (needs " + algo_bytes(c.workspace) + ")";
  }
  AlgoChoice choice{fallback.algo, fallback.workspace, true, ""};
  choice.note = "falling back to " + fallback.name + " (" + algo_bytes(fallback.workspace) +
                " of workspace), which may be slower: ";
  choice.note += skipped.empty()
                     ? "none of cuDNN's " + std::to_string(candidates.size()) +
                           " candidates is deterministic with FMA math"
                     : "the deterministic FMA candidates " + skipped + " need more than the " +
                           algo_bytes(budget) + " that can be allocated";
  return choice;
}

}  // namespace mirror::cuda
