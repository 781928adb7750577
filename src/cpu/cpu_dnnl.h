// defines: the process-wide oneDNN engine, a per-thread stream, the error bridge from
// dnnl::error to mirror::Error, user-managed scratchpads taken from the device allocator, and
// DnnlBoundary / DnnlRun, which move tensors between Mirror's plain layouts and the blocked
// layouts a primitive chose (Note [oneDNN layouts]).
//
// Note [oneDNN threading]: primitives are created with scratchpad_mode::user and each execution
// gets its scratchpad from the tensor allocator (cached, so the steady state allocates nothing).
// That makes one cached primitive safe to run from several in-process replicas' threads at once;
// the library-managed scratchpad is not. oneDNN itself parallelises with OpenMP and respects
// omp_get_max_threads() (set by the programs' --threads).
//
// Note [Primitives and thread counts]: a oneDNN primitive fixes its work split (and with it the
// order of its reductions, e.g. a convolution's weight gradient summed over thread-local
// partials) from omp_get_max_threads() of the thread that creates it. A primitive made under
// 2 threads and run under 1 gives other bits than one made under 1. So the caches key every
// entry by the creating thread's count as well as by shape: whichever replica thread gets there
// first, every thread runs a primitive planned for its own count, and results depend only on
// the thread count (which every replica thread inherits from its caller, see ReplicaWorkers).
//
// Note [oneDNN layouts]: Mirror's tensors are always plain (NCHW activations, OIHW kernels).
// Given plain memory descriptors oneDNN's convolutions fall back to im2col + sgemm; given
// format_tag::any they pick blocked layouts (nChw8c, OIhw8i8o, ... on AVX2) and direct JIT
// kernels that are much faster even with reorders at the boundaries. So the primitive caches
// keep, per argument, the plain descriptor, the chosen one and the reorder between them
// (DnnlBoundary); DnnlRun reorders inputs in, runs, and reorders outputs back. The blocked
// copies come from the tensor allocator like the scratchpads, so the steady state allocates
// nothing and every cached object is safe to share between threads.
#pragma once

#include <cstdint>
#include <dnnl.hpp>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "mirror/tensor.h"

namespace mirror::cpu {

dnnl::engine& dnnl_engine();
/// A stream on dnnl_engine() owned by the calling thread.
dnnl::stream& dnnl_stream();
/// Primitive attributes with scratchpad_mode::user (Note [oneDNN threading]).
dnnl::primitive_attr dnnl_user_scratchpad_attr();
/// A memory object over a tensor's data (oneDNN wants non-const pointers even for inputs).
dnnl::memory dnnl_memory(const dnnl::memory::desc& md, const Tensor& t);
/// Scratch bytes for one execution; undefined tensor when none is needed.
Tensor dnnl_scratchpad(const dnnl::memory::desc& md, Device device);

/// How many primitive-cache entries were created so far (tests check that a repeated shape
/// creates nothing new).
std::int64_t dnnl_primitives_created();
void note_dnnl_primitive_created();

/// Throws mirror::Error "<what>: oneDNN <message> (status <n>)" for a caught dnnl::error.
[[noreturn]] void rethrow_dnnl(const dnnl::error& e, const std::string& what);

/// One primitive argument's layouts (Note [oneDNN layouts]). `reorder` is empty when the
/// primitive uses the plain layout itself; otherwise it goes plain -> chosen for inputs and
/// chosen -> plain for outputs.
struct DnnlBoundary {
  dnnl::memory::desc plain, chosen;
  dnnl::reorder reorder;
  dnnl::memory::desc reorder_scratch;
  bool reorders() const { return static_cast<bool>(reorder); }
};

/// An input boundary: plain `plain`, chosen `chosen`.
DnnlBoundary dnnl_input_boundary(const dnnl::memory::desc& plain, const dnnl::memory::desc& chosen);
/// An output boundary. With `accumulate` the result is ADDED to the plain tensor (a reorder with a
/// sum post-op, so there is a reorder even when the layouts agree).
DnnlBoundary dnnl_output_boundary(const dnnl::memory::desc& plain, const dnnl::memory::desc& chosen,
                                  bool accumulate = false);

/// One execution of a primitive with its boundaries: inputs are reordered on input(), the
/// primitive and the output reorders run on execute(). Temporaries (blocked copies,
/// scratchpads) come from `device`'s allocator and live as long as the DnnlRun.
class DnnlRun {
 public:
  explicit DnnlRun(Device device) : device_(device) {}
  void input(int arg, const DnnlBoundary& b, const Tensor& t);
  /// `t` receives the result (overwritten, or added to for an accumulating boundary).
  void output(int arg, const DnnlBoundary& b, const Tensor& t);
  /// Runs `prim` with a scratchpad of `scratch_md`, then the output reorders, and waits.
  void execute(const dnnl::primitive& prim, const dnnl::memory::desc& scratch_md);
  /// Runs input boundary `b`'s reorder alone, from `from` (its plain layout) into `to` (its
  /// chosen layout), and waits: a copy a caller keeps and hands to primitives later.
  void reorder(const DnnlBoundary& b, const Tensor& from, const Tensor& to);

 private:
  dnnl::memory buffer(const dnnl::memory::desc& md);
  void run(const dnnl::primitive& prim, const dnnl::memory::desc& scratch_md,
           std::unordered_map<int, dnnl::memory> args);

  struct PendingOutput {
    const DnnlBoundary* boundary;
    dnnl::memory from, to;
  };
  Device device_;
  std::vector<Tensor> keep_;
  std::unordered_map<int, dnnl::memory> args_;
  std::vector<PendingOutput> outputs_;
};

/// The calling thread's OpenMP thread count, as a cache-key prefix (Note [Primitives and
/// thread counts]).
std::string dnnl_thread_key();

/// A small thread-safe map from a shape key to whatever a primitive family caches (primitive
/// descriptors and primitives). Entries live for the process: a model uses a handful of shapes.
/// The key is extended with the calling thread's OpenMP thread count (Note [Primitives and
/// thread counts]).
template <class Value>
class PrimitiveCache {
 public:
  template <class Make>
  Value get(const std::string& shape_key, Make&& make) {
    const std::string key = dnnl_thread_key() + shape_key;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = map_.find(key);
      if (it != map_.end()) return it->second;
    }
    Value v = make();  // created outside the lock: creation may take milliseconds
    note_dnnl_primitive_created();
    std::lock_guard<std::mutex> lock(mutex_);
    return map_.emplace(key, std::move(v)).first->second;
  }
  std::size_t size() {
    std::lock_guard<std::mutex> lock(mutex_);
    return map_.size();
  }

 private:
  std::mutex mutex_;
  std::unordered_map<std::string, Value> map_;
};

}  // namespace mirror::cpu
