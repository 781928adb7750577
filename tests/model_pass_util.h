// defines: one forward and backward of a Sequential on a fixed batch of four (Pass, run_pass),
// and the check that two passes gave the same bits (expect_same_pass): for the tests that show
// a layout or a fusion changes nothing (blocked_images_test, nn_batchnorm_relu_test).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "mirror/nn/sequential.h"
#include "ops_test_util.h"

namespace mirror::ops_test {

/// A pass's output and every parameter's gradient, in parameter order.
struct Pass {
  std::vector<double> output;
  std::vector<std::vector<double>> grads;
};

/// One forward and backward with a fixed output gradient (training or not; `padded`: the last
/// two of the four samples are padding, sample weight 0).
inline Pass run_pass(nn::Sequential& m, const Tensor& x, bool training = true,
                     bool padded = false) {
  nn::ForwardContext ctx;
  ctx.training = training;
  ctx.seed = 3;
  ctx.sample_ids = Tensor::from_vector<std::int64_t>({0, 1, 2, 3}, {4});
  if (padded) ctx.sample_weights = Tensor::from_vector<float>({1, 1, 0, 0}, {4});
  m.zero_grad();
  const Tensor y = m.forward(x, ctx);
  m.backward(random(y.shape(), 9, DType::kFloat32));
  Pass p{values(y), {}};
  for (nn::Parameter* param : m.parameters()) p.grads.push_back(values(param->grad));
  return p;
}

/// The same output and the same bits in every parameter gradient (named from `m`).
inline void expect_same_pass(const Pass& with, const Pass& without, nn::Sequential& m) {
  EXPECT_EQ(with.output, without.output);
  ASSERT_EQ(with.grads.size(), without.grads.size());
  for (std::size_t i = 0; i < with.grads.size(); ++i) {
    EXPECT_EQ(with.grads[i], without.grads[i]) << m.parameters()[i]->name;
  }
}

}  // namespace mirror::ops_test
