// The Keras tutorial models of tests/data/keras/tutorials/ (Rescaling, Normalization, Resizing,
// CenterCrop, a Dense on every step, Keras's masks on padded token ids, sigmoid heads, the layers
// issue 34 added, which run on ops every backend has) on the GPU: one training forward and
// backward from the same weights gives the CPU's logits and gradients.
// Without a usable GPU every test skips with discover_gpus()'s reason.
#include <fstream>

#include "gpu_test_util.h"
#include "mirror/nn/models.h"

namespace mirror {
namespace {

using testing::expect_close;
using testing::fixture_path;
using testing::random_tensor;

class CudaKerasLayers : public testing::GpuTest,
                        public ::testing::WithParamInterface<const char*> {};

TEST_P(CudaKerasLayers, TutorialModelStepMatchesTheCpu) {
  const std::string name = GetParam();
  std::ifstream in(fixture_path("keras/tutorials/" + name + ".json"));
  nn::ModelSpec spec = nn::ModelSpec::from_json(nlohmann::json::parse(in), name);
  const bool tokens =
      spec.layers()[0]["type"] == "embedding" || spec.layers()[0]["type"] == "masking";
  const bool rows = !tokens && spec.input_shape().size() == 2;
  const std::int64_t outputs = spec.ends_in_sigmoid() ? 1 : 10;
  if (spec.ends_in_sigmoid()) spec = spec.with_sigmoid_folded();
  const nn::DataShape data = tokens ? nn::DataShape{{20}, DType::kInt32, outputs, 64}
                             : rows ? nn::DataShape{{28, 28}, DType::kFloat32, outputs, 0}
                                    : nn::DataShape{{1, 28, 28}, DType::kFloat32, outputs, 0};
  const nn::ModelSpec bound = spec.bind(data);
  nn::Sequential cpu = nn::make_model(bound, DType::kFloat32, Device::cpu(), 3);
  nn::Sequential gpu_model = nn::make_model(bound, DType::kFloat32, gpu(), 3);
  Tensor x;
  nn::ForwardContext ctx;
  ctx.training = true;
  ctx.sample_ids = Tensor::from_vector(std::vector<std::int64_t>{0, 1, 2, 3}, {4});
  if (tokens) {
    std::vector<std::int32_t> ids(4 * 20, 0);
    for (int s = 0; s < 4; ++s)
      for (int t = 0; t < 5 + 4 * s; ++t) ids[s * 20 + t] = 1 + (s * 7 + t * 3) % 63;
    x = Tensor::from_vector(ids, {4, 20});
    ctx.lengths = {5, 9, 13, 17};  // what the loader gives; Keras models do not use them
  } else {
    Shape shape = data.sample_shape;
    shape.insert(shape.begin(), 4);
    x = random_tensor(shape, 9, 100.0f);
  }
  nn::ForwardContext gctx = ctx;
  gctx.sample_ids = ctx.sample_ids.to(gpu());
  const Tensor y = cpu.forward(x, ctx);
  expect_close(gpu_model.forward(x.to(gpu()), gctx), y, 1e-4, 1e-5, name + " logits");
  const Tensor dy = random_tensor(y.shape(), 10);
  cpu.backward(dy);
  gpu_model.backward(dy.to(gpu()));
  const auto pc = cpu.parameters(), pg = gpu_model.parameters();
  for (std::size_t i = 0; i < pc.size(); ++i) {
    expect_close(pg[i]->grad, pc[i]->grad, 1e-3, 1e-5, pc[i]->name);
  }
}

const char* const kTutorials[] = {"image_classification_from_scratch",
                                  "resizing_and_center_crop",
                                  "gru_behind_normalization",
                                  "timeseries_fcn",
                                  "dense_per_step",
                                  "imdb_bidirectional_lstm",
                                  "text_classification_conv1d",
                                  "masked_bigru_lstm",
                                  "masked_lstm_max_pool"};
INSTANTIATE_TEST_SUITE_P(Tutorials, CudaKerasLayers, ::testing::ValuesIn(kTutorials));

// Note [Kit fixtures] (gpu_test_util.h): no GPU needed.
TEST(KitFixtures, TutorialModelsAreReadable) {
  std::vector<std::string> files;
  for (const char* name : kTutorials)
    files.push_back(std::string("keras/tutorials/") + name + ".json");
  testing::expect_fixtures_readable(files);
}

}  // namespace
}  // namespace mirror
