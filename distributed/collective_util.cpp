// Element-wise helpers of the CPU communicators.
#include "distributed/collective_util.h"

#include "cpu/cpu_vector_clones.h"
#include "math/convert.h"
#include "mirror/error.h"

namespace mirror::dist::detail {

namespace {

template <class T>
void sum_plain(const std::vector<const void*>& srcs, void* dst, std::int64_t n) {
  T* out = static_cast<T*>(dst);
  for (std::int64_t i = 0; i < n; ++i) {
    T acc = static_cast<const T*>(srcs[0])[i];
    for (std::size_t r = 1; r < srcs.size(); ++r) acc += static_cast<const T*>(srcs[r])[i];
    out[i] = acc;
  }
}

template <float (*ToFloat)(std::uint16_t), std::uint16_t (*FromFloat)(float)>
void sum_16(const std::vector<const void*>& srcs, void* dst, std::int64_t n) {
  auto* out = static_cast<std::uint16_t*>(dst);
  for (std::int64_t i = 0; i < n; ++i) {
    float acc = ToFloat(static_cast<const std::uint16_t*>(srcs[0])[i]);
    for (std::size_t r = 1; r < srcs.size(); ++r)
      acc += ToFloat(static_cast<const std::uint16_t*>(srcs[r])[i]);
    out[i] = FromFloat(acc);
  }
}

template <float (*ToFloat)(std::uint16_t), std::uint16_t (*FromFloat)(float)>
void divide_16(void* data, std::int64_t n, int divisor) {
  auto* p = static_cast<std::uint16_t*>(data);
  const float d = static_cast<float>(divisor);
  for (std::int64_t i = 0; i < n; ++i) p[i] = FromFloat(ToFloat(p[i]) / d);
}

float half_to_float(std::uint16_t h) { return math::half_bits_to_float(h); }
std::uint16_t float_to_half(float f) { return math::float_to_half_bits(f); }
float bf16_to_float(std::uint16_t b) { return math::bfloat16_bits_to_float(b); }
std::uint16_t float_to_bf16(float f) { return math::float_to_bfloat16_bits(f); }

}  // namespace

bool same_memory(const Tensor& a, const Tensor& b) {
  return a.raw_data() == b.raw_data() && a.nbytes() == b.nbytes();
}

void ordered_sum(const std::vector<const void*>& srcs, void* dst, std::int64_t n, DType dtype) {
  if (n == 0 || srcs.empty()) return;
  switch (dtype) {
    case DType::kFloat32:
      return sum_plain<float>(srcs, dst, n);
    case DType::kFloat64:
      return sum_plain<double>(srcs, dst, n);
    case DType::kInt32:
      return sum_plain<std::int32_t>(srcs, dst, n);
    case DType::kInt64:
      return sum_plain<std::int64_t>(srcs, dst, n);
    case DType::kFloat16:
      return sum_16<half_to_float, float_to_half>(srcs, dst, n);
    case DType::kBFloat16:
      return sum_16<bf16_to_float, float_to_bf16>(srcs, dst, n);
    default:
      throw InvalidArgument(std::string("cannot sum ") + dtype_name(dtype) + " tensors");
  }
}

void divide_in_place(void* data, std::int64_t n, DType dtype, int divisor) {
  if (divisor == 1 || n == 0) return;
  switch (dtype) {
    case DType::kFloat32: {
      auto* p = static_cast<float*>(data);
      for (std::int64_t i = 0; i < n; ++i) p[i] /= static_cast<float>(divisor);
      return;
    }
    case DType::kFloat64: {
      auto* p = static_cast<double*>(data);
      for (std::int64_t i = 0; i < n; ++i) p[i] /= static_cast<double>(divisor);
      return;
    }
    case DType::kFloat16:
      return divide_16<half_to_float, float_to_half>(data, n, divisor);
    case DType::kBFloat16:
      return divide_16<bf16_to_float, float_to_bf16>(data, n, divisor);
    default:
      throw InvalidArgument(std::string("cannot average ") + dtype_name(dtype) + " tensors");
  }
}

// The 16-bit loops below widen, add or divide in float and round back with integer bit
// operations, which give the same bits in every MIRROR_VECTOR_CALL clone; in the library's
// baseline SSE2 the bfloat16 sum ran at 0.43 ns per element (1.4 ms for a 12.8 MB bucket's
// 3.2M), a quarter of the memory's speed, and made --compression bf16 slower than none on the CPU.
namespace {

MIRROR_VECTOR_BODY void add_half_loop(const std::uint16_t* in, std::uint16_t* inout,
                                      std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i)
    inout[i] = float_to_half(half_to_float(in[i]) + half_to_float(inout[i]));
}

MIRROR_VECTOR_BODY void add_bfloat16_loop(const std::uint16_t* in, std::uint16_t* inout,
                                          std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i)
    inout[i] = float_to_bf16(bf16_to_float(in[i]) + bf16_to_float(inout[i]));
}

}  // namespace

void add_half(const std::uint16_t* in, std::uint16_t* inout, std::int64_t n) {
  MIRROR_VECTOR_CALL(add_half_loop(in, inout, n));
}

void add_bfloat16(const std::uint16_t* in, std::uint16_t* inout, std::int64_t n) {
  MIRROR_VECTOR_CALL(add_bfloat16_loop(in, inout, n));
}

}  // namespace mirror::dist::detail
