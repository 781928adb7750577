// MIRROR_VECTOR_CLONES: compile a hot loop three times, for baseline x86-64 (SSE2), x86-64-v3
// (AVX2 + FMA) and x86-64-v4 (AVX-512), and let the loader pick the best one the CPU runs (GCC's
// target_clones, an ifunc). The library itself is built for baseline x86-64, so without it a
// loop gets four floats (two doubles) per vector where the CPU may have eight or sixteen. Users:
// the RNN gate loops (Note [Vector gate loops], cpu_rnn.h) and the BatchNorm channel sums
// (Note [Channel sums], cpu_norm.cpp).
// Sanitizer builds keep one version: the ifunc resolver runs while the dynamic loader relocates
// libmirror, before the sanitizer's runtime is initialised, and its instrumented code crashed
// the TSan build at start-up (scripts/build_sanitized.sh checks correctness, not speed).
#pragma once

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__) && \
    !defined(__SANITIZE_THREAD__) && !defined(__SANITIZE_ADDRESS__)
#define MIRROR_VECTOR_CLONES \
  __attribute__((target_clones("default", "arch=x86-64-v3", "arch=x86-64-v4")))
#else
#define MIRROR_VECTOR_CLONES
#endif
