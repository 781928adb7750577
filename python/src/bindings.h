// defines: what the Python module's binding files share: the process's Runtime (started on
// first use), NumPy <-> NumericArray / Tensor conversions, the scope that routes stop signals
// to Mirror during a call, and the functions that add each part to the module.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <csignal>
#include <string>

#include "mirror/data/numeric_array.h"
#include "mirror/distributed/runtime.h"
#include "mirror/tensor.h"
#include "mirror/train/checkpoint.h"

namespace mirror::python {

namespace nb = nanobind;

/// A NumPy array as nanobind hands it over: on the CPU, C-contiguous (nanobind copies an array
/// that is not, so only such an array is read without a copy), any dtype (checked by
/// borrow_array), read-only access.
using CpuArray = nb::ndarray<nb::ro, nb::c_contig, nb::device::cpu>;

/// Note [Zero-copy arrays]: the array's elements as a NumericArray that borrows them (Note
/// [Borrowed elements], numeric_array.h) and keeps the NumPy array alive through its owner.
/// DataError naming `name` for a dtype Mirror does not read (bool, float16, complex, ...).
data::NumericArray borrow_array(const CpuArray& array, const std::string& name);

/// A copy of a CPU tensor as a new NumPy array of the same dtype and shape.
nb::object to_numpy(const Tensor& tensor);
/// A copy of a NumPy array (float32/float64/int32/int64/uint8) as a CPU tensor.
Tensor to_tensor(const CpuArray& array, const std::string& name);

/// The process's MPI runtime, started at the first call (MPI_Init: under mpirun the job's
/// ranks, alone a world of one) and finalized by shutdown_runtime() at exit.
dist::Runtime& runtime();
bool runtime_started();
void shutdown_runtime();

/// Note [Python stop signals]: Python's own handlers run on the main thread between bytecodes,
/// which a fit() in C++ never reaches, and the library's rule is that no compute thread ever
/// runs a handler (Note [Stop signals], distributed/preemption.cpp). So during a fit() the
/// library's stop handling takes SIGTERM, SIGINT and SIGUSR1 (install_stop_handlers: blocked
/// here and in every thread created meanwhile, taken by the library's signal thread, which sets
/// the stop flag that the next step's all-reduce carries to every rank), and afterwards
/// Python's handlers and this thread's signal mask come back. Other calls that compute (predict)
/// only block the signals, so the threads they create never take one, and Python sees a signal
/// that arrived meanwhile when the call returns.
class StopSignalScope {
 public:
  /// `take`: route the signals to the library's stop flag (fit), else only block them.
  explicit StopSignalScope(bool take);
  ~StopSignalScope();
  StopSignalScope(const StopSignalScope&) = delete;
  StopSignalScope& operator=(const StopSignalScope&) = delete;

 private:
  bool take_;
  struct sigaction saved_[3];
  sigset_t saved_mask_;
};

void bind_errors(nb::module_& m);
void bind_runtime(nb::module_& m);
void bind_fit(nb::module_& m);
void bind_models(nb::module_& m);
void bind_keras(nb::module_& m);

}  // namespace mirror::python
