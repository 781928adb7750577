// CpuKernels: the singleton, host memory operations, and the GRU entry points (implemented in
// cpu_gru.cpp). The other ops live in cpu_dense/conv/pool/eltwise/loss/sequence/window1d.cpp.
#include "cpu/cpu_kernels.h"

#include <cstring>

#include "cpu/cpu_backend.h"
#include "cpu/cpu_gru.h"

namespace mirror {

KernelSet& cpu_kernels() {
  static cpu::CpuKernels kernels;
  return kernels;
}

}  // namespace mirror

namespace mirror::cpu {

void require_dtype(const Tensor& t, DType want, const char* op, const char* what) {
  MIRROR_CHECK(t.dtype() == want, InvalidArgument,
               std::string(op) + ": " + what + " must be " + dtype_name(want) + ", got " + t.str());
}

void CpuKernels::copy(void* dst, Device dst_device, const void* src, Device src_device,
                      std::size_t bytes) {
  // Only host<->host reaches here: copies involving a CUDA device go to the CUDA backend.
  MIRROR_CHECK(dst_device.is_cpu() && src_device.is_cpu(), InvalidArgument,
               "CPU backend asked to copy " + src_device.str() + " -> " + dst_device.str() +
                   "; copies involving a GPU belong to the CUDA backend");
  if (bytes) std::memmove(dst, src, bytes);
}

void CpuKernels::memset_zero(void* dst, std::size_t bytes) {
  if (bytes) std::memset(dst, 0, bytes);
}

ops::GruForwardResult CpuKernels::gru_forward(const Tensor& x,
                                              const std::vector<std::int32_t>& lengths,
                                              const ops::GruWeights& w, bool training) {
  return cpu::gru_forward(x, lengths, w, training);
}

Tensor CpuKernels::gru_backward(const Tensor& x, const std::vector<std::int32_t>& lengths,
                                const ops::GruWeights& w, const ops::GruForwardResult& fwd,
                                const Tensor& dy, const Tensor& dh_last, ops::GruWeights& dw,
                                bool need_dx) {
  return cpu::gru_backward(x, lengths, w, fwd, dy, dh_last, dw, need_dx);
}

}  // namespace mirror::cpu
