// The CPU backend's instruction set (Note [One ISA knob], cpu_isa.h).
#include "cpu/cpu_isa.h"

#include <cstdlib>
#include <dnnl.hpp>

namespace mirror::cpu {
namespace {

bool has(dnnl::cpu_isa isa, dnnl::cpu_isa level) {
  const auto a = static_cast<unsigned>(isa), l = static_cast<unsigned>(level);
  return (a & l) == l;
}

/// The best level the processor itself has, whatever the cap says.
VectorIsa cpu_vector_isa() {
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("x86-64-v4")) return VectorIsa::kAvx512;
  if (__builtin_cpu_supports("x86-64-v3")) return VectorIsa::kAvx2;
#endif
  return VectorIsa::kBaseline;
}

/// The processor's own best ISA in oneDNN's words (what a cap hides).
std::string cpu_isa_name() {
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("x86-64-v4")) {
    if (__builtin_cpu_supports("avx512bf16")) return "AVX-512 BF16";
    if (__builtin_cpu_supports("avx512vnni")) return "AVX-512 VNNI";
    return "AVX-512";
  }
  if (__builtin_cpu_supports("avx2")) return "AVX2";
  if (__builtin_cpu_supports("avx")) return "AVX";
  if (__builtin_cpu_supports("sse4.1")) return "SSE4.1";
#endif
  return "baseline";
}

}  // namespace

std::string onednn_isa_name() {
  const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
  if (has(isa, dnnl::cpu_isa::avx512_core_amx)) return "AVX-512 AMX";
  if (has(isa, dnnl::cpu_isa::avx512_core_bf16)) return "AVX-512 BF16";
  if (has(isa, dnnl::cpu_isa::avx512_core_vnni)) return "AVX-512 VNNI";
  if (has(isa, dnnl::cpu_isa::avx512_core)) return "AVX-512";
  if (has(isa, dnnl::cpu_isa::avx2_vnni)) return "AVX2 VNNI";
  if (has(isa, dnnl::cpu_isa::avx2)) return "AVX2";
  if (has(isa, dnnl::cpu_isa::avx)) return "AVX";
  if (has(isa, dnnl::cpu_isa::sse41)) return "SSE4.1";
  return "baseline";
}

VectorIsa vector_isa() {
  static const VectorIsa isa = [] {
    // The cap oneDNN applies (ONEDNN_MAX_CPU_ISA), so both run the same level.
    const dnnl::cpu_isa onednn = dnnl::get_effective_cpu_isa();
    const VectorIsa cap = has(onednn, dnnl::cpu_isa::avx512_core) ? VectorIsa::kAvx512
                          : has(onednn, dnnl::cpu_isa::avx2)      ? VectorIsa::kAvx2
                                                                  : VectorIsa::kBaseline;
    const VectorIsa cpu = cpu_vector_isa();
    return static_cast<int>(cap) < static_cast<int>(cpu) ? cap : cpu;
  }();
  return isa;
}

const char* vector_isa_name(VectorIsa isa) {
  switch (isa) {
    case VectorIsa::kAvx512:
      return "x86-64-v4 (AVX-512)";
    case VectorIsa::kAvx2:
      return "x86-64-v3 (AVX2)";
    case VectorIsa::kBaseline:
      break;
  }
  return "baseline x86-64 (SSE2)";
}

std::string isa_summary() {
  std::string s = onednn_isa_name();
  const char* cap = std::getenv("ONEDNN_MAX_CPU_ISA");
  const std::string own = cpu_isa_name();
  if (cap != nullptr && *cap != '\0') {
    s += std::string(" (ONEDNN_MAX_CPU_ISA=") + cap + "; the CPU has " + own + ")";
  } else if (own != s) {
    s += " (the CPU has " + own + ")";
  }
  return s + "; Mirror's vector loops: " + vector_isa_name(vector_isa());
}

}  // namespace mirror::cpu
