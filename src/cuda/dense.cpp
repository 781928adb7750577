// GEMM through cuBLAS, bias add / bias gradient through our kernels; which math modes the GPU
// runs (Note [GPU mixed precision]).
//
// Note [GPU mixed precision]: the policies keep float32 tensors on the GPU too; the libraries
// round inside. gemm: cublasGemmEx with float32 A, B, C and compute type
// CUBLAS_COMPUTE_32F_FAST_16BF (kBFloat16) or _FAST_16F (kFloat16): "automatic down-conversion"
// of the operands to the 16-bit type for the tensor cores, float32 accumulation. Convolutions
// (conv.cpp): CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION for kFloat16 (cuDNN converts float32 data to
// fp16 for the tensor cores); for kBFloat16 CUDNN_DEFAULT_MATH, which lets cuDNN use TF32 tensor
// cores (10-bit significands, at least bfloat16's precision) on Ampere and newer; float32 runs
// CUDNN_FMA_MATH (exact float32, no TF32). tests/gpu/cuda_mixed_precision_test.cpp checks both
// against the CPU's rounded-operand results.
//
// Note [Row-major GEMM on cuBLAS]: cuBLAS is column-major. A row-major [r, c] matrix is the
// column-major [c, r] matrix of the same bytes, i.e. its transpose. So row-major
// C = op(A) op(B) is computed as column-major C^T = op(B)^T op(A)^T: call cublasSgemm with
// the operands swapped (B first), the same transpose flags, m = columns of C (n below),
// n = rows of C (m below), and leading dimensions equal to each row-major matrix's stored
// column count. No data is transposed. The CPU twin is oneDNN's row-major sgemm
// (cpu_dense.cpp); tests/gpu/cuda_ops_test.cpp compares the two for all four flag pairs.
#include <string>

#include "cuda/channel_reduce.h"
#include "cuda/check.h"
#include "cuda/cuda_kernels.h"
#include "cuda/kernels.h"
#include "cuda/math_type.h"
#include "mirror/precision.h"

namespace mirror::cuda {

void CudaKernels::gemm(bool trans_a, bool trans_b, double alpha, const Tensor& a, const Tensor& b,
                       double beta, Tensor& c) {
  OpScope op(c);
  const char* name = "gemm";
  const int m = static_cast<int>(c.dim(0));                       // rows of C = rows of op(A)
  const int n = static_cast<int>(c.dim(1));                       // cols of C = cols of op(B)
  const int k = static_cast<int>(trans_a ? a.dim(0) : a.dim(1));  // inner size
  MIRROR_CHECK(a.numel() < (1ll << 31) && b.numel() < (1ll << 31) && c.numel() < (1ll << 31),
               InvalidArgument, "gemm: matrices over 2^31 elements are not supported on CUDA");
  if (m == 0 || n == 0) return;
  const float al = static_cast<float>(alpha), be = static_cast<float>(beta);
  const int lda = static_cast<int>(a.dim(1)), ldb = static_cast<int>(b.dim(1));
  const float* pa = f32(a, name);
  const float* pb = f32(b, name);
  float* pc = f32(c, name);
  if (k == 0) {  // cuBLAS does not define k == 0; C = beta * C
    if (beta == 0) return cuda::fill(pc, 0.0f, c.numel(), op.stream());
    return cuda::scale(pc, be, c.numel(), op.stream());
  }
  const cublasOperation_t ob = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t oa = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (math_mode() == MathMode::kFloat32 && !tf32()) {
    MIRROR_CUBLAS_CHECK(
        cublasSgemm(op.ctx().cublas(), ob, oa, n, m, k, &al, pb, ldb, pa, lda, &be, pc, n));
    return;
  }
  // Note [GPU mixed precision]: float32 in and out, 16-bit (or TF32) tensor-core products inside.
  const cublasComputeType_t compute = cublas_compute_type();
  MIRROR_CUBLAS_CHECK(cublasGemmEx(op.ctx().cublas(), ob, oa, n, m, k, &al, pb, CUDA_R_32F, ldb, pa,
                                   CUDA_R_32F, lda, &be, pc, CUDA_R_32F, n, compute,
                                   CUBLAS_GEMM_DEFAULT));
}

ops::MathSupport CudaKernels::math_support(Device device, MathMode mode) {
  if (mode == MathMode::kFloat32) return {};
  cudaDeviceProp p{};
  MIRROR_CUDA_CHECK(cudaGetDeviceProperties(&p, device.index));
  std::string missing = gpu_math_missing(p.major, p.minor, mode);
  if (!missing.empty()) missing = std::string(p.name) + ": " + missing;
  return {missing, {}};
}

void CudaKernels::bias_add(Tensor& y, const Tensor& bias) {
  OpScope op(y);
  const std::int64_t outer = y.dim(0), channels = y.dim(1);
  const std::int64_t inner = channels ? y.numel() / (outer * channels) : 0;
  if (outer == 0 || channels == 0) return;
  cuda::bias_add(f32(y, "bias_add"), f32(bias, "bias_add"), outer, channels, inner, op.stream());
}

void CudaKernels::bias_grad(const Tensor& dy, Tensor& dbias) {
  OpScope op(dbias);
  const std::int64_t outer = dy.dim(0), channels = dy.dim(1);
  if (outer == 0 || channels == 0) return;
  const ops::ChannelView v{outer, channels, dy.numel() / (outer * channels)};
  const ChannelSplit split = channel_split(v);
  Tensor partial = Tensor::empty({split.partials(channels)}, DType::kFloat64, dbias.device());
  cuda::bias_grad(f32(dy, "bias_grad"), f32(dbias, "bias_grad"), partial.data<double>(), v, split,
                  op.stream());
}

}  // namespace mirror::cuda
