// defines: the cuDNN math type of the math mode in force (include/mirror/precision.h), shared by
// the convolutions and the RNNs so both follow the precision policy alike.
#pragma once

#include <cudnn.h>

#include "mirror/precision.h"

namespace mirror::cuda {

/// Note [GPU mixed precision] (dense.cpp): float32 keeps exact FMA math (no TF32); mixed_float16
/// lets cuDNN down-convert float32 operands to fp16 for tensor cores; mixed_bfloat16 allows
/// cuDNN's default tensor-core math on float32 data (TF32, at least as precise as bf16).
inline cudnnMathType_t cudnn_math_type() {
  switch (math_mode()) {
    case MathMode::kFloat16:
      return CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
    case MathMode::kBFloat16:
      return CUDNN_DEFAULT_MATH;
    case MathMode::kFloat32:
      break;
  }
  return CUDNN_FMA_MATH;
}

}  // namespace mirror::cuda
