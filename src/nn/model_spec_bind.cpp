// ModelSpec::bind: fills what the data decides, checks what the spec states, and walks the
// layer shapes so a mismatch is reported with the layer's index before anything is built.
#include <algorithm>
#include <map>

#include "mirror/nn/models.h"
#include "mirror/ops.h"
#include "nn/model_spec_internal.h"

namespace mirror::nn {

using nlohmann::json;

namespace {

struct Walk {
  std::string where;  // "model 'cnn': layer 3 (dense)"

  [[noreturn]] void fail(const std::string& what) const {
    throw InvalidArgument(where + ": " + what);
  }
  void expect_rank(const Shape& s, std::size_t rank, const std::string& what,
                   const std::string& hint) const {
    if (s.size() != rank) fail("expects " + what + ", got " + shape_str(s) + hint);
  }
};

/// The output shape of a merge layer ("add", "concatenate") of a graph, or a failure naming both
/// inputs and both shapes.
Shape merge_shape(const Walk& w, const std::string& type, const nlohmann::json& inputs,
                  const std::vector<Shape>& shapes) {
  Shape out = shapes[0];
  if (type == "concatenate" && (out.empty() || out.size() > 3)) {
    w.fail(
        "joins images [C, H, W], features [F] or sequences [T, F] along the channel axis, got "
        "input '" +
        inputs[0].get<std::string>() + "' " + shape_str(out));
  }
  // The channel axis: C of [C, H, W], F of [F] and [T, F].
  const std::size_t axis = type == "concatenate" && out.size() == 2 ? 1 : 0;
  for (std::size_t i = 1; i < shapes.size(); ++i) {
    bool ok = shapes[i].size() == out.size() && !out.empty();
    for (std::size_t d = 0; ok && d < out.size(); ++d) {
      // add broadcasts a size of 1 (nn/cnn_layers.h).
      const bool broadcast = type == "add" && (shapes[i][d] == 1 || out[d] == 1);
      ok = (type == "concatenate" && d == axis) || shapes[i][d] == out[d] || broadcast;
      if (ok && type == "add") out[d] = std::max(out[d], shapes[i][d]);
    }
    if (!ok) {
      w.fail(std::string(type == "add" ? "inputs must have one shape (or sizes 1 to broadcast)"
                                       : "inputs must agree in every dimension but the channel "
                                         "axis") +
             ", but input '" + inputs[0].get<std::string>() + "' is " + shape_str(shapes[0]) +
             " and input '" + inputs[i].get<std::string>() + "' is " + shape_str(shapes[i]) +
             " (per sample, NCHW)");
    }
    if (type == "concatenate") out[axis] += shapes[i][axis];
  }
  return out;
}

/// Note [Positive channel axes] (model_spec_layers.cpp): the input `s` (per sample, NCHW for
/// images) as Keras writes it in the layout the axis counts in, batch first, and for an image
/// that layout: "[N, 8, 8, 3] input (channels_last: [N, H, W, C])".
std::string keras_input(const Shape& s, bool channels_last) {
  Shape k = s;
  if (s.size() == 3 && channels_last) k = {s[1], s[2], s[0]};
  std::string out = "[N";
  for (auto d : k) out += ", " + std::to_string(d);
  out += "] input";
  if (s.size() == 3) {
    out += channels_last ? " (channels_last: [N, H, W, C])" : " (channels_first: [N, C, H, W])";
  }
  return out;
}

/// A positive axis the layer recorded must be the channel axis of its input `s`: the last axis
/// counting the batch axis (3 of an image [N, H, W, C], 1 of features, 2 of sequences), or 1 of
/// an image with channels_first. Then the fields go, so the bound layer is the one written with
/// -1; any other axis is refused naming the layer, the axis and the shape.
void check_axis(const Walk& w, json& l, const Shape& s, const std::string& does) {
  if (!l.contains("data_format")) return;
  const std::int64_t axis = l["axis"].get<std::int64_t>();
  const bool last = l["data_format"] == "channels_last";
  const auto channel =
      s.size() == 3 && !last ? std::int64_t{1} : static_cast<std::int64_t>(s.size());
  if (axis != channel) {
    w.fail((l.contains("name") ? "'" + l["name"].get<std::string>() + "': " : std::string()) +
           "axis " + std::to_string(axis) + " of a " + keras_input(s, last) +
           " is not the channel axis; Mirror " + does + " along the channel axis only (-1 or " +
           std::to_string(channel) + " here)");
  }
  l.erase("data_format");
  if (l["type"] == "normalization") {
    l["axis"] = -1;
  } else {
    l.erase("axis");
  }
}

/// Note [Keras layers on image channels] (nn/image_channels.h): whether a dense or
/// layer_normalization the parser marked as Keras's (its last axis is a channels_last image's C)
/// reads an image [C, H, W]; the mark is dropped for any other input, whose last axis is Mirror's.
bool channels_last_image(json& l, const Shape& s) {
  if (!l.value("keras_channels_last", false)) return false;
  if (s.size() == 3) return true;
  l.erase("keras_channels_last");
  return false;
}

std::int64_t conv_out(std::int64_t in, std::int64_t k, std::int64_t stride, bool same) {
  if (same) return (in + stride - 1) / stride;  // TensorFlow: ceil(in / stride)
  return in < k ? 0 : (in - k) / stride + 1;
}

}  // namespace

namespace {

/// The model's output per sample `s` against what the data labels (Note [Dense labels]): one
/// vector [outputs] per sample, [T, classes] for per-step labels [T] (token data may be padded
/// past T), [classes, H, W] for per-pixel labels [H, W], or the float targets' own shape.
void check_output_shape(const std::string& model, const Shape& s, const DataShape& data) {
  const std::string needs = " per sample but the data needs ";
  const Shape& l = data.label_shape;
  if (l.size() == 1) {
    const bool tokens = data.input_dtype == DType::kInt32;
    MIRROR_CHECK(s.size() == 2 && s[1] == data.outputs && (s[0] == l[0] || (tokens && s[0] > l[0])),
                 InvalidArgument,
                 model + ": the model outputs " + shape_str(s) + needs +
                     shape_str({l[0], data.outputs}) + " (per-step labels " + shape_str(l) +
                     " of " + std::to_string(data.outputs) +
                     " classes): end with a recurrent layer returning sequences and a dense of " +
                     std::to_string(data.outputs) + " units (TimeDistributed or not)");
    return;
  }
  if (l.size() == 2) {
    const Shape want = {data.outputs, l[0], l[1]};
    MIRROR_CHECK(s == want, InvalidArgument,
                 model + ": the model outputs " + shape_str(s) + needs + shape_str(want) +
                     " (per-pixel labels " + shape_str(l) + " of " + std::to_string(data.outputs) +
                     " classes, classes on the channel axis): end with a conv2d of " +
                     std::to_string(data.outputs) + " filters at the labels' resolution");
    return;
  }
  if (!data.target_shape.empty()) {
    MIRROR_CHECK(s == data.target_shape, InvalidArgument,
                 model + ": the model outputs " + shape_str(s) + needs +
                     shape_str(data.target_shape) +
                     " (the float targets' shape, in Mirror's [C, H, W] layout for images): make "
                     "the model's output the targets' shape");
    return;
  }
  MIRROR_CHECK(data.outputs < 1 || s == Shape{data.outputs}, InvalidArgument,
               model + ": the model outputs " + shape_str(s) + needs + "[" +
                   std::to_string(data.outputs) + "] (classes or target elements)" +
                   (s.size() == 2 ? "; a model that outputs one vector per step trains on "
                                    "per-step labels [N, T] (Note [Dense labels]); for one label "
                                    "per sample end with a global pooling or a recurrent layer "
                                    "without return_sequences before the last dense"
                                  : ""));
}

}  // namespace

ModelSpec ModelSpec::bind(const DataShape& data) const {
  const std::string model = "model '" + name_ + "'";
  ModelSpec out = *this;
  const bool have_data = !data.sample_shape.empty();
  Shape s = input_shape_;
  if (have_data) {
    for (auto d : data.sample_shape) {
      MIRROR_CHECK(d > 0, InvalidArgument,
                   model + ": the data's sample shape " + shape_str(data.sample_shape) +
                       " has a non-positive dimension");
    }
    bool same = s.empty() || s.size() == data.sample_shape.size();
    for (std::size_t i = 0; same && i < s.size(); ++i) {
      same = s[i] < 0 || s[i] == data.sample_shape[i];
    }
    MIRROR_CHECK(same, InvalidArgument,
                 model + ": the spec states input shape " + shape_str(s) +
                     " (NCHW for images; -1 = any) but the data's samples are " +
                     shape_str(data.sample_shape));
    s = data.sample_shape;
  } else {
    bool known = !s.empty();
    for (auto d : s) known = known && d > 0;
    MIRROR_CHECK(known, InvalidArgument,
                 model + ": the input shape is not stated (" + shape_str(s) +
                     "): bind the spec to the data's sample shape");
  }
  out.input_shape_ = s;

  std::size_t last_dense = out.layers_.size();
  for (std::size_t i = 0; i < out.layers_.size(); ++i) {
    if (out.layers_[i]["type"] == "dense") last_dense = i;
  }
  // Token ids until an embedding turns them into vectors. Without data, a spec whose first
  // layer (masking aside) is an embedding reads ids.
  bool ids = false;
  if (have_data) {
    ids = data.input_dtype == DType::kInt32;
  } else {
    for (const json& l : out.layers_) {
      if (l["type"] == "masking") continue;
      ids = l["type"] == "embedding";
      break;
    }
  }
  std::map<std::string, Shape> shapes = {{"input", s}};  // a graph's outputs by name
  std::map<std::string, bool> id_tensors = {{"input", ids}};  // ... and whether they are ids
  for (std::size_t i = 0; i < out.layers_.size(); ++i) {
    json& l = out.layers_[i];
    const std::string type = l["type"].get<std::string>();
    const std::size_t index = i < origin_.size() ? origin_[i] : i;
    const Walk w{model + ": layer " + std::to_string(index) + " (" + type + ")"};
    const bool merge = type == "add" || type == "concatenate";
    if (l.contains("inputs")) {
      std::vector<Shape> ins;
      for (const json& name : l["inputs"]) ins.push_back(shapes.at(name.get<std::string>()));
      if (detail::is_keras_merge(type)) {  // Multiply, ..., the attention layers
        s = detail::bind_keras_merge(w.where, l, ins);
        shapes[l["name"].get<std::string>()] = s;
        id_tensors[l["name"].get<std::string>()] = false;  // their outputs are floats
        continue;
      }
      if (merge != (ins.size() > 1)) {
        w.fail(merge ? "a merge layer needs two or more inputs, got one"
                     : "takes one input, got " + std::to_string(ins.size()) +
                           " (use add or concatenate to merge)");
      }
      s = merge ? merge_shape(w, type, l["inputs"], ins) : ins[0];
      if (merge) check_axis(w, l, ins[0], "joins inputs");
      ids = id_tensors.at(l["inputs"][0].get<std::string>());
      shapes[l["name"].get<std::string>()] = s;
      id_tensors[l["name"].get<std::string>()] = ids;
      if (merge) continue;
    } else if (merge || detail::is_keras_merge(type)) {
      w.fail(
          "merges two or more inputs: give the layers names and this layer \"inputs\" "
          "(docs/model-spec.md)");
    }
    if (ids && type != "masking" && type != "embedding") {
      w.fail("the input is int32 token ids " + shape_str(s) +
             ", which only masking and embedding take: start the model with an embedding");
    }
    if (auto keras_out = detail::bind_keras_layer(w.where, l, s)) {
      s = *keras_out;  // the layers of nn/keras_layers.h (their build() checks the shape)
    } else if (type == "masking") {
      if (s.size() != 1 && s.size() != 2) {
        w.fail("expects ids [T] or sequences [T, F], got " + shape_str(s));
      }
    } else if (type == "embedding") {
      if (!ids) {
        w.fail("expects int32 token ids [T], got " +
               std::string(have_data ? dtype_name(data.input_dtype) : "float") + " " +
               shape_str(s));
      }
      w.expect_rank(s, 1, "ids [T]", "");
      if (!l.contains("input_dim")) {
        if (data.vocab < 2) {
          w.fail("field 'input_dim': not stated and the data gives no vocabulary (got " +
                 std::to_string(data.vocab) + "); state input_dim or use token data");
        }
        l["input_dim"] = data.vocab;
      } else if (data.vocab > l["input_dim"].get<std::int64_t>()) {
        w.fail("field 'input_dim': the spec states " + l["input_dim"].dump() +
               " but the data's vocabulary is " + std::to_string(data.vocab) +
               " (ids must be < input_dim)");
      }
      s = {s[0], l["output_dim"].get<std::int64_t>()};
      ids = false;
    } else if (type == "batch_normalization") {
      if (s.empty() || s.size() > 3)
        w.fail("expects [C, H, W], [F] or [T, F], got " + shape_str(s));
      check_axis(w, l, s, "normalises");
    } else if (type == "layer_normalization") {
      const bool pixels = channels_last_image(l, s);  // Note [Keras layers on image channels]
      if (s.size() != 1 && s.size() != 2 && !pixels) {
        w.fail("normalises the last axis of features [F] or sequences [T, F], got " + shape_str(s) +
               "; for images use batch_normalization");
      }
      check_axis(w, l, s, "normalises");
    } else if (type == "global_average_pooling2d") {
      w.expect_rank(s, 3, "an image [C, H, W] (NCHW)", "");
      s = {s[0]};
    } else if (type == "zero_padding2d") {
      w.expect_rank(s, 3, "an image [C, H, W] (NCHW)", "");
      const json& p = l["padding"];
      s = {s[0], s[1] + p[0][0].get<std::int64_t>() + p[0][1].get<std::int64_t>(),
           s[2] + p[1][0].get<std::int64_t>() + p[1][1].get<std::int64_t>()};
    } else if (type == "conv2d" || type == "maxpool2d" || type == "average_pooling2d") {
      w.expect_rank(s, 3, "an image [C, H, W] (NCHW)",
                    s.size() == 2 ? " (a [H, W] sample needs a channel axis: [1, H, W])" : "");
      const bool conv = type == "conv2d";
      if (conv && s[0] % l.value("groups", std::int64_t{1}) != 0) {
        w.fail("field 'groups': " + l["groups"].dump() + " does not divide the input's " +
               std::to_string(s[0]) + " channels " + shape_str(s) + " (NCHW)");
      }
      const auto k = l[conv ? "kernel" : "pool"];  // maxpool2d, average_pooling2d: "pool"
      const std::int64_t stride = l["strides"][0].get<std::int64_t>();
      const bool same = l["padding"] == "same";
      const std::int64_t oh = conv_out(s[1], k[0].get<std::int64_t>(), stride, same);
      const std::int64_t ow = conv_out(s[2], k[1].get<std::int64_t>(), stride, same);
      if (oh <= 0 || ow <= 0) {
        w.fail("a " + k[0].dump() + "x" + k[1].dump() + " window does not fit the input " +
               shape_str(s) + " with valid padding");
      }
      s = {conv ? l["filters"].get<std::int64_t>() : s[0], oh, ow};
    } else if (type == "rescaling" || type == "normalization") {
      if (s.empty() || s.size() > 3) {
        w.fail("expects features [F], sequences [T, F] or images [C, H, W], got " + shape_str(s));
      }
      if (type == "normalization") check_axis(w, l, s, "normalises");
      const std::int64_t channels = s.size() == 3 ? s[0] : s.back();  // Keras's last axis
      for (const char* key : {"scale", "offset", "mean", "variance"}) {
        if (!l.contains(key) || !l[key].is_array()) continue;
        const auto n = static_cast<std::int64_t>(l[key].size());
        if (n != 1 && n != channels) {
          w.fail(std::string("field '") + key + "': " + std::to_string(n) + " values for " +
                 std::to_string(channels) + " channels (the input " + shape_str(s) +
                 "); give one value or one per channel");
        }
      }
    } else if (type == "resizing" || type == "center_crop") {
      w.expect_rank(s, 3, "an image [C, H, W] (NCHW)",
                    s.size() == 2 ? " (a [H, W] sample needs a channel axis: [1, H, W])" : "");
      s = {s[0], l["height"].get<std::int64_t>(), l["width"].get<std::int64_t>()};
    } else if (type == "flatten") {
      s = {shape_numel(s)};
    } else if (type == "dense") {
      // Keras applies a Dense to the last axis: each step of a sequence [T, F]. An image's last
      // axis is its channels in Keras but its width in Mirror's NCHW, so images are refused
      // unless the spec is Keras's channels_last (Note [Keras layers on image channels]).
      const bool pixels = channels_last_image(l, s);
      if (s.size() != 1 && s.size() != 2 && !pixels) {
        w.fail("expects features [F] or sequences [T, F] (each step), got " + shape_str(s) +
               (s.size() == 3 ? " (an image, NCHW): add a flatten or a global pooling before it; "
                                "a Dense over an image's channels is a 1x1 conv2d"
                              : ""));
      }
      if (!l.contains("units")) {
        if (data.outputs < 1) {
          w.fail("field 'units': not stated and the data gives no output count");
        }
        l["units"] = data.outputs;
      } else if (i == last_dense && data.outputs > 0 &&
                 l["units"].get<std::int64_t>() != data.outputs) {
        w.fail("field 'units': the spec states " + l["units"].dump() + " but the data has " +
               std::to_string(data.outputs) + " outputs (classes or target elements)");
      }
      s[pixels ? 0 : s.size() - 1] = l["units"].get<std::int64_t>();
    } else if (type == "gru" || type == "lstm" || type == "bidirectional") {
      w.expect_rank(s, 2, "sequences [T, F]", "");
      const json& rnn = type == "bidirectional" ? l["layer"] : l;
      auto units = rnn["units"].get<std::int64_t>();
      if (type == "bidirectional" && l["merge_mode"] == "concat") units *= 2;
      s = rnn["return_sequences"].get<bool>() ? Shape{s[0], units} : Shape{units};
    } else if (type == "conv1d" || type == "maxpool1d" || type == "avgpool1d") {
      w.expect_rank(s, 2, "sequences [T, C]", "");
      const bool conv = type == "conv1d";
      const int k = static_cast<int>(l[conv ? "kernel" : "pool"].get<std::int64_t>());
      const int stride = static_cast<int>(l["strides"].get<std::int64_t>());
      const int dilation = conv ? static_cast<int>(l["dilation_rate"].get<std::int64_t>()) : 1;
      const ops::Window1D g = ops::Window1D::make(l["padding"].get<std::string>(),
                                                  static_cast<int>(s[0]), k, stride, dilation);
      const int out = g.out(static_cast<int>(s[0]));
      if (out < 1) {
        w.fail("a window of " + std::to_string(g.span()) + " steps does not fit the input " +
               shape_str(s) + " with valid padding");
      }
      s = {out, conv ? l["filters"].get<std::int64_t>() : s[1]};
    } else if (type == "global_maxpool1d" || type == "global_avgpool1d") {
      w.expect_rank(s, 2, "sequences [T, C]", "");
      s = {s[1]};
    } else if (type == "dropout" && l.contains("noise_shape")) {
      // The layer checks its noise_shape against the input (nn/layers.h, Dropout).
      std::unique_ptr<Layer> dropout = detail::make_canonical_layer(l);
      dropout->set_name("dropout");
      InitRng rng(0);
      try {
        dropout->build(s, DType::kFloat32, Device::cpu(), rng);
      } catch (const InvalidArgument& e) {
        const std::string what = e.what(), prefix = "dropout (dropout): ";
        w.fail(what.rfind(prefix, 0) == 0 ? what.substr(prefix.size()) : what);
      }
    }
    if (l.contains("name")) {
      shapes[l["name"].get<std::string>()] = s;
      id_tensors[l["name"].get<std::string>()] = ids;
    }
    // dropout, activation: the shape passes through.
  }
  if (ids) {
    throw InvalidArgument(model +
                          ": the input is int32 token ids and no embedding turns them "
                          "into vectors");
  }
  check_output_shape(model, s, data);
  out.bound_ = true;
  return out;
}

}  // namespace mirror::nn
