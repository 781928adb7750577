// export_onnx's preprocessing layers (include/mirror/nn/preprocessing.h): Rescaling and
// Normalization as element-wise Mul/Sub/Add with per-channel constants, Resizing as the two
// products with the interpolation matrices Mirror runs (so the graph computes exactly its
// weights), CenterCrop as a Slice.
#include <cmath>

#include "mirror/nn/preprocessing.h"
#include "mirror/nn/random_augment.h"
#include "tools/onnx_export_internal.h"

namespace mirror::onnx::detail {
namespace {

/// Per-channel values as a constant that broadcasts over a sample `in` ([C, H, W]: [C, 1, 1];
/// features and sequences: [F]; one value: [1]).
std::string channel_constant(Ctx& c, const std::string& hint, const std::vector<double>& v,
                             const Shape& in) {
  const auto n = static_cast<std::int64_t>(v.size());
  const std::vector<float> f(v.begin(), v.end());
  if (n > 1 && in.size() == 3) return c.b.floats(hint, {n, 1, 1}, f);
  return c.b.floats(hint, {n}, f);
}

std::vector<double> doubles(const nlohmann::json& j) { return j.get<std::vector<double>>(); }

/// x [N, C, H, W] through resize's interpolation matrices: rows [h, H] (x columns^T).
std::string resize(Ctx& c, const nn::Resizing& r, const std::string& x, const std::string& name) {
  const Tensor& cols = r.columns();  // [w, W]
  const std::int64_t w = cols.dim(0), width = cols.dim(1);
  const std::vector<float> cv = values_of(cols);
  std::vector<float> ct(cv.size());  // columns^T [W, w]
  for (std::int64_t i = 0; i < w; ++i)
    for (std::int64_t j = 0; j < width; ++j) ct[j * w + i] = cv[i * width + j];
  const std::string a = c.b.op("MatMul", {x, c.b.floats(name + "/columns", {width, w}, ct)});
  return c.b.op("MatMul", {c.b.floats(name + "/rows", dims_of(r.rows()), values_of(r.rows())), a},
                {}, name);
}

}  // namespace

bool export_preprocessing_layer(Ctx& c, nn::Layer& l, const std::string& x, const Shape& in,
                                std::string& y) {
  const std::string kind = l.kind();
  const nlohmann::json cfg = l.config();
  if (kind == "rescaling") {
    const std::string scaled =
        c.b.op("Mul", {x, channel_constant(c, l.name() + "/scale", doubles(cfg["scale"]), in)});
    y = c.b.op("Add",
               {scaled, channel_constant(c, l.name() + "/offset", doubles(cfg["offset"]), in)}, {},
               l.name());
  } else if (kind == "normalization") {
    const std::vector<double> mean = doubles(cfg["mean"]);
    std::vector<double> d;
    for (double v : doubles(cfg["variance"])) d.push_back(std::max(std::sqrt(v), 1e-7));
    if (cfg["invert"].get<bool>()) {
      y = c.b.op("Add",
                 {c.b.op("Mul", {x, channel_constant(c, l.name() + "/stddev", d, in)}),
                  channel_constant(c, l.name() + "/mean", mean, in)},
                 {}, l.name());
    } else {
      for (double& v : d) v = 1.0 / v;
      y = c.b.op("Mul",
                 {c.b.op("Sub", {x, channel_constant(c, l.name() + "/mean", mean, in)}),
                  channel_constant(c, l.name() + "/inverse_stddev", d, in)},
                 {}, l.name());
    }
  } else if (kind == "resizing") {
    y = resize(c, dynamic_cast<nn::Resizing&>(l), x, l.name());
  } else if (kind == "random_crop") {  // inference: Keras's centred box, resized
    y = resize(c, dynamic_cast<const nn::Resizing&>(*dynamic_cast<nn::RandomCrop&>(l).resize()), x,
               l.name());
  } else if (kind == "center_crop") {
    auto& crop = dynamic_cast<nn::CenterCrop&>(l);
    if (crop.resize() != nullptr) {
      y = resize(c, *crop.resize(), x, l.name());
    } else {
      const std::int64_t top = crop.top(), left = crop.left(), h = cfg["height"], w = cfg["width"];
      y = c.b.op("Slice",
                 {x, c.b.ints({top, left}), c.b.ints({top + h, left + w}), c.b.ints({2, 3})}, {},
                 l.name());
    }
  } else {
    return false;
  }
  return true;
}

}  // namespace mirror::onnx::detail
