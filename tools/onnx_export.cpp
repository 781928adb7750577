// export_onnx: Mirror's layers as ONNX opset-17 ops. Note [Export lengths]: Mirror's sequence
// layers read one per-batch vector of lengths (ForwardContext::lengths) that the data (token ids:
// last non-zero id + 1) or a Masking layer sets and that Conv1D / Pool1D shorten and a global
// pool clears. The graph carries the same vector as an int64 [N] tensor, updated in layer
// order exactly where Mirror's layers update ctx.lengths, and uses it where Mirror does:
// sequence_lens of GRU/LSTM, zeros past the length, and steps that may not win a max or count
// in an average. Sequence layers live in onnx_export_sequence.cpp.
#include "tools/onnx_export.h"

#include <cmath>
#include <utility>

#include "mirror/error.h"
#include "mirror/nn/cnn_layers.h"
#include "tools/onnx_export_internal.h"

namespace mirror::onnx {
namespace detail {

std::vector<float> values_of(const Tensor& t) {
  const Tensor host = t.to(Device::cpu());
  MIRROR_CHECK(host.dtype() == DType::kFloat32, InvalidArgument,
               "mirror-export writes float32 weights; a tensor is " + host.str());
  return host.to_vector<float>();
}

std::vector<std::int64_t> dims_of(const Tensor& t) {
  return std::vector<std::int64_t>(t.shape().begin(), t.shape().end());
}

std::string weight(Ctx& c, const nn::Parameter& p) {
  return c.b.floats(p.name, dims_of(p.value), values_of(p.value));
}

std::string activation(Ctx& c, const std::string& x, const std::string& name,
                       const std::string& hint) {
  if (name == "linear") return x;
  if (name == "relu") return c.b.op("Relu", {x}, {}, hint);
  if (name == "tanh") return c.b.op("Tanh", {x}, {}, hint);
  if (name == "sigmoid") return c.b.op("Sigmoid", {x}, {}, hint);
  if (name == "gelu") {  // the erf form: x * (1 + erf(x / sqrt 2)) / 2 (Gelu is opset 20)
    const std::string e =
        c.b.op("Erf", {c.b.op("Div", {x, c.b.scalar_f(static_cast<float>(std::sqrt(2.0)))})});
    const std::string one_plus = c.b.op("Add", {e, c.b.scalar_f(1.0f)});
    return c.b.op("Mul", {c.b.op("Mul", {x, one_plus}), c.b.scalar_f(0.5f)}, {}, hint);
  }
  // Note [Activations through the input] (nn/keras_ops_layers.h).
  if (name == "silu") return c.b.op("Mul", {x, c.b.op("Sigmoid", {x})}, {}, hint);
  if (name == "hard_sigmoid" || name == "hard_silu") {  // relu6(x + 3) / 6 = clip(x / 6 + 1/2)
    const std::string h =
        c.b.op("HardSigmoid", {x}, {attr_f("alpha", 1.0f / 6.0f), attr_f("beta", 0.5f)},
               name == "hard_sigmoid" ? hint : std::string());
    return name == "hard_sigmoid" ? h : c.b.op("Mul", {x, h}, {}, hint);
  }
  if (name == "relu6") {
    return c.b.op("Clip", {x, c.b.scalar_f(0.0f), c.b.scalar_f(6.0f)}, {}, hint);
  }
  if (name == "elu") return c.b.op("Elu", {x}, {attr_f("alpha", 1.0f)}, hint);
  if (name == "leaky_relu") return c.b.op("LeakyRelu", {x}, {attr_f("alpha", 0.2f)}, hint);
  throw InvalidArgument(hint + ": activation '" + name + "' has no ONNX mapping");
}

std::string transpose(Ctx& c, const std::string& x, std::vector<std::int64_t> perm) {
  return c.b.op("Transpose", {x}, {attr("perm", std::move(perm))});
}

}  // namespace detail

namespace {
using namespace detail;

/// TensorFlow's "same" split of a window over `size` (Note [Same padding], docs/model-spec.md):
/// {before, after}.
std::pair<std::int64_t, std::int64_t> same_pads(std::int64_t size, std::int64_t k,
                                                std::int64_t stride) {
  const std::int64_t out = (size + stride - 1) / stride;
  const std::int64_t total = std::max<std::int64_t>((out - 1) * stride + k - size, 0);
  return {total / 2, total - total / 2};
}

/// ONNX pads [top, left, bottom, right] for a square window on [C, H, W].
std::vector<std::int64_t> pads_2d(const Shape& in, std::int64_t k, std::int64_t stride,
                                  const std::string& padding) {
  if (padding != "same") return {0, 0, 0, 0};
  const auto [top, bottom] = same_pads(in[1], k, stride);
  const auto [left, right] = same_pads(in[2], k, stride);
  return {top, left, bottom, right};
}

std::string dense(Ctx& c, nn::Layer& l, const std::string& x, const Shape& in) {
  const auto params = l.parameters();
  if (in.size() == 1) {
    const std::string y =
        c.b.op("Gemm", {x, weight(c, *params[0]), weight(c, *params[1])}, {}, l.name());
    return activation(c, y, l.config().at("activation"), l.name());
  }
  // A sequence [N, T, F]: every step (MatMul broadcasts over N and T).
  const std::string y = c.b.op(
      "Add", {c.b.op("MatMul", {x, weight(c, *params[0])}), weight(c, *params[1])}, {}, l.name());
  const std::string out = activation(c, y, l.config().at("activation"), l.name());
  // Note [Sequence masks]: Mirror's sequences stay zero past their lengths.
  return c.lengths.empty() || c.keras_masks ? out : fill_past(c, out, c.lengths, 0.0f);
}

std::string conv2d(Ctx& c, nn::Layer& l, const std::string& x, const Shape& in) {
  const auto cfg = l.config();
  const auto params = l.parameters();
  const std::int64_t kh = cfg["kernel_size"][0], kw = cfg["kernel_size"][1], s = cfg["strides"];
  std::vector<std::int64_t> pads = {0, 0, 0, 0};
  if (cfg["padding"] == "same") {
    const auto [top, bottom] = same_pads(in[1], kh, s);
    const auto [left, right] = same_pads(in[2], kw, s);
    pads = {top, left, bottom, right};
  }
  std::vector<std::string> inputs = {x, weight(c, *params[0])};
  if (params.size() > 1) inputs.push_back(weight(c, *params[1]));
  const std::string y =
      c.b.op("Conv", inputs,
             {attr("kernel_shape", std::vector<std::int64_t>{kh, kw}),
              attr("strides", std::vector<std::int64_t>{s, s}), attr("pads", pads)},
             l.name());
  return activation(c, y, cfg.at("activation"), l.name());
}

std::string pool2d(Ctx& c, nn::Layer& l, const std::string& x, const Shape& in, bool max) {
  const auto cfg = l.config();
  const std::int64_t k = cfg["pool_size"], s = cfg["strides"];
  std::vector<Attribute> attrs = {attr("kernel_shape", std::vector<std::int64_t>{k, k}),
                                  attr("strides", std::vector<std::int64_t>{s, s}),
                                  attr("pads", pads_2d(in, k, s, cfg["padding"]))};
  // Padded positions never win a max (ONNX ignores them) nor count in an average (TensorFlow).
  if (!max) attrs.push_back(attr("count_include_pad", 0));
  return c.b.op(max ? "MaxPool" : "AveragePool", {x}, attrs, l.name());
}

/// A normalization's gamma and beta over n features: its parameters, or ones and zeros where
/// the layer has scale: false or center: false (ONNX's operators require both).
std::pair<std::string, std::string> scale_and_shift(Ctx& c, nn::Layer& l,
                                                    const nlohmann::json& cfg, std::int64_t n) {
  const auto params = l.parameters();
  std::size_t next = 0;
  const std::string gamma = cfg["scale"].get<bool>()
                                ? weight(c, *params[next++])
                                : c.b.floats("ones", {n}, std::vector<float>(n, 1));
  const std::string beta = cfg["center"].get<bool>()
                               ? weight(c, *params[next++])
                               : c.b.floats("zeros", {n}, std::vector<float>(n, 0));
  return {gamma, beta};
}

std::string batch_norm(Ctx& c, nn::Layer& l, const std::string& x, const Shape& in) {
  const auto cfg = l.config();
  const std::int64_t channels = in.size() == 2 ? in[1] : in[0];  // [T, F]: F; else dim 1
  const auto buffers = l.buffers();
  const auto [gamma, beta] = scale_and_shift(c, l, cfg, channels);
  const std::string mean =
      c.b.floats(buffers[0]->name, dims_of(buffers[0]->value), values_of(buffers[0]->value));
  const std::string var =
      c.b.floats(buffers[1]->name, dims_of(buffers[1]->value), values_of(buffers[1]->value));
  const std::vector<Attribute> attrs = {attr_f("epsilon", cfg["epsilon"].get<float>())};
  if (in.size() != 2)
    return c.b.op("BatchNormalization", {x, gamma, beta, mean, var}, attrs, l.name());
  // Sequences [N, T, F]: the channel axis is the last; ONNX's is 1.
  const std::string y = c.b.op(
      "BatchNormalization", {transpose(c, x, {0, 2, 1}), gamma, beta, mean, var}, attrs, l.name());
  return transpose(c, y, {0, 2, 1});
}

std::string layer_norm(Ctx& c, nn::Layer& l, const std::string& x, const Shape& in) {
  const auto cfg = l.config();
  const auto [gamma, beta] = scale_and_shift(c, l, cfg, in.back());
  return c.b.op("LayerNormalization", {x, gamma, beta},
                {attr("axis", -1), attr_f("epsilon", cfg["epsilon"].get<float>())}, l.name());
}

std::string zero_padding(Ctx& c, nn::Layer& l, const std::string& x) {
  const auto p = l.config()["padding"];
  const std::int64_t top = p[0][0], bottom = p[0][1], left = p[1][0], right = p[1][1];
  return c.b.op("Pad", {x, c.b.ints({0, 0, top, left, 0, 0, bottom, right})},
                {attr("mode", "constant")}, l.name());
}

/// One layer: its output tensor's name.
std::string export_layer(Ctx& c, nn::Layer& l, const std::vector<std::string>& xs,
                         const Shape& in) {
  const std::string kind = l.kind();
  const std::string& x = xs.front();
  // Not mapped yet (no exact ONNX graph checked against Keras here): a grouped convolution, and
  // a Dense or LayerNormalization over an image's channels (Note [Keras layers on image
  // channels], nn/image_channels.h), which the NCHW mappings below would get wrong.
  const auto cfg = l.config();
  const bool grouped = kind == "conv2d" && cfg.value("groups", 1) != 1;
  if (grouped || (cfg.is_object() && cfg.value("channels_last_image", false))) {
    throw InvalidArgument("layer " + l.name() + " (" + kind +
                          (grouped ? ", groups " + cfg["groups"].dump()
                                   : " over an image's channels") +
                          ") cannot be exported to ONNX yet: mirror-export has no exact mapping "
                          "for it (docs/predict-export.md lists the supported layers)");
  }
  if (kind == "dense") return dense(c, l, x, in);
  if (kind == "conv2d") return conv2d(c, l, x, in);
  if (kind == "max_pooling2d") return pool2d(c, l, x, in, true);
  if (kind == "average_pooling2d") return pool2d(c, l, x, in, false);
  if (kind == "global_average_pooling2d")
    return c.b.op("Flatten", {c.b.op("GlobalAveragePool", {x}, {}, l.name())}, {attr("axis", 1)});
  if (kind == "flatten") return c.b.op("Flatten", {x}, {attr("axis", 1)}, l.name());
  if (kind == "activation") {
    const std::string act = l.config().at("activation");
    const std::string y = activation(c, x, act, l.name());
    // Note [Sequence masks]: a sigmoid keeps Mirror's sequences zero past their lengths.
    const bool zero = act == "sigmoid" && in.size() == 2 && !c.lengths.empty() && !c.keras_masks;
    return zero ? fill_past(c, y, c.lengths, 0.0f) : y;
  }
  if (kind == "dropout") return c.b.op("Identity", {x}, {}, l.name());  // inference: identity
  if (kind == "batch_normalization") return batch_norm(c, l, x, in);
  if (kind == "layer_normalization") return layer_norm(c, l, x, in);
  if (kind == "zero_padding2d") return zero_padding(c, l, x);
  if (kind == "add") return c.b.op(xs.size() == 2 ? "Add" : "Sum", xs, {}, l.name());
  if (kind == "concatenate")  // the channel axis: 1 of NCHW and [N, F], 2 of sequences [N, T, F]
    return c.b.op("Concat", xs, {attr("axis", in.size() == 2 ? 2 : 1)}, l.name());
  if (kind == "embedding")
    return c.b.op("Gather", {weight(c, *l.parameters()[0]), x}, {attr("axis", 0)}, l.name());
  if (kind == "masking") {
    c.lengths = lengths_of_input(c, x, in.size() == 1);
    return x;
  }
  if (std::string y; export_sequence_layer(c, l, x, in, y)) return y;
  if (std::string y; export_preprocessing_layer(c, l, x, in, y)) return y;
  if (std::string y; export_keras_layer(c, l, xs, in, y)) return y;
  throw InvalidArgument("layer " + l.name() + " (" + kind +
                        ") cannot be exported to ONNX: mirror-export has no exact mapping for "
                        "it (docs/predict-export.md lists the supported layers)");
}

}  // namespace

std::string detail::export_any_layer(Ctx& c, nn::Layer& l, const std::vector<std::string>& xs,
                                     const Shape& in) {
  return export_layer(c, l, xs, in);
}

namespace {

std::vector<std::string> dims(const Shape& sample, const std::string& batch, bool dynamic_t) {
  std::vector<std::string> out = {batch};
  for (std::size_t i = 0; i < sample.size(); ++i)
    out.push_back(i == 0 && dynamic_t ? std::string("T") : std::to_string(sample[i]));
  return out;
}

}  // namespace

Graph export_onnx(nn::Sequential& model, const ExportOptions& options) {
  MIRROR_CHECK(model.built(), InvalidArgument, "export_onnx: the model is not built");
  Graph g;
  g.name = options.name;
  g.doc = "Exported by mirror-export: " + model.config().dump();
  GraphBuilder b(g);
  Ctx c{b, "", options.tokens, model.keras_masks()};
  const std::string input = "input";
  g.inputs.push_back({input, options.tokens ? ElemType::kInt32 : ElemType::kFloat,
                      dims(model.input_shape(), "N", options.tokens)});
  // Token data carries its lengths from the start (the loader's), as in training, except with
  // Keras's masks (Note [Sequence masks]).
  const std::string input_lengths =
      options.tokens && !c.keras_masks ? lengths_of_input(c, input, true) : "";
  const auto& layers = model.layers();
  std::vector<std::string> outputs(layers.size()), lengths(layers.size());
  std::vector<Shape> shapes = model.layer_output_shapes();
  for (std::size_t i = 0; i < layers.size(); ++i) {
    std::vector<std::string> xs;
    Shape in;
    // Each layer sees its input's lengths; a merge the longest (Sequential::forward).
    c.lengths.clear();
    bool unmasked = false;
    for (int j : model.layer_inputs(i)) {
      const bool model_input = j == nn::Sequential::kModelInput;
      const auto k = static_cast<std::size_t>(j);
      xs.push_back(model_input ? input : outputs[k]);
      in = model_input ? model.input_shape() : shapes[k];
      const std::string& l = model_input ? input_lengths : lengths[k];
      unmasked = unmasked || l.empty();
      c.lengths = c.lengths.empty() ? l : b.op("Max", {c.lengths, l});
    }
    if (unmasked) c.lengths.clear();
    outputs[i] = export_layer(c, *layers[i], xs, in);
    if (shapes[i].size() < 2 && in.size() >= 2) c.lengths.clear();  // no time axis any more
    lengths[i] = c.lengths;
  }
  std::string last = outputs.back();
  if (options.probabilities && options.sigmoid) last = b.op("Sigmoid", {last});
  if (options.probabilities && !options.sigmoid) last = b.op("Softmax", {last}, {attr("axis", -1)});
  g.nodes.push_back({"Identity", "output", {last}, {"output"}, {}});
  const bool dynamic_out = options.tokens && model.output_shape().size() >= 2;
  g.outputs.push_back({"output", ElemType::kFloat, dims(model.output_shape(), "N", dynamic_out)});
  return g;
}

}  // namespace mirror::onnx
