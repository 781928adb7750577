// Max pooling with plain loops, float32 and float64 alike.
//
// Note [Max-pool ties]: ops.h promises that the FIRST maximum in row-major window order gets
// the gradient and that padded positions never win. oneDNN's pooling does not document a tie
// rule (its backward follows a workspace whose choice depends on the implementation picked), so
// the CPU backend uses its own loops: the window scan below uses a strict '>' and visits only
// in-bounds positions. Pooling is memory-bound and cheap next to the convolutions around it.
//
// The common 2x2 / stride 2 / unpadded window has its own branch-free loops (Pool2x2) that the
// compiler vectorizes: the same values and the same gradient routing as the general scan (the
// forward makes the scan's comparisons; the backward picks the first element equal to the scan's
// maximum, which is the scan's winner), 5-25x faster on the CNN's shapes.

#include "cpu/cpu_kernels.h"

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

/// Offset (within the input plane) of the first maximum of window (oh, ow).
template <class T>
std::int64_t window_argmax(const T* plane, const PoolDims& d, std::int64_t oh, std::int64_t ow) {
  const std::int64_t h0 = oh * d.g.stride_h - d.g.pad_top, w0 = ow * d.g.stride_w - d.g.pad_left;
  std::int64_t best = -1;
  for (std::int64_t i = h0; i < h0 + d.g.k_h; ++i) {
    if (i < 0 || i >= d.h) continue;
    for (std::int64_t j = w0; j < w0 + d.g.k_w; ++j) {
      if (j < 0 || j >= d.w) continue;
      const std::int64_t at = i * d.w + j;
      if (best < 0 || plane[at] > plane[best]) best = at;
    }
  }
  return best;  // >= 0: padding < kernel (checked) puts at least one real position in a window
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

  /// dx = 0 + dy at the first maximum (the '+' keeps the general path's -0 -> +0), 0 elsewhere.
  template <class T>
  static void backward(const T* plane, const T* grad, T* out, const PoolDims& d) {
    for (std::int64_t oh = 0; oh < d.oh; ++oh) {
      const T* r0 = plane + 2 * oh * d.w;
      const T* r1 = r0 + d.w;
      T* o0 = out + 2 * oh * d.w;
      T* o1 = o0 + d.w;
      const T* g = grad + oh * d.ow;
      for (std::int64_t ow = 0; ow < d.ow; ++ow) {
        const std::int64_t j = 2 * ow;
        const T a = r0[j], b = r0[j + 1], c = r1[j], e = r1[j + 1];
        T m = a;  // the forward's scan
        m = b > m ? b : m;
        m = c > m ? c : m;
        m = e > m ? e : m;
        // The scan's winner is the first element equal to m (every earlier one is smaller), or
        // `a` when none is (m is NaN only when a is). Masks, not branches: this vectorizes.
        // Bitwise '&'/'|' on purpose: '&&' would be control flow.
        const bool ab = a == m, bb = b == m, cb = c == m, eb = e == m;
        const bool to_b = !ab & bb, to_c = !ab & !bb & cb, to_e = !ab & !bb & !cb & eb;
        const T v = T(0) + g[ow];
        o0[j] = !(to_b | to_c | to_e) ? v : T(0);
        o0[j + 1] = to_b ? v : T(0);
        o1[j] = to_c ? v : T(0);
        o1[j + 1] = to_e ? v : T(0);
      }
      for (std::int64_t j = 2 * d.ow; j < d.w; ++j) o0[j] = o1[j] = T(0);  // odd last column
    }
    for (std::int64_t i = 2 * d.oh * d.w; i < d.h * d.w; ++i) out[i] = T(0);  // odd last row
  }
};

}  // namespace

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
  const PoolDims d(x.shape(), g);
  MIRROR_CHECK(
      x.rank() == 4 && dy.rank() == 4 && dy.dim(0) == d.n && dy.dim(1) == d.c &&
          dy.dim(2) == d.oh && dy.dim(3) == d.ow && x.dtype() == dy.dtype(),
      InvalidArgument,
      "maxpool2d_backward: dy " + dy.str() + " does not match the pooled shape of x " + x.str());
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
        Pool2x2::backward(plane, grad, out, d);
        continue;
      }
      for (std::int64_t oh = 0; oh < d.oh; ++oh) {
        for (std::int64_t ow = 0; ow < d.ow; ++ow) {
          out[window_argmax(plane, d, oh, ow)] += grad[oh * d.ow + ow];
        }
      }
    }
    return dx;
  });
}

}  // namespace mirror::cpu
