// Max pooling with plain loops, float32 and float64 alike.
//
// Note [Max-pool ties]: ops.h promises that the FIRST maximum in row-major window order gets
// the gradient and that padded positions never win. oneDNN's pooling does not document a tie
// rule (its backward follows a workspace whose choice depends on the implementation picked), so
// the CPU backend uses its own loops: the window scan below uses a strict '>' and visits only
// in-bounds positions. Pooling is memory-bound and cheap next to the convolutions around it.
//
// Note [ReLU through max pool]: a max pool reading a ReLU's output routes each window's gradient
// to a position it reads anyway, so its backward can apply the ReLU's mask there (y > 0, as
// math::Relu::backward) and spare the ReLU a pass over the whole input gradient. `relu` does
// that: dx is what relu_backward(x, pool_backward(...)) gives, bit for bit.
//
// The common 2x2 / stride 2 / unpadded window has its own branch-free loops (Pool2x2) that the
// compiler vectorizes: the same values and the same gradient routing as the general scan (the
// forward makes the scan's comparisons; the backward picks the first element equal to the scan's
// maximum, which is the scan's winner), 5-25x faster on the CNN's shapes.
//
// The 2x2 backward also writes its input gradient as a bfloat16 convolution operand (Note
// [Gradients as convolution operands], mirror/ops.h): each window's float32 gradient is rounded
// in registers (store_bf16x16, cpu_bf16_store.h).

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "cpu/cpu_bf16_store.h"
#include "cpu/cpu_kernels.h"
#include "cpu/cpu_vector_clones.h"
#include "mirror/precision.h"

namespace mirror::cpu {
namespace {

struct PoolDims {
  std::int64_t n, c, h, w, oh, ow;
  ops::Pool2DGeometry g;
  PoolDims(const Shape& x, const ops::Pool2DGeometry& geo)
      : n(x[0]), c(x[1]), h(x[2]), w(x[3]), g(geo) {
    oh = g.out_h(static_cast<int>(h));
    ow = g.out_w(static_cast<int>(w));
  }
};

/// Offset (within the input plane) of the first maximum of window (oh, ow). A plane holds `b`
/// channels side by side, position p of lane l at p * b + l: b = 1 for plain NCHW, the block
/// for a blocked image (Note [Blocked images], ops.h).
template <class T>
std::int64_t window_argmax(const T* plane, const PoolDims& d, std::int64_t oh, std::int64_t ow,
                           std::int64_t b = 1, std::int64_t l = 0) {
  const std::int64_t h0 = oh * d.g.stride_h - d.g.pad_top, w0 = ow * d.g.stride_w - d.g.pad_left;
  std::int64_t best = -1;
  for (std::int64_t i = std::max<std::int64_t>(h0, 0); i < std::min(h0 + d.g.k_h, d.h); ++i) {
    for (std::int64_t j = std::max<std::int64_t>(w0, 0); j < std::min(w0 + d.g.k_w, d.w); ++j) {
      const std::int64_t at = (i * d.w + j) * b + l;
      if (best < 0 || plane[at] > plane[best]) best = at;
    }
  }
  return best;  // >= 0: padding < kernel (checked) puts at least one real position in a window
}

/// One unpadded 2x2 window's gradient, b lanes (one for a plain image, the block for a blocked
/// one): r0 and r1 point at its top-left position in the input's two rows, src at its lanes of
/// dy; d0..d3 receive the gradient of its four positions in row-major order, dy at the first
/// maximum (0 + dy: the '+' keeps the general path's -0 -> +0) and 0 elsewhere. `relu`: also 0
/// where the maximum is not positive (Note [ReLU through max pool]).
template <class T, int B>
[[gnu::always_inline]] inline void window2x2_backward(const T* r0, const T* r1, const T* src, T* d0,
                                                      T* d1, T* d2, T* d3, std::int64_t runtime_b,
                                                      bool relu) {
  const std::int64_t b = B > 0 ? B : runtime_b;
  for (std::int64_t l = 0; l < b; ++l) {
    const T v0 = r0[l], v1 = r0[b + l], v2 = r1[l], v3 = r1[b + l];
    T m = v0;  // the forward's scan
    m = v1 > m ? v1 : m;
    m = v2 > m ? v2 : m;
    m = v3 > m ? v3 : m;
    // The scan's winner is the first element equal to m (every earlier one is smaller), or v0
    // when none is (m is NaN only when v0 is). Masks, not branches: this vectorizes. Bitwise
    // '&'/'|' on purpose: '&&' would be control flow.
    const bool e0 = v0 == m, e1 = v1 == m, e2 = v2 == m, e3 = v3 == m;
    const bool to1 = !e0 & e1, to2 = !e0 & !e1 & e2, to3 = !e0 & !e1 & !e2 & e3;
    const T v = relu && !(m > T(0)) ? T(0) : T(0) + src[l];
    d0[l] = !(to1 | to2 | to3) ? v : T(0);
    d1[l] = to1 ? v : T(0);
    d2[l] = to2 ? v : T(0);
    d3[l] = to3 ? v : T(0);
  }
}

/// The 2x2 / stride-2 / unpadded case. Windows tile the input without overlap (an odd last row
/// or column belongs to no window), so the backward pass writes every dx element exactly once
/// and needs no zero fill.
struct Pool2x2 {
  static bool applies(const ops::Pool2DGeometry& g) {
    return g.k_h == 2 && g.k_w == 2 && g.stride_h == 2 && g.stride_w == 2 && g.pad_top == 0 &&
           g.pad_bottom == 0 && g.pad_left == 0 && g.pad_right == 0;
  }

  template <class T>
  static void forward(const T* plane, T* out, const PoolDims& d) {
    for (std::int64_t oh = 0; oh < d.oh; ++oh) {
      const T* r0 = plane + 2 * oh * d.w;
      const T* r1 = r0 + d.w;
      T* o = out + oh * d.ow;
      for (std::int64_t ow = 0; ow < d.ow; ++ow) {
        T best = r0[2 * ow];
        best = r0[2 * ow + 1] > best ? r0[2 * ow + 1] : best;
        best = r1[2 * ow] > best ? r1[2 * ow] : best;
        best = r1[2 * ow + 1] > best ? r1[2 * ow + 1] : best;
        o[ow] = best;
      }
    }
  }

  /// window2x2_backward over a plain plane.
  template <class T>
  static void backward(const T* plane, const T* grad, T* out, const PoolDims& d, bool relu) {
    for (std::int64_t oh = 0; oh < d.oh; ++oh) {
      const T* r0 = plane + 2 * oh * d.w;
      const T* r1 = r0 + d.w;
      T* o0 = out + 2 * oh * d.w;
      T* o1 = o0 + d.w;
      for (std::int64_t ow = 0; ow < d.ow; ++ow) {
        const std::int64_t j = 2 * ow;
        window2x2_backward<T, 1>(r0 + j, r1 + j, grad + oh * d.ow + ow, o0 + j, o0 + j + 1, o1 + j,
                                 o1 + j + 1, 1, relu);
      }
      for (std::int64_t j = 2 * d.ow; j < d.w; ++j) o0[j] = o1[j] = T(0);  // odd last column
    }
    for (std::int64_t i = 2 * d.oh * d.w; i < d.h * d.w; ++i) out[i] = T(0);  // odd last row
  }
};

/// Note [Blocked images] (ops.h): the same windows, tie rule and gradient routing over a blocked
/// image [N, C/b, H, W, b]. A "plane" is then b channels side by side (position p of lane l at
/// p * b + l), and the loops over lanes vectorize when B, the lane count, is a constant (B = 0:
/// `runtime_b` lanes), in the CPU's widest vectors (MIRROR_VECTOR_CALL; max and compare give
/// the same bits in every clone). Both sides are blocked; a plain pooled side is converted around
/// them.
template <class T, int B>
MIRROR_VECTOR_BODY void blocked_forward(const T* __restrict plane, T* __restrict out,
                                        const PoolDims& d, std::int64_t runtime_b) {
  const std::int64_t b = B > 0 ? B : runtime_b;
  if (Pool2x2::applies(d.g)) {
    for (std::int64_t oh = 0; oh < d.oh; ++oh) {
      for (std::int64_t ow = 0; ow < d.ow; ++ow) {
        const T* r0 = plane + (2 * oh * d.w + 2 * ow) * b;
        const T* r1 = r0 + d.w * b;
        T* dst = out + (oh * d.ow + ow) * b;
        for (std::int64_t l = 0; l < b; ++l) {
          T best = r0[l];
          best = r0[b + l] > best ? r0[b + l] : best;
          best = r1[l] > best ? r1[l] : best;
          best = r1[b + l] > best ? r1[b + l] : best;
          dst[l] = best;
        }
      }
    }
    return;
  }
  for (std::int64_t oh = 0; oh < d.oh; ++oh) {
    for (std::int64_t ow = 0; ow < d.ow; ++ow) {
      for (std::int64_t l = 0; l < b; ++l) {
        const std::int64_t best = window_argmax(plane, d, oh, ow, b, l);
        out[(oh * d.ow + ow) * b + l] = plane[best];
      }
    }
  }
}

template <class T, int B>
MIRROR_VECTOR_BODY void blocked_backward(const T* __restrict plane, const T* __restrict grad,
                                         T* __restrict out, const PoolDims& d,
                                         std::int64_t runtime_b, bool relu) {
  const std::int64_t b = B > 0 ? B : runtime_b;
  if (Pool2x2::applies(d.g)) {
    for (std::int64_t oh = 0; oh < d.oh; ++oh) {
      for (std::int64_t ow = 0; ow < d.ow; ++ow) {
        const std::int64_t at = (2 * oh * d.w + 2 * ow) * b;
        T* o0 = out + at;
        T* o1 = o0 + d.w * b;
        window2x2_backward<T, B>(plane + at, plane + at + d.w * b, grad + (oh * d.ow + ow) * b, o0,
                                 o0 + b, o1, o1 + b, b, relu);
      }
      for (std::int64_t r = 2 * oh; r < 2 * oh + 2; ++r) {  // odd last column
        for (std::int64_t i = (r * d.w + 2 * d.ow) * b; i < (r + 1) * d.w * b; ++i) out[i] = T(0);
      }
    }
    for (std::int64_t i = 2 * d.oh * d.w * b; i < d.h * d.w * b; ++i) out[i] = T(0);  // odd row
    return;
  }
  for (std::int64_t i = 0; i < d.h * d.w * b; ++i) out[i] = T(0);
  for (std::int64_t oh = 0; oh < d.oh; ++oh) {
    for (std::int64_t ow = 0; ow < d.ow; ++ow) {
      for (std::int64_t l = 0; l < b; ++l) {
        const std::int64_t best = window_argmax(plane, d, oh, ow, b, l);
        if (!relu || plane[best] > T(0)) out[best] += grad[(oh * d.ow + ow) * b + l];
      }
    }
  }
}

/// Calls f(std::integral_constant<int, B>) with B = b for the common blocks, 0 otherwise.
template <class F>
void with_block(std::int64_t b, F&& f) {
  if (b == 16) return f(std::integral_constant<int, 16>{});
  if (b == 8) return f(std::integral_constant<int, 8>{});
  f(std::integral_constant<int, 0>{});
}

/// A plain NCHW float32 tensor in the blocked layout with block b (image_to_plain's inverse).
Tensor blocked_copy(const Tensor& x, std::int64_t b) {
  const Shape& s = x.shape();
  Tensor y = Tensor::empty({s[0], s[1] / b, s[2], s[3], b}, x.dtype(), x.device());
  const std::int64_t hw = s[2] * s[3], planes = s[0] * (s[1] / b);
  const float* xp = x.data<float>();
  float* yp = y.data<float>();
#pragma omp parallel for schedule(static) if (x.numel() > kParallelGrain)
  for (std::int64_t p = 0; p < planes; ++p) {
    for (std::int64_t q = 0; q < hw; ++q) {
      for (std::int64_t l = 0; l < b; ++l) yp[(p * hw + q) * b + l] = xp[(p * b + l) * hw + q];
    }
  }
  return y;
}

#if MIRROR_BF16_STORE
/// Note [Gradients as convolution operands] (mirror/ops.h): the 2x2 backward over one plane of 16
/// channels, each window's gradient rounded to bfloat16 in registers (out: the plane of a
/// bfloat16 blocked image). Only called where the CPU has AVX-512 BF16.
[[MIRROR_BF16_TARGET]] void blocked_backward_operand16(const float* __restrict plane,
                                                       const float* __restrict grad,
                                                       std::uint16_t* __restrict out,
                                                       const PoolDims& d, bool relu) {
  constexpr std::int64_t b = 16;
  alignas(64) float lanes[4][b];
  for (std::int64_t oh = 0; oh < d.oh; ++oh) {
    for (std::int64_t ow = 0; ow < d.ow; ++ow) {
      const std::int64_t at = (2 * oh * d.w + 2 * ow) * b;
      window2x2_backward<float, b>(plane + at, plane + at + d.w * b, grad + (oh * d.ow + ow) * b,
                                   lanes[0], lanes[1], lanes[2], lanes[3], b, relu);
      store_bf16x16(out + at, lanes[0]);
      store_bf16x16(out + at + b, lanes[1]);
      store_bf16x16(out + at + d.w * b, lanes[2]);
      store_bf16x16(out + at + d.w * b + b, lanes[3]);
    }
    for (std::int64_t r = 2 * oh; r < 2 * oh + 2; ++r) {  // odd last column: bfloat16 +0
      std::fill(out + (r * d.w + 2 * d.ow) * b, out + (r + 1) * d.w * b, std::uint16_t{0});
    }
  }
  std::fill(out + 2 * d.oh * d.w * b, out + d.h * d.w * b, std::uint16_t{0});  // odd last row
}
#endif

/// x's pooled gradient dy, checked against x and blocked like x (block b).
Tensor blocked_pool_grad(const Tensor& x, const Tensor& dy, const PoolDims& d, std::int64_t b) {
  const Shape dys = ops::image_shape(dy);
  const std::int64_t dyb = ops::image_block(dy);
  MIRROR_CHECK(
      dys.size() == 4 && dys[0] == d.n && dys[1] == d.c && dys[2] == d.oh && dys[3] == d.ow &&
          x.dtype() == DType::kFloat32 && dy.dtype() == x.dtype() && (dyb == 0 || dyb == b),
      InvalidArgument,
      "maxpool2d_backward: dy " + dy.str() + " does not match the pooled shape of x " + x.str());
  return dyb == 0 ? blocked_copy(dy, b) : dy;
}

}  // namespace

Tensor CpuKernels::maxpool2d_backward_operand(const Tensor& x, const Tensor& y, const Tensor& dy,
                                              const ops::Pool2DGeometry& g, bool relu) {
#if MIRROR_BF16_STORE
  // The operand conv2d_operand would make: float32 math in bfloat16 mode, nChw16c.
  constexpr std::int64_t b = 16;
  if (math_mode() != MathMode::kBFloat16 || x.dtype() != DType::kFloat32 ||
      ops::image_block(x) != b || !Pool2x2::applies(g) || !cpu_has_bf16()) {
    return {};
  }
  const PoolDims d(ops::image_shape(x), g);
  const Tensor grad = blocked_pool_grad(x, dy, d, b);
  Tensor dx = Tensor::empty(x.shape(), DType::kBFloat16, x.device());
  const float* xp = x.data<float>();
  const float* gp = grad.data<float>();
  auto* dxp = static_cast<std::uint16_t*>(dx.raw_data());
  const std::int64_t planes = d.n * (d.c / b);
#pragma omp parallel for schedule(static) if (x.numel() > kParallelGrain)
  for (std::int64_t p = 0; p < planes; ++p) {
    blocked_backward_operand16(xp + p * d.h * d.w * b, gp + p * d.oh * d.ow * b,
                               dxp + p * d.h * d.w * b, d, relu);
  }
  return dx;
#else
  return {};
#endif
}

Tensor CpuKernels::maxpool2d_forward_blocked(const Tensor& x, const ops::Pool2DGeometry& g,
                                             bool blocked_out) {
  const std::int64_t b = ops::image_block(x);
  if (b == 0) return maxpool2d_forward(x, g);
  const PoolDims d(ops::image_shape(x), g);
  const std::int64_t blocks = d.c / b;
  MIRROR_CHECK(x.dtype() == DType::kFloat32, InvalidArgument,
               "maxpool2d_forward: blocked images are float32, got " + x.str());
  Tensor y = Tensor::empty({d.n, blocks, d.oh, d.ow, b}, x.dtype(), x.device());
  const float* xp = x.data<float>();
  float* yp = y.data<float>();
  with_block(b, [&](auto block) {
    constexpr int B = decltype(block)::value;
#pragma omp parallel for schedule(static) if (x.numel() > kParallelGrain)
    for (std::int64_t p = 0; p < d.n * blocks; ++p) {
      MIRROR_VECTOR_CALL(
          blocked_forward<float, B>(xp + p * d.h * d.w * b, yp + p * d.oh * d.ow * b, d, b));
    }
  });
  // A plain output (for a reader that takes no blocked input) is a quarter of x: cheap to convert.
  return blocked_out ? y : image_to_plain(y);
}

Tensor CpuKernels::image_to_plain(const Tensor& x) {
  const std::int64_t b = ops::image_block(x);
  if (b == 0) return x;
  const Shape s = ops::image_shape(x);
  MIRROR_CHECK(x.dtype() == DType::kFloat32, InvalidArgument,
               "plain_image: blocked images are float32, got " + x.str());
  Tensor y = Tensor::empty(s, x.dtype(), x.device());
  const std::int64_t hw = s[2] * s[3], planes = s[0] * (s[1] / b);
  const float* xp = x.data<float>();
  float* yp = y.data<float>();
#pragma omp parallel for schedule(static) if (x.numel() > kParallelGrain)
  for (std::int64_t p = 0; p < planes; ++p) {
    for (std::int64_t l = 0; l < b; ++l) {
      for (std::int64_t q = 0; q < hw; ++q) yp[(p * b + l) * hw + q] = xp[(p * hw + q) * b + l];
    }
  }
  return y;
}

Tensor CpuKernels::image_to_blocked(const Tensor& x, std::int64_t block) {
  MIRROR_CHECK(x.dtype() == DType::kFloat32, InvalidArgument,
               "blocked_image: blocked images are float32, got " + x.str());
  return blocked_copy(x, block);
}

Tensor CpuKernels::maxpool2d_forward(const Tensor& x, const ops::Pool2DGeometry& g) {
  const PoolDims d(x.shape(), g);
  return with_float(x, "maxpool2d_forward", [&](auto t) -> Tensor {
    using T = decltype(t);
    Tensor y = Tensor::empty({d.n, d.c, d.oh, d.ow}, x.dtype(), x.device());
    const T* xp = x.data<T>();
    T* yp = y.data<T>();
    const bool fast = Pool2x2::applies(g);
#pragma omp parallel for schedule(static) if (x.numel() > kParallelGrain)
    for (std::int64_t p = 0; p < d.n * d.c; ++p) {
      const T* plane = xp + p * d.h * d.w;
      T* out = yp + p * d.oh * d.ow;
      if (fast) {
        Pool2x2::forward(plane, out, d);
        continue;
      }
      for (std::int64_t oh = 0; oh < d.oh; ++oh) {
        for (std::int64_t ow = 0; ow < d.ow; ++ow) {
          out[oh * d.ow + ow] = plane[window_argmax(plane, d, oh, ow)];
        }
      }
    }
    return y;
  });
}

Tensor CpuKernels::maxpool2d_backward(const Tensor& x, const Tensor& y, const Tensor& dy,
                                      const ops::Pool2DGeometry& g) {
  return pool_backward(x, y, dy, g, false);
}

Tensor CpuKernels::maxpool2d_backward_relu(const Tensor& x, const Tensor& y, const Tensor& dy,
                                           const ops::Pool2DGeometry& g) {
  return pool_backward(x, y, dy, g, true);
}

Tensor CpuKernels::pool_backward(const Tensor& x, const Tensor& y, const Tensor& dy,
                                 const ops::Pool2DGeometry& g, bool relu) {
  if (const std::int64_t b = ops::image_block(x); b != 0) {
    const PoolDims d(ops::image_shape(x), g);
    const Tensor grad = blocked_pool_grad(x, dy, d, b);
    const std::int64_t blocks = d.c / b;
    Tensor dx = Tensor::empty(x.shape(), x.dtype(), x.device());
    const float* xp = x.data<float>();
    const float* gp = grad.data<float>();
    float* dxp = dx.data<float>();
    with_block(b, [&](auto block) {
      constexpr int B = decltype(block)::value;
      // Each plane (b channels) is owned by one thread: overlapping windows are safe.
#pragma omp parallel for schedule(static) if (x.numel() > kParallelGrain)
      for (std::int64_t p = 0; p < d.n * blocks; ++p) {
        MIRROR_VECTOR_CALL(blocked_backward<float, B>(xp + p * d.h * d.w * b,
                                                      gp + p * d.oh * d.ow * b,
                                                      dxp + p * d.h * d.w * b, d, b, relu));
      }
    });
    return dx;
  }
  const PoolDims d(x.shape(), g);
  MIRROR_CHECK(
      x.rank() == 4 && dy.rank() == 4 && dy.dim(0) == d.n && dy.dim(1) == d.c &&
          dy.dim(2) == d.oh && dy.dim(3) == d.ow && x.dtype() == dy.dtype(),
      InvalidArgument,
      "maxpool2d_backward: dy " + dy.str() + " does not match the pooled shape of x " + x.str());
  if (x.dtype() == DType::kFloat32 && Pool2x2::applies(g) && d.c % 8 == 0) {
    // The plain 2x2 loop stays scalar (its windows' pairs are strided); the blocked loops
    // vectorize over channels. So a plain float32 image with 8k channels goes through them,
    // converted there and back: the same windows and tie rule, the same bits (the CNN's first
    // pool under --images plain: 4.8 ms before, 2.7 ms with the two conversions).
    const Tensor blocked = blocked_copy(x, d.c % 16 == 0 ? 16 : 8);
    return image_to_plain(pool_backward(blocked, y, dy, g, relu));
  }
  return with_float(x, "maxpool2d_backward", [&](auto t) -> Tensor {
    using T = decltype(t);
    const bool fast = Pool2x2::applies(g);
    Tensor dx = fast ? Tensor::empty(x.shape(), x.dtype(), x.device())
                     : Tensor::zeros(x.shape(), x.dtype(), x.device());
    const T* xp = x.data<T>();
    const T* dyp = dy.data<T>();
    T* dxp = dx.data<T>();
    // The argmax is recomputed from x (not matched against y) so the tie rule is the forward's
    // by construction. Each plane is owned by one thread: overlapping windows are safe.
#pragma omp parallel for schedule(static) if (x.numel() > kParallelGrain)
    for (std::int64_t p = 0; p < d.n * d.c; ++p) {
      const T* plane = xp + p * d.h * d.w;
      const T* grad = dyp + p * d.oh * d.ow;
      T* out = dxp + p * d.h * d.w;
      if (fast) {
        Pool2x2::backward(plane, grad, out, d, relu);
        continue;
      }
      for (std::int64_t oh = 0; oh < d.oh; ++oh) {
        for (std::int64_t ow = 0; ow < d.ow; ++ow) {
          const std::int64_t best = window_argmax(plane, d, oh, ow);
          if (!relu || plane[best] > T(0)) out[best] += grad[oh * d.ow + ow];
        }
      }
    }
    return dx;
  });
}

}  // namespace mirror::cpu
