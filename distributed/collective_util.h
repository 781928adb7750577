// defines: the element-wise helpers the CPU communicators reduce with (ordered sums, division
// for kAvg, the 16-bit adds behind the MPI user operations). Names and argument checks of the
// collectives: collective_op.h.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mirror/distributed/communicator.h"
#include "mirror/tensor.h"

namespace mirror::dist::detail {

/// Same first byte and same size: an in-place operation.
bool same_memory(const Tensor& a, const Tensor& b);

/// dst[i] = srcs[0][i] + srcs[1][i] + ... added in that order, so every replica that receives
/// dst gets identical bytes. 16-bit types accumulate in float and round once. dst may be one
/// of the sources.
void ordered_sum(const std::vector<const void*>& srcs, void* dst, std::int64_t n, DType dtype);

/// data[i] /= divisor (floating dtypes; 16-bit types in float, rounded back).
void divide_in_place(void* data, std::int64_t n, DType dtype, int divisor);

/// inout[i] = round16(float(in[i]) + float(inout[i])): the MPI user operations' kernels.
void add_half(const std::uint16_t* in, std::uint16_t* inout, std::int64_t n);
void add_bfloat16(const std::uint16_t* in, std::uint16_t* inout, std::int64_t n);

}  // namespace mirror::dist::detail
