// `_mirror.load` and `_mirror.predict`: a checkpoint's weights and spec as NumPy arrays, and a
// model's outputs on NumPy samples, through mirror-predict's engine (tools/predict.h).
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <optional>
#include <string>
#include <vector>

#include "bindings.h"
#include "mirror/json_input.h"
#include "tools/predict.h"

namespace mirror::python {
namespace {

namespace pr = mirror::predict;

nb::dict load(const std::string& path) {
  pr::CheckpointModel ck;
  {
    nb::gil_scoped_release release;
    ck = pr::load_checkpoint_model(path);
  }
  nb::dict weights;
  for (const auto& [name, tensor] : ck.weights) weights[name.c_str()] = to_numpy(tensor);
  nb::dict out;
  out["weights"] = weights;
  out["spec"] = ck.spec.to_json().dump();
  out["step"] = ck.step;
  out["path"] = ck.file.string();
  return out;
}

/// A model given as its bound spec (JSON) and weights by name, as load() and fit() return them.
pr::CheckpointModel in_memory_model(const std::string& spec_json, const nb::dict& weights,
                                    const std::string& what) {
  pr::CheckpointModel ck;
  ck.file = what;
  ck.spec = nn::ModelSpec::from_json(parse_json_input(spec_json, what), what);
  MIRROR_CHECK(ck.spec.bound(), InvalidArgument,
               what + ": the spec is not bound to data; give a trained model (fit() or load())");
  for (auto [name, value] : weights) {
    const std::string key = nb::cast<std::string>(name);
    ck.weights.emplace(key, to_tensor(nb::cast<CpuArray>(value), what + " weight '" + key + "'"));
  }
  return ck;
}

/// mirror-predict's steps (examples/mirror_predict.cpp) on one process: checks, batches in
/// input order, logits or probabilities.
nb::object predict(const std::optional<std::string>& path, const std::optional<std::string>& spec,
                   const nb::dict& weights, const CpuArray& x, std::int64_t batch_size,
                   const std::string& output_kind, const std::vector<std::int64_t>& input_shape) {
  MIRROR_CHECK(output_kind == "logits" || output_kind == "probabilities", InvalidArgument,
               "output_kind must be logits or probabilities, got '" + output_kind + "'");
  MIRROR_CHECK(batch_size >= 1, InvalidArgument,
               "batch_size must be >= 1, got " + std::to_string(batch_size));
  const pr::CheckpointModel ck =
      path ? pr::load_checkpoint_model(*path) : in_memory_model(*spec, weights, "model");
  // uint8 samples as stored for a model that rescales its own input (Note [Raw values]).
  pr::Inputs inputs =
      pr::array_input(borrow_array(x, "x"), "x", !ck.spec.reads_raw_values());
  Shape shape;
  std::vector<float> out;
  {
    StopSignalScope blocked(false);  // Note [Python stop signals]
    nb::gil_scoped_release release;
    nn::Sequential model = pr::build_model(ck, Device::cpu());
    std::string reshaped_by;
    for (std::size_t i = 0; i < input_shape.size(); ++i)
      reshaped_by += (i ? "," : "") + std::to_string(input_shape[i]);
    // Arrays laid out as training read them (a checkpoint's recorded --data-format).
    pr::prepare_inputs(inputs, model, "x", Shape(input_shape.begin(), input_shape.end()),
                       reshaped_by, ck.data_format);
    out = pr::run_model(model, inputs, 0, inputs.count(), batch_size);
    shape = pr::written_output_shape(model);  // Note [Dense labels]
    pr::apply_output_kind(out, ck.spec, pr::class_axis(model), output_kind);
    shape.insert(shape.begin(), inputs.count());
  }
  return to_numpy(Tensor::from_vector<float>(out, shape));
}

}  // namespace

void bind_models(nb::module_& m) {
  m.def("load", &load, nb::arg("path"));
  m.def("predict", &predict, nb::arg("path").none(), nb::arg("spec").none(), nb::arg("weights"),
        nb::arg("x"), nb::arg("batch_size"), nb::arg("output_kind"), nb::arg("input_shape"));
}

}  // namespace mirror::python
