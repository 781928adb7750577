// Element-wise kernels, reductions and optimizer updates: one thread per element over the
// shared src/math functions (Note [Shared math]). The library is compiled with --fmad=false,
// so a + b * c rounds twice exactly as the CPU loops do and the float results of these
// kernels equal the CPU backend's bit for bit (transcendentals aside: expf/tanhf may differ
// in the last ulp).
#include <math.h>

#include <string>

#include "cuda/kernels.h"
#include "cuda/launch.cuh"
#include "math/activation.h"
#include "math/convert.h"
#include "math/dropout.h"
#include "math/optim.h"
#include "mirror/error.h"
#include "ops/with_activation.h"

namespace mirror::cuda {
namespace {

template <class Act>
__global__ void activation_forward_kernel(const float* x, float* y, std::int64_t n) {
  MIRROR_GRID_LOOP(i, n) y[i] = Act::forward(x[i]);
}

template <class Act>
__global__ void activation_backward_kernel(const float* y, const float* dy, float* dx,
                                           std::int64_t n) {
  MIRROR_GRID_LOOP(i, n) dx[i] = Act::backward(y[i], dy[i]);
}


__global__ void dropout_forward_kernel(const float* x, float* y, float* mask,
                                       const std::int64_t* ids, std::int64_t n, std::int64_t per,
                                       float rate, std::uint64_t seed) {
  MIRROR_GRID_LOOP(i, n) {
    mask[i] = math::dropout_scale<float>(seed, ids[i / per], i % per, rate);
    y[i] = x[i] * mask[i];
  }
}

__global__ void multiply_kernel(const float* a, const float* b, float* out, std::int64_t n) {
  MIRROR_GRID_LOOP(i, n) out[i] = a[i] * b[i];
}

template <class T>
__global__ void axpy_kernel(T alpha, const T* b, T* a, std::int64_t n) {
  MIRROR_GRID_LOOP(i, n) a[i] += alpha * b[i];
}

template <class T>
__global__ void scale_kernel(T* a, T alpha, std::int64_t n) {
  MIRROR_GRID_LOOP(i, n) a[i] *= alpha;
}

template <class T>
__global__ void fill_kernel(T* a, T value, std::int64_t n) {
  MIRROR_GRID_LOOP(i, n) a[i] = value;
}

/// One block per kSumSquaresBlock elements; each thread sums a strided sixteenth in double,
/// then a fixed shared-memory tree adds the 256 partial sums.
template <class T>
__global__ void sum_squares_kernel(const T* a, std::int64_t n, double* partials) {
  __shared__ double sums[kThreads];
  const std::int64_t begin = static_cast<std::int64_t>(blockIdx.x) * kSumSquaresBlock;
  std::int64_t end = begin + kSumSquaresBlock;
  if (end > n) end = n;
  double s = 0;
  for (std::int64_t i = begin + threadIdx.x; i < end; i += kThreads) {
    s += static_cast<double>(a[i]) * a[i];
  }
  sums[threadIdx.x] = s;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (static_cast<int>(threadIdx.x) < half) sums[threadIdx.x] += sums[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) partials[blockIdx.x] = sums[0];
}

template <class T>
__global__ void nonfinite_kernel(const T* a, std::int64_t n, int* flag) {
  MIRROR_GRID_LOOP(i, n) {
    if (!isfinite(a[i])) *flag = 1;  // benign race: every writer stores 1
  }
}

__global__ void nonfinite_bits_kernel(const std::uint16_t* a, std::int64_t n,
                                      std::uint16_t exp_mask, int* flag) {
  MIRROR_GRID_LOOP(i, n) {
    if ((a[i] & exp_mask) == exp_mask) *flag = 1;
  }
}

__global__ void f32_to_f16_kernel(const float* src, std::uint16_t* dst, std::int64_t n) {
  MIRROR_GRID_LOOP(i, n) dst[i] = math::float_to_half_bits(src[i]);
}
__global__ void f16_to_f32_kernel(const std::uint16_t* src, float* dst, std::int64_t n) {
  MIRROR_GRID_LOOP(i, n) dst[i] = math::half_bits_to_float(src[i]);
}
__global__ void f32_to_bf16_kernel(const float* src, std::uint16_t* dst, std::int64_t n) {
  MIRROR_GRID_LOOP(i, n) dst[i] = math::float_to_bfloat16_bits(src[i]);
}
__global__ void bf16_to_f32_kernel(const std::uint16_t* src, float* dst, std::int64_t n) {
  MIRROR_GRID_LOOP(i, n) dst[i] = math::bfloat16_bits_to_float(src[i]);
}
__global__ void f32_to_f64_kernel(const float* src, double* dst, std::int64_t n) {
  MIRROR_GRID_LOOP(i, n) dst[i] = static_cast<double>(src[i]);
}
__global__ void f64_to_f32_kernel(const double* src, float* dst, std::int64_t n) {
  MIRROR_GRID_LOOP(i, n) dst[i] = static_cast<float>(src[i]);  // round to nearest even
}

__global__ void bias_add_kernel(float* y, const float* bias, std::int64_t n, std::int64_t channels,
                                std::int64_t inner) {
  MIRROR_GRID_LOOP(i, n) y[i] += bias[(i / inner) % channels];
}

__global__ void sgd_kernel(float* p, const float* g, float* buf, std::int64_t n, float lr,
                           float momentum, bool nesterov, float weight_decay) {
  MIRROR_GRID_LOOP(i, n) {
    math::sgd_step(p[i], g[i], buf ? buf + i : nullptr, lr, momentum, nesterov, weight_decay);
  }
}

__global__ void adam_kernel(float* p, const float* g, float* m, float* v, std::int64_t n,
                            math::AdamScalars s) {
  MIRROR_GRID_LOOP(i, n) math::adam_step(p[i], g[i], m[i], v[i], s);
}

}  // namespace

void activation_forward(ops::Activation act, const float* x, float* y, std::int64_t n,
                        cudaStream_t s) {
  ops::with_activation(
      act, [&](auto a) { MIRROR_LAUNCH(activation_forward_kernel<decltype(a)>, n, s, x, y, n); });
}

void activation_backward(ops::Activation act, const float* y, const float* dy, float* dx,
                         std::int64_t n, cudaStream_t s) {
  ops::with_activation(act, [&](auto a) {
    MIRROR_LAUNCH(activation_backward_kernel<decltype(a)>, n, s, y, dy, dx, n);
  });
}

void dropout_forward(const float* x, float* y, float* mask, const std::int64_t* ids, std::int64_t n,
                     std::int64_t per, float rate, std::uint64_t seed, cudaStream_t s) {
  MIRROR_LAUNCH(dropout_forward_kernel, n, s, x, y, mask, ids, n, per, rate, seed);
}

void multiply(const float* a, const float* b, float* out, std::int64_t n, cudaStream_t s) {
  MIRROR_LAUNCH(multiply_kernel, n, s, a, b, out, n);
}

template <class T>
void axpy(T alpha, const T* b, T* a, std::int64_t n, cudaStream_t s) {
  MIRROR_LAUNCH(axpy_kernel<T>, n, s, alpha, b, a, n);
}
template <class T>
void scale(T* a, T alpha, std::int64_t n, cudaStream_t s) {
  MIRROR_LAUNCH(scale_kernel<T>, n, s, a, alpha, n);
}
template <class T>
void fill(T* a, T value, std::int64_t n, cudaStream_t s) {
  MIRROR_LAUNCH(fill_kernel<T>, n, s, a, value, n);
}
template void axpy<float>(float, const float*, float*, std::int64_t, cudaStream_t);
template void axpy<double>(double, const double*, double*, std::int64_t, cudaStream_t);
template void scale<float>(float*, float, std::int64_t, cudaStream_t);
template void scale<double>(double*, double, std::int64_t, cudaStream_t);
template void fill<float>(float*, float, std::int64_t, cudaStream_t);
template void fill<double>(double*, double, std::int64_t, cudaStream_t);
template void fill<std::int32_t>(std::int32_t*, std::int32_t, std::int64_t, cudaStream_t);
template void fill<std::int64_t>(std::int64_t*, std::int64_t, std::int64_t, cudaStream_t);
template void fill<std::uint16_t>(std::uint16_t*, std::uint16_t, std::int64_t, cudaStream_t);
template void fill<std::uint8_t>(std::uint8_t*, std::uint8_t, std::int64_t, cudaStream_t);

template <class T>
void sum_squares_partials(const T* a, std::int64_t n, double* partials, cudaStream_t s) {
  const std::int64_t blocks = (n + kSumSquaresBlock - 1) / kSumSquaresBlock;
  if (blocks == 0) return;
  sum_squares_kernel<T><<<static_cast<unsigned>(blocks), kThreads, 0, s>>>(a, n, partials);
  MIRROR_CUDA_CHECK_LAUNCH("sum_squares_kernel");
}
template void sum_squares_partials<float>(const float*, std::int64_t, double*, cudaStream_t);
template void sum_squares_partials<double>(const double*, std::int64_t, double*, cudaStream_t);

void nonfinite_flag(DType dtype, const void* a, std::int64_t n, int* flag, cudaStream_t s) {
  switch (dtype) {
    case DType::kFloat32:
      MIRROR_LAUNCH(nonfinite_kernel<float>, n, s, static_cast<const float*>(a), n, flag);
      return;
    case DType::kFloat64:
      MIRROR_LAUNCH(nonfinite_kernel<double>, n, s, static_cast<const double*>(a), n, flag);
      return;
    case DType::kFloat16:
    case DType::kBFloat16: {
      const std::uint16_t mask = dtype == DType::kFloat16 ? 0x7C00u : 0x7F80u;
      MIRROR_LAUNCH(nonfinite_bits_kernel, n, s, static_cast<const std::uint16_t*>(a), n, mask,
                    flag);
      return;
    }
    default:
      return;  // integers are always finite
  }
}

void cast(DType from, DType to, const void* src, void* dst, std::int64_t n, cudaStream_t s) {
  using U16 = std::uint16_t;
  const auto* f32 = static_cast<const float*>(src);
  auto* out32 = static_cast<float*>(dst);
  if (from == DType::kFloat32 && to == DType::kFloat16) {
    MIRROR_LAUNCH(f32_to_f16_kernel, n, s, f32, static_cast<U16*>(dst), n);
  } else if (from == DType::kFloat16 && to == DType::kFloat32) {
    MIRROR_LAUNCH(f16_to_f32_kernel, n, s, static_cast<const U16*>(src), out32, n);
  } else if (from == DType::kFloat32 && to == DType::kBFloat16) {
    MIRROR_LAUNCH(f32_to_bf16_kernel, n, s, f32, static_cast<U16*>(dst), n);
  } else if (from == DType::kBFloat16 && to == DType::kFloat32) {
    MIRROR_LAUNCH(bf16_to_f32_kernel, n, s, static_cast<const U16*>(src), out32, n);
  } else if (from == DType::kFloat32 && to == DType::kFloat64) {
    MIRROR_LAUNCH(f32_to_f64_kernel, n, s, f32, static_cast<double*>(dst), n);
  } else if (from == DType::kFloat64 && to == DType::kFloat32) {
    MIRROR_LAUNCH(f64_to_f32_kernel, n, s, static_cast<const double*>(src), out32, n);
  } else {
    throw InvalidArgument(std::string("cast: ") + dtype_name(from) + " to " + dtype_name(to) +
                          " is not supported; supported are float32 <-> float16, bfloat16, " +
                          "float64 (cast through float32 for other pairs)");
  }
}

void bias_add(float* y, const float* bias, std::int64_t outer, std::int64_t channels,
              std::int64_t inner, cudaStream_t s) {
  const std::int64_t n = outer * channels * inner;
  MIRROR_LAUNCH(bias_add_kernel, n, s, y, bias, n, channels, inner);
}

void sgd_update(float* p, const float* g, float* buf, std::int64_t n, float lr, float momentum,
                bool nesterov, float weight_decay, cudaStream_t s) {
  MIRROR_LAUNCH(sgd_kernel, n, s, p, g, buf, n, lr, momentum, nesterov, weight_decay);
}

void adam_update(float* p, const float* g, float* m, float* v, std::int64_t n,
                 const math::AdamScalars& scalars, cudaStream_t s) {
  MIRROR_LAUNCH(adam_kernel, n, s, p, g, m, v, n, scalars);
}

}  // namespace mirror::cuda
