// defines: per-channel sums over a tensor viewed as [outer, channels, inner], split over many
// blocks (Note [Channel reductions]): BatchNorm/LayerNorm statistics (channel_sums) and bias
// gradients (bias_grad). Raw device pointers, enqueued on `s`, launches checked, never
// synchronising.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "mirror/ops.h"

namespace mirror::cuda {

/// How each channel's outer range is cut: `splits` blocks of `per_split` outer rows (the last
/// may hold fewer). The caller provides partials(channels) doubles of device scratch.
struct ChannelSplit {
  std::int64_t splits = 1, per_split = 1;
  std::int64_t partials(std::int64_t channels) const { return 2 * splits * channels; }
};
ChannelSplit channel_split(const ops::ChannelView& v);

/// sums[c] = sum of a[o, c, i], sums[C + c] = sum of a * b, in double; b may equal a.
void channel_sums(const float* a, const float* b, double* partial, double* sums,
                  const ops::ChannelView& v, const ChannelSplit& split, cudaStream_t s);
/// BatchNormalization's statistics (Note [Device batch norm]): stats[c] = sum of x, stats[C + c]
/// = sum of x^2 over the rows of real samples (row o belongs to sample o / (outer / samples); real:
/// weights null or weights[n] > 0), stats[2C] = the element count of one channel over them.
void channel_moments(const float* x, const float* weights, std::int64_t samples, double* partial,
                     double* stats, const ops::ChannelView& v, const ChannelSplit& split,
                     cudaStream_t s);
/// dbias[c] += sum of dy[o, c, i] (summed in double, rounded once).
void bias_grad(const float* dy, float* dbias, double* partial, const ops::ChannelView& v,
               const ChannelSplit& split, cudaStream_t s);

}  // namespace mirror::cuda
