// Normalisation, average pooling, strided block copies and GELU on the CPU, plain loops in
// float32 and float64.
//
// Note [CPU normalisation loops]: oneDNN has batch and layer normalisation primitives, but they
// compute statistics over the local tensor only; cross-replica BatchNorm needs the per-channel
// sums themselves (to all-reduce them between the statistics and the normalisation), which is
// PyTorch's SyncBatchNorm decomposition. So the CPU computes channel_sums (double accumulation,
// one fixed order per channel: Note [Channel sums]) and channel_affine, and the layers combine
// them. Average pooling also uses loops (its TF "exclude padding" count is one line here, and
// pooling is memory-bound next to the convolutions around it).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "cpu/cpu_bf16_store.h"
#include "cpu/cpu_kernels.h"
#include "cpu/cpu_vector_clones.h"
#include "math/gelu.h"
#include "mirror/precision.h"

namespace mirror::cpu {

namespace {

// Note [Channel sums]: BatchNorm's statistics and gradient sums (channel_sums) read every
// activation once per pass, in double. Element i of each of a channel's rows goes to lane
// i % kSumLanes; the lanes are combined pairwise in one fixed order at the end. The order is
// written out here rather than left to the vectoriser (an `omp simd` reduction sums in as many
// lanes as the vector has), so every clone of MIRROR_VECTOR_CALL gives the same bits: for
// float data a product of two floats is exact in double, so FMA contraction changes nothing
// either (double data, used by gradient checks, may differ in the last bit between clones).
// Threads split channels, never a channel: the same bits for any thread count. 32 lanes keep
// enough independent additions in flight (8 and 16 lanes ran no faster than the SSE2 loop);
// one core here, 64 x 16 x 28 x 28 floats: 0.20 ms before, 0.07 ms in the AVX-512 clone,
// 0.11 ms in the AVX2 one, 0.23 ms baseline.
constexpr int kSumLanes = 32;

/// Per channel, the maps of one channel_affine / channel_sums call in the tensors' dtype:
/// out = ka (a' - ca) + kb (b - cb) + k0, then max(out, 0) with `relu`, where a' is a, or
/// (m(b) > 0 ? a : 0) with a ReLU mask m(b) = mka (b - mca) + mk0 (Note [BatchNorm and ReLU],
/// ops.h). A vector is empty when its term is absent. Loops index them by channel.
template <class T>
struct ChannelMaps {
  std::vector<T> ka, ca, kb, cb, k0, mka, mca, mk0;

  ChannelMaps(const ops::ChannelAffine* k, const ops::ReluMask* mask) {
    const auto cast = [](const std::vector<double>& d) {
      std::vector<T> f(d.size());
      for (std::size_t c = 0; c < d.size(); ++c) f[c] = static_cast<T>(d[c]);
      return f;
    };
    if (k != nullptr) {
      ka = cast(k->ka), ca = cast(k->ca), kb = cast(k->kb), cb = cast(k->cb), k0 = cast(k->k0);
    }
    if (mask != nullptr) mka = cast(mask->ka), mca = cast(mask->ca), mk0 = cast(mask->k0);
  }
};

// The element maps, written once for the plain and the blocked loops. This file is built with
// -ffp-contract=off: every clone rounds each product and sum like the baseline loop, the ReLU's
// own forward and backward, and the CUDA kernels (--fmad=false).
template <class T>
inline bool relu_passes(T b, T mka, T mca, T mk0) {
  return mka * (b - mca) + mk0 > T(0);  // the forward's output > 0 (math::Relu)
}

template <class T, bool kB, bool kMasked, bool kRelu>
inline T affine_element(T a, T b, T ka, T ca, T kb, T cb, T k0, T mka, T mca, T mk0) {
  if (kMasked && !relu_passes(b, mka, mca, mk0)) a = T(0);
  T out = ka * (a - ca);
  if (kB) out = out + kb * (b - cb);
  out = out + k0;
  if (kRelu) out = out > T(0) ? out : T(0);
  return out;
}

/// Calls f(std::bool_constant<on>{}).
template <class F>
void with_bool(bool on, F&& f) {
  if (on) {
    f(std::true_type{});
  } else {
    f(std::false_type{});
  }
}

template <class T, bool kMasked>
MIRROR_VECTOR_BODY void channel_sum_lanes(const T* a, const T* b, std::int64_t rows,
                                          std::int64_t stride, std::int64_t n, T mka, T mca,
                                          T mk0, double* sum_a, double* sum_ab) {
  double s1[kSumLanes] = {}, s2[kSumLanes] = {};
  // The mask selects in T, the compare's width (a select into double did not vectorise: 10x).
  const auto add = [&](int l, T va, T vb) {
    const double x = !kMasked || relu_passes(vb, mka, mca, mk0) ? va : T(0);
    s1[l] += x;
    s2[l] += x * static_cast<double>(vb);
  };
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* ra = a + r * stride;
    const T* rb = b + r * stride;
    std::int64_t i = 0;
    for (; i + kSumLanes <= n; i += kSumLanes) {
      for (int l = 0; l < kSumLanes; ++l) add(l, ra[i + l], rb[i + l]);
    }
    for (int l = 0; i + l < n; ++l) add(l, ra[i + l], rb[i + l]);
  }
  for (int width = kSumLanes / 2; width >= 1; width /= 2) {
    for (int l = 0; l < width; ++l) {
      s1[l] += s1[l + width];
      s2[l] += s2[l + width];
    }
  }
  *sum_a = s1[0];
  *sum_ab = s2[0];
}

// A blocked image's group of kBlock channels (Note [Channel view], ops.h): row r of the group is
// `n` positions of kBlock channels each. Channel l's element i goes to lane i % kSumLanes and
// the lanes are combined as above, so every channel gets the bits of channel_sum_lanes over the
// plain image; the kBlock channels advance together, in vectors. Four lanes at a time keep their
// accumulators in registers while they walk their positions (lanes l..l+3 read positions
// l..l+3, then 32 further, ...); a row of one group (at most a few tens of KB) is prefetched in
// order first and stays in cache over the 8 walks. Each lane still adds its own elements in row
// order, i increasing.
constexpr int kLanesAtOnce = 4;

template <class T, int kBlock, bool kMasked>
MIRROR_VECTOR_BODY void blocked_channel_sum_lanes(const T* a, const T* b, std::int64_t rows,
                                                  std::int64_t stride, std::int64_t n,
                                                  const T* mka, const T* mca, const T* mk0,
                                                  double* sum_a, double* sum_ab) {
  constexpr std::int64_t kLine = 64 / sizeof(T);  // elements per cache line
  double s1[kSumLanes][kBlock] = {}, s2[kSumLanes][kBlock] = {};
  T m1[kBlock], m2[kBlock], m3[kBlock];
  for (int c = 0; c < kBlock; ++c) {
    m1[c] = kMasked ? mka[c] : T(0);
    m2[c] = kMasked ? mca[c] : T(0);
    m3[c] = kMasked ? mk0[c] : T(0);
  }
  const auto value = [&](T va, T vb, int c) -> double {
    return !kMasked || relu_passes(vb, m1[c], m2[c], m3[c]) ? va : T(0);
  };
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* ra = a + r * stride;
    const T* rb = b + r * stride;
    // The walks touch a row's lines 2 KB apart, which the hardware prefetchers do not follow.
    for (std::int64_t e = 0; e < n * kBlock; e += kLine) {
      __builtin_prefetch(ra + e, 0, 2);
      if (rb != ra) __builtin_prefetch(rb + e, 0, 2);
    }
    for (int l = 0; l < kSumLanes && l < n; l += kLanesAtOnce) {
      double acc1[kLanesAtOnce][kBlock], acc2[kLanesAtOnce][kBlock];
      for (int q = 0; q < kLanesAtOnce; ++q) {
        for (int c = 0; c < kBlock; ++c) {
          acc1[q][c] = s1[l + q][c];
          acc2[q][c] = s2[l + q][c];
        }
      }
      std::int64_t i = l;
      for (; i + kLanesAtOnce <= n; i += kSumLanes) {
        const T* pa = ra + i * kBlock;
        const T* pb = rb + i * kBlock;
        for (int q = 0; q < kLanesAtOnce; ++q) {
          for (int c = 0; c < kBlock; ++c) {
            const double x = value(pa[q * kBlock + c], pb[q * kBlock + c], c);
            acc1[q][c] += x;
            acc2[q][c] += x * static_cast<double>(pb[q * kBlock + c]);
          }
        }
      }
      for (int q = 0; i + q < n && q < kLanesAtOnce; ++q) {  // the row's last, partial step
        for (int c = 0; c < kBlock; ++c) {
          const double x = value(ra[(i + q) * kBlock + c], rb[(i + q) * kBlock + c], c);
          acc1[q][c] += x;
          acc2[q][c] += x * static_cast<double>(rb[(i + q) * kBlock + c]);
        }
      }
      for (int q = 0; q < kLanesAtOnce; ++q) {
        for (int c = 0; c < kBlock; ++c) {
          s1[l + q][c] = acc1[q][c];
          s2[l + q][c] = acc2[q][c];
        }
      }
    }
  }
  for (int width = kSumLanes / 2; width >= 1; width /= 2) {
    for (int l = 0; l < width; ++l) {
      for (int c = 0; c < kBlock; ++c) {
        s1[l][c] += s1[l + width][c];
        s2[l][c] += s2[l + width][c];
      }
    }
  }
  for (int c = 0; c < kBlock; ++c) {
    sum_a[c] = s1[0][c];
    sum_ab[c] = s2[0][c];
  }
}

/// f(std::integral_constant<int, b>) for the blocks oneDNN uses for float32 images.
template <class F>
void with_channel_block(std::int64_t b, F&& f) {
  switch (b) {
    case 16: return f(std::integral_constant<int, 16>{});
    case 8: return f(std::integral_constant<int, 8>{});
    case 4: return f(std::integral_constant<int, 4>{});
    default:
      throw InvalidArgument("channel view: unsupported image block " + std::to_string(b) +
                            " (4, 8 or 16)");
  }
}

/// channel_sums (mask: Note [BatchNorm and ReLU]) over a plain or blocked view.
template <class T>
std::vector<double> sums(const T* pa, const T* pb, const ops::ChannelView& v,
                         const ops::ReluMask* mask) {
  std::vector<double> out(static_cast<std::size_t>(2 * v.channels), 0.0);
  const ChannelMaps<T> m(nullptr, mask);
  with_bool(mask != nullptr, [&](auto masked) {
    constexpr bool kMasked = decltype(masked)::value;
    if (v.block == 0) {
#pragma omp parallel for schedule(static) if (v.numel() > kParallelGrain)
      for (std::int64_t c = 0; c < v.channels; ++c) {
        const auto k = static_cast<std::size_t>(c);
        MIRROR_VECTOR_CALL(channel_sum_lanes<T, kMasked>(
            pa + c * v.inner, pb + c * v.inner, v.outer, v.channels * v.inner, v.inner,
            kMasked ? m.mka[k] : T(0), kMasked ? m.mca[k] : T(0), kMasked ? m.mk0[k] : T(0),
            &out[k], &out[static_cast<std::size_t>(v.channels) + k]));
      }
      return;
    }
    with_channel_block(v.block, [&](auto block) {
      constexpr int B = decltype(block)::value;
      const std::int64_t groups = v.channels / B;
#pragma omp parallel for schedule(static) if (v.numel() > kParallelGrain)
      for (std::int64_t g = 0; g < groups; ++g) {
        MIRROR_VECTOR_CALL(blocked_channel_sum_lanes<T, B, kMasked>(
            pa + g * v.inner * B, pb + g * v.inner * B, v.outer, v.channels * v.inner, v.inner,
            kMasked ? m.mka.data() + g * B : nullptr, kMasked ? m.mca.data() + g * B : nullptr,
            kMasked ? m.mk0.data() + g * B : nullptr, out.data() + g * B,
            out.data() + v.channels + g * B));
      }
    });
  });
  return out;
}

/// One row of one channel of a plain view: n elements.
template <class T, bool kB, bool kMasked, bool kRelu>
MIRROR_VECTOR_BODY void affine_row(const T* pa, const T* pb, T* py, std::int64_t n, T ka, T ca,
                                   T kb, T cb, T k0, T mka, T mca, T mk0) {
  for (std::int64_t i = 0; i < n; ++i) {
    py[i] = affine_element<T, kB, kMasked, kRelu>(pa[i], kB || kMasked ? pb[i] : T(0), ka, ca, kb,
                                                  cb, k0, mka, mca, mk0);
  }
}

/// The maps of channels c0 .. c0 + B (one group of a blocked view), absent terms zero.
template <class T, int B, bool kB, bool kMasked>
struct GroupMaps {
  T ka[B], ca[B], kb[B], cb[B], k0[B], mka[B], mca[B], mk0[B];
  [[gnu::always_inline]] GroupMaps(const ChannelMaps<T>& m, std::int64_t c0) {
    for (int c = 0; c < B; ++c) {
      const auto k = static_cast<std::size_t>(c0 + c);
      ka[c] = m.ka[k], ca[c] = m.ca[k], k0[c] = m.k0[k];
      kb[c] = kB ? m.kb[k] : T(0), cb[c] = kB ? m.cb[k] : T(0);
      mka[c] = kMasked ? m.mka[k] : T(0), mca[c] = kMasked ? m.mca[k] : T(0);
      mk0[c] = kMasked ? m.mk0[k] : T(0);
    }
  }
};

/// One row of a blocked view's group: n positions of B channels.
template <class T, int B, bool kB, bool kMasked, bool kRelu>
MIRROR_VECTOR_BODY void blocked_affine_row(const T* pa, const T* pb, T* py, std::int64_t n,
                                           const ChannelMaps<T>& m, std::int64_t c0) {
  const GroupMaps<T, B, kB, kMasked> g(m, c0);
  for (std::int64_t i = 0; i < n * B; i += B) {
    for (int c = 0; c < B; ++c) {
      py[i + c] = affine_element<T, kB, kMasked, kRelu>(pa[i + c], kB || kMasked ? pb[i + c] : T(0),
                                                        g.ka[c], g.ca[c], g.kb[c], g.cb[c], g.k0[c],
                                                        g.mka[c], g.mca[c], g.mk0[c]);
    }
  }
}

#if MIRROR_BF16_STORE
/// Note [Gradients as convolution operands] (mirror/ops.h): blocked_affine_row for a
/// float32 group of 16 channels, each position's results rounded to bfloat16 in registers (py:
/// the row of a bfloat16 blocked image). Only called where the CPU has AVX-512 BF16.
template <bool kB, bool kMasked, bool kRelu>
[[MIRROR_BF16_TARGET]] void blocked_affine_row_operand16(const float* pa, const float* pb,
                                                         std::uint16_t* py, std::int64_t n,
                                                         const ChannelMaps<float>& m,
                                                         std::int64_t c0) {
  constexpr int B = 16;
  const GroupMaps<float, B, kB, kMasked> g(m, c0);
  alignas(64) float lanes[B];
  for (std::int64_t i = 0; i < n * B; i += B) {
    for (int c = 0; c < B; ++c) {
      lanes[c] = affine_element<float, kB, kMasked, kRelu>(
          pa[i + c], kB || kMasked ? pb[i + c] : 0.0f, g.ka[c], g.ca[c], g.kb[c], g.cb[c], g.k0[c],
          g.mka[c], g.mca[c], g.mk0[c]);
    }
    store_bf16x16(py + i, lanes);
  }
}
#endif

/// channel_affine (k.relu and mask: Note [BatchNorm and ReLU]) over a plain or blocked view.
template <class T>
void affine(const T* pa, const T* pb, T* py, const ops::ChannelAffine& k,
            const ops::ReluMask* mask, const ops::ChannelView& v) {
  const ChannelMaps<T> m(&k, mask);
  with_bool(!k.kb.empty(), [&](auto with_b) {
    with_bool(mask != nullptr, [&](auto masked) {
      with_bool(k.relu, [&](auto relu) {
        constexpr bool kB = decltype(with_b)::value, kMasked = decltype(masked)::value;
        constexpr bool kRelu = decltype(relu)::value;
        if (v.block == 0) {
          const std::int64_t rows = v.outer * v.channels;
#pragma omp parallel for schedule(static) if (v.numel() > kParallelGrain)
          for (std::int64_t r = 0; r < rows; ++r) {
            const auto c = static_cast<std::size_t>(r % v.channels);
            const std::int64_t at = r * v.inner;
            MIRROR_VECTOR_CALL(affine_row<T, kB, kMasked, kRelu>(
                pa + at, pb != nullptr ? pb + at : nullptr, py + at, v.inner, m.ka[c], m.ca[c],
                kB ? m.kb[c] : T(0), kB ? m.cb[c] : T(0), m.k0[c], kMasked ? m.mka[c] : T(0),
                kMasked ? m.mca[c] : T(0), kMasked ? m.mk0[c] : T(0)));
          }
          return;
        }
        with_channel_block(v.block, [&](auto block) {
          constexpr int B = decltype(block)::value;
          const std::int64_t groups = v.channels / B, rows = v.outer * groups;
#pragma omp parallel for schedule(static) if (v.numel() > kParallelGrain)
          for (std::int64_t r = 0; r < rows; ++r) {
            const std::int64_t at = r * v.inner * B;
            MIRROR_VECTOR_CALL(blocked_affine_row<T, B, kB, kMasked, kRelu>(
                pa + at, pb != nullptr ? pb + at : nullptr, py + at, v.inner, m, (r % groups) * B));
          }
        });
      });
    });
  });
}

}  // namespace

std::vector<double> CpuKernels::channel_sums(const Tensor& a, const Tensor& b,
                                             const ops::ChannelView& v) {
  return with_float(a, "channel_sums", [&](auto t) {
    using T = decltype(t);
    return sums<T>(a.data<T>(), b.data<T>(), v, nullptr);
  });
}

std::vector<double> CpuKernels::channel_sums_masked(const Tensor& a, const Tensor& b,
                                                    const ops::ReluMask& mask,
                                                    const ops::ChannelView& v) {
  return with_float(a, "channel_sums", [&](auto t) {
    using T = decltype(t);
    return sums<T>(a.data<T>(), b.data<T>(), v, &mask);
  });
}

Tensor CpuKernels::channel_affine(const Tensor& a, const Tensor& b, const ops::ChannelAffine& k,
                                  const ops::ChannelView& v) {
  return with_float(a, "channel_affine", [&](auto t) {
    using T = decltype(t);
    Tensor y = Tensor::empty(a.shape(), a.dtype(), a.device());
    affine<T>(a.data<T>(), k.kb.empty() ? nullptr : b.data<T>(), y.data<T>(), k, nullptr, v);
    return y;
  });
}

Tensor CpuKernels::channel_affine_operand(const Tensor& a, const Tensor& b,
                                          const ops::ChannelAffine& k, const ops::ReluMask* mask,
                                          const ops::ChannelView& v) {
#if MIRROR_BF16_STORE
  // Only what conv2d_operand would round: float32 math in bfloat16 mode, nChw16c.
  if (math_mode() != MathMode::kBFloat16 || a.dtype() != DType::kFloat32 || v.block != 16 ||
      a.rank() != 5 || !cpu_has_bf16()) {
    return {};
  }
  Tensor y = Tensor::empty(a.shape(), DType::kBFloat16, a.device());
  const ChannelMaps<float> m(&k, mask);
  const float* pa = a.data<float>();
  const float* pb = k.kb.empty() && mask == nullptr ? nullptr : b.data<float>();
  auto* py = static_cast<std::uint16_t*>(y.raw_data());
  with_bool(!k.kb.empty(), [&](auto with_b) {
    with_bool(mask != nullptr, [&](auto masked) {
      with_bool(k.relu, [&](auto relu) {
        constexpr bool kB = decltype(with_b)::value, kMasked = decltype(masked)::value;
        constexpr bool kRelu = decltype(relu)::value;
        const std::int64_t groups = v.channels / 16, rows = v.outer * groups;
#pragma omp parallel for schedule(static) if (v.numel() > kParallelGrain)
        for (std::int64_t r = 0; r < rows; ++r) {
          const std::int64_t at = r * v.inner * 16;
          blocked_affine_row_operand16<kB, kMasked, kRelu>(
              pa + at, pb != nullptr ? pb + at : nullptr, py + at, v.inner, m, (r % groups) * 16);
        }
      });
    });
  });
  return y;
#else
  return {};
#endif
}

Tensor CpuKernels::channel_affine_masked(const Tensor& a, const Tensor& b,
                                         const ops::ChannelAffine& k, const ops::ReluMask& mask,
                                         const ops::ChannelView& v) {
  return with_float(a, "channel_affine", [&](auto t) {
    using T = decltype(t);
    Tensor y = Tensor::empty(a.shape(), a.dtype(), a.device());
    affine<T>(a.data<T>(), b.data<T>(), y.data<T>(), k, &mask, v);
    return y;
  });
}

namespace {

/// The window of output (oh, ow) clipped to the input: rows [h0, h1), columns [w0, w1).
struct Window {
  std::int64_t h0, h1, w0, w1;
  Window(const ops::Pool2DGeometry& g, std::int64_t h, std::int64_t w, std::int64_t oh,
         std::int64_t ow) {
    h0 = oh * g.stride_h - g.pad_top;
    w0 = ow * g.stride_w - g.pad_left;
    h1 = std::min(h0 + g.k_h, h);
    w1 = std::min(w0 + g.k_w, w);
    h0 = std::max<std::int64_t>(h0, 0);
    w0 = std::max<std::int64_t>(w0, 0);
  }
  std::int64_t count() const { return (h1 - h0) * (w1 - w0); }
};

}  // namespace

Tensor CpuKernels::avgpool2d_forward(const Tensor& x, const ops::Pool2DGeometry& g) {
  return with_float(x, "avgpool2d_forward", [&](auto t) {
    using T = decltype(t);
    const std::int64_t planes = x.dim(0) * x.dim(1), h = x.dim(2), w = x.dim(3);
    const std::int64_t oh = g.out_h(static_cast<int>(h)), ow = g.out_w(static_cast<int>(w));
    Tensor y = Tensor::empty({x.dim(0), x.dim(1), oh, ow}, x.dtype(), x.device());
    const T* px = x.data<T>();
    T* py = y.data<T>();
#pragma omp parallel for schedule(static) if (x.numel() > kParallelGrain)
    for (std::int64_t p = 0; p < planes; ++p) {
      const T* plane = px + p * h * w;
      for (std::int64_t i = 0; i < oh; ++i) {
        for (std::int64_t j = 0; j < ow; ++j) {
          const Window win(g, h, w, i, j);
          double s = 0;
          for (std::int64_t r = win.h0; r < win.h1; ++r) {
            for (std::int64_t c = win.w0; c < win.w1; ++c) s += plane[r * w + c];
          }
          py[(p * oh + i) * ow + j] = static_cast<T>(s / static_cast<double>(win.count()));
        }
      }
    }
    return y;
  });
}

Tensor CpuKernels::avgpool2d_backward(const Tensor& dy, const Shape& x_shape,
                                      const ops::Pool2DGeometry& g) {
  return with_float(dy, "avgpool2d_backward", [&](auto t) {
    using T = decltype(t);
    const std::int64_t planes = x_shape[0] * x_shape[1], h = x_shape[2], w = x_shape[3];
    const std::int64_t oh = dy.dim(2), ow = dy.dim(3);
    Tensor dx = Tensor::zeros(x_shape, dy.dtype(), dy.device());
    const T* pdy = dy.data<T>();
    T* pdx = dx.data<T>();
#pragma omp parallel for schedule(static) if (dx.numel() > kParallelGrain)
    for (std::int64_t p = 0; p < planes; ++p) {
      T* plane = pdx + p * h * w;
      for (std::int64_t i = 0; i < oh; ++i) {
        for (std::int64_t j = 0; j < ow; ++j) {
          const Window win(g, h, w, i, j);
          const T share = pdy[(p * oh + i) * ow + j] / static_cast<T>(win.count());
          for (std::int64_t r = win.h0; r < win.h1; ++r) {
            for (std::int64_t c = win.w0; c < win.w1; ++c) plane[r * w + c] += share;
          }
        }
      }
    }
    return dx;
  });
}

void CpuKernels::copy_block(Tensor& dst, const Tensor& src, const ops::BlockCopy& b) {
  const std::size_t es = dtype_size(dst.dtype());
  auto* d = static_cast<unsigned char*>(dst.raw_data());
  const auto* s = static_cast<const unsigned char*>(src.raw_data());
  // The innermost dimension is usually contiguous on both sides: one memcpy per row.
  const bool rows = b.dst_strides[3] == 1 && b.src_strides[3] == 1;
  const std::int64_t outer = b.dims[0] * b.dims[1] * b.dims[2];
#pragma omp parallel for schedule(static) if (outer * b.dims[3] > kParallelGrain)
  for (std::int64_t r = 0; r < outer; ++r) {
    const std::int64_t i2 = r % b.dims[2], i1 = (r / b.dims[2]) % b.dims[1];
    const std::int64_t i0 = r / (b.dims[2] * b.dims[1]);
    const std::int64_t dbase =
        b.dst_offset + i0 * b.dst_strides[0] + i1 * b.dst_strides[1] + i2 * b.dst_strides[2];
    const std::int64_t sbase =
        b.src_offset + i0 * b.src_strides[0] + i1 * b.src_strides[1] + i2 * b.src_strides[2];
    if (rows) {
      std::memcpy(d + dbase * es, s + sbase * es, static_cast<std::size_t>(b.dims[3]) * es);
      continue;
    }
    for (std::int64_t i3 = 0; i3 < b.dims[3]; ++i3) {
      std::memcpy(d + (dbase + i3 * b.dst_strides[3]) * es,
                  s + (sbase + i3 * b.src_strides[3]) * es, es);
    }
  }
}

Tensor CpuKernels::gelu_forward(const Tensor& x) {
  return with_float(x, "gelu_forward", [&](auto t) {
    using T = decltype(t);
    Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
    const T* px = x.data<T>();
    T* py = y.data<T>();
    const std::int64_t n = x.numel();
#pragma omp parallel for simd schedule(static) if (n > kParallelGrain)
    for (std::int64_t i = 0; i < n; ++i) py[i] = math::Gelu::forward(px[i]);
    return y;
  });
}

Tensor CpuKernels::gelu_backward(const Tensor& x, const Tensor& dy) {
  return with_float(x, "gelu_backward", [&](auto t) {
    using T = decltype(t);
    Tensor dx = Tensor::empty(x.shape(), x.dtype(), x.device());
    const T* px = x.data<T>();
    const T* pdy = dy.data<T>();
    T* pdx = dx.data<T>();
    const std::int64_t n = x.numel();
#pragma omp parallel for simd schedule(static) if (n > kParallelGrain)
    for (std::int64_t i = 0; i < n; ++i) pdx[i] = math::Gelu::backward(px[i], pdy[i]);
    return dx;
  });
}

}  // namespace mirror::cpu
