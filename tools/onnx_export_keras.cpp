// export_onnx for the layers Keras users combine with GRUs and CNNs (nn/keras_layers.h,
// nn/keras_ops_layers.h, nn/attention.h). Images stay NCHW and sequences [N, T, F] as in Mirror;
// the attention masks are built from the lengths tensor where Mirror's layers read
// ForwardContext::lengths (Note [Export lengths], Note [Attention masks]).
#include <cmath>
#include <limits>

#include "mirror/error.h"
#include "mirror/nn/attention.h"
#include "mirror/nn/keras_layers.h"
#include "mirror/nn/keras_ops_layers.h"
#include "mirror/nn/random_augment.h"
#include "tools/onnx_export_internal.h"

namespace mirror::onnx::detail {
namespace {

std::string reshape_to(Ctx& c, const std::string& x, std::vector<std::int64_t> dims) {
  return c.b.op("Reshape", {x, c.b.ints(std::move(dims))});
}

// ---------------------------------------------------------------- shape layers

std::string reshape(Ctx& c, nn::Reshape& l, const std::string& x, const Shape& in) {
  const bool cl = l.channels_last();
  std::string y = cl && in.size() == 3 ? transpose(c, x, {0, 2, 3, 1}) : x;  // Keras's HWC
  std::vector<std::int64_t> dims = {-1};
  for (auto d : l.keras_output()) dims.push_back(d);
  y = reshape_to(c, y, dims);
  if (cl && l.keras_output().size() == 3) y = transpose(c, y, {0, 3, 1, 2});
  return c.b.op("Identity", {y}, {}, l.name());
}

std::string permute(Ctx& c, nn::Permute& l, const std::string& x) {
  std::vector<std::int64_t> perm = {0};
  for (int a : l.axes()) perm.push_back(a + 1);
  return c.b.op("Transpose", {x}, {attr("perm", perm)}, l.name());
}

std::string repeat_vector(Ctx& c, nn::Layer& l, const std::string& x) {
  const std::int64_t n = l.config()["n"];
  c.lengths.clear();  // full-length sequences, as Mirror's RepeatVector leaves them
  return c.b.op("Tile", {c.b.op("Unsqueeze", {x, c.b.ints({1})}), c.b.ints({1, n, 1})}, {},
                l.name());
}

std::string cropping(Ctx& c, nn::Layer& l, const std::string& x, const Shape& in) {
  const auto p = l.config()["cropping"];
  const std::int64_t top = p[0][0], bottom = p[0][1], left = p[1][0], right = p[1][1];
  return c.b.op(
      "Slice",
      {x, c.b.ints({top, left}), c.b.ints({in[1] - bottom, in[2] - right}), c.b.ints({2, 3})}, {},
      l.name());
}

std::string up_sampling(Ctx& c, nn::Layer& l, const std::string& x) {
  const auto size = l.config()["size"];
  // Nearest neighbour at integer scales: asymmetric coordinates, floor = each pixel repeated.
  return c.b.op(
      "Resize",
      {x, "", c.b.floats("scales", {4}, {1.0f, 1.0f, size[0].get<float>(), size[1].get<float>()})},
      {attr("mode", "nearest"), attr("coordinate_transformation_mode", "asymmetric"),
       attr("nearest_mode", "floor")},
      l.name());
}

/// TimeDistributed: [N, T, ...] -> [N * T, ...], the inner layer, back to [N, T, ...].
std::string time_distributed(Ctx& c, nn::TimeDistributed& l, const std::string& x,
                             const Shape& in) {
  const Shape step(in.begin() + 1, in.end());
  std::vector<std::int64_t> merged = {-1};
  merged.insert(merged.end(), step.begin(), step.end());
  const std::string saved = c.lengths;
  c.lengths.clear();  // the inner layer sees samples without a time axis
  const std::string inner = export_any_layer(c, l.inner(), {reshape_to(c, x, merged)}, step);
  c.lengths = saved;
  // [N, T] from the input, then the inner output's own dimensions.
  const std::string nt = c.b.op("Slice", {c.b.op("Shape", {x}), c.b.ints({0}), c.b.ints({2})});
  const std::string rest = c.b.op("Slice", {c.b.op("Shape", {inner}), c.b.ints({1}),
                                            c.b.ints({std::numeric_limits<std::int64_t>::max()})});
  return c.b.op("Reshape", {inner, c.b.op("Concat", {nt, rest}, {attr("axis", 0)})}, {}, l.name());
}

// ---------------------------------------------------------------- convolutions

std::string conv_transpose(Ctx& c, nn::Conv2DTranspose& l, const std::string& x, const Shape& in) {
  const auto cfg = l.config();
  const auto params = l.parameters();
  const ops::Conv2DGeometry& g = l.geometry();
  const std::int64_t kh = cfg["kernel_size"][0], kw = cfg["kernel_size"][1], s = cfg["strides"];
  const Shape out = {params[0]->value.dim(1), 0, 0};
  const std::int64_t oh =
      in[1] * s + (cfg["padding"] == "same" ? 0 : std::max<std::int64_t>(kh - s, 0));
  const std::int64_t ow =
      in[2] * s + (cfg["padding"] == "same" ? 0 : std::max<std::int64_t>(kw - s, 0));
  // ONNX: out = s (in - 1) + output_padding + k - pads; the rest of Keras's size is output_padding.
  const std::int64_t oph = oh - (s * (in[1] - 1) + kh - g.pad_top - g.pad_bottom);
  const std::int64_t opw = ow - (s * (in[2] - 1) + kw - g.pad_left - g.pad_right);
  std::vector<std::string> inputs = {x, weight(c, *params[0])};
  if (params.size() > 1) inputs.push_back(weight(c, *params[1]));
  const std::string y = c.b.op(
      "ConvTranspose", inputs,
      {attr("kernel_shape", std::vector<std::int64_t>{kh, kw}),
       attr("strides", std::vector<std::int64_t>{s, s}),
       attr("pads", std::vector<std::int64_t>{g.pad_top, g.pad_left, g.pad_bottom, g.pad_right}),
       attr("output_padding", std::vector<std::int64_t>{oph, opw})},
      l.name());
  (void)out;
  return activation(c, y, cfg.at("activation"), l.name());
}

std::string depthwise(Ctx& c, nn::Layer& l, const std::string& x, const Shape& in) {
  const auto cfg = l.config();
  const auto params = l.parameters();
  const std::int64_t kh = cfg["kernel_size"][0], kw = cfg["kernel_size"][1], s = cfg["strides"];
  const ops::Conv2DGeometry g =
      cfg["padding"] == "same"
          ? ops::Conv2DGeometry::same(static_cast<int>(in[1]), static_cast<int>(in[2]),
                                      static_cast<int>(kh), static_cast<int>(kw),
                                      static_cast<int>(s), static_cast<int>(s))
          : ops::Conv2DGeometry::valid(static_cast<int>(s), static_cast<int>(s));
  const bool separable = cfg.contains("filters");
  const bool bias = cfg["use_bias"].get<bool>();
  std::vector<std::string> inputs = {x, weight(c, *params[0])};
  if (bias && !separable) inputs.push_back(weight(c, *params.back()));
  std::string y = c.b.op(
      "Conv", inputs,
      {attr("kernel_shape", std::vector<std::int64_t>{kh, kw}),
       attr("strides", std::vector<std::int64_t>{s, s}),
       attr("pads", std::vector<std::int64_t>{g.pad_top, g.pad_left, g.pad_bottom, g.pad_right}),
       attr("group", in[0])},
      l.name());
  if (separable) {
    std::vector<std::string> pw = {y, weight(c, *params[1])};
    if (bias) pw.push_back(weight(c, *params[2]));
    y = c.b.op("Conv", pw, {attr("kernel_shape", std::vector<std::int64_t>{1, 1})}, l.name());
  }
  return activation(c, y, cfg.at("activation"), l.name());
}

// ---------------------------------------------------------------- activations and merges

std::string parametric(Ctx& c, nn::ParametricActivation& l, const std::string& x) {
  const ops::Eltwise& f = l.function();
  if (f.kind != ops::Eltwise::Kind::kRelu && f.kind != ops::Eltwise::Kind::kLeakyRelu &&
      f.kind != ops::Eltwise::Kind::kElu) {
    return activation(c, x, nn::input_activation_name(f), l.name());
  }
  if (f.kind == ops::Eltwise::Kind::kLeakyRelu) {
    return c.b.op("LeakyRelu", {x}, {attr_f("alpha", static_cast<float>(f.negative_slope))},
                  l.name());
  }
  if (f.kind == ops::Eltwise::Kind::kElu) {
    return c.b.op("Elu", {x}, {attr_f("alpha", static_cast<float>(f.alpha))}, l.name());
  }
  // Note [Parametric activations] (ops.h), Keras's steps.
  const std::string thr = c.b.scalar_f(static_cast<float>(f.threshold));
  std::string y = f.threshold != 0
                      ? c.b.op("Where", {c.b.op("Greater", {x, thr}), x, c.b.scalar_f(0.0f)})
                      : c.b.op("Relu", {x});
  if (f.max_value >= 0) {
    y = c.b.op("Clip", {y, c.b.scalar_f(0.0f), c.b.scalar_f(static_cast<float>(f.max_value))});
  }
  if (f.negative_slope != 0) {
    const std::string below = c.b.op("Relu", {c.b.op("Sub", {thr, x})});
    y = c.b.op("Sub",
               {y, c.b.op("Mul", {below, c.b.scalar_f(static_cast<float>(f.negative_slope))})});
  }
  return c.b.op("Identity", {y}, {}, l.name());
}

std::string merge(Ctx& c, nn::Layer& l, const std::vector<std::string>& xs) {
  const std::string kind = l.kind();
  if (kind == "subtract") return c.b.op("Sub", xs, {}, l.name());
  if (kind == "average") return c.b.op("Mean", xs, {}, l.name());
  if (kind == "maximum") return c.b.op("Max", xs, {}, l.name());
  if (kind == "minimum") return c.b.op("Min", xs, {}, l.name());
  std::string y = xs[0];  // multiply
  for (std::size_t i = 1; i < xs.size(); ++i) y = c.b.op("Mul", {y, xs[i]});
  return c.b.op("Identity", {y}, {}, l.name());
}

// ---------------------------------------------------------------- attention

/// Scores [..., Tq, Tk] with masked entries replaced by -1e9 (Note [Attention masks]); q and k
/// are [N, Tq, *] and [N, Tk, *]; `rank` is the scores' rank (3, or 4 with heads).
std::string masked_scores(Ctx& c, const std::string& scores, const std::string& q,
                          const std::string& k, bool mask_queries, bool causal, int rank) {
  std::string mask;
  auto both = [&](const std::string& m) { mask = mask.empty() ? m : c.b.op("And", {mask, m}); };
  const std::string tq = c.b.op("Range", {c.b.scalar_i64(0), steps_of(c, q), c.b.scalar_i64(1)});
  const std::string tk = c.b.op("Range", {c.b.scalar_i64(0), steps_of(c, k), c.b.scalar_i64(1)});
  const std::vector<std::int64_t> heads =
      rank == 4 ? std::vector<std::int64_t>{1} : std::vector<std::int64_t>{};
  if (!c.lengths.empty()) {
    const std::string len = c.b.op("Unsqueeze", {c.lengths, c.b.ints({1})});  // [N, 1]
    std::vector<std::int64_t> key_axes = {1};
    if (rank == 4) key_axes = {1, 2};
    both(c.b.op("Unsqueeze", {c.b.op("Less", {c.b.op("Unsqueeze", {tk, c.b.ints({0})}), len}),
                              c.b.ints(key_axes)}));  // [N, (1,) 1, Tk]
    if (mask_queries) {
      std::vector<std::int64_t> q_axes = {2};
      if (rank == 4) q_axes = {1, 3};
      both(c.b.op("Unsqueeze", {c.b.op("Less", {c.b.op("Unsqueeze", {tq, c.b.ints({0})}), len}),
                                c.b.ints(q_axes)}));  // [N, (1,) Tq, 1]
    }
  }
  if (causal) {
    both(c.b.op("GreaterOrEqual", {c.b.op("Unsqueeze", {tq, c.b.ints({1})}),
                                   c.b.op("Unsqueeze", {tk, c.b.ints({0})})}));  // [Tq, Tk]
  }
  (void)heads;
  return mask.empty() ? scores : c.b.op("Where", {mask, scores, c.b.scalar_f(-1e9f)});
}

std::string attention(Ctx& c, nn::Layer& l, const std::vector<std::string>& xs) {
  const auto cfg = l.config();
  const bool additive = l.kind() == "additive_attention";
  const std::string q = xs[0], v = xs[1], k = xs.size() > 2 ? xs[2] : xs[1];
  const auto params = l.parameters();
  std::string scores;
  if (!additive) {
    scores = c.b.op("MatMul", {q, transpose(c, k, {0, 2, 1})});
    if (!params.empty())
      scores = c.b.op("Mul", {scores, c.b.op("Reshape", {weight(c, *params[0]), c.b.ints({})})});
  } else {
    const std::string pre =
        c.b.op("Add", {c.b.op("Unsqueeze", {q, c.b.ints({2})}),
                       c.b.op("Unsqueeze", {k, c.b.ints({1})})});  // [N,Tq,Tk,D]
    const std::string t = c.b.op("Tanh", {pre});
    const std::string scaled = params.empty() ? t : c.b.op("Mul", {t, weight(c, *params[0])});
    scores = c.b.op("ReduceSum", {scaled, c.b.ints({-1})}, {attr("keepdims", 0)});
  }
  scores = masked_scores(c, scores, q, k, false, cfg["causal"].get<bool>(), 3);
  const std::string out = c.b.op("MatMul", {c.b.op("Softmax", {scores}, {attr("axis", -1)}), v});
  // Keras zeros the padded queries' outputs.
  return c.lengths.empty() ? c.b.op("Identity", {out}, {}, l.name())
                           : fill_past(c, out, c.lengths, 0.0f);
}

std::string multi_head(Ctx& c, nn::Layer& l, const std::vector<std::string>& xs) {
  const auto cfg = l.config();
  const std::int64_t h = cfg["num_heads"], kd = cfg["key_dim"], vd = cfg["value_dim"];
  const bool bias = cfg["use_bias"].get<bool>();
  const auto p = l.parameters();
  const std::size_t per = bias ? 2 : 1;  // query, key, value, output: kernel (and bias) each
  auto dense = [&](const std::string& x, std::size_t which) {
    std::string y = c.b.op("MatMul", {x, weight(c, *p[which * per])});
    return bias ? c.b.op("Add", {y, weight(c, *p[which * per + 1])}) : y;
  };
  auto heads = [&](const std::string& x, std::int64_t width) {  // [N, T, H*W] -> [N, H, T, W]
    return transpose(c, reshape_to(c, x, {0, 0, h, width}), {0, 2, 1, 3});
  };
  const std::string query = xs[0], value = xs[1], key = xs.size() > 2 ? xs[2] : xs[1];
  const std::string q = c.b.op(
      "Mul",
      {heads(dense(query, 0), kd), c.b.scalar_f(static_cast<float>(1.0 / std::sqrt(double(kd))))});
  const std::string k = heads(dense(key, 1), kd), v = heads(dense(value, 2), vd);
  std::string scores = c.b.op("MatMul", {q, transpose(c, k, {0, 1, 3, 2})});  // [N, H, Tq, Tk]
  scores = masked_scores(c, scores, query, key, true, cfg["causal"].get<bool>(), 4);
  const std::string o = c.b.op("MatMul", {c.b.op("Softmax", {scores}, {attr("axis", -1)}), v});
  const std::string merged = reshape_to(c, transpose(c, o, {0, 2, 1, 3}), {0, 0, h * vd});
  return c.b.op("Identity", {dense(merged, 3)}, {}, l.name());
}

}  // namespace

bool export_keras_layer(Ctx& c, nn::Layer& l, const std::vector<std::string>& xs, const Shape& in,
                        std::string& y) {
  const std::string kind = l.kind();
  const std::string& x = xs.front();
  if (auto* r = dynamic_cast<nn::Reshape*>(&l)) {
    y = reshape(c, *r, x, in);
  } else if (auto* p = dynamic_cast<nn::Permute*>(&l)) {
    y = permute(c, *p, x);
  } else if (kind == "repeat_vector") {
    y = repeat_vector(c, l, x);
  } else if (kind == "cropping2d") {
    y = cropping(c, l, x, in);
  } else if (kind == "up_sampling2d") {
    y = up_sampling(c, l, x);
  } else if (kind == "global_max_pooling2d") {
    y = c.b.op("Flatten", {c.b.op("GlobalMaxPool", {x}, {}, l.name())}, {attr("axis", 1)});
  } else if (kind == "spatial_dropout1d" || kind == "spatial_dropout2d" ||
             nn::is_random_augment(kind)) {
    y = c.b.op("Identity", {x}, {}, l.name());  // inference
  } else if (auto* t = dynamic_cast<nn::TimeDistributed*>(&l)) {
    y = time_distributed(c, *t, x, in);
  } else if (auto* ct = dynamic_cast<nn::Conv2DTranspose*>(&l)) {
    y = conv_transpose(c, *ct, x, in);
  } else if (kind == "depthwise_conv2d" || kind == "separable_conv2d") {
    y = depthwise(c, l, x, in);
  } else if (auto* a = dynamic_cast<nn::ParametricActivation*>(&l)) {
    y = parametric(c, *a, x);
  } else if (kind == "multiply" || kind == "subtract" || kind == "average" || kind == "maximum" ||
             kind == "minimum") {
    y = merge(c, l, xs);
  } else if (kind == "attention" || kind == "additive_attention") {
    y = attention(c, l, xs);
  } else if (kind == "multi_head_attention") {
    y = multi_head(c, l, xs);
  } else {
    return false;
  }
  return true;
}

}  // namespace mirror::onnx::detail
