// defines: the CPU GRU kernels (plain loops + gemm, float32 and float64); CpuKernels forwards
// gru_forward / gru_backward here.
#pragma once

#include <cstdint>
#include <vector>

#include "mirror/ops.h"

namespace mirror::cpu {

ops::GruForwardResult gru_forward(const Tensor& x, const std::vector<std::int32_t>& lengths,
                                  const ops::GruWeights& w, bool training);
Tensor gru_backward(const Tensor& x, const std::vector<std::int32_t>& lengths,
                    const ops::GruWeights& w, const ops::GruForwardResult& fwd, const Tensor& dy,
                    const Tensor& dh_last, ops::GruWeights& dw, bool need_dx);

}  // namespace mirror::cpu
