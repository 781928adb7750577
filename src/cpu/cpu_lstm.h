// defines: the CPU LSTM kernels (plain loops + gemm, float32 and float64); CpuKernels forwards
// lstm_forward / lstm_backward here.
#pragma once

#include <cstdint>
#include <vector>

#include "mirror/ops.h"

namespace mirror::cpu {

ops::LstmForwardResult lstm_forward(const Tensor& x, const std::vector<std::int32_t>& lengths,
                                    const ops::LstmWeights& w, bool training);
Tensor lstm_backward(const Tensor& x, const std::vector<std::int32_t>& lengths,
                     const ops::LstmWeights& w, const ops::LstmForwardResult& fwd, const Tensor& dy,
                     const Tensor& dh_last, ops::LstmWeights& dw, bool need_dx);

}  // namespace mirror::cpu
