// RandomAugment (nn/random_augment.h): the layer around ops::augment_forward/backward.
#include "mirror/nn/random_augment.h"

#include <utility>

#include "mirror/nn/attention.h"
#include "mirror/nn/keras_layers.h"
#include "mirror/nn/preprocessing.h"

namespace mirror::nn {

namespace {

const char* kind_name(ops::ImageAugment::Kind k) {
  switch (k) {
    case ops::ImageAugment::Kind::kFlip:
      return "random_flip";
    case ops::ImageAugment::Kind::kTranslation:
      return "random_translation";
    case ops::ImageAugment::Kind::kZoom:
      return "random_zoom";
    case ops::ImageAugment::Kind::kRotation:
      return "random_rotation";
    case ops::ImageAugment::Kind::kContrast:
      return "random_contrast";
    case ops::ImageAugment::Kind::kBrightness:
      return "random_brightness";
    case ops::ImageAugment::Kind::kCrop:
      return "random_crop";
  }
  return "";
}

const char* fill_name(ops::ImageAugment::Fill f) {
  switch (f) {
    case ops::ImageAugment::Fill::kReflect:
      return "reflect";
    case ops::ImageAugment::Fill::kWrap:
      return "wrap";
    case ops::ImageAugment::Fill::kConstant:
      return "constant";
    case ops::ImageAugment::Fill::kNearest:
      return "nearest";
  }
  return "";
}

}  // namespace

bool is_random_augment(const std::string& kind) {
  return kind == "random_flip" || kind == "random_translation" || kind == "random_zoom" ||
         kind == "random_rotation" || kind == "random_contrast" || kind == "random_brightness";
}

RandomAugment::RandomAugment(std::string kind, const ops::ImageAugment& augment)
    : kind_(std::move(kind)), augment_(augment) {
  MIRROR_CHECK(kind_ == kind_name(augment.kind), InvalidArgument,
               "RandomAugment: kind '" + kind_ + "' does not match its transform (" +
                   kind_name(augment.kind) + ")");
}

Shape RandomAugment::build(const Shape& input_shape, DType dtype, Device, InitRng&) {
  detail::require(*this, input_shape.size() == 3,
                  "expects an image [C, H, W] (Keras's [H, W, C]), got " + shape_str(input_shape));
  input_shape_ = input_shape;
  dtype_ = dtype;
  return input_shape;
}

std::uint64_t augment_layer_seed(const Layer& layer, std::uint64_t step_seed) {
  return detail::dropout_seed(layer, step_seed ^ 0x6175676d656e7421ull);  // "augment!"
}

Tensor RandomAugment::forward(const Tensor& x, ForwardContext& ctx) {
  detail::require(*this,
                  x.rank() == 4 && Shape(x.shape().begin() + 1, x.shape().end()) == input_shape_,
                  "expected input [N, " + shape_str(input_shape_).substr(1) + ", got " + x.str());
  x_ = Tensor();
  ids_ = Tensor();
  if (!ctx.training) return x;
  detail::require(*this, ctx.sample_ids.defined(), "training needs ForwardContext::sample_ids");
  seed_ = augment_layer_seed(*this, ctx.seed);
  ids_ = ctx.sample_ids;
  x_ = x;
  return ops::augment_forward(augment_, x, seed_, ids_);
}

Tensor RandomAugment::backward(const Tensor& dy) {
  if (!x_.defined()) return dy;
  if (!input_grad_needed()) return Tensor();
  return ops::augment_backward(augment_, x_, dy, seed_, ids_);
}

nlohmann::json RandomAugment::config() const {
  const ops::ImageAugment& a = augment_;
  nlohmann::json j = {{"lower", {a.lower[0], a.lower[1]}}, {"upper", {a.upper[0], a.upper[1]}}};
  using K = ops::ImageAugment::Kind;
  if (a.kind == K::kFlip) {
    j = {{"horizontal", a.flip_horizontal}, {"vertical", a.flip_vertical}};
  } else if (a.kind == K::kContrast || a.kind == K::kBrightness) {
    j["value_range"] = {a.value_lo, a.value_hi};
  } else {
    j["fill_mode"] = fill_name(a.fill);
    j["fill_value"] = a.fill_value;
    j["interpolation"] = a.nearest ? "nearest" : "bilinear";
    if (a.kind == K::kZoom) j["same_zoom"] = a.same_zoom;
  }
  return j;
}

RandomCrop::RandomCrop(int height, int width) : height_(height), width_(width) {
  MIRROR_CHECK(height >= 1 && width >= 1, InvalidArgument,
               "RandomCrop: height and width must be positive, got " + std::to_string(height) +
                   "x" + std::to_string(width));
}

Shape RandomCrop::build(const Shape& input_shape, DType dtype, Device device, InitRng& rng) {
  detail::require(*this, input_shape.size() == 3,
                  "expects an image [C, H, W] (Keras's [H, W, C]), got " + shape_str(input_shape));
  input_shape_ = input_shape;
  dtype_ = dtype;
  random_ = input_shape[1] > height_ && input_shape[2] > width_;
  resize_ = std::make_unique<Resizing>(height_, width_, Resizing::Interpolation::kBilinear, true);
  resize_->set_name(name() + "/resize");
  resize_->build(input_shape, dtype, device, rng);
  return {input_shape[0], height_, width_};
}

Tensor RandomCrop::forward(const Tensor& x, ForwardContext& ctx) {
  x_ = Tensor();
  ids_ = Tensor();
  if (!ctx.training || !random_) return resize_->forward(x, ctx);
  detail::require(*this,
                  x.rank() == 4 && Shape(x.shape().begin() + 1, x.shape().end()) == input_shape_,
                  "expected input [N, " + shape_str(input_shape_).substr(1) + ", got " + x.str());
  detail::require(*this, ctx.sample_ids.defined(), "training needs ForwardContext::sample_ids");
  seed_ = augment_layer_seed(*this, ctx.seed);
  ids_ = ctx.sample_ids;
  x_ = x;
  return ops::augment_forward(crop(), x, seed_, ids_);
}

Tensor RandomCrop::backward(const Tensor& dy) {
  if (!x_.defined()) return resize_->backward(dy);
  if (!input_grad_needed()) return Tensor();
  return ops::augment_backward(crop(), x_, dy, seed_, ids_);
}

ops::ImageAugment RandomCrop::crop() const {
  ops::ImageAugment a;
  a.kind = ops::ImageAugment::Kind::kCrop;
  a.crop_height = height_;
  a.crop_width = width_;
  return a;
}

}  // namespace mirror::nn
