// Keras 3 functional models (tests/data/keras/*.keras.json, exported once by
// tests/data/keras/make_functional.py; CI needs no Keras) build the same graph and the same
// initial weights as their hand-written Mirror-format twins (*.mirror.json), and train.
#include <gtest/gtest.h>

#include "gradcheck.h"
#include "mirror/nn/models.h"
#include "mirror/ops.h"

namespace mirror::nn {
namespace {

std::string fixture(const std::string& name) {
  return std::string(MIRROR_SOURCE_DIR) + "/tests/data/keras/" + name;
}

/// Every parameter's and buffer's name, shape and bytes, in model order.
std::vector<std::pair<std::string, std::uint64_t>> weights(Sequential& m) {
  std::vector<std::pair<std::string, std::uint64_t>> out;
  for (Parameter* p : m.parameters()) out.emplace_back(p->name, ops::fingerprint(p->value));
  for (Buffer* b : m.buffers()) out.emplace_back(b->name, ops::fingerprint(b->value));
  return out;
}

class KerasFunctional : public ::testing::TestWithParam<const char*> {};

TEST_P(KerasFunctional, BuildsTheGraphAndWeightsOfItsMirrorTwin) {
  const std::string name = GetParam();
  const DataShape data{{1, 28, 28}, DType::kFloat32, 10};
  const ModelSpec keras = ModelSpec::from_file(fixture(name + ".keras.json")).bind(data);
  const ModelSpec twin = ModelSpec::from_file(fixture(name + ".mirror.json")).bind(data);
  Sequential a = make_model(keras, DType::kFloat32, Device::cpu(), 11);
  Sequential b = make_model(twin, DType::kFloat32, Device::cpu(), 11);
  EXPECT_FALSE(a.is_chain());
  // Same layers (kinds, Mirror names, configs) wired the same way.
  EXPECT_EQ(a.config(), b.config());
  EXPECT_EQ(weights(a), weights(b));
  ASSERT_EQ(a.layers().size(), b.layers().size());
  // The same function: one forward on the same batch gives the same logits.
  ForwardContext ctx;
  ctx.training = true;
  const Tensor x = ops::cast(testing::random_tensor({3, 1, 28, 28}, 2), DType::kFloat32);
  EXPECT_EQ(a.forward(x, ctx).to_vector<float>(), b.forward(x, ctx).to_vector<float>());
}

INSTANTIATE_TEST_SUITE_P(Fixtures, KerasFunctional, ::testing::Values("residual", "branches"));

TEST(KerasFunctionalFixtures, ReadWhatKerasWrote) {
  const ModelSpec residual = ModelSpec::from_file(fixture("residual.keras.json"));
  // Keras's InputLayer (channels_last [28, 28, 1]) becomes Mirror's NCHW input.
  EXPECT_EQ(residual.input_shape(), (Shape{1, 28, 28}));
  int adds = 0, bns = 0;
  for (const auto& l : residual.layers()) {
    adds += l["type"] == "add";
    bns += l["type"] == "batch_normalization";
  }
  EXPECT_EQ(adds, 2);
  EXPECT_EQ(bns, 4);
  // Keras's own layer names are the graph's names; its model input is renamed "input".
  EXPECT_EQ(residual.layers()[0]["inputs"], nlohmann::json({"input"}));
  EXPECT_EQ(residual.layers()[5]["name"], "add");
  EXPECT_EQ(residual.layers()[5]["inputs"],
            nlohmann::json({"batch_normalization_1", "activation"}));
  const ModelSpec branches = ModelSpec::from_file(fixture("branches.keras.json"));
  EXPECT_EQ(branches.layers()[5]["type"], "concatenate");
  EXPECT_EQ(branches.layers()[5]["inputs"].size(), 3u);
  EXPECT_EQ(branches.layers()[9]["activation"], "gelu");
}

}  // namespace
}  // namespace mirror::nn
