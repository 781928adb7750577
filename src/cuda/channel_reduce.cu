// Per-channel sums for BatchNorm/LayerNorm statistics and bias gradients.
//
// Note [Channel reductions]: the first kernels gave each channel one block. A ResNet's
// BatchNorm has 16 to 64 channels, so 16 to 64 blocks ran on an H200's 132 multiprocessors, and
// every element paid two 64-bit divisions for its index: 47 us per call by Nsight Compute, a
// third of the ResNet step's kernel time (docs/gpu-kit.md). Now each channel's outer rows are
// cut into `splits` slices, about 1024 blocks in all when the rows allow it. A block sums its
// slice in double, walking (o, i) by increments instead of divisions, with block_sum2's fixed
// tree; a second kernel adds each channel's partials in slice order. The grouping depends only on
// the shape, so the bits are the same on every run and every GPU (channel_split does not look at
// the device). Measured the same way: 6.4 + 5.4 us per ResNet call (partials + finish), and a
// Dense bias gradient 35 -> 10.5 us. The ResNet step's wall time did not move (12.2 vs 12.4 ms):
// kernels fill a third of it, the rest is the host (docs/gpu-kit.md, "First GPU runs").
// BatchNorm's statistics (channel_moments) went the same way later: its block-per-channel kernel
// took 59 us per call on an H100, 17 % of the ResNet step's kernel time once the host no longer
// bound the step.
#include "cuda/channel_reduce.h"
#include "cuda/launch.cuh"

namespace mirror::cuda {
namespace {

constexpr std::int64_t kTargetBlocks = 1024;    // several per multiprocessor
constexpr std::int64_t kMinSlice = 4 * kThreads;  // elements a block should have at least

/// weights (kMasked): row o counts when weights[o / rows_per_sample] > 0 (a real sample).
template <bool kProducts, bool kMasked = false>
__global__ void channel_partials_kernel(const float* a, const float* b, double* partial,
                                        std::int64_t outer, std::int64_t channels,
                                        std::int64_t inner, std::int64_t per_split,
                                        const float* weights = nullptr,
                                        std::int64_t rows_per_sample = 1) {
  const std::int64_t c = blockIdx.x, slice = blockIdx.y;
  const std::int64_t o_begin = slice * per_split;
  const std::int64_t o_end = o_begin + per_split < outer ? o_begin + per_split : outer;
  // Thread t starts at flat element t of the slice and steps by kThreads = step_o rows and
  // step_i columns, carrying into o when i passes inner.
  const std::int64_t step_o = kThreads / inner, step_i = kThreads % inner;
  std::int64_t o = o_begin + threadIdx.x / inner, i = threadIdx.x % inner;
  double x1 = 0, x2 = 0;
  while (o < o_end) {
    if (!kMasked || weights[o / rows_per_sample] > 0.0f) {
      const std::int64_t at = (o * channels + c) * inner + i;
      const float va = a[at];
      x1 += va;
      if (kProducts) x2 += static_cast<double>(va) * b[at];
    }
    o += step_o;
    i += step_i;
    if (i >= inner) {
      i -= inner;
      ++o;
    }
  }
  block_sum2(x1, x2);
  if (threadIdx.x == 0) {
    partial[2 * (slice * channels + c)] = x1;
    partial[2 * (slice * channels + c) + 1] = x2;
  }
}

/// Channel c's partials added in slice order: sums[c] and sums[channels + c].
__device__ void finish_channel(const double* partial, double* sums, std::int64_t splits,
                               std::int64_t channels, std::int64_t c) {
  double x1 = 0, x2 = 0;
  for (std::int64_t s = 0; s < splits; ++s) {
    x1 += partial[2 * (s * channels + c)];
    x2 += partial[2 * (s * channels + c) + 1];
  }
  sums[c] = x1;
  sums[channels + c] = x2;
}

__global__ void finish_sums_kernel(const double* partial, double* sums, std::int64_t splits,
                                   std::int64_t channels) {
  MIRROR_GRID_LOOP(c, channels) finish_channel(partial, sums, splits, channels, c);
}

/// finish_sums_kernel's sums, and at 2C the element count of one channel over the real samples.
__global__ void finish_moments_kernel(const double* partial, double* stats, std::int64_t splits,
                                      std::int64_t channels, const float* weights,
                                      std::int64_t samples, std::int64_t per_sample) {
  MIRROR_GRID_LOOP(c, channels + 1) {
    if (c == channels) {
      double real = 0;
      for (std::int64_t n = 0; n < samples; ++n) real += weights == nullptr || weights[n] > 0.0f;
      stats[2 * channels] = real * static_cast<double>(per_sample);
    } else {
      finish_channel(partial, stats, splits, channels, c);
    }
  }
}

__global__ void finish_bias_kernel(const double* partial, float* dbias, std::int64_t splits,
                                   std::int64_t channels) {
  MIRROR_GRID_LOOP(c, channels) {
    double x1 = 0;
    for (std::int64_t s = 0; s < splits; ++s) x1 += partial[2 * (s * channels + c)];
    dbias[c] += static_cast<float>(x1);
  }
}

void launch_partials(const float* a, const float* b, double* partial, const ops::ChannelView& v,
                     const ChannelSplit& split, cudaStream_t s) {
  const dim3 grid(static_cast<unsigned>(v.channels), static_cast<unsigned>(split.splits));
  if (b != nullptr) {
    channel_partials_kernel<true>
        <<<grid, kThreads, 0, s>>>(a, b, partial, v.outer, v.channels, v.inner, split.per_split);
  } else {
    channel_partials_kernel<false>
        <<<grid, kThreads, 0, s>>>(a, a, partial, v.outer, v.channels, v.inner, split.per_split);
  }
  MIRROR_CUDA_CHECK_LAUNCH("channel_partials_kernel");
}

}  // namespace

ChannelSplit channel_split(const ops::ChannelView& v) {
  ChannelSplit split;
  if (v.outer <= 0 || v.channels <= 0 || v.inner <= 0) return split;
  const std::int64_t by_blocks = (kTargetBlocks + v.channels - 1) / v.channels;
  const std::int64_t by_work = (v.outer * v.inner) / kMinSlice;
  std::int64_t splits = by_blocks < by_work ? by_blocks : by_work;
  splits = splits < 1 ? 1 : (splits > v.outer ? v.outer : splits);
  split.splits = splits < 65535 ? splits : 65535;  // gridDim.y's limit
  split.per_split = (v.outer + split.splits - 1) / split.splits;
  split.splits = (v.outer + split.per_split - 1) / split.per_split;  // no empty slice
  return split;
}

// An empty view (no rows or an empty inner extent) sums to zero: no partials, splits 0.
void channel_sums(const float* a, const float* b, double* partial, double* sums,
                  const ops::ChannelView& v, const ChannelSplit& split, cudaStream_t s) {
  const bool empty = v.outer == 0 || v.inner == 0;
  if (!empty) launch_partials(a, b, partial, v, split, s);
  MIRROR_LAUNCH(finish_sums_kernel, v.channels, s, partial, sums, empty ? 0 : split.splits,
                v.channels);
}

void channel_moments(const float* x, const float* weights, std::int64_t samples,
                     double* partial, double* stats, const ops::ChannelView& v,
                     const ChannelSplit& split, cudaStream_t s) {
  const bool empty = v.outer == 0 || v.inner == 0 || samples <= 0;
  const std::int64_t rows_per_sample = empty ? 1 : v.outer / samples;
  if (!empty) {
    const dim3 grid(static_cast<unsigned>(v.channels), static_cast<unsigned>(split.splits));
    if (weights != nullptr) {
      channel_partials_kernel<true, true><<<grid, kThreads, 0, s>>>(
          x, x, partial, v.outer, v.channels, v.inner, split.per_split, weights, rows_per_sample);
    } else {
      channel_partials_kernel<true>
          <<<grid, kThreads, 0, s>>>(x, x, partial, v.outer, v.channels, v.inner, split.per_split);
    }
    MIRROR_CUDA_CHECK_LAUNCH("channel_partials_kernel");
  }
  MIRROR_LAUNCH(finish_moments_kernel, v.channels + 1, s, partial, stats, empty ? 0 : split.splits,
                v.channels, weights, samples < 0 ? 0 : samples, rows_per_sample * v.inner);
}

void bias_grad(const float* dy, float* dbias, double* partial, const ops::ChannelView& v,
               const ChannelSplit& split, cudaStream_t s) {
  if (v.outer == 0 || v.inner == 0) return;  // adds nothing
  launch_partials(dy, nullptr, partial, v, split, s);
  MIRROR_LAUNCH(finish_bias_kernel, v.channels, s, partial, dbias, split.splits, v.channels);
}

}  // namespace mirror::cuda
