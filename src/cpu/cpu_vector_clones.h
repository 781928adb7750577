// defines: MIRROR_VECTOR_BODY and MIRROR_VECTOR_CALL, a hot loop compiled for baseline x86-64
// (SSE2), x86-64-v3 (AVX2 + FMA) and x86-64-v4 (AVX-512), one of them picked at run time.
//
// The library is built for baseline x86-64, so a plain loop gets four floats (two doubles) per
// vector where the CPU may have eight or sixteen. A loop written as a MIRROR_VECTOR_BODY function
// (always inlined) and called through MIRROR_VECTOR_CALL(f(args)) is inlined into three
// functions, one per target, and the call runs the one vector_isa() names: the best the CPU has,
// capped by ONEDNN_MAX_CPU_ISA like oneDNN (Note [One ISA knob], cpu_isa.h). GCC's
// target_clones did this before, but its loader-time choice (an ifunc) cannot honour the cap.
// Users: the RNN gate loops (Note [Vector gate loops], cpu_rnn.h), the BatchNorm channel sums
// (Note [Channel sums], cpu_norm.cpp), pooling, dropout, dense bias, casts.
// Sanitizer builds and other compilers keep the baseline loop (correctness, not speed, is what
// scripts/build_sanitized.sh checks).
#pragma once

#include "cpu/cpu_isa.h"

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__) && \
    !defined(__SANITIZE_THREAD__) && !defined(__SANITIZE_ADDRESS__)

namespace mirror::cpu::vector_clones {

// The loop (a lambda whose call is always inlined) compiled for each target. A baseline
// always-inline function may be inlined into a function with more ISA, not the reverse.
template <class F>
[[gnu::target("arch=x86-64-v4")]] void run_x86_64_v4(F& loop) {
  loop();
}
template <class F>
[[gnu::target("arch=x86-64-v3")]] void run_x86_64_v3(F& loop) {
  loop();
}
template <class F>
void run(F&& loop) {
  switch (vector_isa()) {
    case VectorIsa::kAvx512:
      run_x86_64_v4(loop);
      return;
    case VectorIsa::kAvx2:
      run_x86_64_v3(loop);
      return;
    case VectorIsa::kBaseline:
      break;
  }
  loop();
}

}  // namespace mirror::cpu::vector_clones

#define MIRROR_VECTOR_BODY [[gnu::always_inline]] inline
#define MIRROR_VECTOR_CALL(...) \
  ::mirror::cpu::vector_clones::run([&]() __attribute__((always_inline)) { __VA_ARGS__; })
#else
#define MIRROR_VECTOR_BODY inline
#define MIRROR_VECTOR_CALL(...) \
  do {                          \
    __VA_ARGS__;                \
  } while (false)
#endif
