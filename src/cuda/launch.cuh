// defines: the grid-stride launch helpers shared by the backend's .cu files.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/check.h"

namespace mirror::cuda {

inline constexpr int kThreads = 256;

/// Blocks for n elements at kThreads per block, capped: kernels loop grid-stride over the rest.
inline unsigned grid_for(std::int64_t n) {
  const std::int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < (1 << 20) ? blocks : (1 << 20));
}

#if defined(__CUDACC__)
/// Sums each thread's (x1, x2) over a block of kThreads threads with a fixed tree (the same
/// order every run: deterministic); thread 0 gets the totals, the others garbage. Every thread
/// of the block must call it, once per kernel (its shared arrays are not fenced for reuse).
__device__ inline void block_sum2(double& x1, double& x2) {
  __shared__ double s1[kThreads];
  __shared__ double s2[kThreads];
  s1[threadIdx.x] = x1;
  s2[threadIdx.x] = x2;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (static_cast<int>(threadIdx.x) < half) {
      s1[threadIdx.x] += s1[threadIdx.x + half];
      s2[threadIdx.x] += s2[threadIdx.x + half];
    }
    __syncthreads();
  }
  x1 = s1[0];
  x2 = s2[0];
}
#endif

}  // namespace mirror::cuda

/// for (i = this thread's first element; i < n; i += all threads)
#define MIRROR_GRID_LOOP(i, n)                                                                     \
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)

/// Launches `kernel` over n elements on stream s (nothing for n == 0) and checks the launch.
#define MIRROR_LAUNCH(kernel, n, s, ...)                                                      \
  do {                                                                                        \
    if ((n) > 0) {                                                                            \
      kernel<<<::mirror::cuda::grid_for(n), ::mirror::cuda::kThreads, 0, (s)>>>(__VA_ARGS__); \
      MIRROR_CUDA_CHECK_LAUNCH(#kernel);                                                      \
    }                                                                                         \
  } while (0)
