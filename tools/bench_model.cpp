// The benchmarks' models and synthetic batches (tools/bench_model.h).
#include "tools/bench_model.h"

#include <filesystem>
#include <vector>

#include "mirror/data/synthetic.h"
#include "mirror/error.h"

namespace mirror::bench {

namespace {

using nlohmann::json;

/// The bidirectional twins of gru-rows and lstm-rows (bench/step_torch.py builds the same):
/// [28, 28] rows -> Bidirectional(GRU or LSTM, 64 units, last states, concat) -> Dense(10).
/// Bench-only specs, so the built-in model list (and what mirror-train offers) is unchanged.
nn::ModelSpec bidirectional_twin(const std::string& name) {
  const std::string cell = name == "bigru-rows" ? "gru" : "lstm";
  json layer = {{"type", cell}, {"units", 64}, {"return_sequences", false}};
  if (cell == "lstm") layer["unit_forget_bias"] = true;
  const json spec = {{"name", name},
                     {"input_shape", {28, 28}},
                     {"layers",
                      {{{"type", "bidirectional"}, {"merge_mode", "concat"}, {"layer", layer}},
                       {{"type", "dense"}, {"activation", "linear"}}}}};
  return nn::ModelSpec::from_json(spec, "bench model " + name);
}

/// The model's first Embedding (after any Masking), or null when it reads floats.
const json* first_embedding(const nn::ModelSpec& spec) {
  for (const json& l : spec.layers()) {
    const std::string type = l.value("type", "");
    if (type == "embedding") return &l;
    if (type != "masking" && type != "input") return nullptr;
  }
  return nullptr;
}

/// Feature vectors [F] (Synthetic makes images [C,H,W] and rows [T,F]): an image dataset of
/// [1, 1, F] whose samples are read as [F].
class Vectors final : public data::Dataset {
 public:
  Vectors(std::int64_t size, std::int64_t features, int classes)
      : images_(data::Synthetic::images(size, 11, {1, 1, features}, classes)),
        features_(features) {}
  std::int64_t size() const override { return images_->size(); }
  int num_classes() const override { return images_->num_classes(); }
  DType input_dtype() const override { return DType::kFloat32; }
  Shape sample_shape() const override { return {features_}; }
  bool is_sequence() const override { return false; }
  std::int32_t label(std::int64_t i) const override { return images_->label(i); }
  void decode_float(std::int64_t i, float* dst) const override { images_->decode_float(i, dst); }
  std::string describe() const override { return "synthetic vectors"; }

 private:
  std::shared_ptr<data::Synthetic> images_;
  std::int64_t features_;
};

/// The built-in specs state no input shape for Fashion-MNIST's images and rows: these do.
Shape builtin_input(const std::string& name) {
  if (name == "gru-rows" || name == "lstm-rows") return {28, 28};
  return {1, 28, 28};
}

}  // namespace

BenchModel bench_model(const std::string& name, const std::string& spec_file,
                       std::int64_t samples) {
  BenchModel m;
  nn::ModelSpec spec;
  Shape input;
  if (!spec_file.empty()) {
    spec = nn::ModelSpec::from_file(spec_file);
    m.label = spec.name() + " (" + spec_file + ")";
    input = spec.input_shape();
  } else if (name == "bigru-rows" || name == "bilstm-rows") {
    spec = bidirectional_twin(name);
    m.label = name;
    input = spec.input_shape();
  } else {
    spec = nn::ModelSpec::builtin(name);
    m.label = name;
    input = spec.input_shape().empty() ? builtin_input(name) : spec.input_shape();
  }
  constexpr int kClasses = 10;
  nn::DataShape shape;
  shape.outputs = kClasses;
  if (const json* embedding = first_embedding(spec)) {
    const std::int32_t steps = input.size() == 1 && input[0] > 0 ? static_cast<std::int32_t>(input[0]) : 24;
    std::int32_t vocab = 64;
    if (embedding->contains("input_dim") && (*embedding)["input_dim"].is_number_integer())
      vocab = std::max<std::int32_t>(3, (*embedding)["input_dim"].get<std::int32_t>());
    m.data = data::Synthetic::tokens(samples, 11, kClasses, vocab, steps, steps);
    shape.sample_shape = {steps};
    shape.input_dtype = DType::kInt32;
    shape.vocab = vocab;
  } else {
    if (input.empty()) input = {1, 28, 28};
    for (std::int64_t d : input) {
      MIRROR_CHECK(d > 0, InvalidArgument,
                   m.label + ": the benchmark needs a fixed input shape, the spec leaves " +
                       shape_str(input) + " open; state input_shape in the spec");
    }
    if (input.size() == 1) {
      m.data = std::make_shared<Vectors>(samples, input[0], kClasses);
    } else if (input.size() == 2) {
      m.data = data::Synthetic::rows(samples, 11, input, kClasses);
    } else {
      m.data = data::Synthetic::images(samples, 11, input, kClasses);
    }
    shape.sample_shape = input;
  }
  m.spec = spec.bind(shape);
  return m;
}

data::Batch bench_batch(const data::Dataset& ds, int rank, int world, std::int64_t per,
                        std::int64_t step) {
  const Shape sample = ds.sample_shape();
  Shape shape = {per};
  shape.insert(shape.end(), sample.begin(), sample.end());
  const std::int64_t numel = shape_numel(sample);
  const bool tokens = ds.input_dtype() == DType::kInt32;
  std::vector<float> floats(tokens ? 0 : static_cast<std::size_t>(per * numel));
  std::vector<std::int32_t> ids(tokens ? static_cast<std::size_t>(per * numel) : 0);
  std::vector<std::int32_t> labels;
  std::vector<float> weights(static_cast<std::size_t>(per), 1.0f);
  std::vector<std::int64_t> sample_ids;
  data::Batch b;
  for (std::int64_t i = 0; i < per; ++i) {
    const std::int64_t index = ((step * world + rank) * per + i) % ds.size();
    if (tokens) {
      ds.decode_tokens(index, ids.data() + i * numel, static_cast<std::int32_t>(numel));
    } else {
      ds.decode_float(index, floats.data() + i * numel);
    }
    labels.push_back(ds.label(index));
    sample_ids.push_back(index);
    if (ds.is_sequence()) b.lengths.push_back(ds.length(index));
  }
  b.inputs = tokens ? Tensor::from_vector(ids, shape) : Tensor::from_vector(floats, shape);
  b.labels = Tensor::from_vector(labels, {per});
  b.weights = Tensor::from_vector(weights, {per});
  b.sample_ids = Tensor::from_vector(sample_ids, {per});
  b.global_count = per * world;
  b.step = step;
  return b;
}

}  // namespace mirror::bench
