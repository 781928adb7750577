// defines: the dropout keep decision, a counter-based hash of (seed, sample_id, element index)
// mapped to a uniform number in [0, 1), and the mask value derived from it.
//
// Note [Dropout by sample id]: the decision is a pure function of the sample's global id, not of
// its position in the batch or of any RNG state, so a sample is masked identically whichever
// replica (and batch slot) holds it, and CPU and GPU draw the same masks. This is what keeps R
// replicas bit-for-bit equivalent to one replica with the whole batch (docs/architecture.md
// invariant 2).
#pragma once

#include <stdint.h>  // NOLINT: fixed-width types usable in device code

#include "math/hd.h"

namespace mirror::math {

/// SplitMix64 finaliser (Steele, Lea, Flood 2014): a bijective 64-bit mix with full avalanche.
MIRROR_HD inline uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

/// The state after absorbing (seed, sample_id): the same for every element of a sample, so a
/// kernel computes it once per sample (dropout_uniform is dropout_uniform_from of it).
MIRROR_HD inline uint64_t dropout_sample_key(uint64_t seed, int64_t sample_id) {
  return splitmix64(splitmix64(seed) ^ static_cast<uint64_t>(sample_id));
}

/// Uniform in [0, 1) with 24 random bits from a sample's key and an element index.
MIRROR_HD inline float dropout_uniform_from(uint64_t sample_key, int64_t index) {
  const uint64_t h = splitmix64(sample_key ^ static_cast<uint64_t>(index));
  return static_cast<float>(h >> 40) * (1.0f / 16777216.0f);
}

/// Uniform in [0, 1) with 24 random bits, so it is exact in float on every platform.
MIRROR_HD inline float dropout_uniform(uint64_t seed, int64_t sample_id, int64_t index) {
  // Chained mixing: each key is absorbed after the previous state was fully avalanched, so
  // (seed, id, index) triples that differ anywhere give unrelated outputs.
  return dropout_uniform_from(dropout_sample_key(seed, sample_id), index);
}

/// True when element `index` of sample `sample_id` is kept; P(keep) = 1 - rate.
MIRROR_HD inline bool dropout_keep(uint64_t seed, int64_t sample_id, int64_t index, float rate) {
  return dropout_uniform(seed, sample_id, index) >= rate;
}

/// The value stored in the dropout mask: 0 for a dropped element, 1/(1-rate) for a kept one
/// (inverted dropout: no rescaling at inference).
template <class T>
MIRROR_HD inline T dropout_scale(uint64_t seed, int64_t sample_id, int64_t index, float rate) {
  return dropout_keep(seed, sample_id, index, rate) ? T(1) / (T(1) - T(rate)) : T(0);
}

}  // namespace mirror::math
