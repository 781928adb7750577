// defines: helpers shared by the communicator tests: run one function per replica thread, and
// tensors with closed-form contents in every dtype.
#pragma once

#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "math/convert.h"
#include "mirror/tensor.h"

namespace mirror::testing_util {

/// Every dtype a communicator can reduce.
inline constexpr DType kReducible[] = {DType::kFloat32, DType::kFloat64, DType::kInt32,
                                       DType::kInt64,   DType::kFloat16, DType::kBFloat16};

/// Calls f(i) on `n` threads at once; rethrows the first exception after all have finished.
template <class F>
void run_replicas(int n, F f) {
  std::vector<std::thread> threads;
  std::exception_ptr first;
  std::mutex m;
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      try {
        f(i);
      } catch (...) {
        std::lock_guard lock(m);
        if (!first) first = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  if (first) std::rethrow_exception(first);
}

/// A CPU tensor of `n` elements with element i = values[i] converted to `dtype`
/// (16-bit types round to nearest even; the tests use exactly representable values).
inline Tensor tensor_of(DType dtype, const std::vector<double>& values) {
  const auto n = static_cast<std::int64_t>(values.size());
  Tensor t = Tensor::empty({n}, dtype);
  for (std::int64_t i = 0; i < n; ++i) {
    const double v = values[i];
    switch (dtype) {
      case DType::kFloat32:
        t.data<float>()[i] = static_cast<float>(v);
        break;
      case DType::kFloat64:
        t.data<double>()[i] = v;
        break;
      case DType::kInt32:
        t.data<std::int32_t>()[i] = static_cast<std::int32_t>(v);
        break;
      case DType::kInt64:
        t.data<std::int64_t>()[i] = static_cast<std::int64_t>(v);
        break;
      case DType::kFloat16:
        t.data<Half>()[i].bits = math::float_to_half_bits(static_cast<float>(v));
        break;
      case DType::kBFloat16:
        t.data<BFloat16>()[i].bits = math::float_to_bfloat16_bits(static_cast<float>(v));
        break;
      case DType::kUInt8:
        t.data<std::uint8_t>()[i] = static_cast<std::uint8_t>(v);
        break;
    }
  }
  return t;
}

/// The elements of a CPU tensor as doubles (exact for every dtype).
inline std::vector<double> values_of(const Tensor& t) {
  std::vector<double> out(static_cast<std::size_t>(t.numel()));
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    switch (t.dtype()) {
      case DType::kFloat32:
        out[i] = t.data<float>()[i];
        break;
      case DType::kFloat64:
        out[i] = t.data<double>()[i];
        break;
      case DType::kInt32:
        out[i] = t.data<std::int32_t>()[i];
        break;
      case DType::kInt64:
        out[i] = static_cast<double>(t.data<std::int64_t>()[i]);
        break;
      case DType::kFloat16:
        out[i] = math::half_bits_to_float(t.data<Half>()[i].bits);
        break;
      case DType::kBFloat16:
        out[i] = math::bfloat16_bits_to_float(t.data<BFloat16>()[i].bits);
        break;
      case DType::kUInt8:
        out[i] = t.data<std::uint8_t>()[i];
        break;
    }
  }
  return out;
}

/// Replica r's contribution in the closed-form tests: r + (i % period); small integers, exact
/// in every dtype (period 5 keeps 16-bit sums exact).
inline std::vector<double> pattern(int replica, std::int64_t n, int period) {
  std::vector<double> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[i] = replica + static_cast<double>(i % period);
  return v;
}

/// Sum over replicas 0..size-1 of pattern(r, n, period).
inline std::vector<double> pattern_sum(int size, std::int64_t n, int period) {
  std::vector<double> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i)
    v[i] = size * (size - 1) / 2.0 + size * static_cast<double>(i % period);
  return v;
}

inline int period_for(DType dtype) {
  return dtype == DType::kFloat16 || dtype == DType::kBFloat16 ? 5 : 13;
}

}  // namespace mirror::testing_util
