// The Keras weight conversion of every built-in layer type (Note [Keras weights] in
// include/mirror/train/keras_weights.h): Mirror's layouts (OIHW kernels, PyTorch's GRU gates r, z,
// n and two biases, the LSTM's two biases) against Keras's (HWIO kernels, z, r, h, one LSTM bias).
// A new layer type adds its entry here (or calls register_keras_conversion).
#include <algorithm>
#include <map>
#include <string>

#include "mirror/error.h"
#include "mirror/train/keras_weights.h"

namespace mirror::train::detail {

using nlohmann::json;
using namespace keras_layout;  // NOLINT(google-build-using-namespace): this file's vocabulary

namespace {

using Vars = std::vector<KerasVariables>;

const Tensor& at(const LayerTensors& t, const std::string& what) {
  const auto it = t.find(what);
  MIRROR_CHECK(it != t.end(), Error, "Keras weights: the layer has no tensor '" + what + "'");
  return it->second;
}

/// Keras's variables of the object at `path` (relative to the layer).
const std::vector<Tensor>& vars(const Vars& v, const std::string& path) {
  for (const KerasVariables& k : v) {
    if (k.path == path) return k.values;
  }
  throw Error("Keras weights: no Keras object '" + path + "'");
}

Tensor features(const KerasLayerInfo& info, const Tensor& t) {
  return info.feature_order.empty() ? t : gather_rows(t, info.feature_order);
}

Tensor mirror_features(const KerasLayerInfo& info, const Tensor& t) {
  return info.feature_order.empty() ? t : gather_rows(t, inverse(info.feature_order));
}

Tensor zeros_like(const Tensor& t) { return Tensor::zeros(t.shape(), DType::kFloat32); }

Tensor stack2(const Tensor& a, const Tensor& b) {
  Tensor y = Tensor::empty({2, a.numel()}, DType::kFloat32);
  std::copy_n(a.data<float>(), a.numel(), y.data<float>());
  std::copy_n(b.data<float>(), b.numel(), y.data<float>() + a.numel());
  return y;
}

Tensor row(const Tensor& t, std::int64_t r) {
  const std::int64_t n = t.dim(1);
  Tensor y = Tensor::empty({n}, DType::kFloat32);
  std::copy_n(t.data<float>() + r * n, n, y.data<float>());
  return y;
}

Tensor add(const Tensor& a, const Tensor& b) {
  Tensor y = a.clone();
  for (std::int64_t i = 0; i < y.numel(); ++i) y.data<float>()[i] += b.data<float>()[i];
  return y;
}

// ---------------------------------------------------------------- dense, convolutions

KerasConversion dense() {
  KerasConversion c;
  c.keras_class = "dense";
  c.feature_order = FeatureOrder::kConsume;
  // Kernel [in, units] in both; after a Flatten of images its rows follow Keras's order.
  c.to_keras = [](const KerasLayerInfo& info, const LayerTensors& t) {
    return Vars{{"", "", {features(info, at(t, "kernel")), at(t, "bias")}}};
  };
  c.from_keras = [](const KerasLayerInfo& info, const Vars& v) {
    const auto& k = vars(v, "");
    return LayerTensors{{"kernel", mirror_features(info, k[0])}, {"bias", k[1]}};
  };
  return c;
}

/// A kernel and an optional bias whose kernel is transposed by `to` (and back by `from`).
KerasConversion kernel_bias(const std::string& keras_class, std::vector<int> to,
                            std::vector<int> from) {
  KerasConversion c;
  c.keras_class = keras_class;
  c.to_keras = [to](const KerasLayerInfo&, const LayerTensors& t) {
    KerasVariables k{"", "", {transpose(at(t, "kernel"), to)}};
    if (t.count("bias")) k.values.push_back(at(t, "bias"));
    return Vars{k};
  };
  c.from_keras = [from](const KerasLayerInfo&, const Vars& v) {
    const auto& k = vars(v, "");
    LayerTensors out{{"kernel", transpose(k[0], from)}};
    if (k.size() > 1) out["bias"] = k[1];
    return out;
  };
  return c;
}

KerasConversion embedding() {
  KerasConversion c;
  c.keras_class = "embedding";
  c.to_keras = [](const KerasLayerInfo&, const LayerTensors& t) {
    return Vars{{"", "", {at(t, "embeddings")}}};
  };
  c.from_keras = [](const KerasLayerInfo&, const Vars& v) {
    return LayerTensors{{"embeddings", vars(v, "")[0]}};
  };
  return c;
}

// ---------------------------------------------------------------- recurrent

/// Mirror's GRU gates r, z, n <-> Keras's z, r, h (the swap is its own inverse).
const std::vector<int> kSwapRz = {1, 0, 2};

/// One GRU or LSTM cell: Mirror tensors "<prefix>kernel", ... <-> the cell's three variables.
std::vector<Tensor> cell_to_keras(bool gru, const LayerTensors& t, const std::string& prefix) {
  const Tensor& k = at(t, prefix + "kernel");
  const Tensor& rk = at(t, prefix + "recurrent_kernel");
  const Tensor& b = at(t, prefix + "bias");
  const Tensor& rb = at(t, prefix + "recurrent_bias");
  if (gru) {
    return {transpose(reorder_blocks(k, kSwapRz), {1, 0}),
            transpose(reorder_blocks(rk, kSwapRz), {1, 0}),
            stack2(reorder_blocks(b, kSwapRz), reorder_blocks(rb, kSwapRz))};
  }
  // Keras's LSTM gates i, f, c, o are Mirror's i, f, g, o; its one bias is the sum of both.
  return {transpose(k, {1, 0}), transpose(rk, {1, 0}), add(b, rb)};
}

void cell_from_keras(bool gru, const std::vector<Tensor>& v, const std::string& prefix,
                     LayerTensors& out) {
  if (gru) {
    out[prefix + "kernel"] = reorder_blocks(transpose(v[0], {1, 0}), kSwapRz);
    out[prefix + "recurrent_kernel"] = reorder_blocks(transpose(v[1], {1, 0}), kSwapRz);
    out[prefix + "bias"] = reorder_blocks(row(v[2], 0), kSwapRz);
    out[prefix + "recurrent_bias"] = reorder_blocks(row(v[2], 1), kSwapRz);
    return;
  }
  out[prefix + "kernel"] = transpose(v[0], {1, 0});
  out[prefix + "recurrent_kernel"] = transpose(v[1], {1, 0});
  out[prefix + "bias"] = v[2];
  out[prefix + "recurrent_bias"] = zeros_like(v[2]);
}

KerasConversion recurrent(const std::string& kind) {
  KerasConversion c;
  c.keras_class = kind;
  const bool gru = kind == "gru";
  c.to_keras = [gru](const KerasLayerInfo&, const LayerTensors& t) {
    return Vars{{"cell", "", cell_to_keras(gru, t, "")}};
  };
  c.from_keras = [gru](const KerasLayerInfo&, const Vars& v) {
    LayerTensors out;
    cell_from_keras(gru, vars(v, "cell"), "", out);
    return out;
  };
  return c;
}

KerasConversion bidirectional() {
  KerasConversion c;
  c.keras_class = "bidirectional";
  auto is_gru = [](const KerasLayerInfo& info) { return (*info.spec)["layer"]["type"] == "gru"; };
  c.to_keras = [is_gru](const KerasLayerInfo& info, const LayerTensors& t) {
    const bool gru = is_gru(info);
    return Vars{{"forward_layer/cell", "", cell_to_keras(gru, t, "forward/")},
                {"backward_layer/cell", "", cell_to_keras(gru, t, "backward/")}};
  };
  c.from_keras = [is_gru](const KerasLayerInfo& info, const Vars& v) {
    LayerTensors out;
    cell_from_keras(is_gru(info), vars(v, "forward_layer/cell"), "forward/", out);
    cell_from_keras(is_gru(info), vars(v, "backward_layer/cell"), "backward/", out);
    return out;
  };
  return c;
}

// ---------------------------------------------------------------- normalisation

/// Per-feature tensors in Keras's order (`names`, those the layer has): BatchNormalization's
/// gamma, beta, moving_mean, moving_variance; LayerNormalization's gamma, beta. After a Flatten
/// of images they follow Keras's feature order.
KerasConversion per_feature(const std::string& keras_class, std::vector<std::string> names) {
  KerasConversion c;
  c.keras_class = keras_class;
  c.feature_order = FeatureOrder::kPass;
  c.to_keras = [names](const KerasLayerInfo& info, const LayerTensors& t) {
    KerasVariables k{"", "", {}};
    for (const std::string& n : names) {
      if (t.count(n)) k.values.push_back(features(info, at(t, n)));
    }
    return Vars{k};
  };
  c.from_keras = [names](const KerasLayerInfo& info, const Vars& v) {
    const auto& k = vars(v, "");
    const json& spec = *info.spec;
    LayerTensors out;
    std::size_t i = 0;
    for (const std::string& n : names) {
      const bool present = (n != "gamma" || spec.value("scale", true)) &&
                           (n != "beta" || spec.value("center", true));
      if (present && i < k.size()) out[n] = mirror_features(info, k[i++]);
    }
    return out;
  };
  return c;
}

/// DepthwiseConv2D: Mirror [C * m, 1, kh, kw] (channel c * m + j), Keras [kh, kw, C, m].
/// SeparableConv2D adds a pointwise kernel: Mirror [filters, C * m, 1, 1], Keras [1, 1, C * m,
/// filters], and names its depthwise kernel depthwise_kernel.
Tensor depthwise_to_keras(const KerasLayerInfo& info, const Tensor& k) {
  const std::int64_t c = info.input_shapes.at(0).at(0);
  return transpose(k.reshape({c, k.dim(0) / c, k.dim(2), k.dim(3)}), {2, 3, 0, 1});
}

Tensor depthwise_from_keras(const Tensor& k) {
  const Tensor cm = transpose(k, {2, 3, 0, 1});  // [C, m, kh, kw]
  return cm.reshape({cm.dim(0) * cm.dim(1), 1, cm.dim(2), cm.dim(3)});
}

KerasConversion depthwise(bool separable) {
  KerasConversion c;
  c.keras_class = separable ? "separable_conv2d" : "depthwise_conv2d";
  const std::string dw = separable ? "depthwise_kernel" : "kernel";
  c.to_keras = [separable, dw](const KerasLayerInfo& info, const LayerTensors& t) {
    KerasVariables out{"", "", {depthwise_to_keras(info, at(t, dw))}};
    if (separable) out.values.push_back(transpose(at(t, "pointwise_kernel"), {2, 3, 1, 0}));
    if (t.count("bias")) out.values.push_back(at(t, "bias"));
    return Vars{out};
  };
  c.from_keras = [separable, dw](const KerasLayerInfo&, const Vars& v) {
    const auto& k = vars(v, "");
    LayerTensors out{{dw, depthwise_from_keras(k[0])}};
    std::size_t next = 1;
    if (separable) out["pointwise_kernel"] = transpose(k[next++], {3, 2, 0, 1});
    if (k.size() > next) out["bias"] = k[next];
    return out;
  };
  return c;
}

// ---------------------------------------------------------------- attention

/// Attention's scalar scale (Mirror [1], Keras []) and AdditiveAttention's [D], when use_scale.
KerasConversion attention(const std::string& keras_class) {
  KerasConversion c;
  c.keras_class = keras_class;
  c.to_keras = [keras_class](const KerasLayerInfo&, const LayerTensors& t) {
    const Tensor& s = at(t, "scale");
    return Vars{{"", "", {keras_class == "attention" ? s.reshape({}) : s}}};
  };
  c.from_keras = [](const KerasLayerInfo&, const Vars& v) {
    const Tensor& s = vars(v, "")[0];
    return LayerTensors{{"scale", s.reshape({s.numel()})}};
  };
  return c;
}

/// MultiHeadAttention: Mirror's kernels are Keras's EinsumDense kernels flattened (the same
/// memory): query/key [D, H * K] = Keras [D, H, K], value [D, H * V] = [D, H, V], output
/// [H * V, Dout] = [H, V, Dout]; biases [H * K] = [H, K], ..., output [Dout].
KerasConversion multi_head_attention() {
  KerasConversion c;
  c.keras_class = "multi_head_attention";
  struct Dense {
    const char* mirror;
    const char* keras;
  };
  static const Dense kDense[] = {{"query", "query_dense"},
                                 {"key", "key_dense"},
                                 {"value", "value_dense"},
                                 {"output", "output_dense"}};
  c.to_keras = [](const KerasLayerInfo& info, const LayerTensors& t) {
    const json& spec = *info.spec;
    const std::int64_t h = spec["num_heads"].get<std::int64_t>();
    Vars out;
    for (const Dense& d : kDense) {
      const std::string m = d.mirror;
      const std::int64_t width =
          (m == "value" || m == "output" ? spec["value_dim"] : spec["key_dim"]).get<std::int64_t>();
      const Tensor& k = at(t, m + "_kernel");
      KerasVariables v{d.keras, "", {}};
      v.values.push_back(m == "output" ? k.reshape({h, width, k.dim(1)})
                                       : k.reshape({k.dim(0), h, width}));
      if (t.count(m + "_bias")) {
        const Tensor& b = at(t, m + "_bias");
        v.values.push_back(m == "output" ? b : b.reshape({h, width}));
      }
      out.push_back(std::move(v));
    }
    return out;
  };
  c.from_keras = [](const KerasLayerInfo&, const Vars& v) {
    LayerTensors out;
    for (const Dense& d : kDense) {
      const auto& k = vars(v, d.keras);
      const Tensor& kernel = k[0];
      const std::string m = d.mirror;
      out[m + "_kernel"] = m == "output"
                               ? kernel.reshape({kernel.dim(0) * kernel.dim(1), kernel.dim(2)})
                               : kernel.reshape({kernel.dim(0), kernel.dim(1) * kernel.dim(2)});
      if (k.size() > 1) out[m + "_bias"] = k[1].reshape({k[1].numel()});
    }
    return out;
  };
  return c;
}

// ---------------------------------------------------------------- wrappers

/// TimeDistributed(layer): Keras keeps the wrapped layer's objects under "layer"; Mirror its
/// tensors under "<inner kind>/" (TimeDistributed's parameter names).
KerasLayerInfo inner_info(const KerasLayerInfo& info, const std::string& kind) {
  KerasLayerInfo inner;
  inner.spec = &(*info.spec)["layer"];
  inner.name = info.name + "/" + kind;
  const Shape& in = info.input_shapes.at(0);
  inner.input_shapes = {Shape(in.begin() + 1, in.end())};
  inner.output_shape = Shape(info.output_shape.begin() + 1, info.output_shape.end());
  return inner;
}

const KerasConversion& inner_conversion(const KerasLayerInfo& info) {
  const std::string type = (*info.spec)["layer"]["type"].get<std::string>();
  const KerasConversion* c = find_keras_conversion(type);
  MIRROR_CHECK(
      c != nullptr && c->to_keras, InvalidArgument,
      "Keras weights: layer " + info.name + " wraps a " + type + ", which has no Keras conversion");
  return *c;
}

KerasConversion time_distributed() {
  KerasConversion c;
  c.keras_class = "time_distributed";
  c.to_keras = [](const KerasLayerInfo& info, const LayerTensors& t) {
    const std::string kind = t.begin()->first.substr(0, t.begin()->first.find('/'));
    LayerTensors inner;
    for (const auto& [what, value] : t) inner[what.substr(kind.size() + 1)] = value;
    Vars out = inner_conversion(info).to_keras(inner_info(info, kind), inner);
    for (KerasVariables& k : out) k.path = "layer" + (k.path.empty() ? "" : "/" + k.path);
    return out;
  };
  c.from_keras = [](const KerasLayerInfo& info, const Vars& v) {
    const std::string type = (*info.spec)["layer"]["type"].get<std::string>();
    Vars inner = v;
    for (KerasVariables& k : inner) k.path = k.path.size() > 6 ? k.path.substr(6) : "";
    // The inner Layer's kind() names its tensors: for layers with weights it is their type.
    const std::string& kind = type;
    LayerTensors out;
    for (auto& [what, value] : inner_conversion(info).from_keras(inner_info(info, kind), inner)) {
      out[kind + "/" + what] = value;
    }
    return out;
  };
  return c;
}

/// Note [Adapted normalization]: Keras keeps adapt()'s mean, variance and count as the layer's
/// variables ([C] each, or scalars for axis null; the count an int32 scalar, written as float and
/// cast by Keras on load); a Normalization given its values in the config has none.
KerasConversion normalization() {
  KerasConversion c;
  c.keras_class = "normalization";
  c.spec_variables = [](const KerasLayerInfo& info) {
    const json& l = *info.spec;
    if (!l.value("adapted", false)) return Vars{};
    const Shape shape = l["axis"].is_null() ? Shape{} : Shape{std::int64_t(l["mean"].size())};
    auto values = [&](const char* key) {
      Tensor t = Tensor::empty(shape, DType::kFloat32);
      for (std::int64_t k = 0; k < t.numel(); ++k)
        t.data<float>()[k] = l[key][static_cast<std::size_t>(k)].get<float>();
      return t;
    };
    Tensor count = Tensor::empty({}, DType::kFloat32);
    count.data<float>()[0] = static_cast<float>(l.value("count", std::int64_t{0}));
    return Vars{{"", "", {values("mean"), values("variance"), count}}};
  };
  return c;
}

KerasConversion order_rule(FeatureOrder rule) {
  KerasConversion c;
  c.feature_order = rule;
  return c;
}

}  // namespace

void register_builtin_keras_conversions(std::map<std::string, KerasConversion>& t) {
  t["dense"] = dense();
  // Conv2D: Mirror OIHW, Keras HWIO. Conv1D: Mirror [O, k, I], Keras [k, I, O].
  t["conv2d"] = kernel_bias("conv2d", {2, 3, 1, 0}, {3, 2, 0, 1});
  t["conv1d"] = kernel_bias("conv1d", {1, 2, 0}, {2, 0, 1});
  t["embedding"] = embedding();
  t["gru"] = recurrent("gru");
  t["lstm"] = recurrent("lstm");
  t["bidirectional"] = bidirectional();
  t["batch_normalization"] =
      per_feature("batch_normalization", {"gamma", "beta", "moving_mean", "moving_variance"});
  t["layer_normalization"] = per_feature("layer_normalization", {"gamma", "beta"});
  t["normalization"] = normalization();
  t["layer_scale"] = per_feature("layer_scale", {"gamma"});  // keras.applications' ConvNeXt
  // Layers without weights that a Flatten's feature order passes through.
  for (const char* type : {"activation", "dropout", "stochastic_depth"}) {
    t[type] = order_rule(FeatureOrder::kPass);
  }
  t["flatten"] = order_rule(FeatureOrder::kFlatten);
  t["add"] = order_rule(FeatureOrder::kMerge);
  // The layers Keras users combine with GRUs and CNNs (nn/keras_layers.h, ...).
  // Conv2DTranspose: Mirror [C, filters, kh, kw], Keras [kh, kw, filters, C].
  t["conv2d_transpose"] = kernel_bias("conv2d_transpose", {2, 3, 1, 0}, {3, 2, 0, 1});
  t["time_distributed"] = time_distributed();
  t["depthwise_conv2d"] = depthwise(false);
  t["separable_conv2d"] = depthwise(true);
  t["attention"] = attention("attention");
  t["additive_attention"] = attention("additive_attention");
  t["multi_head_attention"] = multi_head_attention();
  for (const char* type : {"multiply", "subtract", "average", "maximum", "minimum"}) {
    t[type] = order_rule(FeatureOrder::kMerge);
  }
  for (const char* type : {"relu", "leaky_relu", "elu"}) t[type] = order_rule(FeatureOrder::kPass);
  t["concatenate"] = order_rule(FeatureOrder::kConcat);
}

}  // namespace mirror::train::detail
