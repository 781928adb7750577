// `_mirror.fit`: mirror-train's flags (Note [One command line]), NumPy arrays and a model spec
// in memory (Note [In-memory sources]), Python callbacks (Note [Fit callbacks]) -> the library's
// Trainer on this rank; returns the summary, the history and the trained weights.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bindings.h"
#include "mirror/data/arrays.h"
#include "mirror/distributed/preemption.h"
#include "mirror/json_input.h"
#include "mirror/nn/models.h"
#include "mirror/train/trainer.h"
#include "tools/train_flags.h"

namespace mirror::python {
namespace {

nb::dict logs_dict(const train::Logs& logs) {
  nb::dict d;
  for (const auto& [name, value] : logs) d[name.c_str()] = value;
  return d;
}

/// A Python hook (mirror/_fit.py) as the Trainer calls it: with the GIL, True to stop; a str is
/// the message of an exception the Python side caught (and keeps, to raise it again there).
template <class Index>
std::function<bool(Index, const train::Logs&)> hook(nb::object fn) {
  if (fn.is_none()) return {};
  return [fn](Index at, const train::Logs& logs) {
    nb::gil_scoped_acquire gil;
    nb::object answer = fn(at, logs_dict(logs));
    if (nb::isinstance<nb::str>(answer)) throw Error(nb::cast<std::string>(answer));
    return nb::cast<bool>(answer);
  };
}

train::Sources sources_of(const nb::dict& arrays, const std::optional<std::string>& spec_json,
                          const train::TrainConfig& config) {
  train::Sources s;
  const std::pair<const char*, std::optional<data::NumericArray> train::Sources::*> fields[] = {
      {"train_x", &train::Sources::train_x},
      {"train_y", &train::Sources::train_y},
      {"test_x", &train::Sources::test_x},
      {"test_y", &train::Sources::test_y}};
  const std::string* names[] = {&config.train_x, &config.train_y, &config.test_x, &config.test_y};
  for (std::size_t i = 0; i < 4; ++i) {
    if (!arrays.contains(fields[i].first)) continue;
    s.*fields[i].second = borrow_array(nb::cast<CpuArray>(arrays[fields[i].first]), *names[i]);
  }
  if (spec_json) s.model_spec = parse_json_input(*spec_json, config.model_spec);
  if (arrays.contains("init_weights_file"))  // a Keras model's weights, saved by mirror.fit
    s.init_weights_file = nb::cast<std::string>(arrays["init_weights_file"]);
  return s;
}

nb::dict summary_dict(const train::FitSummary& s) {
  nb::dict d;
  char fingerprint[32];
  std::snprintf(fingerprint, sizeof fingerprint, "%016llx",
                static_cast<unsigned long long>(s.weights_fingerprint));
  d["loss_kind"] = s.loss;
  d["evaluated"] = s.evaluated;
  d["test_loss"] = s.test_loss;
  d["test_accuracy"] = s.test_accuracy;
  d["test_mse"] = s.test_mse;
  d["test_mae"] = s.test_mae;
  d["train_loss"] = s.train_loss;
  d["train_accuracy"] = s.train_accuracy;
  d["steps"] = s.steps;
  d["final_step"] = s.final_step;
  d["wall_seconds"] = s.wall_seconds;
  d["samples_per_second"] = s.samples_per_second;
  d["world_replicas"] = s.world_replicas;
  d["devices"] = s.devices;
  d["weights_fingerprint"] = std::string(fingerprint);
  d["preempted"] = s.preempted;
  d["stopped_by_callback"] = s.stopped_by_callback;
  d["first_epoch"] = s.first_epoch;
  return d;
}

/// What a finished fit hands back, gathered without the GIL.
struct FitResult {
  train::FitSummary summary;
  train::NamedTensors weights;
  std::string spec;  // the bound spec (a checkpoint's 'mirror.model')
};

FitResult run_fit(const train::TrainConfig& config, train::Sources sources,
                  train::FitCallbacks callbacks) {
  dist::Runtime& rt = runtime();
  StopSignalScope signals(true);
  nb::gil_scoped_release release;
  FitResult out;
  std::optional<train::Trainer> trainer;
  try {
    trainer.emplace(rt, config, std::move(sources));
    trainer->set_callbacks(std::move(callbacks));
    out.summary = trainer->fit();
    out.weights = trainer->weights();
    out.spec = trainer->model_description();
    // Note [Python stop signals]: a signal after the last step's all-reduce reached only its
    // rank; every rank learns of it here, so all of them raise Preempted or none.
    const auto late = rt.all_gather_value<char>(dist::stop_requested() ? 1 : 0);
    for (char any : late) out.summary.preempted = out.summary.preempted || any != 0;
  } catch (const train::JobStopped&) {
    throw;  // Note [Agreed errors]: every rank raises it together
  } catch (const Error& e) {
    // With several ranks an error that was not agreed may leave others waiting in a
    // collective: end the job with the message, as mirror-train does (run_main).
    if (rt.world_size() > 1) dist::Runtime::abort_job(message_for(e));
    throw;
  }
  return out;
}

nb::dict fit(const std::vector<std::string>& args, const std::optional<std::string>& spec_json,
             const nb::dict& arrays, nb::object on_step_end, nb::object on_epoch_end) {
  const train::TrainFlags flags = train::parse_train_flags(args);
  MIRROR_CHECK(!flags.help, InvalidArgument, "help is not a fit() keyword: see help(mirror.fit)");
  train::FitCallbacks callbacks;
  callbacks.on_step_end = hook<std::int64_t>(on_step_end);
  callbacks.on_epoch_end = hook<int>(on_epoch_end);
  FitResult r =
      run_fit(flags.config, sources_of(arrays, spec_json, flags.config), std::move(callbacks));
  nb::dict out = summary_dict(r.summary);
  nb::list history;
  for (const train::Logs& logs : r.summary.history) history.append(logs_dict(logs));
  out["history"] = history;
  nb::dict weights;
  for (const auto& [name, tensor] : r.weights) weights[name.c_str()] = to_numpy(tensor);
  out["weights"] = weights;
  out["spec"] = r.spec;
  return out;
}

}  // namespace

void bind_fit(nb::module_& m) {
  m.def("fit", &fit, nb::arg("args"), nb::arg("spec_json").none(), nb::arg("arrays"),
        nb::arg("on_step_end").none(), nb::arg("on_epoch_end").none());
  m.def("flags_help", &train::train_flags_help);
  m.def("flag_switches", &train::train_flag_switches);
  m.def("builtin_models", &nn::ModelSpec::builtin_names);
  // The dataset fit() makes of x and y, for the proof that no copy is made (Note [Zero-copy
  // arrays]): the address it reads x from, and its samples decoded on demand.
  struct ArraysView {
    std::shared_ptr<const data::Dataset> dataset;
    std::uintptr_t x_address = 0;
  };
  nb::class_<ArraysView>(m, "_ArraysView")
      .def_ro("x_address", &ArraysView::x_address)
      .def("__len__", [](const ArraysView& v) { return v.dataset->size(); })
      .def("describe", [](const ArraysView& v) { return v.dataset->describe(); })
      .def("sample", [](const ArraysView& v, std::int64_t i) {
        std::vector<float> out(static_cast<std::size_t>(shape_numel(v.dataset->sample_shape())));
        v.dataset->decode_float(i, out.data());
        return out;
      });
  m.def("_arrays_view", [](const CpuArray& x, const CpuArray& y) {
    const data::NumericArray xa = borrow_array(x, "x");
    ArraysView v;
    v.x_address = reinterpret_cast<std::uintptr_t>(xa.data());
    v.dataset = data::arrays_dataset(xa, borrow_array(y, "y"), {}, "x", "y");
    return v;
  });
}

}  // namespace mirror::python
