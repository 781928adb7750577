// Keras's arithmetic with a number (ModelSpecParser::scalar_operand, model_spec_parser.h).
//
// Note [Scalar operands]
// Keras 3 writes `x + 3.0`, `x * (1 / 6)` (MobileNetV3's hard sigmoid: ReLU(6)(x + 3) / 6) and
// the like into to_json() as the op nodes Add, Subtract, Multiply, Divide / TrueDivide of
// keras.src.ops.numpy, whose inbound node holds the number beside the tensor:
//   {"args": [{"class_name": "__keras_tensor__", ...}, 3.0], "kwargs": {}}.
// Each such node is an affine map of its one tensor input, so it is read as a rescaling layer
// (scale, offset): x + c = (1, c), x - c = (1, -c), c - x = (-1, c), x * c = c * x = (c, 0),
// x / c = (1 / c, 0) (the one that may differ from Keras, by at most one rounding). The first
// four compute Keras's float32 result exactly. c / x is not affine and is refused, and so is a
// node whose arguments are two numbers (Keras folds those) or two tensors (a merge layer then).
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "nn/model_spec_parser.h"

namespace mirror::nn {

using nlohmann::json;

std::optional<json> ModelSpecParser::scalar_operand(Fields& f, const std::string& op) {
  if (!call_args.is_array() || call_args.size() != 2) return std::nullopt;
  const json& a = call_args[0];
  const json& b = call_args[1];
  if (a.is_number() == b.is_number()) return std::nullopt;
  const json& tensor = a.is_number() ? b : a;
  if (!tensor.is_object()) return std::nullopt;
  const double c = (a.is_number() ? a : b).get<double>();
  const bool number_first = a.is_number();
  if (!std::isfinite(c)) f.fail_layer("the number " + std::to_string(c) + " is not finite");
  f.finish();
  double scale = 1, offset = 0;
  if (op == "add") {
    offset = c;
  } else if (op == "subtract") {
    scale = number_first ? -1.0 : 1.0;
    offset = number_first ? c : -c;
  } else if (op == "multiply") {
    scale = c;
  } else {  // divide
    if (number_first) {
      f.fail_layer("divides the number " + std::to_string(c) +
                   " by a tensor, which Mirror does not compute (only x / c, x * c, x + c, "
                   "x - c and c - x)");
    }
    if (c == 0) f.fail_layer("divides by zero");
    scale = 1.0 / c;
  }
  return json{{"type", "rescaling"}, {"scale", scale}, {"offset", offset}};
}

std::vector<json> ModelSpecParser::divide(Fields& f, bool) {
  if (auto scalar = scalar_operand(f, "divide")) return {*scalar};
  f.fail_layer(
      "Mirror divides a tensor by a number only (x / c, Keras's op node with the number in its "
      "arguments), not by another tensor");
}

}  // namespace mirror::nn
