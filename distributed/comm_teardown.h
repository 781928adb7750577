// defines: destroy_together and abort_together, the order in which communicators created
// together (one host thread owning several GPUs) are torn down. Written against a small table of
// library calls (CommTeardownOps), so the grouping and order are unit-tested without NCCL
// (tests/dist_comm_teardown_test.cpp); the NCCL table is NcclTeardownOps in
// distributed/cuda/nccl_communicator.cpp.
//
// Note [Grouped teardown]: finalizing an NCCL communicator is an intra-node collective: every
// rank of the clique takes part, and a thread that owns several ranks must issue the calls for
// all of them inside one ncclGroupStart/End; otherwise the first ncclCommFinalize waits for peers
// that the same thread would reach only afterwards, and the program hangs at exit. Abort is the
// same: ncclCommAbort of one rank can wait for kernels of its siblings that only their own abort
// ends, so the ranks a thread owns are aborted together in one group (the grouped-abort semantic
// NCCL recommends). The order is:
//   group { finalize every comm }   group { destroy every comm }
// and when finalizing fails, or the caller knows work is still pending that will never finish
// (destroy_together's `drained` is false):
//   group { abort every comm }
// Destroy after a successful finalize only frees local resources; a failed destroy is reported,
// never followed by an abort (the handle may already be freed).
#pragma once

#include <concepts>
#include <span>
#include <string>

namespace mirror::dist::detail {

/// The calls a teardown makes. Each returns "" on success or the library's error text.
template <class Ops>
concept CommTeardownOps = requires(Ops& ops, typename Ops::Comm comm) {
  { ops.group_start() } -> std::convertible_to<std::string>;
  { ops.group_end() } -> std::convertible_to<std::string>;
  { ops.finalize(comm) } -> std::convertible_to<std::string>;
  { ops.destroy(comm) } -> std::convertible_to<std::string>;
  { ops.abort(comm) } -> std::convertible_to<std::string>;
};

namespace teardown_impl {
inline void note(std::string& errors, const std::string& step, const std::string& error) {
  if (error.empty()) return;
  errors += (errors.empty() ? "" : "; ") + step + ": " + error;
}
}  // namespace teardown_impl

/// Aborts every non-null comm in `comms` inside one group (Note [Grouped teardown]). Never
/// throws; returns "" or what failed. If the group cannot even be opened the aborts are still
/// made, one by one, since an abort is the last way out.
template <CommTeardownOps Ops>
std::string abort_together(Ops& ops, std::span<const typename Ops::Comm> comms) {
  using teardown_impl::note;
  std::string errors;
  const std::string start = ops.group_start();
  note(errors, "ncclGroupStart before abort", start);
  for (const auto& comm : comms) {
    if (comm != typename Ops::Comm{}) note(errors, "ncclCommAbort", ops.abort(comm));
  }
  if (start.empty()) note(errors, "ncclGroupEnd after abort", ops.group_end());
  return errors;
}

/// Tears `comms` down together: when `drained` (nothing pending, or everything pending has
/// completed), finalizes them in one group and destroys them in another; when not drained, or
/// when finalizing fails, aborts them all in one group instead. Null comms are skipped. Never
/// throws; returns "" or what failed (the caller prints it: destructors must not throw).
template <CommTeardownOps Ops>
std::string destroy_together(Ops& ops, std::span<const typename Ops::Comm> comms, bool drained) {
  using teardown_impl::note;
  using Comm = typename Ops::Comm;
  if (!drained) return abort_together(ops, comms);
  std::string errors;
  std::string start = ops.group_start();
  if (!start.empty()) {
    note(errors, "ncclGroupStart before finalize", start);
    note(errors, "then aborted", abort_together(ops, comms));
    return errors;
  }
  for (const Comm& comm : comms) {
    if (comm != Comm{}) note(errors, "ncclCommFinalize", ops.finalize(comm));
  }
  note(errors, "ncclGroupEnd after finalize", ops.group_end());
  if (!errors.empty()) {
    note(errors, "then aborted", abort_together(ops, comms));
    return errors;
  }
  start = ops.group_start();
  note(errors, "ncclGroupStart before destroy", start);
  for (const Comm& comm : comms) {
    if (comm != Comm{}) note(errors, "ncclCommDestroy", ops.destroy(comm));
  }
  if (start.empty()) note(errors, "ncclGroupEnd after destroy", ops.group_end());
  return errors;
}

}  // namespace mirror::dist::detail
