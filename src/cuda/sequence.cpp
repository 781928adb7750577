// CudaKernels: the sequence layout ops the Bidirectional layer is built from (reverse within
// each length, feature concat and slice, element-wise product); float32, kernels in sequence.cu
// and eltwise.cu.
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

}  // namespace

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
