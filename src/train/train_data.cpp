// The task mirror-train builds from its config: a model spec (a --model-spec file or a built-in)
// bound to its data (the user's files, or Fashion-MNIST for the CNN and row GRU, Debian word
// lists for the word GRU, or seeded synthetic data of the same shapes), optionally cut to a
// seeded random subset.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>
#include <set>
#include <vector>

#include "mirror/data/fashion_mnist.h"
#include "mirror/data/synthetic.h"
#include "mirror/data/words.h"
#include "mirror/json_input.h"
#include "mirror/nn/image_layout.h"
#include "mirror/train/keras_weights.h"
#include "train/dataset_views.h"
#include "train/trainer_impl.h"

namespace mirror::train {
namespace {

/// The samples of `base` at `indices` (ascending), in that order.
class Subset final : public DatasetView {
 public:
  Subset(std::shared_ptr<const data::Dataset> base, std::vector<std::int64_t> indices,
         std::uint64_t seed)
      : DatasetView(std::move(base)), indices_(std::move(indices)), seed_(seed) {}
  std::int64_t size() const override { return static_cast<std::int64_t>(indices_.size()); }
  std::int32_t length(std::int64_t i) const override { return base_->length(at(i)); }
  std::int32_t label(std::int64_t i) const override { return base_->label(at(i)); }
  void decode_labels(std::int64_t i, std::int32_t* dst) const override {
    base_->decode_labels(at(i), dst);
  }
  std::int64_t label_count(std::int64_t i) const override { return base_->label_count(at(i)); }
  void decode_target(std::int64_t i, float* dst) const override {
    base_->decode_target(at(i), dst);
  }
  void decode_float(std::int64_t i, float* dst) const override { base_->decode_float(at(i), dst); }
  void decode_float_drawn(std::int64_t i, std::uint64_t seed, int epoch,
                          float* dst) const override {
    base_->decode_float_drawn(at(i), seed, epoch, dst);
  }
  void decode_tokens(std::int64_t i, std::int32_t* dst, std::int32_t steps) const override {
    base_->decode_tokens(at(i), dst, steps);
  }
  std::string describe() const override {
    return base_->describe() + " (random " + std::to_string(size()) + " of " +
           std::to_string(base_->size()) + ", seed " + std::to_string(seed_) + ")";
  }

 private:
  std::int64_t at(std::int64_t i) const {
    MIRROR_CHECK(
        i >= 0 && i < size(), InvalidArgument,
        "sample " + std::to_string(i) + " outside the subset of " + std::to_string(size()));
    return indices_[static_cast<std::size_t>(i)];
  }
  std::vector<std::int64_t> indices_;
  std::uint64_t seed_;
};

struct Fnv {
  std::uint64_t h = 1469598103934665603ull;
  void mix(std::uint64_t v) {
    for (int b = 0; b < 8; ++b) {
      h ^= (v >> (8 * b)) & 0xff;
      h *= 1099511628211ull;
    }
  }
};

void mix_dataset(Fnv& f, const data::Dataset& ds) {
  f.mix(static_cast<std::uint64_t>(ds.size()));
  f.mix(static_cast<std::uint64_t>(ds.num_classes()));
  for (auto d : ds.sample_shape()) f.mix(static_cast<std::uint64_t>(d));
  if (ds.target_kind() == data::TargetKind::kClass) {
    // Note [Dense labels]: every label of a sample, one per step or pixel.
    for (auto d : ds.label_shape()) f.mix(static_cast<std::uint64_t>(d));
    std::vector<std::int32_t> labels(static_cast<std::size_t>(shape_numel(ds.label_shape())));
    for (std::int64_t i = 0; i < ds.size(); ++i) {
      ds.decode_labels(i, labels.data());
      for (std::int32_t l : labels) f.mix(static_cast<std::uint64_t>(l));
    }
    return;
  }
  for (auto d : ds.target_shape()) f.mix(static_cast<std::uint64_t>(d));
  std::vector<float> target(static_cast<std::size_t>(shape_numel(ds.target_shape())));
  for (std::int64_t i = 0; i < ds.size(); ++i) {
    ds.decode_target(i, target.data());
    for (float v : target) {
      std::uint32_t bits = 0;
      std::memcpy(&bits, &v, sizeof bits);
      f.mix(bits);
    }
  }
}

bool name_ends_with(const std::string& name, const std::string& suffix) {
  return name.size() >= suffix.size() &&
         name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
}

DataSplits image_data(const TrainConfig& c, data::Layout layout) {
  DataSplits d;
  if (c.data == "synthetic") {
    const std::int64_t n = c.train_limit > 0 ? c.train_limit : 2048;
    const std::int64_t m = c.test_limit > 0 ? c.test_limit : 512;
    if (layout == data::Layout::kNCHW) {
      d.train = data::Synthetic::images(n, c.seed);
      d.test = data::Synthetic::images(m, c.seed + 1);
    } else {
      d.train = data::Synthetic::rows(n, c.seed);
      d.test = data::Synthetic::rows(m, c.seed + 1);
    }
  } else {
    const std::string dir = c.data_dir.empty() ? data::kFashionMnistDir : c.data_dir;
    d.train = data::FashionMnist::load(dir, data::Split::kTrain, layout);
    d.test = data::FashionMnist::load(dir, data::Split::kTest, layout);
  }
  return d;
}

DataSplits word_data(const TrainConfig& c) {
  DataSplits d;
  if (c.data == "synthetic") {
    const std::int64_t n = c.train_limit > 0 ? c.train_limit : 4096;
    const std::int64_t m = c.test_limit > 0 ? c.test_limit : 1024;
    d.train = data::Synthetic::tokens(n, c.seed, 5, 64, 1, 24);
    d.test = data::Synthetic::tokens(m, c.seed + 1, 5, 64, 1, 24);
  } else {
    data::WordOptions options;
    if (!c.dict_dir.empty()) options.dict_dir = c.dict_dir;
    options.split = data::Split::kTrain;
    d.train = data::WordLanguages::load(options);
    options.split = data::Split::kTest;
    d.test = data::WordLanguages::load(options);
  }
  return d;
}

/// The model the config names: a built-in, the spec file, or the in-memory spec standing for it
/// (Note [In-memory sources], trainer.h).
nn::ModelSpec load_spec(const TrainConfig& c, const Sources& s) {
  return c.model_spec.empty() ? nn::ModelSpec::builtin(c.model)
         : s.model_spec       ? nn::ModelSpec::from_json(*s.model_spec, c.model_spec)
                              : nn::ModelSpec::from_file(c.model_spec);
}

/// Whether `stated` (open dimensions -1) admits `shape`.
bool admits(const Shape& stated, const Shape& shape) {
  if (stated.size() != shape.size()) return false;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (stated[i] >= 0 && stated[i] != shape[i]) return false;
  }
  return true;
}

/// The first layer of a spec that decides what its input is (preprocessing, dropout, masking
/// and activations pass any input on).
std::string first_shaping_layer(const nn::ModelSpec& spec) {
  static const std::set<std::string> neutral = {"masking",   "dropout",       "activation",
                                                "rescaling", "normalization", "input"};
  for (const auto& l : spec.layers()) {
    const std::string type = l["type"].get<std::string>();
    if (!neutral.count(type)) return type;
  }
  return "";
}

/// Note [Built-in data follow the model]: without data files, a --model-spec trains on the
/// built-in data in the form its input takes: the word lists for a model that starts with an
/// embedding, Fashion-MNIST as rows for an input [28, 28], as images for [1, 28, 28] (Keras's
/// [28, 28, 1]), and as any other shape of 784 elements ([784] for a Dense first) by reading the
/// same pixels in that shape. An input stated nowhere is decided by the first layer: images for
/// 2-D layers, rows for recurrent and 1-D ones, [784] for a Dense. --input-shape reads the
/// images in that shape instead. Anything else is an error naming what would fit.
DataSplits builtin_data_for_spec(const TrainConfig& c, const Sources& s) {
  const nn::ModelSpec spec = load_spec(c, s);
  const std::string first = first_shaping_layer(spec);
  if (first == "embedding") return word_data(c);
  const Shape image = {1, 28, 28}, rows = {28, 28};
  Shape want = c.parsed_input_shape();
  if (want.empty()) want = spec.input_shape();
  if (want.empty()) {
    static const std::set<std::string> sequence = {"gru",
                                                   "lstm",
                                                   "bidirectional",
                                                   "conv1d",
                                                   "maxpool1d",
                                                   "avgpool1d",
                                                   "global_maxpool1d",
                                                   "global_avgpool1d",
                                                   "layer_normalization"};
    want = sequence.count(first) ? rows : first == "dense" ? Shape{784} : image;
  }
  if (admits(want, rows)) return image_data(c, data::Layout::kRows);
  DataSplits d = image_data(c, data::Layout::kNCHW);
  if (admits(want, image)) return d;
  bool known = true;
  for (auto v : want) known = known && v > 0;
  MIRROR_CHECK(known && shape_numel(want) == 28 * 28, InvalidArgument,
               "--model-spec " + c.model_spec + " reads samples " + shape_str(want) +
                   " (NCHW; -1 = any), which the built-in data do not have: they are "
                   "Fashion-MNIST's 28x28 images (a model input [1,28,28], Keras's [28,28,1], "
                   "[28,28] read as 28 rows, or any other shape of 784 elements such as [784]) "
                   "and the word lists (a model that starts with an embedding); train on your "
                   "own data with --train-x/--train-y (docs/data-formats.md)");
  d.train = reshaped(d.train, want);
  d.test = reshaped(d.test, want);
  return d;
}

/// Without data files: the built-in data --model names (by the name's suffix: `*-words` train
/// on the word lists, `*-rows` on the images read as 28 rows of 28 pixels, the others on the
/// images), or the data a --model-spec's input takes.
DataSplits builtin_data(const TrainConfig& c, const Sources& s) {
  if (!c.model_spec.empty()) return builtin_data_for_spec(c, s);
  if (name_ends_with(c.model, "-words")) return word_data(c);
  DataSplits d =
      image_data(c, name_ends_with(c.model, "-rows") ? data::Layout::kRows : data::Layout::kNCHW);
  if (!c.input_shape.empty()) {
    d.train = reshaped(d.train, c.parsed_input_shape());
    d.test = reshaped(d.test, c.parsed_input_shape());
  }
  return d;
}

nn::DataShape data_shape(const data::Dataset& d) {
  nn::DataShape s;
  s.sample_shape = d.sample_shape();
  s.input_dtype = d.input_dtype();
  const bool classes = d.target_kind() == data::TargetKind::kClass;
  s.outputs = classes ? d.num_classes() : shape_numel(d.target_shape());
  s.vocab = d.vocab_size();
  if (classes) s.label_shape = d.label_shape();  // Note [Dense labels]
  // Targets of several axes (an autoencoder's images) are matched by shape, not by a last dense.
  if (!classes && d.target_shape().size() > 1) {
    s.target_shape = d.target_shape();
    s.outputs = 0;
  }
  return s;
}

/// Note [Binary heads]: a model with one output (a last Dense of 1 unit, typically with a
/// sigmoid) on class labels is a binary classifier, as in Keras: labels 0 and 1 become one float
/// target (binary_targets) and the loss binary cross-entropy on the logit, with accuracy at
/// threshold 0.5. Then, and for a sigmoid head on float targets with --loss
/// binary-cross-entropy, the final sigmoid is folded into the loss (Note [Folded sigmoid]).
/// Returns the loss the run uses (c.loss, or binary-cross-entropy for a binary head).
std::string binary_head(const TrainConfig& c, nn::ModelSpec& spec, DataSplits& d,
                        const std::string& what) {
  const data::Dataset& train = *d.train;
  const bool classes = train.target_kind() == data::TargetKind::kClass;
  const std::int64_t units = spec.output_units();
  const bool one_output = units == 1 || (units == 0 && spec.ends_in_sigmoid());
  std::string loss = c.loss;
  if (classes && one_output) {
    const auto kind =
        c.loss == "auto" ? dist::LossKind::kBinaryCrossEntropy : dist::parse_loss(c.loss);
    MIRROR_CHECK(kind != dist::LossKind::kSoftmaxCrossEntropy, InvalidArgument,
                 what +
                     " ends in one output (a binary classifier), which softmax cross-entropy "
                     "cannot train: use --loss binary-cross-entropy (or auto), or end the "
                     "model with a dense of one unit per class");
    MIRROR_CHECK(train.num_classes() <= 2, InvalidArgument,
                 what +
                     " ends in one output (a binary classifier: labels 0 and 1), but the "
                     "labels of " +
                     train.describe() + " make " + std::to_string(train.num_classes()) +
                     " classes: end the model with a dense of " +
                     std::to_string(train.num_classes()) +
                     " units (linear or softmax) for softmax cross-entropy");
    d.train = binary_targets(d.train);
    if (d.test) d.test = binary_targets(d.test);
    if (c.loss == "auto") loss = "binary-cross-entropy";
  } else if (classes && spec.ends_in_sigmoid()) {
    throw InvalidArgument(what + " ends in a sigmoid of " + std::to_string(units) +
                          " outputs, but the data has class labels (" +
                          std::to_string(train.num_classes()) +
                          " classes): a sigmoid head reads labels 0/1 with one output (Dense(1, "
                          "sigmoid)); for several classes end with softmax or linear");
  }
  const bool bce = loss != "auto" && dist::parse_loss(loss) == dist::LossKind::kBinaryCrossEntropy;
  if (bce && spec.ends_in_sigmoid()) spec = spec.with_sigmoid_folded();
  return loss;
}

/// Note [Unstated normalization]: Keras keeps the mean and variance that Normalization.adapt()
/// computed as weights, which to_json() does not write (its config says "mean": null). The
/// canonical spec then has no values, and the model cannot run: refused here, naming the layer
/// and where its values can come from.
void check_normalization_values(const nn::ModelSpec& spec, const std::string& what) {
  int k = 0;
  for (const auto& l : spec.layers()) {
    if (l["type"] != "normalization") continue;
    ++k;
    MIRROR_CHECK(l.contains("mean"), InvalidArgument,
                 what + ": normalization layer " + std::to_string(k) +
                     (l.contains("name") ? " ('" + l["name"].get<std::string>() + "')" : "") +
                     " states no mean and variance: Keras keeps the values adapt() computed as "
                     "weights, which to_json() does not write. State them in the layer "
                     "(Normalization(mean=..., variance=...), or \"mean\"/\"variance\" in its "
                     "config: print(layer.mean, layer.variance) after adapt()), or start from the "
                     "adapted model's weights with --init-weights model.weights.h5");
  }
}

/// Whether the run's loss is softmax cross-entropy (`auto`: class labels).
bool cross_entropy_loss(const std::string& loss, const data::Dataset& train) {
  return loss == "auto" ? train.target_kind() == data::TargetKind::kClass
                        : dist::parse_loss(loss) == dist::LossKind::kSoftmaxCrossEntropy;
}

/// Note [Spec's output width] (dataset_views.h): a last dense wider than the labels' classes
/// wins, with a warning naming the classes no label uses; a narrower one stays an error (bind).
void widen_to_spec(const nn::ModelSpec& spec, DataSplits& d, bool cross_entropy,
                   const std::string& what) {
  const std::int64_t units = spec.output_units();
  const int classes = d.train->num_classes();
  if (!cross_entropy || d.train->target_kind() != data::TargetKind::kClass || units <= classes ||
      units > std::numeric_limits<int>::max())
    return;
  const int wide = static_cast<int>(units);
  d.warnings.push_back(
      what + " ends in " + std::to_string(units) + " outputs, but the training labels make " +
      std::to_string(classes) + " classes: class" +
      (wide - classes == 1 ? " " + std::to_string(classes) + " is"
                           : "es " + std::to_string(classes) + ".." + std::to_string(wide - 1) +
                                 " are") +
      " never a label (trained as Keras does: they only learn to be unlikely)");
  d.train = wider_classes(d.train, wide);
  if (d.test && d.test->target_kind() == data::TargetKind::kClass &&
      d.test->num_classes() <= wide)
    d.test = wider_classes(d.test, wide);
}

/// The file --init-weights reads: the config's path, or the file an in-memory source names.
std::string init_weights_path(const TrainConfig& c, const Sources& s) {
  return s.init_weights_file.value_or(c.init_weights);
}


/// Note [Keras's image layout]: [H, W, C] samples (a channels_last model's, or any image model's
/// under --data-format channels_last) are read as NCHW. Image folders and tar shards are decoded
/// in the model's layout already: --data-format is for arrays (TrainConfig::validate).
void keras_image_layout(const TrainConfig& c, const nn::ModelSpec& spec, DataSplits& d) {
  const nn::DataFormat format = nn::parse_data_format(c.data_format);
  for (std::shared_ptr<const data::Dataset>* split : {&d.train, &d.test}) {
    if (!*split || (*split)->input_dtype() != DType::kFloat32) continue;
    const std::string which = split == &d.train ? "training data" : "test data";
    bool hwc = false;
    try {
      hwc = nn::samples_channels_last(format, spec.channels_last_input(), spec.input_shape(),
                                      (*split)->sample_shape());
    } catch (const InvalidArgument& e) {
      throw InvalidArgument(std::string(e.what()) + " (the " + which + ")");
    }
    if (!hwc) continue;
    *split = channels_first(*split);
    // Image targets (an autoencoder's) come in the inputs' layout: Keras's [H, W, C] too.
    if ((*split)->target_kind() == data::TargetKind::kFloat && (*split)->target_shape().size() == 3)
      *split = targets_channels_first(*split);
  }
}

/// Whether the spec has a Masking layer (an Embedding's mask_zero makes one).
bool has_masking(const nn::ModelSpec& spec) {
  for (const auto& l : spec.layers()) {
    if (l["type"] == "masking") return true;
  }
  return false;
}

/// The spec bound to the training data (which it may view anew: binary labels, Keras's image
/// layout, a wider head), and the loss the run uses; a mismatch names the spec, the data and both
/// values.
nn::ModelSpec bind_to_data(const TrainConfig& c, const Sources& s, DataSplits& d,
                           std::string& loss) {
  nn::ModelSpec spec = load_spec(c, s);
  if (c.sync_batchnorm) spec = spec.with_synchronized_batchnorm();
  const std::string what = c.model_spec.empty() ? "--model " + c.model
                           : s.model_spec       ? c.model_spec
                                                : "--model-spec " + c.model_spec;
  loss = binary_head(c, spec, d, what);
  if (!c.init_weights.empty()) {  // Note [Adapted normalization] (keras_weights.h)
    spec = with_keras_normalization(spec, read_keras_weights_file(init_weights_path(c, s)),
                                    "--init-weights " + c.init_weights);
  }
  check_normalization_values(spec, what);
  // Note [Sequence masks]: a Keras model that states its input length sees every sequence padded
  // to it, as Keras does (pad_sequences), whatever the batch's longest.
  const Shape& stated = spec.input_shape();
  if (spec.keras_masks() && d.train->input_dtype() == DType::kInt32 && stated.size() == 1 &&
      stated[0] > 0) {
    d.train = fixed_length(d.train, stated[0]);
    if (d.test) d.test = fixed_length(d.test, stated[0]);
  }
  keras_image_layout(c, spec, d);
  // Note [Dense labels]: Keras masks the loss with the output's mask; without a Masking layer
  // (mask_zero adds one) there is none, and every step's label counts, padding included.
  if (spec.keras_masks() && d.train->label_shape().size() == 1 && !has_masking(spec)) {
    d.train = every_step_labelled(d.train);
    if (d.test && d.test->label_shape().size() == 1) d.test = every_step_labelled(d.test);
  }
  widen_to_spec(spec, d, cross_entropy_loss(loss, *d.train), what);
  const data::Dataset& train = *d.train;
  const bool cross_entropy = cross_entropy_loss(loss, train);
  MIRROR_CHECK(!spec.softmax_folded() || cross_entropy, InvalidArgument,
               "the model spec ends in a softmax, which Mirror folds into the "
               "softmax-cross-entropy loss, but this run's loss is " +
                   loss + (loss == "auto" ? " (float targets: mse)" : "") +
                   "; use class labels with --loss softmax-cross-entropy, or end the model with "
                   "a linear layer");
  try {
    return spec.bind(data_shape(train));
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(what + " does not fit the training data (" + train.describe() +
                          "): " + e.what());
  }
}

/// Note [In-memory sources] (trainer.h): every source stands for a file the config names.
void check_sources(const TrainConfig& c, const Sources& s) {
  const std::pair<bool, const char*> named[] = {
      {!s.train_x || !c.train_x.empty(), "train_x"},
      {!s.train_y || !c.train_y.empty(), "train_y"},
      {!s.test_x || !c.test_x.empty(), "test_x"},
      {!s.test_y || !c.test_y.empty(), "test_y"},
      {!s.model_spec || !c.model_spec.empty(), "model_spec"},
      {!s.init_weights_file || !c.init_weights.empty(), "init_weights"}};
  for (const auto& [ok, field] : named) {
    MIRROR_CHECK(ok, InvalidArgument,
                 std::string("an in-memory ") + field + " needs a name in the config's " + field);
  }
  MIRROR_CHECK(s.train_x.has_value() == s.train_y.has_value() &&
                   s.test_x.has_value() == s.test_y.has_value(),
               InvalidArgument, "in-memory x and y arrays go together");
}

}  // namespace

std::shared_ptr<const data::Dataset> random_subset(std::shared_ptr<const data::Dataset> dataset,
                                                   std::int64_t n, std::uint64_t seed,
                                                   std::uint64_t salt) {
  if (n <= 0 || n >= dataset->size()) return dataset;
  // The loader's permutation (portable Fisher-Yates), seeded apart from the epochs' orders.
  data::LoaderOptions options;
  options.seed = seed ^ salt;
  options.shuffle = true;
  std::vector<std::int64_t> order = data::epoch_order(*dataset, options, 0);
  order.resize(static_cast<std::size_t>(n));
  std::sort(order.begin(), order.end());
  return std::make_shared<Subset>(std::move(dataset), std::move(order), seed);
}

std::string data_checksum(const data::Dataset& train, const data::Dataset* test) {
  Fnv f;
  mix_dataset(f, train);
  if (test)
    mix_dataset(f, *test);
  else
    f.mix(~0ull);  // no test split
  char buf[32];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(f.h));
  return buf;
}

namespace {

/// The ids the bound model's Embedding reads (its input_dim: stated, or the training data's
/// largest id + 1); 0 for a model without one.
std::int64_t embedding_rows(const nn::ModelSpec& bound) {
  const nlohmann::json spec = bound.to_json();  // kept alive: the loop reads into it
  for (const auto& layer : spec.at("layers")) {
    if (layer.value("type", "") == "embedding") return layer.at("input_dim").get<std::int64_t>();
  }
  return 0;
}

/// Test token ids the model cannot read would stop the run at its first evaluation, an epoch
/// in; refused at load instead, naming the data (token text is checked as it is read).
void check_test_vocabulary(const nn::ModelSpec& bound, const data::Dataset* test) {
  if (test == nullptr || test->vocab_size() <= 0) return;
  const std::int64_t rows = embedding_rows(bound);
  MIRROR_CHECK(rows == 0 || test->vocab_size() <= rows, DataError,
               "the test data (" + test->describe() + ") has token ids up to " +
                   std::to_string(test->vocab_size() - 1) +
                   ", but the model's embedding reads ids below " + std::to_string(rows) +
                   " (its input_dim, or the training data's largest id + 1): give test "
                   "tokens of the training vocabulary, or state a larger input_dim");
}

}  // namespace

ConfigTask task_from_config(const TrainConfig& c, const Sources& s) {
  check_sources(c, s);
  // Note [Raw values]: a model that starts with a Rescaling or Normalization reads pixels 0..255.
  const bool raw = load_spec(c, s).reads_raw_values();
  DataSplits d = c.own_data() ? load_own_data(c, s, raw) : builtin_data(c, s);
  if (raw && !c.own_data() && d.train->input_dtype() == DType::kFloat32) {
    d.train = raw_pixels(d.train);
    if (d.test) d.test = raw_pixels(d.test);
  }
  ConfigTask t;
  const nn::ModelSpec bound = bind_to_data(c, s, d, t.loss);
  check_test_vocabulary(bound, d.test.get());
  t.name = bound.name();
  t.label = t.name;
  if (!c.model_spec.empty()) {
    t.label += " (from " + c.model_spec;
    if (!bound.description().empty())
      t.label += ": \"" + quote_input(bound.description(), 120) + "\"";
    t.label += ")";
  }
  t.warnings = std::move(d.warnings);
  t.task.train = random_subset(d.train, c.train_limit, c.seed, 0x7261696e);  // "rain"
  t.task.test = d.test ? random_subset(d.test, c.test_limit, c.seed, 0x74657374) : nullptr;
  t.task.model_description = bound.to_json().dump();
  const std::uint64_t seed = c.seed;
  t.task.model = [bound, seed](Device d) {
    return nn::make_model(bound, DType::kFloat32, d, seed);
  };
  if (!c.init_weights.empty()) {
    // --init-weights: every replica starts from the file's weights (read once per rank, as the
    // data files are), BatchNorm statistics included.
    const std::string path = c.init_weights;
    auto init = std::make_shared<const NamedTensors>(from_keras_weights(
        bound, read_keras_weights_file(init_weights_path(c, s)), "--init-weights " + path));
    t.task.model = [bound, seed, init, path](Device d) {
      nn::Sequential m = nn::make_model(bound, DType::kFloat32, d, seed);
      assign_model_tensors(m, *init, "--init-weights " + path);
      return m;
    };
    t.label += "; initial weights from " + path;
  }
  return t;
}

}  // namespace mirror::train
