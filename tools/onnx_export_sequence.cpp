// export_onnx's sequence half: lengths (Note [Export lengths] in onnx_export.cpp), GRU and LSTM
// (ONNX's GRU with linear_before_reset = 1 is Mirror's reset-after GRU), Bidirectional, Conv1D
// and the 1-D pools. Sequences are [N, T, C] in Mirror; ONNX's RNNs read [T, N, C] and its
// convolutions and pools [N, C, T], so each op is wrapped in the transposes it needs.
#include <limits>

#include "mirror/error.h"
#include "mirror/nn/bidirectional.h"
#include "mirror/nn/conv1d.h"
#include "tools/onnx_export_internal.h"

namespace mirror::onnx::detail {
namespace {

constexpr int kBool = 9, kInt32 = 6, kInt64 = 7, kFloat = 1;

std::string cast(Ctx& c, const std::string& x, int to) {
  return c.b.op("Cast", {x}, {attr("to", to)});
}

}  // namespace

// steps_of, valid_steps, fill_past: declared in onnx_export_internal.h.
std::string steps_of(Ctx& c, const std::string& x) {
  return c.b.op("Gather", {c.b.op("Shape", {x}), c.b.scalar_i64(1)}, {attr("axis", 0)});
}

std::string valid_steps(Ctx& c, const std::string& x, const std::string& lengths) {
  const std::string steps = c.b.op("Range", {c.b.scalar_i64(0), steps_of(c, x), c.b.scalar_i64(1)});
  const std::string lt = c.b.op("Less", {c.b.op("Unsqueeze", {steps, c.b.ints({0})}),
                                         c.b.op("Unsqueeze", {lengths, c.b.ints({1})})});
  return c.b.op("Unsqueeze", {lt, c.b.ints({2})});
}

std::string fill_past(Ctx& c, const std::string& x, const std::string& lengths, float fill) {
  return c.b.op("Where", {valid_steps(c, x, lengths), x, c.b.scalar_f(fill)});
}

namespace {

/// Mirror's window_output_length on the lengths tensor (include/mirror/nn/conv1d.h).
std::string window_lengths(Ctx& c, const std::string& lengths, const std::string& padding,
                           std::int64_t k, std::int64_t stride, std::int64_t dilation) {
  const std::int64_t span = dilation * (k - 1) + 1;
  std::string numerator;  // out = numerator / stride + 1 (C++ division, as in Mirror)
  if (padding == "valid")
    numerator = c.b.op("Sub", {lengths, c.b.scalar_i64(span)});
  else if (padding == "causal")
    numerator = c.b.op("Sub", {lengths, c.b.scalar_i64(1)});
  else  // same: ceil(length / stride) outputs
    numerator = c.b.op("Sub", {lengths, c.b.scalar_i64(1)});
  const std::string out =
      c.b.op("Add", {c.b.op("Div", {numerator, c.b.scalar_i64(stride)}), c.b.scalar_i64(1)});
  return c.b.op("Max", {out, c.b.scalar_i64(1)});
}

/// The pads (or auto_pad) attribute of a 1-D window over `steps` (-1: dynamic).
Attribute window_pads(const std::string& padding, std::int64_t steps, std::int64_t k,
                      std::int64_t stride, std::int64_t dilation) {
  const std::int64_t span = dilation * (k - 1) + 1;
  if (padding == "valid") return attr("pads", std::vector<std::int64_t>{0, 0});
  if (padding == "causal") return attr("pads", std::vector<std::int64_t>{span - 1, 0});
  if (stride > 1 && steps < 0) return attr("auto_pad", "SAME_UPPER");  // TensorFlow's rule
  const std::int64_t in = stride > 1 ? steps : 1;  // at stride 1 the total is span - 1
  const std::int64_t out = (in + stride - 1) / stride;
  const std::int64_t total = std::max<std::int64_t>((out - 1) * stride + span - in, 0);
  return attr("pads", std::vector<std::int64_t>{total / 2, total - total / 2});
}

std::string conv1d(Ctx& c, nn::Layer& l, const std::string& x, const Shape& in) {
  const auto cfg = l.config();
  const std::int64_t k = cfg["kernel_size"], s = cfg["strides"], d = cfg["dilation_rate"];
  const auto params = l.parameters();
  // [O, k, C] -> ONNX's [O, C, k].
  const Tensor& kernel = params[0]->value;
  const std::int64_t o = kernel.dim(0), ch = kernel.dim(2);
  const std::vector<float> w = values_of(kernel);
  std::vector<float> oik(w.size());
  for (std::int64_t a = 0; a < o; ++a)
    for (std::int64_t j = 0; j < k; ++j)
      for (std::int64_t i = 0; i < ch; ++i) oik[(a * ch + i) * k + j] = w[(a * k + j) * ch + i];
  const std::string padding = cfg["padding"];
  if (c.keras_masks) c.lengths.clear();  // Note [Sequence masks]: Keras's Conv1D ends the mask
  const std::string y =
      c.b.op("Conv",
             {transpose(c, x, {0, 2, 1}), c.b.floats(params[0]->name, {o, ch, k}, oik),
              weight(c, *params[1])},
             {attr("kernel_shape", std::vector<std::int64_t>{k}),
              attr("strides", std::vector<std::int64_t>{s}),
              attr("dilations", std::vector<std::int64_t>{d}),
              window_pads(padding, c.dynamic_steps ? -1 : in[0], k, s, d)},
             l.name());
  const std::string out = transpose(c, activation(c, y, cfg.at("activation"), l.name()), {0, 2, 1});
  if (c.lengths.empty()) return out;
  c.lengths = window_lengths(c, c.lengths, padding, k, s, d);
  return fill_past(c, out, c.lengths, 0.0f);
}

std::string pool1d(Ctx& c, nn::Layer& l, const std::string& x, const Shape& in, bool max) {
  const auto cfg = l.config();
  const std::int64_t k = cfg["pool_size"], s = cfg["strides"];
  const std::string padding = cfg["padding"];
  if (c.keras_masks) c.lengths.clear();  // Note [Sequence masks]: Keras's pools end the mask
  const Attribute pads = window_pads(padding, c.dynamic_steps ? -1 : in[0], k, s, 1);
  const std::vector<Attribute> window = {attr("kernel_shape", std::vector<std::int64_t>{k}),
                                         attr("strides", std::vector<std::int64_t>{s}), pads};
  std::string y;
  if (max) {
    // Steps past the length never win: they become -inf (padding is ignored by MaxPool).
    const std::string in_x =
        c.lengths.empty() ? x : fill_past(c, x, c.lengths, -std::numeric_limits<float>::infinity());
    y = c.b.op("MaxPool", {transpose(c, in_x, {0, 2, 1})}, window, l.name());
  } else if (c.lengths.empty()) {
    std::vector<Attribute> attrs = window;
    attrs.push_back(attr("count_include_pad", 0));  // padding does not count (TensorFlow)
    y = c.b.op("AveragePool", {transpose(c, x, {0, 2, 1})}, attrs, l.name());
  } else {
    // Sum and count of the valid steps of each window, as two convolutions with ones.
    const std::int64_t ch = in[1];
    std::vector<Attribute> depthwise = window;
    depthwise.push_back(attr("group", ch));
    const std::string sum =
        c.b.op("Conv",
               {transpose(c, fill_past(c, x, c.lengths, 0.0f), {0, 2, 1}),
                c.b.floats("ones", {ch, 1, k}, std::vector<float>(ch * k, 1.0f))},
               depthwise, l.name());
    const std::string valid = cast(c, valid_steps(c, x, c.lengths), kFloat);  // [N, T, 1]
    const std::string count = c.b.op("Conv",
                                     {transpose(c, valid, {0, 2, 1}),
                                      c.b.floats("ones", {1, 1, k}, std::vector<float>(k, 1.0f))},
                                     window);
    y = c.b.op("Div", {sum, c.b.op("Max", {count, c.b.scalar_f(1.0f)})}, {}, l.name());
  }
  const std::string out = transpose(c, y, {0, 2, 1});
  if (c.lengths.empty()) return out;
  c.lengths = window_lengths(c, c.lengths, padding, k, s, 1);
  return fill_past(c, out, c.lengths, 0.0f);
}

std::string global_pool1d(Ctx& c, const std::string& x, bool max, const std::string& name) {
  if (c.keras_masks && max) c.lengths.clear();  // Keras's GlobalMaxPooling1D reads every step
  std::string y;
  if (max) {
    const std::string in_x =
        c.lengths.empty() ? x : fill_past(c, x, c.lengths, -std::numeric_limits<float>::infinity());
    y = c.b.op("ReduceMax", {in_x},
               {attr("axes", std::vector<std::int64_t>{1}), attr("keepdims", 0)}, name);
  } else if (c.lengths.empty()) {
    y = c.b.op("ReduceMean", {x}, {attr("axes", std::vector<std::int64_t>{1}), attr("keepdims", 0)},
               name);
  } else {
    const std::string sum = c.b.op("ReduceSum", {fill_past(c, x, c.lengths, 0.0f), c.b.ints({1})},
                                   {attr("keepdims", 0)});
    const std::string count = c.b.op("Unsqueeze", {cast(c, c.lengths, kFloat), c.b.ints({1})});
    y = c.b.op("Div", {sum, count}, {}, name);
  }
  c.lengths.clear();  // no time axis any more
  return y;
}

/// W, R, B of one or two directions in ONNX's gate order: `order` lists Mirror's gate blocks
/// in ONNX's order (GRU: z, r, n = Mirror's 1, 0, 2; LSTM: i, o, f, c = Mirror's 0, 3, 1, 2).
std::vector<std::string> rnn_weights(Ctx& c, const std::vector<nn::Recurrent*>& dirs,
                                     const std::vector<int>& order, int units,
                                     const std::string& name) {
  const auto gates = static_cast<std::int64_t>(order.size());
  std::vector<float> w, r, b;
  std::int64_t features = 0;
  auto reordered = [&](const Tensor& t, std::vector<float>& out) {
    const std::vector<float> v = values_of(t);
    const std::size_t block = v.size() / static_cast<std::size_t>(gates);
    for (int g : order)
      out.insert(out.end(), v.begin() + static_cast<long>(g * block),
                 v.begin() + static_cast<long>((g + 1) * block));
  };
  for (nn::Recurrent* d : dirs) {
    const auto p = d->parameters();  // kernel, recurrent_kernel, bias, recurrent_bias
    features = p[0]->value.dim(1);
    reordered(p[0]->value, w);
    reordered(p[1]->value, r);
    reordered(p[2]->value, b);
    reordered(p[3]->value, b);
  }
  const auto n = static_cast<std::int64_t>(dirs.size()), gh = gates * units;
  return {c.b.floats(name + "/W", {n, gh, features}, w), c.b.floats(name + "/R", {n, gh, units}, r),
          c.b.floats(name + "/B", {n, 2 * gh}, b)};
}

/// Y [T, D, N, H] or Y_h [D, N, H] merged over the D directions into [N, T, H'] or [N, H'].
std::string merge_directions(Ctx& c, const std::string& y, bool sequences, int units,
                             nn::MergeMode mode, int directions) {
  const std::int64_t axis = sequences ? 2 : 1;  // of the transposed tensor
  const std::string t = sequences ? transpose(c, y, {2, 0, 1, 3}) : transpose(c, y, {1, 0, 2});
  const std::int64_t width = directions == 2 && mode == nn::MergeMode::kConcat ? 2 * units : units;
  if (directions == 1 || mode == nn::MergeMode::kConcat) {
    const std::vector<std::int64_t> shape =
        sequences ? std::vector<std::int64_t>{0, 0, width} : std::vector<std::int64_t>{0, width};
    return c.b.op("Reshape", {t, c.b.ints(shape)});  // forward first, as Mirror's concat
  }
  const std::vector<Attribute> reduce = {attr("axes", std::vector<std::int64_t>{axis}),
                                         attr("keepdims", 0)};
  if (mode == nn::MergeMode::kSum)
    return c.b.op("ReduceSum", {t, c.b.ints({axis})}, {attr("keepdims", 0)});
  if (mode == nn::MergeMode::kAve) return c.b.op("ReduceMean", {t}, reduce);
  return c.b.op("ReduceProd", {t}, reduce);
}

std::string recurrent(Ctx& c, nn::Layer& l, const std::vector<nn::Recurrent*>& dirs,
                      nn::MergeMode mode, const std::string& x) {
  nn::Recurrent& first = *dirs.front();
  const bool gru = first.kind() == "gru";
  MIRROR_CHECK(
      gru || first.kind() == "lstm", InvalidArgument,
      "layer " + l.name() + " wraps a " + first.kind() + ", which cannot be exported to ONNX");
  const int units = first.units();
  const auto weights = rnn_weights(
      c, dirs, gru ? std::vector<int>{1, 0, 2} : std::vector<int>{0, 3, 1, 2}, units, l.name());
  std::vector<std::string> inputs = {transpose(c, x, {1, 0, 2}), weights[0], weights[1],
                                     weights[2]};
  if (!c.lengths.empty()) inputs.push_back(cast(c, c.lengths, kInt32));
  std::vector<Attribute> attrs = {
      attr("hidden_size", units),
      attr("direction", dirs.size() == 2 ? "bidirectional" : "forward")};
  if (gru) attrs.push_back(attr("linear_before_reset", 1));  // Mirror's reset-after GRU
  const auto outs = c.b.node(gru ? "GRU" : "LSTM", inputs, attrs, 2, l.name());
  const bool sequences = first.return_sequences();
  const std::string y = merge_directions(c, sequences ? outs[0] : outs[1], sequences, units, mode,
                                         static_cast<int>(dirs.size()));
  if (!sequences || c.lengths.empty()) return y;
  if (c.keras_masks && !first.zero_output_for_mask() && dirs.size() == 1) {
    // Note [Carried outputs]: past its length a sequence repeats its last valid output: step t
    // reads step min(t, length - 1).
    const std::string steps =
        c.b.op("Range", {c.b.scalar_i64(0), steps_of(c, y), c.b.scalar_i64(1)});
    const std::string last = c.b.op("Sub", {c.lengths, c.b.scalar_i64(1)});
    const std::string index = c.b.op("Min", {c.b.op("Unsqueeze", {steps, c.b.ints({0})}),
                                             c.b.op("Unsqueeze", {last, c.b.ints({1})})});
    const std::string expanded =
        c.b.op("Expand", {c.b.op("Unsqueeze", {index, c.b.ints({2})}), c.b.op("Shape", {y})});
    return c.b.op("GatherElements", {y, expanded}, {attr("axis", 1)});
  }
  // Zeros past each length, as Mirror's return_sequences (whatever the runtime leaves there).
  return fill_past(c, y, c.lengths, 0.0f);
}

}  // namespace

std::string lengths_of_input(Ctx& c, const std::string& x, bool tokens) {
  std::string any = tokens
                        ? x
                        : c.b.op("ReduceMax", {c.b.op("Abs", {x})},
                                 {attr("axes", std::vector<std::int64_t>{2}), attr("keepdims", 0)});
  const std::string nonzero = cast(c, cast(c, any, kBool), kInt64);  // [N, T]
  const std::string positions = c.b.op(
      "Range",
      {c.b.scalar_i64(1), c.b.op("Add", {steps_of(c, x), c.b.scalar_i64(1)}), c.b.scalar_i64(1)});
  const std::string last =
      c.b.op("ReduceMax", {c.b.op("Mul", {nonzero, positions})},
             {attr("axes", std::vector<std::int64_t>{1}), attr("keepdims", 0)});
  return c.b.op("Max", {last, c.b.scalar_i64(1)}, {}, "lengths");
}

bool export_sequence_layer(Ctx& c, nn::Layer& l, const std::string& x, const Shape& in,
                           std::string& y) {
  const std::string kind = l.kind();
  if (kind == "gru" || kind == "lstm") {
    y = recurrent(c, l, {&dynamic_cast<nn::Recurrent&>(l)}, nn::MergeMode::kConcat, x);
  } else if (kind == "bidirectional") {
    auto& bi = dynamic_cast<nn::Bidirectional&>(l);
    y = recurrent(c, l, {&bi.forward_layer(), &bi.backward_layer()}, bi.merge_mode(), x);
  } else if (kind == "conv1d") {
    y = conv1d(c, l, x, in);
  } else if (kind == "max_pooling1d" || kind == "average_pooling1d") {
    y = pool1d(c, l, x, in, kind == "max_pooling1d");
  } else if (kind == "global_max_pooling1d" || kind == "global_average_pooling1d") {
    y = global_pool1d(c, x, kind == "global_max_pooling1d", l.name());
  } else {
    return false;
  }
  return true;
}

}  // namespace mirror::onnx::detail
