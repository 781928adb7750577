// The extension module `mirror._mirror`: the library's errors as Python exceptions, the MPI
// runtime (rank, size, local rank), and the parts in fit.cpp and models.cpp. The Python package
// (python/mirror/) wraps it; all behaviour stays in the library (Note [One command line]).
#include <pthread.h>

#include <nanobind/stl/string.h>
#include <map>
#include <memory>

#include "bindings.h"
#include "mirror/distributed/preemption.h"
#include "mirror/error.h"
#include "mirror/train/trainer.h"

namespace mirror::python {
namespace {

// ---------------------------------------------------------------- errors

/// The exception classes of mirror/_errors.py by name, handed over at import; never freed
/// (the interpreter may be finalizing when the last translation runs).
std::map<std::string, nb::handle>& error_types() {
  static auto* types = new std::map<std::string, nb::handle>();
  return *types;
}

void set_error_types(nb::dict types) {
  for (auto [name, type] : types) error_types()[nb::cast<std::string>(name)] = type.inc_ref();
}

/// Raises the Python exception `name` (RuntimeError before the package set them) with the
/// library's message; an agreed stop (Note [Agreed errors]) carries its exit code.
void raise(const char* name, const std::exception& e, int exit_code = 1) {
  const auto it = error_types().find(name);
  if (it == error_types().end()) {
    PyErr_SetString(PyExc_RuntimeError, message_for(e).c_str());
    return;
  }
  nb::object error = it->second(message_for(e));
  error.attr("exit_code") = exit_code;
  PyErr_SetObject(it->second.ptr(), error.ptr());
}

void translate(const std::exception_ptr& p, void*) {
  try {
    std::rethrow_exception(p);
  } catch (const train::JobStopped& e) {
    raise("JobStopped", e, e.exit_code());
  } catch (const InvalidArgument& e) {
    raise("InvalidArgument", e, train::kExitSetupFailed);
  } catch (const DataError& e) {
    raise("DataError", e, train::kExitSetupFailed);
  } catch (const OutOfMemory& e) {
    raise("OutOfMemory", e);
  } catch (const CommError& e) {
    raise("CommError", e);
  } catch (const Unavailable& e) {
    raise("Unavailable", e);
  } catch (const Error& e) {
    raise("MirrorError", e);
  }
}

// ---------------------------------------------------------------- runtime

std::unique_ptr<dist::Runtime>& runtime_slot() {
  static std::unique_ptr<dist::Runtime> rt;
  return rt;
}

}  // namespace

dist::Runtime& runtime() {
  auto& rt = runtime_slot();
  if (!rt) {
    // MPI's own threads start here: they never take a stop signal (Note [Python stop signals]).
    StopSignalScope blocked(false);
    nb::gil_scoped_release release;  // MPI_Init waits for every rank
    int argc = 0;
    char** argv = nullptr;
    rt = std::make_unique<dist::Runtime>(argc, argv);
  }
  return *rt;
}

bool runtime_started() { return runtime_slot() != nullptr; }

void shutdown_runtime() {
  nb::gil_scoped_release release;  // MPI_Finalize waits for every rank
  runtime_slot().reset();
}

namespace {
constexpr int kStopSignals[] = {SIGTERM, SIGINT, SIGUSR1};
}

StopSignalScope::StopSignalScope(bool take) : take_(take) {
  sigset_t set;
  sigemptyset(&set);
  for (std::size_t i = 0; i < 3; ++i) {
    sigaction(kStopSignals[i], nullptr, &saved_[i]);
    sigaddset(&set, kStopSignals[i]);
  }
  pthread_sigmask(SIG_BLOCK, &set, &saved_mask_);
  if (!take_) return;
  dist::clear_stop_request();  // a signal before this call was Python's to handle
  dist::install_stop_handlers();
}

StopSignalScope::~StopSignalScope() {
  if (take_) {
    for (std::size_t i = 0; i < 3; ++i) sigaction(kStopSignals[i], &saved_[i], nullptr);
  }
  pthread_sigmask(SIG_SETMASK, &saved_mask_, nullptr);
}

void bind_errors(nb::module_& m) {
  nb::register_exception_translator(translate);
  m.def("_set_error_types", &set_error_types);
}

void bind_runtime(nb::module_& m) {
  m.def("rank", [] { return runtime().world_rank(); });
  m.def("size", [] { return runtime().world_size(); });
  m.def("local_rank", [] { return runtime().local_rank(); });
  m.def("local_size", [] { return runtime().local_size(); });
  m.def("runtime_started", &runtime_started);
  m.def("shutdown", &shutdown_runtime);
  m.def("barrier", [] {
    nb::gil_scoped_release release;
    runtime().barrier();
  });
  // An uncaught exception on one rank of several: end the job instead of leaving the others
  // waiting in a collective (as mirror-train's run_main does).
  m.def("abort_job", [](const std::string& message) { dist::Runtime::abort_job(message); });
}

}  // namespace mirror::python

NB_MODULE(_mirror, m) {
  namespace mp = mirror::python;
  m.attr("__version__") = MIRROR_VERSION;
  mp::bind_errors(m);
  mp::bind_runtime(m);
  mp::bind_fit(m);
  mp::bind_models(m);
  mp::bind_keras(m);
}
