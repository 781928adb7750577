// Keras weights (include/mirror/train/keras_weights.h): every shipped spec and Keras functional
// fixture round-trips through Keras's layout and a .weights.h5 file; the layouts are checked
// against Keras's formulas computed here independently (HWIO kernels, the Flatten order, GRU and
// LSTM cells); the paths are those Keras 3.15 writes (taken from its save_weights); bad files and
// mismatched models are refused by name. tests/e2e/keras_weights.sh checks against Keras itself.
#include "mirror/train/keras_weights.h"

#include <gtest/gtest.h>

#include <limits>

#include <cmath>
#include <fstream>
#include <random>

#include "gradcheck.h"
#include "mirror/nn/models.h"
#include "mirror/ops.h"
#include "temp_dir.h"

namespace mirror::train {
namespace {

using nlohmann::json;

std::string fixture(const std::string& name) {
  return std::string(MIRROR_SOURCE_DIR) + "/tests/data/" + name;
}

/// The data each shipped spec is bound to.
nn::DataShape data_for(const std::string& name) {
  if (name.find("words") != std::string::npos) return {{12}, DType::kInt32, 5, 40};
  if (name.find("rows") != std::string::npos) return {{28, 28}, DType::kFloat32, 10, 0};
  return {{1, 28, 28}, DType::kFloat32, 10, 0};
}

/// A model of `spec` whose every parameter and buffer holds random values (positive variances).
nn::Sequential random_model(const nn::ModelSpec& spec, std::uint64_t seed) {
  nn::Sequential m = nn::make_model(spec, DType::kFloat32, Device::cpu(), seed);
  std::uint64_t s = seed;
  for (auto& [name, t] : model_tensors(m)) {
    const bool variance = name.find("moving_variance") != std::string::npos;
    Tensor r = ops::cast(testing::random_tensor(t.shape(), ++s, variance ? 0.5 : -1.0, 1.5),
                         DType::kFloat32);
    Tensor dst = t;
    dst.copy_from(r);
  }
  return m;
}

std::vector<float> values(const Tensor& t) {
  return keras_layout::host_float(t).to_vector<float>();
}

std::vector<nn::ModelSpec> shipped_specs() {
  std::vector<nn::ModelSpec> out;
  for (const std::string& name : nn::ModelSpec::builtin_names()) {
    out.push_back(nn::ModelSpec::builtin(name).bind(data_for(name)));
  }
  for (const char* name : {"residual", "branches"}) {
    out.push_back(nn::ModelSpec::from_file(fixture(std::string("keras/") + name + ".keras.json"))
                      .bind(data_for(name)));
  }
  for (const char* name : {"images", "rows", "seq", "words"}) {
    const nn::DataShape d = std::string(name) == "words" ? nn::DataShape{{16}, DType::kInt32, 4, 40}
                            : std::string(name) == "images"
                                ? nn::DataShape{{2, 12, 12}, DType::kFloat32, 4, 0}
                                : nn::DataShape{{12, 6}, DType::kFloat32, 4, 0};
    out.push_back(
        nn::ModelSpec::from_file(fixture(std::string("onnx/coverage-") + name + ".json")).bind(d));
  }
  out.push_back(nn::ModelSpec::from_file(fixture("keras/flatten-norm.mirror.json"))
                    .bind({{3, 4, 5}, DType::kFloat32, 4, 0}));
  out.push_back(nn::ModelSpec::from_file(fixture("keras/unet.keras.json"))
                    .bind({{1, 16, 16}, DType::kFloat32, 256, 0}));
  out.push_back(nn::ModelSpec::from_file(fixture("keras/seq2seq_repeat.keras.json"))
                    .bind({{10, 4}, DType::kFloat32, 18, 0}));
  out.push_back(nn::ModelSpec::from_file(fixture("keras/mobilenet_block.keras.json"))
                    .bind({{3, 16, 16}, DType::kFloat32, 5, 0}));
  out.push_back(nn::ModelSpec::from_file(fixture("keras/image_layers.keras.json"))
                    .bind({{3, 12, 12}, DType::kFloat32, 4, 0}));
  out.push_back(nn::ModelSpec::from_file(fixture("keras/sequence_layers.keras.json"))
                    .bind({{8, 6}, DType::kFloat32, 4, 0}));
  out.push_back(nn::ModelSpec::from_file(fixture("keras/gru-mha.mirror.json"))
                    .bind({{16}, DType::kInt32, 5, 40}));
  return out;
}

TEST(KerasWeights, EveryShippedSpecRoundTripsThroughAFile) {
  testing_util::TempDir dir;
  if (!keras_weights_file_supported()) GTEST_SKIP() << "this build has no HDF5";
  for (const nn::ModelSpec& spec : shipped_specs()) {
    SCOPED_TRACE(spec.name());
    nn::Sequential model = random_model(spec, 3);
    const NamedTensors tensors = model_tensors(model);
    const std::vector<KerasVariables> keras = to_keras_weights(spec, tensors);
    ASSERT_FALSE(keras.empty());
    const auto file = dir.path() / (spec.name() + ".weights.h5");
    write_keras_weights_file(file, keras);
    const std::vector<KerasVariables> read = read_keras_weights_file(file);
    // What was written is read back exactly (the file also holds the model's own empty "vars").
    std::map<std::string, const KerasVariables*> by_path;
    for (const KerasVariables& v : read) by_path[v.path] = &v;
    for (const KerasVariables& v : keras) {
      ASSERT_TRUE(by_path.count(v.path)) << v.path;
      const KerasVariables& r = *by_path[v.path];
      ASSERT_EQ(r.values.size(), v.values.size()) << v.path;
      for (std::size_t i = 0; i < v.values.size(); ++i) {
        EXPECT_EQ(r.values[i].shape(), v.values[i].shape()) << v.path;
        EXPECT_EQ(values(r.values[i]), values(v.values[i])) << v.path << "/vars/" << i;
      }
    }
    // Back to Mirror: the same tensors, except an LSTM's two biases, which Keras keeps as one sum.
    const NamedTensors back = from_keras_weights(spec, read, file.string());
    ASSERT_EQ(back.size(), tensors.size());
    for (const auto& [name, t] : tensors) {
      ASSERT_TRUE(back.count(name)) << name;
      const bool lstm_bias = (name.find("lstm") != std::string::npos ||
                              name.find("bidirectional") != std::string::npos) &&
                             name.find("bias") != std::string::npos &&
                             spec.to_json().dump().find("\"lstm\"") != std::string::npos;
      if (!lstm_bias) {
        EXPECT_EQ(values(back.at(name)), values(t)) << name;
      }
    }
    // The function is the same: equal outputs from the weights that came back.
    nn::Sequential again = nn::make_model(spec, DType::kFloat32, Device::cpu(), 99);
    assign_model_tensors(again, back, "round trip");
    nn::ForwardContext ctx;
    const Shape in = model.input_shape();
    Shape batch = {3};
    batch.insert(batch.end(), in.begin(), in.end());
    Tensor x;
    if (spec.to_json().dump().find("\"embedding\"") != std::string::npos) {
      std::vector<std::int32_t> ids(static_cast<std::size_t>(shape_numel(batch)));
      for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = 1 + static_cast<std::int32_t>(i % 37);
      x = Tensor::from_vector(ids, batch);
      ctx.lengths.assign(3, static_cast<std::int32_t>(in[0]));
    } else {
      x = ops::cast(testing::random_tensor(batch, 5), DType::kFloat32);
    }
    const std::vector<float> a = model.forward(x, ctx).to_vector<float>();
    nn::ForwardContext ctx2 = ctx;
    const std::vector<float> b = again.forward(x, ctx2).to_vector<float>();
    ASSERT_EQ(a.size(), b.size());
    for (std::size_t i = 0; i < a.size(); ++i)
      EXPECT_NEAR(a[i], b[i], 1e-5 * (1 + std::fabs(a[i])));
  }
}

/// The Keras variables of the object at `path`.
const std::vector<Tensor>& at(const std::vector<KerasVariables>& k, const std::string& path) {
  for (const KerasVariables& v : k) {
    if (v.path == path) return v.values;
  }
  throw Error("no Keras object " + path);
}

// Keras's Conv2D kernel is HWIO: kernel[h][w][i][o] = Mirror's OIHW kernel[o][i][h][w].
TEST(KerasWeights, ConvKernelsAreHwio) {
  const nn::ModelSpec spec = nn::ModelSpec::from_json(json::parse(R"({"input_shape": [3, 6, 6],
    "layers": [{"type": "conv2d", "filters": 4, "kernel": [2, 3]}, {"type": "flatten"},
               {"type": "dense", "units": 2}]})"));
  nn::Sequential m = random_model(spec, 1);
  const auto k = to_keras_weights(spec, model_tensors(m));
  const Tensor& hwio = at(k, "layers/conv2d")[0];
  ASSERT_EQ(hwio.shape(), (Shape{2, 3, 3, 4}));
  const std::vector<float> oihw = values(m.parameters()[0]->value);
  const std::vector<float> got = values(hwio);
  for (int o = 0; o < 4; ++o)
    for (int i = 0; i < 3; ++i)
      for (int h = 0; h < 2; ++h)
        for (int w = 0; w < 3; ++w) {
          EXPECT_EQ(got[static_cast<std::size_t>(((h * 3 + w) * 3 + i) * 4 + o)],
                    oihw[static_cast<std::size_t>(((o * 3 + i) * 2 + h) * 3 + w)]);
        }
}

// Keras flattens (H, W, C): a Dense and a LayerNormalization after a Flatten of images compute,
// with the converted weights on the channels_last image, what Mirror computes on NCHW.
TEST(KerasWeights, FlattenOrderReachesDenseAndNormalization) {
  const nn::ModelSpec spec = nn::ModelSpec::from_file(fixture("keras/flatten-norm.mirror.json"))
                                 .bind({{3, 4, 5}, DType::kFloat32, 4, 0});
  nn::Sequential m = random_model(spec, 2);
  const auto k = to_keras_weights(spec, model_tensors(m));
  const Tensor x = ops::cast(testing::random_tensor({1, 3, 4, 5}, 8), DType::kFloat32);
  nn::ForwardContext ctx;
  const std::vector<float> mirror = m.forward(x, ctx).to_vector<float>();
  // Keras: flatten (h, w, c) -> LayerNormalization(epsilon 1e-3) -> Dense(4).
  const std::vector<float> xs = x.to_vector<float>();
  std::vector<double> f(60);
  for (int c = 0; c < 3; ++c)
    for (int h = 0; h < 4; ++h)
      for (int w = 0; w < 5; ++w)
        f[static_cast<std::size_t>((h * 5 + w) * 3 + c)] =
            xs[static_cast<std::size_t>((c * 4 + h) * 5 + w)];
  double mean = 0, var = 0;
  for (double v : f) mean += v / 60;
  for (double v : f) var += (v - mean) * (v - mean) / 60;
  const std::vector<float> gamma = values(at(k, "layers/layer_normalization")[0]);
  const std::vector<float> beta = values(at(k, "layers/layer_normalization")[1]);
  for (std::size_t j = 0; j < 60; ++j)
    f[j] = (f[j] - mean) / std::sqrt(var + 1e-3) * gamma[j] + beta[j];
  const std::vector<float> kernel = values(at(k, "layers/dense")[0]);
  const std::vector<float> bias = values(at(k, "layers/dense")[1]);
  ASSERT_EQ(mirror.size(), 4u);
  for (std::size_t u = 0; u < 4; ++u) {
    double y = bias[u];
    for (std::size_t j = 0; j < 60; ++j) y += f[j] * kernel[j * 4 + u];
    EXPECT_NEAR(mirror[u], y, 1e-4 * (1 + std::fabs(y)));
  }
}

double sigmoid(double v) { return 1 / (1 + std::exp(-v)); }

// Keras's GRU (reset_after) and LSTM cells, written from Keras's documentation with Keras's
// weights, give Mirror's outputs.
TEST(KerasWeights, RecurrentCellsComputeKerassFunction) {
  for (const char* kind : {"gru", "lstm"}) {
    SCOPED_TRACE(kind);
    const nn::ModelSpec spec = nn::ModelSpec::from_json(
        json::parse(std::string(R"({"input_shape": [5, 3], "layers": [{"type": ")") + kind +
                    R"(", "units": 4}, {"type": "dense", "units": 2}]})"));
    nn::Sequential m = random_model(spec, 4);
    const auto k = to_keras_weights(spec, model_tensors(m));
    const std::string cell = std::string("layers/") + kind + "/cell";
    const std::vector<float> W = values(at(k, cell)[0]), U = values(at(k, cell)[1]),
                             b = values(at(k, cell)[2]);
    const int H = 4, F = 3, G = std::string(kind) == "gru" ? 3 : 4;
    const Tensor x = ops::cast(testing::random_tensor({1, 5, 3}, 6), DType::kFloat32);
    const std::vector<float> xs = x.to_vector<float>();
    std::vector<double> h(H, 0), c(H, 0);
    for (int t = 0; t < 5; ++t) {
      std::vector<double> xw(static_cast<std::size_t>(G * H), 0),
          hu(static_cast<std::size_t>(G * H), 0);
      for (int j = 0; j < G * H; ++j) {
        for (int f = 0; f < F; ++f)
          xw[j] += xs[t * F + f] * W[static_cast<std::size_t>(f * G * H + j)];
        for (int i = 0; i < H; ++i) hu[j] += h[i] * U[static_cast<std::size_t>(i * G * H + j)];
      }
      for (int i = 0; i < H; ++i) {
        if (G == 3) {  // Keras: z, r, h blocks; bias row 0 input, row 1 recurrent
          const double z = sigmoid(xw[i] + b[i] + hu[i] + b[3 * H + i]);
          const double r = sigmoid(xw[H + i] + b[H + i] + hu[H + i] + b[4 * H + i]);
          const double n =
              std::tanh(xw[2 * H + i] + b[2 * H + i] + r * (hu[2 * H + i] + b[5 * H + i]));
          h[i] = z * h[i] + (1 - z) * n;
        } else {  // Keras: i, f, c, o blocks, one bias
          auto g = [&](int blk) { return xw[blk * H + i] + hu[blk * H + i] + b[blk * H + i]; };
          c[i] = sigmoid(g(1)) * c[i] + sigmoid(g(0)) * std::tanh(g(2));
        }
      }
      if (G == 4) {
        for (int i = 0; i < H; ++i) {
          double o = xw[3 * H + i] + hu[3 * H + i] + b[3 * H + i];
          h[i] = sigmoid(o) * std::tanh(c[i]);
        }
      }
    }
    // Compare through the Dense (Keras's kernel [H, 2] is Mirror's).
    const std::vector<float> dk = values(at(k, "layers/dense")[0]),
                             db = values(at(k, "layers/dense")[1]);
    nn::ForwardContext ctx;
    ctx.lengths = {5};
    const std::vector<float> y = m.forward(x, ctx).to_vector<float>();
    for (int u = 0; u < 2; ++u) {
      double want = db[u];
      for (int i = 0; i < H; ++i) want += h[i] * dk[static_cast<std::size_t>(i * 2 + u)];
      EXPECT_NEAR(y[u], want, 1e-5);
    }
  }
}

// The paths Keras 3.15 writes for the fixtures (its save_weights of model_from_json): layers are
// named by class, counted in model.layers order, not by their own names.
TEST(KerasWeights, PathsAreKerassOwn) {
  auto paths = [](const std::string& file, const nn::DataShape& d) {
    const nn::ModelSpec spec = nn::ModelSpec::from_file(fixture(file)).bind(d);
    std::map<std::string, std::string> by_name;  // Keras layer name -> path
    const std::vector<KerasVariables> k = keras_weights_layout(spec);
    nn::Sequential m = nn::make_model(spec);
    for (const KerasVariables& v : k) {
      for (std::size_t i = 0; i < spec.layers().size(); ++i) {
        if (m.layers()[i]->name() == v.layer) by_name[spec.layers()[i]["name"]] = v.path;
      }
    }
    return by_name;
  };
  const nn::DataShape images{{1, 28, 28}, DType::kFloat32, 10, 0};
  EXPECT_EQ(
      paths("keras/residual.keras.json", images),
      (std::map<std::string, std::string>{{"conv2d", "layers/conv2d"},
                                          {"conv2d_1", "layers/conv2d_1"},
                                          {"conv2d_2", "layers/conv2d_2"},
                                          {"conv2d_3", "layers/conv2d_3"},
                                          {"batch_normalization", "layers/batch_normalization"},
                                          {"batch_normalization_1", "layers/batch_normalization_1"},
                                          {"batch_normalization_2", "layers/batch_normalization_2"},
                                          {"batch_normalization_3", "layers/batch_normalization_3"},
                                          {"dense", "layers/dense"}}));
  EXPECT_EQ(
      paths("keras/branches.keras.json", images),
      (std::map<std::string, std::string>{{"conv2d_4", "layers/conv2d"},
                                          {"conv2d_5", "layers/conv2d_1"},
                                          {"conv2d_6", "layers/conv2d_2"},
                                          {"dense_1", "layers/dense"},
                                          {"layer_normalization", "layers/layer_normalization"},
                                          {"dense_2", "layers/dense_1"}}));
}

TEST(KerasWeights, MismatchedFilesAreRefusedByName) {
  if (!keras_weights_file_supported()) GTEST_SKIP() << "this build has no HDF5";
  testing_util::TempDir dir;
  const nn::ModelSpec gru = nn::ModelSpec::builtin("gru-rows").bind(data_for("gru-rows"));
  const nn::ModelSpec lstm = nn::ModelSpec::builtin("lstm-rows").bind(data_for("lstm-rows"));
  const auto file = dir.path() / "gru.weights.h5";
  write_keras_weights_file(file, keras_weights_layout(gru));
  try {
    from_keras_weights(lstm, read_keras_weights_file(file), "w.h5");
    FAIL() << "an LSTM loaded a GRU's weights";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("w.h5: no variables at 'layers/lstm/cell'"),
              std::string::npos)
        << e.what();
  }
  // The right paths with the wrong shapes: the dense of 10 classes against one of 5.
  auto five = data_for("gru-rows");
  five.outputs = 5;
  try {
    from_keras_weights(nn::ModelSpec::builtin("gru-rows").bind(five), read_keras_weights_file(file),
                       "w.h5");
    FAIL() << "a dense of 5 units loaded one of 10";
  } catch (const DataError& e) {
    EXPECT_NE(
        std::string(e.what()).find("'layers/dense/vars/0' is [64,10] but Mirror layer dense_1"),
        std::string::npos)
        << e.what();
  }
}

TEST(KerasWeights, ANonFiniteWeightIsRefusedByName) {
  // Before, --init-weights took it and the run stopped a step later advising a lower --lr.
  const nn::ModelSpec gru = nn::ModelSpec::builtin("gru-rows").bind(data_for("gru-rows"));
  std::vector<KerasVariables> variables = keras_weights_layout(gru);
  for (KerasVariables& v : variables) {
    if (v.path != "layers/dense") continue;
    v.values.at(0) = v.values.at(0).clone();
    v.values.at(0).data<float>()[3] = std::numeric_limits<float>::quiet_NaN();
  }
  try {
    from_keras_weights(gru, variables, "w.h5");
    FAIL() << "a NaN weight was accepted";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("w.h5: 'layers/dense/vars/0' holds nan at element 3"),
              std::string::npos)
        << e.what();
  }
}

TEST(KerasWeights, BadFilesAreDataErrors) {
  if (!keras_weights_file_supported()) GTEST_SKIP() << "this build has no HDF5";
  testing_util::TempDir dir;
  const auto text = dir.path() / "text.weights.h5";
  std::ofstream(text) << "not hdf5 at all";
  EXPECT_THROW(read_keras_weights_file(text), DataError);
  try {
    read_keras_weights_file(dir.path() / "missing.weights.h5");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("No such file or directory"), std::string::npos);
  }
  // A truncated file is no HDF5 file.
  const nn::ModelSpec spec = nn::ModelSpec::builtin("gru-rows").bind(data_for("gru-rows"));
  const auto good = dir.path() / "good.weights.h5";
  write_keras_weights_file(good, keras_weights_layout(spec));
  std::ifstream in(good, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto cut = dir.path() / "cut.weights.h5";
  std::ofstream(cut, std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  EXPECT_THROW(read_keras_weights_file(cut), DataError);
  // Writing where no folder exists names the file and the reason.
  try {
    write_keras_weights_file(dir.path() / "no" / "such.weights.h5", {});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("such.weights.h5"), std::string::npos) << e.what();
  }
}

TEST(KerasWeights, LayersWithoutAConversionAreNamed) {
  // A Flatten of images merged with features in another order has no Keras equivalent.
  const nn::ModelSpec spec = nn::ModelSpec::from_json(json::parse(R"({"input_shape": [2, 3, 3],
    "layers": [{"type": "flatten", "name": "f"},
               {"type": "dense", "name": "d", "units": 18},
               {"type": "add", "name": "a", "inputs": ["f", "d"]},
               {"type": "dense", "units": 2}]})"));
  try {
    to_keras_weights(spec, model_tensors(*std::make_unique<nn::Sequential>(nn::make_model(spec))));
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("layer add_1 (add) merges a Flatten of images"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace mirror::train
