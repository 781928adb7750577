// mirror-predict's engine on a GPU (tools/predict.cpp): a checkpoint's model built on cuda:0
// predicts what it predicts on the CPU, for a BatchNorm CNN (images) and a bidirectional GRU
// over padded token ids (the data's lengths reach the cuDNN RNN). Tolerances are those of the
// CUDA layer tests (cuDNN/cuBLAS sum in another order). Skips without a usable GPU.
#include <gtest/gtest.h>

#include <cmath>

#include "gpu/gpu_test_util.h"
#include "tools/predict.h"

namespace mirror {
namespace {

class CudaPredict : public testing::GpuTest {};

predict::CheckpointModel checkpoint(const std::string& builtin, const nn::DataShape& data) {
  predict::CheckpointModel ck;
  ck.spec = nn::ModelSpec::builtin(builtin).bind(data);
  nn::Sequential trained = nn::make_model(ck.spec, DType::kFloat32, Device::cpu(), 7);
  for (nn::Parameter* p : trained.parameters()) ck.weights[p->name] = p->value;
  for (nn::Buffer* b : trained.buffers()) ck.weights[b->name] = b->value;
  return ck;
}

void expect_same_predictions(const predict::CheckpointModel& ck, const predict::Inputs& in,
                             Device gpu) {
  nn::Sequential on_cpu = predict::build_model(ck, Device::cpu());
  nn::Sequential on_gpu = predict::build_model(ck, gpu);
  const std::vector<float> want = predict::run_model(on_cpu, in, 0, in.count(), 3);
  const std::vector<float> got = predict::run_model(on_gpu, in, 0, in.count(), 3);
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], 1e-4 + 1e-4 * std::abs(want[i])) << ck.spec.name() << " " << i;
  }
}

TEST_F(CudaPredict, ResnetMatchesTheCpu) {
  const auto ck = checkpoint("resnet", {{1, 28, 28}, DType::kFloat32, 10, 0});
  predict::Inputs in;
  in.shape = {5, 1, 28, 28};
  in.floats = testing::random_floats(5 * 28 * 28, 1.0f, 3);
  expect_same_predictions(ck, in, gpu());
}

TEST_F(CudaPredict, BidirectionalGruOverPaddedIdsMatchesTheCpu) {
  const auto ck = checkpoint("bigru-words", {{12}, DType::kInt32, 5, 30});
  predict::Inputs in;
  in.tokens = true;
  in.shape = {4, 12};
  in.ids.assign(48, 0);
  for (int i = 0; i < 4; ++i)
    for (int t = 0; t < 12 - 3 * i; ++t) in.ids[i * 12 + t] = 1 + (7 * i + 3 * t) % 29;
  expect_same_predictions(ck, in, gpu());
}

}  // namespace
}  // namespace mirror
