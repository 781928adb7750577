// The parsers of the preprocessing layers (ModelSpecParser, model_spec_parser.h): Rescaling,
// Normalization, Resizing and CenterCrop, Mirror's or Keras's spelling, as canonical layers
// (docs/model-spec.md; the layers are include/mirror/nn/preprocessing.h).
#include <cmath>
#include <string>
#include <vector>

#include "nn/model_spec_parser.h"

namespace mirror::nn {

using nlohmann::json;
using namespace spec_fields;  // NOLINT(google-build-using-namespace): the parsers' own helpers

namespace {

/// A finite number or a non-empty list of them (one per channel), as written; null when absent.
json numbers(Fields& f, const std::string& name) {
  std::string field;
  const json* v = f.take(name, "", &field);
  if (v == nullptr) return json();
  const auto finite = [](const json& x) { return x.is_number() && std::isfinite(x.get<double>()); };
  bool ok = finite(*v);
  if (v->is_array()) {
    ok = !v->empty() && v->size() <= (1u << 20);
    for (const json& x : *v) ok = ok && finite(x);
  }
  if (!ok) {
    f.fail(field, "expected a number or a list of numbers (one per channel), got " +
                      v->dump().substr(0, 200));
  }
  return *v;
}

}  // namespace

std::vector<json> ModelSpecParser::rescaling(Fields& f, bool) {
  const json scale = numbers(f, "scale");
  if (scale.is_null()) f.fail("scale", "required (the factor, e.g. 1/255)");
  json offset = numbers(f, "offset");
  if (offset.is_null()) offset = 0.0;
  f.finish({"batch_input_shape", "input_shape"});
  return {{{"type", "rescaling"}, {"scale", scale}, {"offset", offset}}};
}

std::vector<json> ModelSpecParser::normalization(Fields& f, bool) {
  // Keras writes axis as a list: [-1] (the default, per channel), [] (axis=None: one mean) or
  // a positive index ([3] of an image: Note [Positive channel axes]).
  json axis = -1;
  json recorded;
  const json* v = f.peek("axis");
  if (f.is_null("axis") || (v != nullptr && v->is_array() && v->empty())) {
    std::string field;
    f.take("axis", "", &field);
    axis = nullptr;
  } else {
    recorded = channel_axis(f, ", or null (one mean for every element)");
  }
  const json mean = numbers(f, "mean");
  const json variance = numbers(f, "variance");
  if (mean.is_null() != variance.is_null()) {
    f.fail(mean.is_null() ? "mean" : "variance", "mean and variance go together");
  }
  const bool invert = f.boolean("invert", "", false);
  // Mirror's canonical form only: values that Keras's adapt() computed (Note [Adapted
  // normalization]), which Keras keeps as variables, with adapt()'s sample count.
  const bool adapted = f.boolean("adapted", "", false);
  const std::int64_t samples = f.integer("count", "", 0, 0);
  f.finish({"batch_input_shape", "input_shape"});
  json j = {{"type", "normalization"}, {"axis", axis}, {"invert", invert}};
  record_axis(j, recorded);
  if (mean.is_null()) {  // adapted values: Note [Unstated normalization]
    if (adapted) f.fail("adapted", "true needs the adapted mean and variance");
    return {j};
  }
  if (adapted) {
    j["adapted"] = true;
    j["count"] = samples;
  }
  const auto count = [](const json& v) { return v.is_array() ? v.size() : std::size_t{1}; };
  if (count(mean) != count(variance)) {
    f.fail("variance", std::to_string(count(variance)) + " values for " +
                           std::to_string(count(mean)) + " means");
  }
  if (axis.is_null() && count(mean) != 1) {
    f.fail("mean", "axis null normalises with one mean, got " + std::to_string(count(mean)));
  }
  for (const json& v : variance.is_array() ? variance : json::array({variance})) {
    if (v.get<double>() < 0) f.fail("variance", "must be >= 0, got " + v.dump());
  }
  j["mean"] = mean.is_array() ? mean : json::array({mean});
  j["variance"] = variance.is_array() ? variance : json::array({variance});
  return {j};
}

/// height and width: both required, in [1, 65536].
std::pair<std::int64_t, std::int64_t> ModelSpecParser::target_size(Fields& f) {
  const auto height = f.integer("height", "", 0, 1);
  const auto width = f.integer("width", "", 0, 1);
  if (height == 0) f.fail("height", "required (the output height)");
  if (width == 0) f.fail("width", "required (the output width)");
  if (height > 65536) f.fail("height", "at most 65536");
  if (width > 65536) f.fail("width", "at most 65536");
  return {height, width};
}

std::vector<json> ModelSpecParser::resizing(Fields& f, bool keras) {
  const auto [height, width] = target_size(f);
  const std::string interpolation = lower(f.text("interpolation", "", "bilinear"));
  if (interpolation != "bilinear" && interpolation != "nearest") {
    f.fail("interpolation",
           "only bilinear and nearest are supported, got \"" + interpolation + "\"");
  }
  const bool crop = f.boolean("crop_to_aspect_ratio", "", false);
  f.require_bool("pad_to_aspect_ratio", false,
                 "Mirror resizes the whole image or its crop of the target's aspect ratio");
  f.require_bool("antialias", false, "Mirror's resize interpolates without antialiasing");
  // Only used to fill a pad_to_aspect_ratio border, which is refused above.
  f.text("fill_mode", "", "constant");
  f.number("fill_value", "", 0.0);
  image_format(f, keras);
  f.finish({"batch_input_shape", "input_shape"});
  return {{{"type", "resizing"},
           {"height", height},
           {"width", width},
           {"interpolation", interpolation},
           {"crop_to_aspect_ratio", crop}}};
}

std::vector<json> ModelSpecParser::center_crop(Fields& f, bool keras) {
  const auto [height, width] = target_size(f);
  image_format(f, keras);
  f.finish({"batch_input_shape", "input_shape"});
  return {{{"type", "center_crop"}, {"height", height}, {"width", width}}};
}

bool ModelSpec::reads_raw_values() const {
  for (const json& l : layers_) {
    const bool first = !l.contains("inputs") || l["inputs"] == json::array({"input"});
    if (!first) continue;
    return l["type"] == "rescaling" || l["type"] == "normalization";
  }
  return false;
}

}  // namespace mirror::nn
