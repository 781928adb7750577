// The CUDA kernels of Keras's layers: each element's (or row's) arithmetic is the CPU's
// (src/math/keras_activations.h; the masked softmax mirrors cpu_keras.cpp row for row).
#include "cuda/keras_ops_kernels.h"
#include "cuda/launch.cuh"
#include "math/keras_activations.h"

namespace mirror::cuda {
namespace {

__global__ void eltwise_forward_kernel(math::EltwiseArgs<float> a, const float* x, float* y,
                                       std::int64_t n) {
  MIRROR_GRID_LOOP(i, n) y[i] = math::eltwise_forward(a, x[i]);
}

__global__ void eltwise_backward_kernel(math::EltwiseArgs<float> a, const float* x, const float* dy,
                                        float* dx, std::int64_t n) {
  MIRROR_GRID_LOOP(i, n) dx[i] = math::eltwise_backward(a, x[i], dy[i]);
}

__global__ void extremum_kernel(const float* a, const float* b, bool minimum, float* y, float* mask,
                                std::int64_t n) {
  MIRROR_GRID_LOOP(i, n) {
    const bool take_a = math::takes_a(a[i], b[i], minimum);
    y[i] = take_a ? a[i] : b[i];
    mask[i] = take_a ? 1.0f : 0.0f;
  }
}

__device__ bool masked(const AttentionRows& r, std::int64_t b, std::int64_t i, std::int64_t j) {
  if (r.causal && j > i) return true;
  if (r.lengths == nullptr) return false;
  const std::int32_t len = r.lengths[b / r.heads];
  return j >= len || (r.mask_queries && i >= len);
}

constexpr double kMaskedScore = -1e9;  // Keras's large negative (cpu_keras.cpp)

__global__ void attention_softmax_kernel(const float* s, float* p, AttentionRows r,
                                         std::int64_t rows) {
  MIRROR_GRID_LOOP(row, rows) {
    const std::int64_t b = row / r.tq, i = row % r.tq;
    const float* in = s + row * r.tk;
    float* out = p + row * r.tk;
    double top = -INFINITY;
    for (std::int64_t j = 0; j < r.tk; ++j) {
      const double v = masked(r, b, i, j) ? kMaskedScore : static_cast<double>(in[j]);
      top = v > top ? v : top;
    }
    double sum = 0;
    for (std::int64_t j = 0; j < r.tk; ++j) {
      const double v = masked(r, b, i, j) ? kMaskedScore : static_cast<double>(in[j]);
      const double e = exp(v - top);
      out[j] = static_cast<float>(e);
      sum += e;
    }
    for (std::int64_t j = 0; j < r.tk; ++j) out[j] = static_cast<float>(out[j] / sum);
  }
}

__global__ void attention_softmax_backward_kernel(const float* p, const float* dp, float* ds,
                                                  AttentionRows r, std::int64_t rows) {
  MIRROR_GRID_LOOP(row, rows) {
    const std::int64_t b = row / r.tq, i = row % r.tq, at = row * r.tk;
    double dot = 0;
    for (std::int64_t j = 0; j < r.tk; ++j) dot += static_cast<double>(dp[at + j]) * p[at + j];
    for (std::int64_t j = 0; j < r.tk; ++j) {
      ds[at + j] = masked(r, b, i, j) ? 0.0f : static_cast<float>(p[at + j] * (dp[at + j] - dot));
    }
  }
}

}  // namespace

void eltwise_forward(const ops::Eltwise& f, const float* x, float* y, std::int64_t n,
                     cudaStream_t s) {
  MIRROR_LAUNCH(eltwise_forward_kernel, n, s, math::eltwise_args<float>(f), x, y, n);
}

void eltwise_backward(const ops::Eltwise& f, const float* x, const float* dy, float* dx,
                      std::int64_t n, cudaStream_t s) {
  MIRROR_LAUNCH(eltwise_backward_kernel, n, s, math::eltwise_args<float>(f), x, dy, dx, n);
}

void extremum(const float* a, const float* b, bool minimum, float* y, float* mask, std::int64_t n,
              cudaStream_t s) {
  MIRROR_LAUNCH(extremum_kernel, n, s, a, b, minimum, y, mask, n);
}

void attention_softmax(const float* scores, float* probs, const AttentionRows& r, cudaStream_t s) {
  const std::int64_t rows = r.mats * r.tq;
  MIRROR_LAUNCH(attention_softmax_kernel, rows, s, scores, probs, r, rows);
}

void attention_softmax_backward(const float* probs, const float* dprobs, float* dscores,
                                const AttentionRows& r, cudaStream_t s) {
  const std::int64_t rows = r.mats * r.tq;
  MIRROR_LAUNCH(attention_softmax_backward_kernel, rows, s, probs, dprobs, dscores, r, rows);
}

}  // namespace mirror::cuda
