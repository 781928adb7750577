// Reading Keras's augmentation layers (RandomFlip, RandomTranslation, RandomZoom,
// RandomRotation, RandomContrast, RandomBrightness, RandomCrop) into canonical layers, and those
// as RandomAugment (RandomCrop) layers. The factors are checked and normalised as Keras 3's
// _set_factor does (keras/src/layers/preprocessing/image_preprocessing/*.py), so a spec written by
// hand with a single number means what it means to Keras.
#include <algorithm>
#include <cmath>

#include "mirror/nn/random_augment.h"
#include "nn/model_spec_augment.h"
#include "nn/model_spec_parser.h"

namespace mirror::nn {

using nlohmann::json;
using namespace spec_fields;  // NOLINT(google-build-using-namespace): the parsers' own helpers

namespace detail {

const std::vector<std::vector<std::string>>& augment_layer_names() {
  static const std::vector<std::vector<std::string>> names = {
      {"random_flip", "randomflip"},         {"random_translation", "randomtranslation"},
      {"random_zoom", "randomzoom"},         {"random_rotation", "randomrotation"},
      {"random_contrast", "randomcontrast"}, {"random_brightness", "randombrightness"},
      {"random_crop", "randomcrop"},
  };
  return names;
}

std::string augment_type(const std::string& type) {
  for (const auto& spellings : augment_layer_names()) {
    if (std::find(spellings.begin(), spellings.end(), type) != spellings.end())
      return spellings.front();
  }
  return "";
}

namespace {

ops::ImageAugment::Fill fill_of(const std::string& s) {
  if (s == "wrap") return ops::ImageAugment::Fill::kWrap;
  if (s == "constant") return ops::ImageAugment::Fill::kConstant;
  if (s == "nearest") return ops::ImageAugment::Fill::kNearest;
  return ops::ImageAugment::Fill::kReflect;
}

void range(const json& j, double out[2]) {
  out[0] = j[0].get<double>();
  out[1] = j[1].get<double>();
}

}  // namespace

std::unique_ptr<Layer> make_augment_layer(const json& l) {
  const std::string type = l["type"].get<std::string>();
  if (augment_type(type) != type || type.empty()) return nullptr;
  if (type == "random_crop") {
    return std::make_unique<RandomCrop>(static_cast<int>(l["height"].get<std::int64_t>()),
                                        static_cast<int>(l["width"].get<std::int64_t>()));
  }
  using K = ops::ImageAugment::Kind;
  ops::ImageAugment a;
  double r[2];
  if (type == "random_flip") {
    const std::string mode = l["mode"].get<std::string>();
    a.kind = K::kFlip;
    a.flip_horizontal = mode != "vertical";
    a.flip_vertical = mode != "horizontal";
  } else if (type == "random_contrast" || type == "random_brightness") {
    a.kind = type == "random_contrast" ? K::kContrast : K::kBrightness;
    range(l["factor"], r);
    a.lower[0] = r[0];
    a.upper[0] = r[1];
    range(l["value_range"], r);
    a.value_lo = r[0];
    a.value_hi = r[1];
  } else {
    a.kind = type == "random_translation" ? K::kTranslation
             : type == "random_zoom"      ? K::kZoom
                                          : K::kRotation;
    const bool rotation = a.kind == K::kRotation;
    range(l[rotation ? "factor" : "height_factor"], r);
    a.lower[0] = r[0];
    a.upper[0] = r[1];
    if (!rotation && l["width_factor"].is_array()) {
      range(l["width_factor"], r);
      a.lower[1] = r[0];
      a.upper[1] = r[1];
    }
    a.same_zoom = a.kind == K::kZoom && !l["width_factor"].is_array();
    a.fill = fill_of(l["fill_mode"].get<std::string>());
    a.fill_value = l["fill_value"].get<double>();
    a.nearest = l["interpolation"] == "nearest";
  }
  return std::make_unique<RandomAugment>(type, a);
}

}  // namespace detail

namespace {

/// A factor as Keras 3 normalises it: a number f gives [max(-|f|, low), |f|], a pair is sorted;
/// every bound must lie in [low, 1] (Keras's _FACTOR_BOUNDS, or [-1, 1] for translation/zoom).
json factor_range(spec_fields::Fields& f, const std::string& name, double low, bool required) {
  std::string field;
  const json* v = f.take(name, "", &field);
  if (v == nullptr) {
    if (required) f.fail(name, "required (a number or [lower, upper])");
    return nullptr;
  }
  double lo = 0, hi = 0;
  if (v->is_number()) {
    const double x = v->get<double>();
    if (!(x >= low && x <= 1)) {
      f.fail(name, "expected a number in [" + std::to_string(low) + ", 1], got " + v->dump());
    }
    hi = std::fabs(x);
    lo = std::max(-hi, low);
  } else if (v->is_array() && v->size() == 2 && (*v)[0].is_number() && (*v)[1].is_number()) {
    lo = std::min((*v)[0].get<double>(), (*v)[1].get<double>());
    hi = std::max((*v)[0].get<double>(), (*v)[1].get<double>());
    if (!(lo >= std::min(low, -1.0) && hi <= 1)) {
      f.fail(name, "expected bounds in [" + std::to_string(std::min(low, -1.0)) + ", 1], got " +
                       v->dump());
    }
  } else {
    f.fail(name, "expected a number or [lower, upper], got " + v->dump());
  }
  return json::array({lo, hi});
}

/// value_range [low, high] (default [0, 255]).
json value_range(spec_fields::Fields& f, bool sort) {
  std::string field;
  const json* v = f.take("value_range", "", &field);
  if (v == nullptr) return json::array({0.0, 255.0});
  if (!v->is_array() || v->size() != 2 || !(*v)[0].is_number() || !(*v)[1].is_number()) {
    f.fail("value_range", "expected [low, high], got " + v->dump());
  }
  double lo = (*v)[0].get<double>(), hi = (*v)[1].get<double>();
  if (sort && lo > hi) std::swap(lo, hi);
  if (!(lo < hi)) {
    f.fail("value_range", "expected low < high, got " + v->dump() +
                              (sort ? "" : " (Keras's RandomContrast does not sort it)"));
  }
  return json::array({lo, hi});
}

}  // namespace

std::vector<json> detail::random_augment(ModelSpecParser& p, Fields& f, bool keras,
                                         const std::string& type) {
  json j = {{"type", type}};
  if (type == "random_crop") {
    for (const char* side : {"height", "width"}) {
      const std::int64_t n = f.integer(side, "", 0, 1);
      if (n == 0) f.fail(side, "required (a positive integer)");
      j[side] = n;
    }
  } else if (type == "random_flip") {
    const std::string mode = f.text("mode", "", "horizontal_and_vertical");
    if (mode != "horizontal" && mode != "vertical" && mode != "horizontal_and_vertical") {
      f.fail("mode",
             "expected horizontal, vertical or horizontal_and_vertical, got \"" + mode + "\"");
    }
    j["mode"] = mode;
  } else if (type == "random_contrast" || type == "random_brightness") {
    const bool contrast = type == "random_contrast";
    j["factor"] = factor_range(f, "factor", contrast ? 0.0 : -1.0, true);
    j["value_range"] = value_range(f, !contrast);
  } else {
    if (type == "random_rotation") {
      j["factor"] = factor_range(f, "factor", -1.0, true);
    } else {
      j["height_factor"] = factor_range(f, "height_factor", -1.0, true);
      j["width_factor"] = factor_range(f, "width_factor", -1.0, type == "random_translation");
    }
    const std::string fill = f.text("fill_mode", "", "reflect");
    if (fill != "reflect" && fill != "wrap" && fill != "constant" && fill != "nearest") {
      f.fail("fill_mode", "expected reflect, wrap, constant or nearest, got \"" + fill + "\"");
    }
    const std::string interpolation = f.text("interpolation", "", "bilinear");
    if (interpolation != "bilinear" && interpolation != "nearest") {
      f.fail("interpolation", "expected bilinear or nearest, got \"" + interpolation + "\"");
    }
    j["fill_mode"] = fill;
    j["interpolation"] = interpolation;
    j["fill_value"] = f.number("fill_value", "", 0.0);
  }
  if (f.peek("data_format") != nullptr) p.image_format(f, keras);
  f.finish({"batch_input_shape", "input_shape"});
  return {j};
}

}  // namespace mirror::nn
