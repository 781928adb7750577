// defines: the instruction set the CPU backend runs, one answer for oneDNN and for Mirror's own
// vector loops (Note [One ISA knob]).
//
// Note [One ISA knob]: oneDNN picks its kernels for the best ISA the CPU has, capped by the
// ONEDNN_MAX_CPU_ISA environment variable. Mirror's hot loops (MIRROR_VECTOR_CALL,
// cpu_vector_clones.h) are compiled for baseline x86-64, x86-64-v3 (AVX2 + FMA) and x86-64-v4
// (AVX-512) and pick one at run time under the same cap, read through oneDNN
// (dnnl::get_effective_cpu_isa), so `ONEDNN_MAX_CPU_ISA=AVX2` makes an AVX-512 machine compute
// what an AVX2-only CPU computes, bit for bit: the suite's AVX2 leg runs that way (.ci/run), and
// mirror-doctor prints the ISA in force. The cap is read once per process.
#pragma once

#include <string>

namespace mirror::cpu {

/// The vector ISA Mirror's own loops run: the best of these the CPU has, capped like oneDNN.
enum class VectorIsa { kBaseline, kAvx2, kAvx512 };
VectorIsa vector_isa();
const char* vector_isa_name(VectorIsa isa);

/// One line for people: the ISA oneDNN and Mirror's loops use, the CPU's own best when a cap
/// lowers it, and the cap (e.g. "AVX2 (capped by ONEDNN_MAX_CPU_ISA=AVX2; the CPU has AVX-512
/// VNNI); Mirror's vector loops: x86-64-v3 (AVX2)").
std::string isa_summary();

/// oneDNN's name of the ISA it runs ("AVX2", "AVX-512 BF16", ...).
std::string onednn_isa_name();

}  // namespace mirror::cpu
