// Loss, accuracy and embedding kernels. Rows are short (the classes or target elements), so one
// thread per row, as on the CPU, over src/math/loss.h. Invalid labels and ids are reported through
// the context's error word (the caller throws InvalidArgument after reading it) instead of being
// read out of bounds.
#include "cuda/kernels.h"
#include "cuda/launch.cuh"
#include "math/loss.h"

namespace mirror::cuda {
namespace {

__device__ void report(int* error, std::int64_t index) {
  atomicCAS(error, 0, static_cast<int>(index + 1));  // keep the first report
}

__global__ void softmax_xent_kernel(const float* x, const std::int32_t* labels, const float* w,
                                    std::int64_t n, std::int64_t c, double inv_count, float* dx,
                                    double* row_loss, int* error) {
  MIRROR_GRID_LOOP(i, n) {
    const std::int32_t label = labels[i];
    if (label < 0 || label >= c) {
      report(error, i);
      row_loss[i] = 0.0;
      for (std::int64_t j = 0; j < c; ++j) dx[i * c + j] = 0.0f;
      continue;
    }
    row_loss[i] = math::row_softmax_xent<double>(x + i * c, c, label, static_cast<double>(w[i]),
                                                 inv_count, dx + i * c);
  }
}

__global__ void correct_count_kernel(const float* x, const std::int32_t* labels, const float* w,
                                     std::int64_t n, std::int64_t c, unsigned long long* count,
                                     int* error) {
  MIRROR_GRID_LOOP(i, n) {
    const std::int32_t label = labels[i];
    if (label < 0 || label >= c) {
      report(error, i);
      continue;
    }
    if (w[i] > 0.0f && math::row_argmax(x + i * c, c) == label) atomicAdd(count, 1ull);
  }
}

__global__ void target_loss_kernel(math::TargetLoss kind, const float* x, const float* t,
                                   const float* w, std::int64_t n, std::int64_t k, double inv_count,
                                   float* dx, double* rows) {
  MIRROR_GRID_LOOP(i, n) {
    const double wi = static_cast<double>(w[i]);
    const auto r =
        math::row_target_loss<double>(kind, x + i * k, t + i * k, k, wi, inv_count, dx + i * k);
    double* out = rows + i * 5;
    out[0] = r.loss;
    out[1] = r.squared_error;
    out[2] = r.abs_error;
    out[3] = static_cast<double>(r.correct);
    out[4] = wi > 0.0 ? 1.0 : 0.0;
  }
}

__global__ void embedding_forward_kernel(const std::int32_t* ids, const float* table, float* y,
                                         std::int64_t n, std::int64_t vocab, std::int64_t dim,
                                         int* error) {
  MIRROR_GRID_LOOP(k, n) {
    const std::int64_t i = k / dim, d = k % dim;
    const std::int32_t id = ids[i];
    if (id < 0 || id >= vocab) {
      if (d == 0) report(error, i);
      y[k] = 0.0f;
    } else {
      y[k] = table[static_cast<std::int64_t>(id) * dim + d];
    }
  }
}

__global__ void embedding_backward_kernel(const std::int32_t* rows, const std::int32_t* offsets,
                                          const std::int32_t* positions, std::int64_t n,
                                          const float* dy, float* dtable, std::int64_t dim) {
  MIRROR_GRID_LOOP(k, n) {
    const std::int64_t seg = k / dim, d = k % dim;
    float* out = dtable + static_cast<std::int64_t>(rows[seg]) * dim + d;
    float acc = *out;
    for (std::int32_t q = offsets[seg]; q < offsets[seg + 1]; ++q) {
      acc += dy[static_cast<std::int64_t>(positions[q]) * dim + d];
    }
    *out = acc;
  }
}

}  // namespace

void softmax_xent(const float* x, const std::int32_t* labels, const float* w, std::int64_t n,
                  std::int64_t c, double inv_count, float* dx, double* row_loss, int* error,
                  cudaStream_t s) {
  MIRROR_LAUNCH(softmax_xent_kernel, n, s, x, labels, w, n, c, inv_count, dx, row_loss, error);
}

void correct_count(const float* x, const std::int32_t* labels, const float* w, std::int64_t n,
                   std::int64_t c, unsigned long long* count, int* error, cudaStream_t s) {
  MIRROR_LAUNCH(correct_count_kernel, n, s, x, labels, w, n, c, count, error);
}

void target_loss(bool bce, const float* x, const float* t, const float* w, std::int64_t n,
                 std::int64_t k, double inv_count, float* dx, double* rows, cudaStream_t s) {
  const auto kind =
      bce ? math::TargetLoss::kBinaryCrossEntropy : math::TargetLoss::kMeanSquaredError;
  MIRROR_LAUNCH(target_loss_kernel, n, s, kind, x, t, w, n, k, inv_count, dx, rows);
}

void embedding_forward(const std::int32_t* ids, const float* table, float* y, std::int64_t count,
                       std::int64_t vocab, std::int64_t dim, int* error, cudaStream_t s) {
  const std::int64_t n = count * dim;
  MIRROR_LAUNCH(embedding_forward_kernel, n, s, ids, table, y, n, vocab, dim, error);
}

void embedding_backward(const std::int32_t* rows, const std::int32_t* offsets,
                        const std::int32_t* positions, std::int64_t segments, const float* dy,
                        float* dtable, std::int64_t dim, cudaStream_t s) {
  const std::int64_t n = segments * dim;
  MIRROR_LAUNCH(embedding_backward_kernel, n, s, rows, offsets, positions, n, dy, dtable, dim);
}

}  // namespace mirror::cuda
