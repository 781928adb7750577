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

TEST(PredictInputShape, AWrongShapeNamesTheFlagGivenAndTheOneNeeded) {
  // 20 images [1, 28, 28] given --input-shape 28,28,1 (Keras's order) for a [1, 28, 28] model:
  // the message counts 20 samples and asks for 1,28,28, not for the flag that was passed.
  Inputs in;
  in.shape = {20, 1, 28, 28};
  in.floats.assign(20 * 784, 0.0f);
  reshape_samples(in, {28, 28, 1});
  InputSpec spec;
  spec.sample_shape = {1, 28, 28};
  try {
    check_inputs(in, spec, "x.npy", "28,28,1");
    FAIL() << "samples of [28, 28, 1] were accepted by a [1, 28, 28] model";
  } catch (const InvalidArgument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("(20 samples) after --input-shape 28,28,1; pass --input-shape 1,28,28 "
                        "instead"),
              std::string::npos)
        << what;
  }
  // Without the flag, the hint says which one to pass.
  Inputs flat;
  flat.shape = {3, 784};
  flat.floats.assign(3 * 784, 0.0f);
  try {
    check_inputs(flat, spec, "x.npy");
    FAIL() << "samples of [784] were accepted by a [1, 28, 28] model";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("pass --input-shape 1,28,28 to reshape"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace mirror::predict
