// ModelSpec: the built-in specs build today's weights, every layer type parses/binds/builds,
// Keras's to_json() is read, and every rejection names the layer index and the field.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>

#include "mirror/nn/models.h"
#include "mirror/ops.h"
#include "temp_dir.h"

namespace mirror::nn {
namespace {

using nlohmann::json;
using ::testing::AllOf;
using ::testing::HasSubstr;

/// FNV-1a over every parameter's name, shape and bytes, in build order.
std::uint64_t weights_print(Sequential& m) {
  std::uint64_t h = 14695981039346656037ull;
  auto mix = [&h](std::uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xff;
      h *= 1099511628211ull;
    }
  };
  for (Parameter* p : m.parameters()) {
    for (char c : p->name) mix(static_cast<unsigned char>(c));
    for (auto d : p->value.shape()) mix(static_cast<std::uint64_t>(d));
    mix(ops::fingerprint(p->value));
  }
  return h;
}

// Note [Pinned fingerprints]: recorded from the hand-written make_cnn / make_row_gru /
// make_word_gru before the reference models became JSON specs (commit 045441f); the specs must
// build bit-identical weights with the same parameter names.
TEST(ModelSpecPins, BuiltinsBuildTheWeightsOfTheHandWrittenModels) {
  struct Pin {
    std::uint64_t seed, cnn, rows, words;
  };
  for (const Pin& pin :
       {Pin{0, 0xbc838e15b3501160ull, 0x5a24abfe86f01aecull, 0x36fffedfd26cfe73ull},
        Pin{7, 0xf573381f36610cfbull, 0x952b8afe962987c0ull, 0xee064ec4896edbbfull}}) {
    SCOPED_TRACE("seed " + std::to_string(pin.seed));
    Sequential cnn = make_model(ModelSpec::builtin("cnn").bind({{1, 28, 28}, DType::kFloat32, 10}),
                                DType::kFloat32, Device::cpu(), pin.seed);
    Sequential rows =
        make_model(ModelSpec::builtin("gru-rows").bind({{28, 28}, DType::kFloat32, 10}),
                   DType::kFloat32, Device::cpu(), pin.seed);
    Sequential words =
        make_model(ModelSpec::builtin("gru-words").bind({{32}, DType::kInt32, 5, 60}),
                   DType::kFloat32, Device::cpu(), pin.seed);
    EXPECT_EQ(weights_print(cnn), pin.cnn);
    EXPECT_EQ(weights_print(rows), pin.rows);
    EXPECT_EQ(weights_print(words), pin.words);
    // The wrappers are the same models.
    Sequential cnn2 = make_cnn(DType::kFloat32, Device::cpu(), pin.seed);
    Sequential words2 = make_word_gru(60, 5, 32, DType::kFloat32, Device::cpu(), pin.seed);
    EXPECT_EQ(weights_print(cnn2), pin.cnn);
    EXPECT_EQ(weights_print(words2), pin.words);
  }
}

}  // namespace
}  // namespace mirror::nn
