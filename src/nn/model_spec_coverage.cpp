// Note [Keras layer coverage]: the table of docs/model-spec.md that says, for every class of
// keras.layers, whether Mirror's spec parser reads it (supported), reads it with some fields
// at their defaults only (partly: what is missing), or refuses it (and why). The parser's own
// table of layer names is the source (ModelSpecParser::layer publishes it), so a layer added to
// the parser appears as supported by itself; the notes below say what "partly" lacks, and the
// reasons why the others are refused. tests/nn_spec_coverage_test.cpp regenerates the table
// from the Keras class list (tests/data/keras/layers.txt) and fails when the page differs.
#include <algorithm>
#include <map>
#include <mutex>

#include "mirror/nn/models.h"
#include "nn/model_spec_augment.h"
#include "nn/model_spec_fields.h"
#include "nn/model_spec_internal.h"

namespace mirror::nn::detail {

namespace {

std::mutex& names_mutex() {
  static std::mutex m;
  return m;
}

std::vector<std::vector<std::string>>& published() {
  static std::vector<std::vector<std::string>> names;
  return names;
}

/// Note [Augmentation draws] (src/math/random_augment.h): Keras's formulas, Mirror's draws.
constexpr const char* kAugmentDraws =
    "Keras's formulas; draws from the step seed and each sample's id (Keras's seed ignored)";

/// What a layer the parser reads does not do (Keras class -> note); no note: supported.
const std::map<std::string, std::string>& partly() {
  static const std::map<std::string, std::string> notes = {
      {"Conv2D", "dilation_rate 1 only; one stride for height and width"},
      {"MaxPooling2D", "one pool size and one stride for height and width"},
      {"AveragePooling2D", "one pool size and one stride for height and width"},
      {"Dense",
       "use_bias true only; features [F], sequences [T, F] (each step) and channels_last images "
       "(each pixel)"},
      {"Dropout", "noise_shape's batch entry None (each sample's mask is its own)"},
      {"Embedding", "sparse false, no LoRA"},
      {"Masking", "mask_value 0 only; masks trailing padding"},
      {"GRU",
       "reset_after true, tanh and sigmoid, no dropout; not stateful, go_backwards or "
       "return_state"},
      {"LSTM", "tanh and sigmoid, no dropout; not stateful, go_backwards or return_state"},
      {"Bidirectional", "wraps GRU or LSTM; merge_mode not null"},
      {"Conv1D", "channels_last; use_bias true; groups 1; no dilation with strides above 1"},
      {"MaxPooling1D", "channels_last"},
      {"AveragePooling1D", "channels_last"},
      {"GlobalMaxPooling1D", "keepdims false; channels_last"},
      {"GlobalAveragePooling1D", "keepdims false; channels_last"},
      {"Activation",
       "linear, relu, tanh, sigmoid, silu (swish), hard_silu (hard_swish), hard_sigmoid, gelu, "
       "relu6, elu, leaky_relu; softmax and sigmoid at the model's end (folded into the loss)"},
      {"Attention", "score_mode dot only; masks of trailing padding (the sequence lengths)"},
      {"AdditiveAttention", "masks of trailing padding (the sequence lengths)"},
      {"MultiHeadAttention",
       "no use_gate, sliding_window or flash_attention; masks of trailing padding"},
      {"Conv2DTranspose", "output_padding null and dilation_rate 1 only"},
      {"BatchNormalization",
       "the channel axis only (-1, or 3 of an image); default initializers; no renorm; not over "
       "a sequence Keras masks"},
      {"LayerNormalization",
       "the last axis only (-1, or 1 of features, 2 of sequences, 3 of a channels_last image: "
       "each pixel's channels); rms_scaling false"},
      {"Concatenate", "the channel axis only (-1, or 3 of images)"},
      {"Normalization",
       "the channel axis (-1, or [3] of an image) or None; mean and variance stated in the config "
       "(adapt()'s values are weights to_json() does not write)"},
      {"Resizing", "bilinear and nearest; no pad_to_aspect_ratio, no antialias"},
      {"InputLayer", "one input; sparse and ragged false"},
      {"RandomFlip", kAugmentDraws},
      {"RandomTranslation", kAugmentDraws},
      {"RandomZoom", kAugmentDraws},
      {"RandomRotation", kAugmentDraws},
      {"RandomContrast", kAugmentDraws},
      {"RandomBrightness", kAugmentDraws},
      {"RandomCrop",
       "a crop offset per sample (Keras: per batch); outside training Keras's centred box "
       "resized, where Keras 3 returns the uncropped image"},
  };
  return notes;
}

std::string refused(const std::string& k) {
  const auto starts = [&](const char* p) { return k.rfind(p, 0) == 0; };
  const auto ends = [&](const char* s) {
    const std::size_t n = std::char_traits<char>::length(s);
    return k.size() >= n && k.compare(k.size() - n, n, s) == 0;
  };
  if (starts("Random") || k == "AugMix" || k == "CutMix" || k == "MixUp" || k == "RandAugment")
    return "random augmentation: not implemented (Mirror's data loader augments: --augment)";
  if (k == "AutoContrast" || k == "Equalization" || k == "Solarization" ||
      k == "ContrastLimitedAdaptiveHistogramEqualization" || k == "MaxNumBoundingBoxes")
    return "image or bounding-box preprocessing: prepare the data before training";
  if (k == "CategoryEncoding" || k == "Discretization" || k == "HashedCrossing" || k == "Hashing" ||
      k == "IntegerLookup" || k == "StringLookup" || k == "TextVectorization")
    return "lookup and text preprocessing: give Mirror token ids (--train-tokens, .npy)";
  if (k == "Lambda" || k == "Layer" || k == "Wrapper" || k == "RNN" || ends("Cell") ||
      k == "StackedRNNCells" || k == "JaxLayer" || k == "FlaxLayer" || k == "TorchModuleWrapper" ||
      k == "TFSMLayer" || k == "Pipeline")
    return "Python code, a cell or a wrapper of other frameworks: no JSON Mirror can build";
  if (ends("3D")) return "3-D volumes: Mirror's images are 2-D";
  if (k == "MelSpectrogram" || k == "STFTSpectrogram") return "audio preprocessing";
  if (k == "Softmax") return "a Softmax layer: use Activation(\"softmax\") at the end (folded)";
  if (k == "SimpleRNN" || starts("ConvLSTM")) return "not implemented (GRU and LSTM are)";
  return "not implemented";
}

std::string escaped(const std::string& s) {
  std::string out;
  for (char c : s) out += c == '|' ? std::string("\\|") : std::string(1, c);
  return out;
}

}  // namespace

void set_layer_names(std::vector<std::vector<std::string>> names) {
  std::lock_guard<std::mutex> lock(names_mutex());
  if (published().empty()) published() = std::move(names);
}

std::vector<std::vector<std::string>> parser_layer_names() {
  // Parsing any spec runs ModelSpecParser::layer, which publishes its table.
  ModelSpec::from_json(nlohmann::json::array({{{"type", "flatten"}}}), "coverage");
  std::lock_guard<std::mutex> lock(names_mutex());
  std::vector<std::vector<std::string>> names = published();
  // Read outside the parser's table, at its augmentation branch (model_spec_augment.cpp).
  for (const auto& spellings : augment_layer_names()) names.push_back(spellings);
  return names;
}

std::vector<LayerCoverage> keras_layer_coverage(const std::vector<std::string>& classes) {
  const auto names = parser_layer_names();
  std::vector<LayerCoverage> rows;
  for (const std::string& k : classes) {
    const std::string low = spec_fields::lower(k);
    bool read = low == "inputlayer";
    std::string type = read ? "input" : "";
    for (const auto& entry : names) {
      if (std::find(entry.begin(), entry.end(), low) == entry.end()) continue;
      read = true;
      type = entry.front();
    }
    LayerCoverage row{k, type, "refused", ""};
    if (read) {
      const auto note = partly().find(k);
      row.status = note == partly().end() ? "supported" : "partly";
      row.note = note == partly().end() ? "" : note->second;
    } else {
      row.note = refused(k);
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

std::string keras_layer_coverage_markdown(const std::vector<std::string>& classes,
                                          const std::string& keras_version) {
  const auto rows = keras_layer_coverage(classes);
  int counts[3] = {0, 0, 0};
  for (const auto& r : rows) counts[r.status == "supported" ? 0 : r.status == "partly" ? 1 : 2]++;
  std::string md = "Every class of `keras.layers` in Keras " + keras_version + " (" +
                   std::to_string(rows.size()) + "): " + std::to_string(counts[0]) +
                   " supported, " + std::to_string(counts[1]) + " partly, " +
                   std::to_string(counts[2]) + " refused.\n\n";
  md += "| Keras class | Mirror type | status | what is missing, or why refused |\n";
  md += "| --- | --- | --- | --- |\n";
  for (const auto& r : rows) {
    md += "| `" + r.keras_class + "` | " + (r.type.empty() ? "" : "`" + r.type + "`") + " | " +
          r.status + " | " + escaped(r.note) + " |\n";
  }
  return md;
}

}  // namespace mirror::nn::detail
