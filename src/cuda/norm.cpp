// CudaKernels' normalisation, average-pooling, block-copy and GELU entry points over norm.cu.
// Per-channel coefficients travel as one small upload per call; per-channel sums come back with
// one download (the layers combine them on the host, Note [Channel view] in ops.h).
#include <vector>

#include "cuda/channel_reduce.h"
#include "cuda/cuda_kernels.h"
#include "cuda/norm_kernels.h"

namespace mirror::cuda {

std::vector<double> CudaKernels::channel_sums(const Tensor& a, const Tensor& b,
                                              const ops::ChannelView& v) {
  OpScope op(a);
  const ChannelSplit split = channel_split(v);
  Tensor sums = Tensor::empty({2 * v.channels}, DType::kFloat64, a.device());
  Tensor partial = Tensor::empty({split.partials(v.channels)}, DType::kFloat64, a.device());
  cuda::channel_sums(f32(a, "channel_sums"), f32(b, "channel_sums"), partial.data<double>(),
                     sums.data<double>(), v, split, op.stream());
  std::vector<double> host(static_cast<std::size_t>(2 * v.channels));
  op.ctx().download(host.data(), sums.raw_data(), host.size() * sizeof(double));
  return host;
}

Tensor CudaKernels::channel_affine(const Tensor& a, const Tensor& b, const ops::ChannelAffine& k,
                                   const ops::ChannelView& v) {
  OpScope op(a);
  // One upload: ka, ca, k0, then kb, cb when b takes part (dispatch filled the empty ones).
  std::vector<double> packed(k.ka);
  for (const std::vector<double>* x : {&k.ca, &k.k0, &k.kb, &k.cb}) {
    packed.insert(packed.end(), x->begin(), x->end());
  }
  Tensor coef =
      Tensor::empty({static_cast<std::int64_t>(packed.size())}, DType::kFloat64, a.device());
  op.ctx().upload(coef.raw_data(), packed.data(), packed.size() * sizeof(double));
  Tensor y = Tensor::empty(a.shape(), a.dtype(), a.device());
  cuda::channel_affine(f32(a, "channel_affine"), k.kb.empty() ? nullptr : f32(b, "channel_affine"),
                       coef.data<double>(), f32(y, "channel_affine"), v, op.stream());
  return y;
}

Tensor CudaKernels::avgpool2d_forward(const Tensor& x, const ops::Pool2DGeometry& g) {
  OpScope op(x);
  const int h = static_cast<int>(x.dim(2)), w = static_cast<int>(x.dim(3));
  const int oh = g.out_h(h), ow = g.out_w(w);
  Tensor y = Tensor::empty({x.dim(0), x.dim(1), oh, ow}, x.dtype(), x.device());
  avgpool_forward(f32(x, "avgpool2d_forward"), f32(y, "avgpool2d_forward"), x.dim(0) * x.dim(1), h,
                  w, oh, ow, g, op.stream());
  return y;
}

Tensor CudaKernels::avgpool2d_backward(const Tensor& dy, const Shape& x_shape,
                                       const ops::Pool2DGeometry& g) {
  OpScope op(dy);
  // Every element of dx is written by the gather kernel: no zero fill needed.
  Tensor dx = Tensor::empty(x_shape, dy.dtype(), dy.device());
  avgpool_backward(f32(dy, "avgpool2d_backward"), f32(dx, "avgpool2d_backward"),
                   x_shape[0] * x_shape[1], static_cast<int>(x_shape[2]),
                   static_cast<int>(x_shape[3]), static_cast<int>(dy.dim(2)),
                   static_cast<int>(dy.dim(3)), g, op.stream());
  return dx;
}

void CudaKernels::copy_block(Tensor& dst, const Tensor& src, const ops::BlockCopy& b) {
  OpScope op(dst);
  cuda::copy_block(dst.raw_data(), src.raw_data(), dtype_size(dst.dtype()), b, op.stream());
}

Tensor CudaKernels::gelu_forward(const Tensor& x) {
  OpScope op(x);
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  cuda::gelu_forward(f32(x, "gelu_forward"), f32(y, "gelu_forward"), x.numel(), op.stream());
  return y;
}

Tensor CudaKernels::gelu_backward(const Tensor& x, const Tensor& dy) {
  OpScope op(x);
  Tensor dx = Tensor::empty(x.shape(), x.dtype(), x.device());
  cuda::gelu_backward(f32(x, "gelu_backward"), f32(dy, "gelu_backward"), f32(dx, "gelu_backward"),
                      x.numel(), op.stream());
  return dx;
}

}  // namespace mirror::cuda
