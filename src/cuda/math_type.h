// defines: the cuDNN math type and cuBLAS compute type of the math mode in force
// (include/mirror/precision.h), shared by the convolutions, the RNNs and the GEMMs so all follow
// the precision policy (and Note [TF32]) alike.
#pragma once

#include <cublas_v2.h>
#include <cudnn.h>

#include "mirror/precision.h"

namespace mirror::cuda {

/// Note [TF32] (mirror/precision.h): float32 on TF32 tensor cores.
inline bool float32_on_tf32() { return math_mode() == MathMode::kFloat32 && tf32(); }

/// Note [GPU mixed precision] (dense.cpp): float32 keeps exact FMA math unless TF32 is on (Note
/// [TF32]); mixed_float16 lets cuDNN down-convert float32 operands to fp16 for tensor cores;
/// mixed_bfloat16 allows cuDNN's default tensor-core math on float32 data (TF32, at least as
/// precise as bf16).
inline cudnnMathType_t cudnn_math_type() {
  switch (math_mode()) {
    case MathMode::kFloat16:
      return CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
    case MathMode::kBFloat16:
      return CUDNN_DEFAULT_MATH;
    case MathMode::kFloat32:
      break;
  }
  return tf32() ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
}

/// cuBLAS's compute type for float32 operands under the math in force.
inline cublasComputeType_t cublas_compute_type() {
  switch (math_mode()) {
    case MathMode::kFloat16:
      return CUBLAS_COMPUTE_32F_FAST_16F;
    case MathMode::kBFloat16:
      return CUBLAS_COMPUTE_32F_FAST_16BF;
    case MathMode::kFloat32:
      break;
  }
  return tf32() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}

}  // namespace mirror::cuda
