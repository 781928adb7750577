// Keras weights both ways (Note [Keras weights] in include/mirror/train/keras_weights.h): the walk
// over a bound spec's layers that names each one as Keras's save_weights does, tracks the feature
// order a Flatten of images changes, and calls each layer type's conversion from the one table
// (src/train/keras_weights_layers.cpp).
#include "mirror/train/keras_weights.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <set>

#include "mirror/error.h"
#include "mirror/ops.h"

namespace mirror::train {

using nlohmann::json;

namespace detail {
/// Registers the built-in layer types' conversions (keras_weights_layers.cpp).
void register_builtin_keras_conversions(std::map<std::string, KerasConversion>& table);
}  // namespace detail

namespace {

std::map<std::string, KerasConversion>& table() {
  static std::map<std::string, KerasConversion> t = [] {
    std::map<std::string, KerasConversion> m;
    detail::register_builtin_keras_conversions(m);
    return m;
  }();
  return t;
}

std::string type_of(const json& l) { return l["type"].get<std::string>(); }

/// Each layer's inputs as layer indices (-1: the model input), from the canonical "inputs".
std::vector<std::vector<int>> layer_inputs(const nn::ModelSpec& bound) {
  const json& layers = bound.layers();
  std::map<std::string, int> index = {{"input", -1}};
  std::vector<std::vector<int>> inputs(layers.size());
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const json& l = layers[i];
    if (!l.contains("inputs")) {
      inputs[i] = {static_cast<int>(i) - 1};
      continue;
    }
    for (const json& name : l["inputs"]) inputs[i].push_back(index.at(name.get<std::string>()));
    index[l["name"].get<std::string>()] = static_cast<int>(i);
  }
  return inputs;
}

/// Everything the conversions need of the model built from `bound`.
struct Walk {
  nn::Sequential model;
  std::vector<std::vector<int>> inputs;
  std::vector<KerasLayerInfo> infos;  // per layer, model order
  std::vector<std::size_t> order;     // Keras's layer order
};

std::vector<std::int64_t> flatten_order(const Shape& chw) {
  const std::int64_t c = chw[0], h = chw[1], w = chw[2];
  std::vector<std::int64_t> order(static_cast<std::size_t>(c * h * w));
  std::size_t j = 0;
  for (std::int64_t y = 0; y < h; ++y) {
    for (std::int64_t x = 0; x < w; ++x) {
      for (std::int64_t ch = 0; ch < c; ++ch) order[j++] = (ch * h + y) * w + x;
    }
  }
  return order;
}

bool identity(const std::vector<std::int64_t>& order) {
  for (std::size_t i = 0; i < order.size(); ++i) {
    if (order[i] != static_cast<std::int64_t>(i)) return false;
  }
  return true;
}

/// The feature order of layer i's output (Note [Keras weights]: Mirror flattens C, H, W).
std::vector<std::int64_t> output_order(const Walk& w, std::size_t i,
                                       const std::vector<std::vector<std::int64_t>>& orders) {
  const KerasLayerInfo& info = w.infos[i];
  const std::string type = type_of(*info.spec);
  const KerasConversion* c = find_keras_conversion(type);
  const FeatureOrder rule = c ? c->feature_order : FeatureOrder::kRefuse;
  std::vector<std::vector<std::int64_t>> ins;
  bool permuted = false;
  for (int in : w.inputs[i]) {
    ins.push_back(in < 0 ? std::vector<std::int64_t>{} : orders[static_cast<std::size_t>(in)]);
    permuted = permuted || !ins.back().empty();
  }
  if (rule == FeatureOrder::kFlatten && info.input_shapes[0].size() == 3) {
    std::vector<std::int64_t> order = flatten_order(info.input_shapes[0]);
    return identity(order) ? std::vector<std::int64_t>{} : order;
  }
  if (!permuted) return {};
  const std::string where = "layer " + info.name + " (" + type + ")";
  switch (rule) {
    case FeatureOrder::kPass:
    case FeatureOrder::kFlatten:
      return ins[0];
    case FeatureOrder::kConsume:
      return {};
    case FeatureOrder::kMerge:
      for (const auto& o : ins) {
        MIRROR_CHECK(o == ins[0], InvalidArgument,
                     where +
                         " merges a Flatten of images with features in another order: Mirror "
                         "flattens (C, H, W) and Keras (H, W, C), so its weights have no Keras "
                         "equivalent; merge before the Flatten or after a Dense");
      }
      return ins[0];
    case FeatureOrder::kConcat: {
      std::vector<std::int64_t> out;
      for (std::size_t k = 0; k < ins.size(); ++k) {
        const std::int64_t offset = static_cast<std::int64_t>(out.size());
        const std::int64_t n = shape_numel(info.input_shapes[k]);
        for (std::int64_t j = 0; j < n; ++j) {
          const auto jj = static_cast<std::size_t>(j);
          out.push_back(offset + (ins[k].empty() ? j : ins[k][jj]));
        }
      }
      return out;
    }
    case FeatureOrder::kRefuse:
      break;
  }
  throw InvalidArgument(where +
                        " reads a Flatten of images, whose features Mirror orders (C, H, W) and "
                        "Keras (H, W, C); this layer type cannot follow that order, so the "
                        "model's weights have no Keras equivalent");
}

Walk walk(const nn::ModelSpec& bound) {
  MIRROR_CHECK(bound.bound(), InvalidArgument,
               "Keras weights: model '" + bound.name() + "' is not bound to data");
  Walk w{nn::make_model(bound, DType::kFloat32, Device::cpu(), 0), layer_inputs(bound), {}, {}};
  const json& layers = bound.layers();
  const auto& shapes = w.model.layer_output_shapes();
  w.infos.resize(layers.size());
  for (std::size_t i = 0; i < layers.size(); ++i) {
    KerasLayerInfo& info = w.infos[i];
    info.spec = &layers[i];
    info.name = w.model.layers()[i]->name();
    for (int in : w.inputs[i]) {
      info.input_shapes.push_back(in < 0 ? w.model.input_shape()
                                         : shapes[static_cast<std::size_t>(in)]);
    }
    info.output_shape = shapes[i];
  }
  // Feature orders, in model (topological) order.
  std::vector<std::vector<std::int64_t>> orders(layers.size());
  for (std::size_t i = 0; i < layers.size(); ++i) {
    for (int in : w.inputs[i]) {
      if (in >= 0 && w.infos[i].feature_order.empty()) {
        w.infos[i].feature_order = orders[static_cast<std::size_t>(in)];
      }
    }
    orders[i] = output_order(w, i, orders);
  }
  // Keras's paths: the class name counted in Keras's layer order, within the nested models a
  // layer was read from (Note [Nested models], src/nn/model_spec_nested.cpp): a nested model is
  // "layers/<its class>[_k]/" counted among its parent's layers, placed where its first layer is.
  w.order = keras_layer_order(bound);
  std::map<std::string, std::map<std::string, int>> used;  // by parent path: class -> count
  std::map<std::string, std::string> scopes;                // nested model -> its path + "/"
  auto path_in = [&](const std::string& parent, const std::string& cls) {
    const int k = used[parent][cls]++;
    return parent + "layers/" + cls + (k == 0 ? "" : "_" + std::to_string(k));
  };
  for (std::size_t i : w.order) {
    const KerasConversion* c = find_keras_conversion(type_of(layers[i]));
    if (c == nullptr || c->keras_class.empty()) continue;
    std::string parent, key;
    for (const json& s : layers[i].value("keras_scope", json::array())) {
      key += "/" + s[1].get<std::string>();
      auto it = scopes.find(key);
      if (it == scopes.end()) {
        it = scopes.emplace(key, path_in(parent, s[0].get<std::string>()) + "/").first;
      }
      parent = it->second;
    }
    w.infos[i].path = path_in(parent, c->keras_class);
  }
  return w;
}

/// Layer i's tensors by what follows its name, from `tensors` (checked against the built model).
LayerTensors layer_tensors(Walk& w, std::size_t i, const NamedTensors& tensors) {
  nn::Layer& layer = *w.model.layers()[i];
  const std::string prefix = layer.name() + "/";
  LayerTensors out;
  auto take = [&](const std::string& name, const Tensor& built) {
    const auto it = tensors.find(name);
    MIRROR_CHECK(it != tensors.end(), DataError,
                 "Keras weights: tensor '" + name + "' of layer " + layer.name() + " (" +
                     layer.kind() + ") is missing");
    MIRROR_CHECK(it->second.shape() == built.shape(), DataError,
                 "Keras weights: tensor '" + name + "' is " + shape_str(it->second.shape()) +
                     " but the model needs " + shape_str(built.shape()));
    out[name.substr(prefix.size())] = keras_layout::host_float(it->second);
  };
  for (nn::Parameter* p : layer.parameters()) take(p->name, p->value);
  for (nn::Buffer* b : layer.buffers()) take(b->name, b->value);
  return out;
}

bool has_tensors(nn::Layer& layer) {
  return !layer.parameters().empty() || !layer.buffers().empty();
}

const KerasConversion& conversion_for(Walk& w, std::size_t i) {
  const std::string type = type_of(*w.infos[i].spec);
  const KerasConversion* c = find_keras_conversion(type);
  MIRROR_CHECK(c != nullptr && c->to_keras && c->from_keras, InvalidArgument,
               "Keras weights: layer " + w.infos[i].name + " (" + type +
                   ") has weights but no Keras conversion (register_keras_conversion in "
                   "include/mirror/train/keras_weights.h)");
  return *c;
}

/// to_keras of one layer, with the paths made absolute and the layer named.
std::vector<KerasVariables> layer_to_keras(Walk& w, std::size_t i, const LayerTensors& tensors) {
  std::vector<KerasVariables> out = conversion_for(w, i).to_keras(w.infos[i], tensors);
  for (KerasVariables& v : out) {
    v.path = w.infos[i].path + (v.path.empty() ? "" : "/" + v.path);
    v.layer = w.infos[i].name;
  }
  return out;
}

std::vector<KerasVariables> convert_all(Walk& w, const NamedTensors& tensors) {
  std::vector<KerasVariables> out;
  for (std::size_t i : w.order) {
    if (!has_tensors(*w.model.layers()[i])) {
      const KerasConversion* c = find_keras_conversion(type_of(*w.infos[i].spec));
      if (c == nullptr || !c->spec_variables) continue;
      for (KerasVariables& v : c->spec_variables(w.infos[i])) {
        v.path = w.infos[i].path + (v.path.empty() ? "" : "/" + v.path);
        v.layer = w.infos[i].name;
        out.push_back(std::move(v));
      }
      continue;
    }
    for (KerasVariables& v : layer_to_keras(w, i, layer_tensors(w, i, tensors))) {
      out.push_back(std::move(v));
    }
  }
  return out;
}

std::string held_paths(const std::map<std::string, const KerasVariables*>& by_path) {
  std::string s;
  int n = 0;
  for (const auto& [path, v] : by_path) {
    if (n++ == 12) return s + ", ...";
    s += (s.empty() ? "" : ", ") + path;
  }
  return s.empty() ? "none" : s;
}

}  // namespace

void register_keras_conversion(const std::string& mirror_type, KerasConversion conversion) {
  table()[mirror_type] = std::move(conversion);
}

const KerasConversion* find_keras_conversion(const std::string& mirror_type) {
  const auto it = table().find(mirror_type);
  return it == table().end() ? nullptr : &it->second;
}

std::vector<std::size_t> keras_layer_order(const nn::ModelSpec& bound) {
  const std::vector<std::vector<int>> inputs = layer_inputs(bound);
  const std::size_t n = inputs.size();
  if (n == 0) return {};
  // Keras's map_graph: a depth-first walk from the output numbers the layers in first-visit order
  // and lists them after their inputs; depth is the longest path to the output.
  std::vector<int> visit(n, -1);
  std::vector<std::size_t> post;
  int next = 0;
  std::function<void(std::size_t)> dfs = [&](std::size_t i) {
    if (visit[i] >= 0) return;
    visit[i] = next++;
    for (int in : inputs[i]) {
      if (in >= 0) dfs(static_cast<std::size_t>(in));
    }
    post.push_back(i);
  };
  dfs(n - 1);
  std::vector<int> depth(n, 0);
  for (auto it = post.rbegin(); it != post.rend(); ++it) {
    for (int in : inputs[*it]) {
      if (in >= 0) {
        auto& d = depth[static_cast<std::size_t>(in)];
        d = std::max(d, depth[*it] + 1);
      }
    }
  }
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return depth[a] != depth[b] ? depth[a] > depth[b] : visit[a] < visit[b];
  });
  return order;
}

std::vector<KerasVariables> to_keras_weights(const nn::ModelSpec& bound,
                                             const NamedTensors& tensors) {
  Walk w = walk(bound);
  return convert_all(w, tensors);
}

std::vector<KerasVariables> keras_weights_layout(const nn::ModelSpec& bound) {
  Walk w = walk(bound);
  return convert_all(w, model_tensors(w.model));
}

NamedTensors from_keras_weights(const nn::ModelSpec& bound,
                                const std::vector<KerasVariables>& variables,
                                const std::string& source) {
  Walk w = walk(bound);
  const NamedTensors initial = model_tensors(w.model);
  std::map<std::string, const KerasVariables*> by_path;
  for (const KerasVariables& v : variables) by_path[v.path] = &v;
  NamedTensors out;
  for (std::size_t i : w.order) {
    nn::Layer& layer = *w.model.layers()[i];
    if (!has_tensors(layer)) continue;
    const std::string who = "Mirror layer " + layer.name() + " (" + layer.kind() + ")";
    // What the file must hold for this layer: the paths and shapes of its initial weights.
    const std::vector<KerasVariables> expected = layer_to_keras(w, i, layer_tensors(w, i, initial));
    std::vector<KerasVariables> found;
    for (const KerasVariables& e : expected) {
      const auto it = by_path.find(e.path);
      MIRROR_CHECK(it != by_path.end(), DataError,
                   source + ": no variables at '" + e.path + "' (the Keras layer of " + who +
                       "); the file holds " + held_paths(by_path) +
                       ". Was it saved from another model?");
      const KerasVariables& got = *it->second;
      MIRROR_CHECK(got.values.size() == e.values.size(), DataError,
                   source + ": '" + e.path + "' holds " + std::to_string(got.values.size()) +
                       " variables but " + who + " needs " + std::to_string(e.values.size()));
      KerasVariables copy{got.path, got.layer, {}};
      for (std::size_t k = 0; k < e.values.size(); ++k) {
        MIRROR_CHECK(got.values[k].shape() == e.values[k].shape(), DataError,
                     source + ": '" + e.path + "/vars/" + std::to_string(k) + "' is " +
                         shape_str(got.values[k].shape()) + " but " + who + " needs " +
                         shape_str(e.values[k].shape()) + " (Keras's layout)");
        copy.values.push_back(keras_layout::host_float(got.values[k]));
        // A NaN or Inf here would surface a step later as "lower --lr"; name the file instead.
        const std::vector<float> values = copy.values.back().to_vector<float>();
        const auto bad = std::find_if(values.begin(), values.end(),
                                      [](float v) { return !std::isfinite(v); });
        MIRROR_CHECK(bad == values.end(), DataError,
                     source + ": '" + e.path + "/vars/" + std::to_string(k) + "' holds " +
                         std::to_string(*bad) + " at element " +
                         std::to_string(bad - values.begin()) +
                         "; weights must be finite (was the Keras model saved after its "
                         "training diverged?)");
      }
      copy.path = e.path.substr(std::min(e.path.size(), w.infos[i].path.size() + 1));
      found.push_back(std::move(copy));
    }
    const LayerTensors tensors = conversion_for(w, i).from_keras(w.infos[i], found);
    for (const auto& [name, built] : initial) {
      if (name.rfind(layer.name() + "/", 0) != 0) continue;
      const auto it = tensors.find(name.substr(layer.name().size() + 1));
      MIRROR_CHECK(it != tensors.end() && it->second.shape() == built.shape(), Error,
                   "Keras weights: the conversion of " + who + " gives no tensor '" + name +
                       "' of shape " + shape_str(built.shape()));
      out[name] = it->second;
    }
  }
  return out;
}

NamedTensors model_tensors(nn::Sequential& model) {
  NamedTensors out;
  for (nn::Parameter* p : model.parameters()) out[p->name] = p->value;
  for (nn::Buffer* b : model.buffers()) out[b->name] = b->value;
  return out;
}

void assign_model_tensors(nn::Sequential& model, const NamedTensors& tensors,
                          const std::string& source) {
  auto load = [&](const std::string& name, Tensor& value) {
    const auto it = tensors.find(name);
    MIRROR_CHECK(it != tensors.end(), DataError,
                 source + " has no tensor '" + name + "' for the model");
    MIRROR_CHECK(it->second.shape() == value.shape(), DataError,
                 source + ": tensor '" + name + "' is " + shape_str(it->second.shape()) +
                     " but the model needs " + shape_str(value.shape()));
    Tensor t = it->second.to(value.device());
    value.copy_from(t.dtype() == value.dtype() ? t : ops::cast(t, value.dtype()));
  };
  for (nn::Parameter* p : model.parameters()) load(p->name, p->value);
  for (nn::Buffer* b : model.buffers()) load(b->name, b->value);
}

// ---------------------------------------------------------------- host helpers

namespace keras_layout {

Tensor host_float(const Tensor& t) {
  Tensor h = t.to(Device::cpu());
  if (h.dtype() != DType::kFloat32) h = ops::cast(h, DType::kFloat32);
  return h.shares_storage_with(t) ? h.clone() : h;
}

Tensor transpose(const Tensor& t, const std::vector<int>& axes) {
  const Shape& in = t.shape();
  const std::size_t r = in.size();
  MIRROR_CHECK(axes.size() == r, InvalidArgument, "transpose: axes do not match " + t.str());
  Shape out(r);
  for (std::size_t i = 0; i < r; ++i) out[i] = in[static_cast<std::size_t>(axes[i])];
  std::vector<std::int64_t> in_strides(r, 1);
  for (std::size_t i = r; i-- > 1;) in_strides[i - 1] = in_strides[i] * in[i];
  Tensor y = Tensor::empty(out, DType::kFloat32);
  const float* src = t.data<float>();
  float* dst = y.data<float>();
  std::vector<std::int64_t> idx(r, 0);
  for (std::int64_t k = 0; k < y.numel(); ++k) {
    std::int64_t at = 0;
    for (std::size_t i = 0; i < r; ++i)
      at += idx[i] * in_strides[static_cast<std::size_t>(axes[i])];
    dst[k] = src[at];
    for (std::size_t i = r; i-- > 0;) {
      if (++idx[i] < out[i]) break;
      idx[i] = 0;
    }
  }
  return y;
}

Tensor reorder_blocks(const Tensor& t, const std::vector<int>& order) {
  const auto blocks = static_cast<std::int64_t>(order.size());
  MIRROR_CHECK(t.rank() >= 1 && t.dim(0) % blocks == 0, InvalidArgument,
               "reorder_blocks: " + t.str() + " is not " + std::to_string(blocks) + " blocks");
  const std::int64_t block = t.numel() / blocks;
  Tensor y = Tensor::empty(t.shape(), DType::kFloat32);
  for (std::int64_t b = 0; b < blocks; ++b) {
    std::copy_n(t.data<float>() + order[static_cast<std::size_t>(b)] * block, block,
                y.data<float>() + b * block);
  }
  return y;
}

Tensor gather_rows(const Tensor& t, const std::vector<std::int64_t>& rows) {
  const std::int64_t row = t.dim(0) == 0 ? 0 : t.numel() / t.dim(0);
  MIRROR_CHECK(static_cast<std::int64_t>(rows.size()) == t.dim(0), InvalidArgument,
               "gather_rows: " + std::to_string(rows.size()) + " rows for " + t.str());
  Tensor y = Tensor::empty(t.shape(), DType::kFloat32);
  for (std::size_t j = 0; j < rows.size(); ++j) {
    std::copy_n(t.data<float>() + rows[j] * row, row,
                y.data<float>() + static_cast<std::int64_t>(j) * row);
  }
  return y;
}

std::vector<std::int64_t> inverse(const std::vector<std::int64_t>& order) {
  std::vector<std::int64_t> inv(order.size());
  for (std::size_t j = 0; j < order.size(); ++j) {
    inv[static_cast<std::size_t>(order[j])] = static_cast<std::int64_t>(j);
  }
  return inv;
}

}  // namespace keras_layout

}  // namespace mirror::train
