// CudaKernels: the sequence layout ops the Bidirectional layer is built from (reverse within
// each length, feature concat and slice, element-wise product) and the 1-D window ops of Conv1D
// and the 1-D pooling layers; float32, kernels in sequence.cu, eltwise.cu and layout.cu.
#include "cuda/cuda_kernels.h"
#include "cuda/kernels.h"
#include "cuda/sequence_kernels.h"

namespace mirror::cuda {
namespace {

Shape with_last(Shape s, std::int64_t last) {
  s.back() = last;
  return s;
}

/// The product of all dimensions but the last.
std::int64_t rows_of(const Tensor& t) {
  std::int64_t rows = 1;
  for (int i = 0; i + 1 < t.rank(); ++i) rows *= t.dim(i);
  return rows;
}

math::window1d::Geometry geometry(const ops::Window1D& g, std::int64_t steps) {
  return {g.k, g.stride, g.dilation, g.pad_left, g.out(static_cast<int>(steps))};
}

Tensor upload_lengths(OpScope& op, const std::vector<std::int32_t>& lengths) {
  Tensor len =
      Tensor::empty({static_cast<std::int64_t>(lengths.size())}, DType::kInt32, op.device());
  op.ctx().upload(len.raw_data(), lengths.data(), lengths.size() * sizeof(std::int32_t));
  return len;
}

}  // namespace

Tensor CudaKernels::im2col1d(const Tensor& x, const ops::Window1D& g) {
  OpScope op(x);
  const std::int64_t n = x.dim(0), steps = x.dim(1), c = x.dim(2);
  const math::window1d::Geometry geo = geometry(g, steps);
  Tensor cols = Tensor::empty({n, geo.out, g.k * c}, x.dtype(), x.device());
  cuda::im2col1d(f32(x, "im2col1d"), f32(cols, "im2col1d"), n, steps, c, geo, op.stream());
  return cols;
}

Tensor CudaKernels::col2im1d(const Tensor& cols, const ops::Window1D& g, std::int64_t steps) {
  OpScope op(cols);
  const std::int64_t n = cols.dim(0), c = cols.dim(2) / g.k;
  Tensor x = Tensor::empty({n, steps, c}, cols.dtype(), cols.device());
  cuda::col2im1d(f32(cols, "col2im1d"), f32(x, "col2im1d"), n, steps, c, geometry(g, steps),
                 op.stream());
  return x;
}

Tensor CudaKernels::pool1d_forward(ops::Pool1D mode, const Tensor& x,
                                   const std::vector<std::int32_t>& lengths,
                                   const ops::Window1D& g) {
  OpScope op(x);
  const std::int64_t n = x.dim(0), steps = x.dim(1), c = x.dim(2);
  const math::window1d::Geometry geo = geometry(g, steps);
  Tensor y = Tensor::empty({n, geo.out, c}, x.dtype(), x.device());
  if (y.numel() == 0) return y;
  const Tensor len = upload_lengths(op, lengths);
  cuda::pool1d_forward(mode == ops::Pool1D::kMax, f32(x, "pool1d_forward"),
                       f32(y, "pool1d_forward"), len.data<std::int32_t>(), n, steps, c, geo,
                       op.stream());
  return y;
}

Tensor CudaKernels::pool1d_backward(ops::Pool1D mode, const Tensor& x, const Tensor& dy,
                                    const std::vector<std::int32_t>& lengths,
                                    const ops::Window1D& g) {
  OpScope op(x);
  const std::int64_t n = x.dim(0), steps = x.dim(1), c = x.dim(2);
  Tensor dx = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (dx.numel() == 0) return dx;
  const Tensor len = upload_lengths(op, lengths);
  cuda::pool1d_backward(mode == ops::Pool1D::kMax, f32(x, "pool1d_backward"),
                        f32(dy, "pool1d_backward"), f32(dx, "pool1d_backward"),
                        len.data<std::int32_t>(), n, steps, c, geometry(g, steps), op.stream());
  return dx;
}

Tensor CudaKernels::zero_past_lengths(const Tensor& x, const std::vector<std::int32_t>& lengths) {
  OpScope op(x);
  Tensor y = x.clone();
  if (y.numel() == 0) return y;
  const Tensor len = upload_lengths(op, lengths);
  const std::int64_t n = x.dim(0), steps = x.dim(1);
  cuda::zero_past_length(f32(y, "zero_past_lengths"), len.data<std::int32_t>(), n, steps,
                         x.numel() / (n * steps), op.stream());
  return y;
}

Tensor CudaKernels::reverse_sequences(const Tensor& x, const std::vector<std::int32_t>& lengths) {
  OpScope op(x);
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (x.numel() == 0) return y;
  Tensor len = Tensor::empty({x.dim(0)}, DType::kInt32, x.device());
  op.ctx().upload(len.raw_data(), lengths.data(), lengths.size() * sizeof(std::int32_t));
  cuda::reverse_sequences(f32(x, "reverse_sequences"), f32(y, "reverse_sequences"),
                          len.data<std::int32_t>(), x.dim(0), x.dim(1), x.dim(2), op.stream());
  return y;
}

Tensor CudaKernels::concat_features(const Tensor& a, const Tensor& b) {
  OpScope op(a);
  const std::int64_t wa = a.dim(a.rank() - 1), wb = b.dim(b.rank() - 1), rows = rows_of(a);
  Tensor y = Tensor::empty(with_last(a.shape(), wa + wb), a.dtype(), a.device());
  float* out = f32(y, "concat_features");
  copy_columns(f32(a, "concat_features"), wa, out, wa + wb, rows, wa, op.stream());
  copy_columns(f32(b, "concat_features"), wb, out + wa, wa + wb, rows, wb, op.stream());
  return y;
}

Tensor CudaKernels::slice_features(const Tensor& y, std::int64_t begin, std::int64_t count) {
  OpScope op(y);
  const std::int64_t w = y.dim(y.rank() - 1);
  Tensor out = Tensor::empty(with_last(y.shape(), count), y.dtype(), y.device());
  copy_columns(f32(y, "slice_features") + begin, w, f32(out, "slice_features"), count, rows_of(y),
               count, op.stream());
  return out;
}

Tensor CudaKernels::multiply(const Tensor& a, const Tensor& b) {
  OpScope op(a);
  Tensor out = Tensor::empty(a.shape(), a.dtype(), a.device());
  cuda::multiply(f32(a, "multiply"), f32(b, "multiply"), f32(out, "multiply"), a.numel(),
                 op.stream());
  return out;
}

}  // namespace mirror::cuda
