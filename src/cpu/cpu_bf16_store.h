// defines: store_bf16x16, 16 floats rounded to bfloat16 in registers by VCVTNEPS2BF16, the
// instruction oneDNN's reorder runs on the CPUs where Mirror computes in bfloat16 (cpu_has_bf16),
// so a kernel that writes a convolution operand itself gives the bits of conv2d_operand (Note
// [Gradients as convolution operands], mirror/ops.h). MIRROR_BF16_STORE is 0 where the
// compiler cannot emit it; a function calling it carries MIRROR_BF16_TARGET and runs only where
// cpu_has_bf16().
#pragma once

#include <cstdint>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define MIRROR_BF16_STORE 1
#define MIRROR_BF16_TARGET gnu::target("avx512f,avx512bf16")

namespace mirror::cpu {

/// dst[0..16) = lanes[0..16) rounded to nearest even (NaNs stay NaN, quieted).
[[MIRROR_BF16_TARGET, gnu::always_inline]] inline void store_bf16x16(std::uint16_t* dst,
                                                                     const float* lanes) {
  const __m256bh h = _mm512_cvtneps_pbh(_mm512_loadu_ps(lanes));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), reinterpret_cast<const __m256i&>(h));
}

}  // namespace mirror::cpu
#else
#define MIRROR_BF16_STORE 0
#endif
