// defines: the launchers of the kernels of Keras's layers (keras_ops.cu): parametric
// activations, Maximum/Minimum and the attention softmax. Raw device pointers, enqueued on `s`,
// launches checked, never synchronising.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "mirror/ops.h"

namespace mirror::cuda {

void eltwise_forward(const ops::Eltwise& f, const float* x, float* y, std::int64_t n,
                     cudaStream_t s);
void eltwise_backward(const ops::Eltwise& f, const float* x, const float* dy, float* dx,
                      std::int64_t n, cudaStream_t s);
void extremum(const float* a, const float* b, bool minimum, float* y, float* mask, std::int64_t n,
              cudaStream_t s);
/// The attention mask's shape: `lengths` is a device array of N int32 (null: no padding).
struct AttentionRows {
  std::int64_t mats, tq, tk;
  int heads;
  bool mask_queries, causal;
  const std::int32_t* lengths;
};
/// One thread per (matrix, query) row, in double like the CPU.
void attention_softmax(const float* scores, float* probs, const AttentionRows& r, cudaStream_t s);
void attention_softmax_backward(const float* probs, const float* dprobs, float* dscores,
                                const AttentionRows& r, cudaStream_t s);

}  // namespace mirror::cuda
