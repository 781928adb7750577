// defines: the host-side launchers of the backend's own CUDA kernels (element-wise math,
// reductions, layout helpers, loss, embedding, pooling). They take raw device pointers and
// the stream to enqueue on, check the launch, and never synchronise. The per-element math is
// src/math's (Note [Shared math]); the kernels only map threads to elements.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "math/optim.h"
#include "mirror/dtype.h"
#include "mirror/ops.h"

namespace mirror::cuda {

// ---------------------------------------------------------------- element-wise (eltwise.cu)
void activation_forward(ops::Activation act, const float* x, float* y, std::int64_t n,
                        cudaStream_t s);
void activation_backward(ops::Activation act, const float* y, const float* dy, float* dx,
                         std::int64_t n, cudaStream_t s);
/// mask[i] = math::dropout_scale(seed, ids[i / per], i % per, rate); y = x * mask.
void dropout_forward(const float* x, float* y, float* mask, const std::int64_t* ids, std::int64_t n,
                     std::int64_t per, float rate, std::uint64_t seed, cudaStream_t s);
/// out = a * b element-wise.
void multiply(const float* a, const float* b, float* out, std::int64_t n, cudaStream_t s);
template <class T>
void axpy(T alpha, const T* b, T* a, std::int64_t n, cudaStream_t s);
template <class T>
void scale(T* a, T alpha, std::int64_t n, cudaStream_t s);
/// Fills n elements of T (any 1-, 2-, 4- or 8-byte pattern).
template <class T>
void fill(T* a, T value, std::int64_t n, cudaStream_t s);
/// Element block size of sum_squares_partials (the CPU backend's block, for similar rounding).
inline constexpr std::int64_t kSumSquaresBlock = 4096;
/// partials[b] = sum of a[i]^2 (in double) over block b of kSumSquaresBlock elements, with a
/// fixed reduction tree: the result does not depend on scheduling (docs/architecture.md invariant
/// 4).
template <class T>
void sum_squares_partials(const T* a, std::int64_t n, double* partials, cudaStream_t s);
/// Sets *flag to 1 when an element is Inf or NaN (float, double; fp16/bf16 as bit patterns).
void nonfinite_flag(DType dtype, const void* a, std::int64_t n, int* flag, cudaStream_t s);
/// dst = convert(src) for the pairs ops::cast supports (float32 <-> fp16, bf16, float64).
void cast(DType from, DType to, const void* src, void* dst, std::int64_t n, cudaStream_t s);
/// y[o, c, i] += bias[c] for y viewed as [outer, channels, inner].
void bias_add(float* y, const float* bias, std::int64_t outer, std::int64_t channels,
              std::int64_t inner, cudaStream_t s);
void sgd_update(float* p, const float* g, float* buf, std::int64_t n, float lr, float momentum,
                bool nesterov, float weight_decay, cudaStream_t s);
void adam_update(float* p, const float* g, float* m, float* v, std::int64_t n,
                 const math::AdamScalars& scalars, cudaStream_t s);

// ---------------------------------------------------------------- layout (layout.cu)
/// Shape of one pooling or padding problem on an [n*c, h, w] stack of planes.
struct Planes {
  std::int64_t planes;  // n * c
  int h, w;             // input plane
  int oh, ow;           // output plane
};
/// out[p, i, j] = x[p, i - top, j - left] inside the input, 0 in the padding.
void pad2d(const float* x, float* out, const Planes& d, int top, int left, cudaStream_t s);
/// x[p, i, j] = in[p, i + top, j + left] (the inverse of pad2d: d.h/d.w are the padded plane).
void crop2d(const float* in, float* x, const Planes& d, int top, int left, cudaStream_t s);
/// Max pooling with ops.h's tie rule (first maximum in row-major window order; padding never
/// wins). Backward gathers per input element in output order: deterministic, no atomics.
void maxpool_forward(const float* x, float* y, const Planes& d, const ops::Pool2DGeometry& g,
                     cudaStream_t s);
void maxpool_backward(const float* x, const float* dy, float* dx, const Planes& d,
                      const ops::Pool2DGeometry& g, cudaStream_t s);
/// Zeroes y[n, t, :] for t >= lengths[n] (y viewed as [batch, steps, width]).
void zero_past_length(float* y, const std::int32_t* lengths, std::int64_t batch, std::int64_t steps,
                      std::int64_t width, cudaStream_t s);
/// Spins for about `microseconds` (test aid: makes missing stream waits visible).
void sleep(std::int64_t microseconds, cudaStream_t s);

// ---------------------------------------------------------------- loss, embedding (loss.cu)
/// One thread per row: row_loss[i] = math::row_softmax_xent(...), dx written. Labels outside
/// [0, c) set *error to 1 + the row index of one of them (and that row's loss to 0).
void softmax_xent(const float* x, const std::int32_t* labels, const float* w, std::int64_t n,
                  std::int64_t c, double inv_count, float* dx, double* row_loss, int* error,
                  cudaStream_t s);
/// *count += number of rows with w > 0 whose first argmax equals the label (bad labels as
/// above).
void correct_count(const float* x, const std::int32_t* labels, const float* w, std::int64_t n,
                   std::int64_t c, unsigned long long* count, int* error, cudaStream_t s);
/// One thread per row of the float-target losses (math::row_target_loss; BCE when `bce`, else
/// MSE): dx written, and rows[i * 5 + 0..4] = the row's weighted loss, squared-error sum,
/// absolute-error sum, correct elements, and 1 when w > 0 (else 0).
void target_loss(bool bce, const float* x, const float* t, const float* w, std::int64_t n,
                 std::int64_t k, double inv_count, float* dx, double* rows, cudaStream_t s);
/// y[i, :] = table[ids[i], :]; an id outside [0, vocab) writes zeros and sets *error to 1 + i.
void embedding_forward(const std::int32_t* ids, const float* table, float* y, std::int64_t count,
                       std::int64_t vocab, std::int64_t dim, int* error, cudaStream_t s);
/// Deterministic scatter-add: for each segment k (one distinct id rows[k], positions
/// positions[offsets[k] .. offsets[k+1]) in increasing order), dtable[rows[k], :] += the dy
/// rows at those positions, added in that order (the CPU loop's order).
void embedding_backward(const std::int32_t* rows, const std::int32_t* offsets,
                        const std::int32_t* positions, std::int64_t segments, const float* dy,
                        float* dtable, std::int64_t dim, cudaStream_t s);

}  // namespace mirror::cuda
