// What the CPU backend does with the mixed-precision math modes (Note [Mixed precision],
// mirror/precision.h): bfloat16 through oneDNN's AVX-512 BF16 kernels when the CPU has them (an
// error naming what is missing otherwise, never a silent slow path), fp16 emulated by rounding
// (Note [CPU fp16 emulation], cpu_kernels.h).
#include <dnnl.hpp>
#include <string>

#include "cpu/cpu_isa.h"
#include "cpu/cpu_kernels.h"
#include "math/convert.h"

namespace mirror::cpu {
bool cpu_has_bf16() {
  // The ISA oneDNN will actually use: the CPU's, capped by ONEDNN_MAX_CPU_ISA when set (which is
  // how a test pretends to run on a CPU without AVX-512 BF16).
  const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
  const auto bf16 = static_cast<unsigned>(dnnl::cpu_isa::avx512_core_bf16);
  return (isa & bf16) == bf16;
}

std::string CpuKernels::instruction_set(Device) { return isa_summary(); }

ops::MathSupport CpuKernels::math_support(Device, MathMode mode) {
  switch (mode) {
    case MathMode::kFloat32:
      return {};
    case MathMode::kBFloat16:
      if (cpu_has_bf16()) return {};
      return {
          "mixed_bfloat16 on the CPU needs AVX-512 BF16 (the avx512_bf16 flag in "
          "/proc/cpuinfo, Intel Cooper Lake / Sapphire Rapids or AMD Zen 4 and later); "
          "oneDNN reports " +
              onednn_isa_name() +
              " here (ONEDNN_MAX_CPU_ISA caps it when set). Train with --precision float32, "
              "or on a CPU or GPU with bfloat16 support",
          {}};
    case MathMode::kFloat16:
      return {{},
              "the CPU has no fp16 arithmetic: mixed_float16 is EMULATED (the operands of "
              "convolution, dense and RNN products are rounded to fp16, the products computed in "
              "float32; slower than float32, numerically like fp16 with loss scaling)"};
  }
  return {};
}

Tensor round_to_half(const Tensor& t) {
  require_dtype(t, DType::kFloat32, "fp16 emulation", "its operands");
  Tensor out = Tensor::empty(t.shape(), DType::kFloat32, t.device());
  const float* src = t.data<float>();
  float* dst = out.data<float>();
  const std::int64_t n = t.numel();
#pragma omp parallel for schedule(static) if (n > kParallelGrain)
  for (std::int64_t i = 0; i < n; ++i) {
    dst[i] = math::half_bits_to_float(math::float_to_half_bits(src[i]));
  }
  return out;
}

}  // namespace mirror::cpu
