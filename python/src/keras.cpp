// `_mirror.write_keras_weights`: a trained model's weights as the Keras 3 .weights.h5 file of
// its Keras twin, through the library's one layout conversion (Note [Keras weights],
// include/mirror/train/keras_weights.h); mirror.set_keras_weights loads it with
// keras_model.load_weights, Keras's own reader.
#include <nanobind/stl/string.h>

#include <string>

#include "bindings.h"
#include "mirror/json_input.h"
#include "mirror/nn/models.h"
#include "mirror/train/keras_weights.h"

namespace mirror::python {
namespace {

void write_keras_weights(const std::string& spec_json, const nb::dict& weights,
                         const std::string& path) {
  const nn::ModelSpec bound =
      nn::ModelSpec::from_json(parse_json_input(spec_json, "model"), "model");
  MIRROR_CHECK(bound.bound(), InvalidArgument,
               "model: the spec is not bound to data; give a trained model (fit() or load())");
  train::NamedTensors tensors;
  for (auto [name, value] : weights) {
    const std::string key = nb::cast<std::string>(name);
    tensors.emplace(key, to_tensor(nb::cast<CpuArray>(value), "weight '" + key + "'"));
  }
  nb::gil_scoped_release release;
  train::write_keras_weights_file(path, train::to_keras_weights(bound, tensors));
}

}  // namespace

void bind_keras(nb::module_& m) {
  m.def("write_keras_weights", &write_keras_weights, nb::arg("spec"), nb::arg("weights"),
        nb::arg("path"));
  m.def("keras_weights_supported", &train::keras_weights_file_supported);
}

}  // namespace mirror::python
