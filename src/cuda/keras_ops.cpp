// CudaKernels' entry points for Keras's layers (keras_ops.cu), and batched_gemm through cuBLAS's
// strided batched GEMM (the row-major trick and the math modes of dense.cpp: Note [Row-major GEMM
// on cuBLAS], Note [GPU mixed precision]).
#include <vector>

#include "cuda/check.h"
#include "cuda/cuda_kernels.h"
#include "cuda/keras_ops_kernels.h"
#include "cuda/math_type.h"
#include "mirror/precision.h"

namespace mirror::cuda {

Tensor CudaKernels::eltwise_forward(const ops::Eltwise& f, const Tensor& x) {
  OpScope op(x);
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  cuda::eltwise_forward(f, f32(x, "eltwise_forward"), f32(y, "eltwise_forward"), x.numel(),
                        op.stream());
  return y;
}

Tensor CudaKernels::eltwise_backward(const ops::Eltwise& f, const Tensor& x, const Tensor& dy) {
  OpScope op(x);
  Tensor dx = Tensor::empty(x.shape(), x.dtype(), x.device());
  cuda::eltwise_backward(f, f32(x, "eltwise_backward"), f32(dy, "eltwise_backward"),
                         f32(dx, "eltwise_backward"), x.numel(), op.stream());
  return dx;
}

Tensor CudaKernels::extremum(const Tensor& a, const Tensor& b, bool minimum, Tensor& mask) {
  OpScope op(a);
  Tensor y = Tensor::empty(a.shape(), a.dtype(), a.device());
  mask = Tensor::empty(a.shape(), a.dtype(), a.device());
  cuda::extremum(f32(a, "extremum"), f32(b, "extremum"), minimum, f32(y, "extremum"),
                 f32(mask, "extremum"), a.numel(), op.stream());
  return y;
}

void CudaKernels::batched_gemm(bool trans_a, bool trans_b, double alpha, const Tensor& a,
                               const Tensor& b, double beta, Tensor& c) {
  OpScope op(c);
  const char* name = "batched_gemm";
  const int batch = static_cast<int>(c.dim(0));
  const int m = static_cast<int>(c.dim(1)), n = static_cast<int>(c.dim(2));
  const int k = static_cast<int>(trans_a ? a.dim(1) : a.dim(2));
  MIRROR_CHECK(a.numel() < (1ll << 31) && b.numel() < (1ll << 31) && c.numel() < (1ll << 31),
               InvalidArgument, "batched_gemm: tensors over 2^31 elements are not supported");
  if (k == 0) return KernelSet::batched_gemm(trans_a, trans_b, alpha, a, b, beta, c);
  const float al = static_cast<float>(alpha), be = static_cast<float>(beta);
  const int lda = static_cast<int>(a.dim(2)), ldb = static_cast<int>(b.dim(2));
  const long long sa = a.dim(1) * a.dim(2), sb = b.dim(1) * b.dim(2), sc = c.dim(1) * c.dim(2);
  const cublasOperation_t ob = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t oa = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasComputeType_t compute = cublas_compute_type();
  // Row-major C_i = op(A_i) op(B_i) as column-major C_i^T = op(B_i)^T op(A_i)^T (dense.cpp).
  MIRROR_CUBLAS_CHECK(cublasGemmStridedBatchedEx(op.ctx().cublas(), ob, oa, n, m, k, &al,
                                                 f32(b, name), CUDA_R_32F, ldb, sb, f32(a, name),
                                                 CUDA_R_32F, lda, sa, &be, f32(c, name), CUDA_R_32F,
                                                 n, sc, batch, compute, CUBLAS_GEMM_DEFAULT));
}

namespace {

/// The mask's rows, its lengths uploaded to a device array kept alive by `keep`.
AttentionRows rows_of(OpScope& op, const Tensor& t, const ops::AttentionMask& m, Tensor& keep) {
  AttentionRows r{t.dim(0), t.dim(1), t.dim(2), m.heads, m.mask_queries, m.causal, nullptr};
  if (!m.lengths.empty()) {
    keep = Tensor::empty({static_cast<std::int64_t>(m.lengths.size())}, DType::kInt32, t.device());
    op.ctx().upload(keep.raw_data(), m.lengths.data(), m.lengths.size() * sizeof(std::int32_t));
    r.lengths = keep.data<std::int32_t>();
  }
  return r;
}

}  // namespace

Tensor CudaKernels::attention_softmax(const Tensor& scores, const ops::AttentionMask& m) {
  OpScope op(scores);
  Tensor lengths;
  const AttentionRows r = rows_of(op, scores, m, lengths);
  Tensor p = Tensor::empty(scores.shape(), scores.dtype(), scores.device());
  cuda::attention_softmax(f32(scores, "attention_softmax"), f32(p, "attention_softmax"), r,
                          op.stream());
  return p;
}

Tensor CudaKernels::attention_softmax_backward(const Tensor& probs, const Tensor& dprobs,
                                               const ops::AttentionMask& m) {
  OpScope op(probs);
  Tensor lengths;
  const AttentionRows r = rows_of(op, probs, m, lengths);
  Tensor ds = Tensor::empty(probs.shape(), probs.dtype(), probs.device());
  cuda::attention_softmax_backward(f32(probs, "attention_softmax_backward"),
                                   f32(dprobs, "attention_softmax_backward"),
                                   f32(ds, "attention_softmax_backward"), r, op.stream());
  return ds;
}

}  // namespace mirror::cuda
