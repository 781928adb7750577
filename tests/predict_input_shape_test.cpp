// mirror-predict --input-shape (tools/predict.cpp, reshape_samples): every sample is reshaped and
// none is lost. Issue 30's defect: x of [32, 28, 28] with --input-shape 1,28,28 became one
// sample, because the count was read after the shape was replaced.
#include <gtest/gtest.h>

#include "tools/predict.h"

namespace mirror::predict {
namespace {

TEST(PredictInputShape, EverySampleIsReshapedAndKept) {
  Inputs in;
  in.shape = {32, 28, 28};
  in.floats.assign(32 * 28 * 28, 0.5f);
  reshape_samples(in, {1, 28, 28});
  EXPECT_EQ(in.shape, (Shape{32, 1, 28, 28}));
  EXPECT_EQ(in.count(), 32);
  Inputs rows;
  rows.shape = {5, 784};
  rows.floats.assign(5 * 784, 0.0f);
  reshape_samples(rows, {28, 28});
  EXPECT_EQ(rows.shape, (Shape{5, 28, 28}));
  EXPECT_THROW(reshape_samples(rows, {27, 28}), InvalidArgument);
}

}  // namespace
}  // namespace mirror::predict
