// defines: destroy_together and abort_together, the order in which communicators created
// together (one host thread owning several GPUs) are torn down; finish_group and wait_refusal,
// what happens to the collectives of a group once it ends, launched or not. Written against small
// tables of library calls (CommTeardownOps, GroupLaunchOps), so the grouping and order are
// unit-tested without NCCL (tests/dist_comm_teardown_test.cpp, tests/dist_group_launch_test.cpp);
// the NCCL tables are NcclTeardownOps and NcclGroupLaunchOps in
// distributed/cuda/nccl_communicator.cpp.
//
// Note [Grouped teardown]: finalizing an NCCL communicator is an intra-node collective: every
// rank of the clique takes part, and a thread that owns several ranks must issue the calls for
// all of them inside one ncclGroupStart/End; otherwise the first ncclCommFinalize waits for peers
// that the same thread would reach only afterwards, and the program hangs at exit. Abort is the
// same: ncclCommAbort of one rank can wait for kernels of its siblings that only their own abort
// ends, so the ranks a thread owns are aborted together in one group (the grouped-abort semantic
// NCCL recommends). The communicators are non-blocking (Note [Comm gate], comm_gate.h), so a
// finalize only starts; each one is then polled until it is done (settle) before any destroy.
// The order is:
//   group { finalize every comm }   settle every comm   group { destroy every comm }
// and when finalizing or settling fails, or the caller knows work is still pending that will
// never finish (destroy_together's `drained` is false):
//   group { abort every comm }
// Destroy after a successful finalize only frees local resources; a failed destroy is reported,
// never followed by an abort (the handle may already be freed).
#pragma once

#include <concepts>
#include <span>
#include <string>
#include <string_view>

namespace mirror::dist::detail {

/// The calls a teardown makes. Each returns "" on success or the library's error text.
template <class Ops>
concept CommTeardownOps = requires(Ops& ops, typename Ops::Comm comm) {
  { ops.group_start() } -> std::convertible_to<std::string>;
  { ops.group_end() } -> std::convertible_to<std::string>;
  { ops.finalize(comm) } -> std::convertible_to<std::string>;
  { ops.settle(comm) } -> std::convertible_to<std::string>;  // waits for the finalize
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
/// completed), finalizes them in one group, waits for each finalize and destroys them in another
/// group; when not drained, or when finalizing fails, aborts them all in one group instead. Null comms are skipped. Never
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
  for (const Comm& comm : comms) {
    if (errors.empty() && comm != Comm{}) note(errors, "finalizing", ops.settle(comm));
  }
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

// Note [Failed group launch]: collectives issued inside a group are enqueued by its end call
// (ncclGroupEnd); when that call fails, part of the group may already be enqueued, and those
// kernels keep writing the collectives' tensors. Giving the tensors back to the caching allocator
// then (dropping the unrecorded Works) hands out memory NCCL still writes. So, in this order:
//   1. abort the communicators of every collective of the group (each with the communicators
//      created together with it, Note [NCCL clique]): this ends whatever was enqueued and marks
//      them failed with the error, which every later wait() reports;
//   2. for each collective, record its completion on the communication stream (after whatever the
//      abort ended) and make the compute stream wait for that record before the tensors are
//      given back; when either step fails, the tensors are never given back (the rank is going
//      down: a leak is the safe side);
//   3. report the error to the caller.
// Releasing before aborting would free buffers under running kernels; recording after the abort
// is what orders the reuse after them.

/// The calls that end a group of collectives. `Work` is the handle of one collective issued in it.
template <class Ops>
concept GroupLaunchOps = requires(Ops& ops, const typename Ops::Work& w, const std::string& s) {
  { ops.launched(w) } -> std::same_as<void>;  // the group launched: track w as usual
  // Aborts w's communicator and those created with it, marking them failed with `s`; idempotent.
  { ops.abort(w, s) } -> std::same_as<void>;
  // Records w's completion on its communication stream: "" or the error.
  { ops.record(w) } -> std::convertible_to<std::string>;
  // Orders the compute stream after that record, then gives w's tensors back: "" or the error
  // (then nothing was given back).
  { ops.release(w) } -> std::convertible_to<std::string>;
  // w's tensors are never given back, because of the error `s`.
  { ops.keep(w, s) } -> std::same_as<void>;
};

/// The error a failed group end reports, naming the call that failed.
inline std::string group_launch_error(std::string_view call, std::string_view error) {
  return "a collective group failed to launch (" + std::string(call) + ": " + std::string(error) +
         ")";
}

/// Ends the group whose end call `end_call` returned `end_error` ("" on success) for the
/// collectives `pending` issued in it. Success: each is tracked (launched) and "" is returned.
/// Failure: Note [Failed group launch]; returns the error the caller must report.
template <GroupLaunchOps Ops>
std::string finish_group(Ops& ops, std::span<const typename Ops::Work> pending,
                         std::string_view end_call, std::string_view end_error) {
  if (end_error.empty()) {
    for (const auto& w : pending) ops.launched(w);
    return "";
  }
  const std::string why = group_launch_error(end_call, end_error);
  for (const auto& w : pending) ops.abort(w, why);  // every communicator, before any release
  for (const auto& w : pending) {
    std::string error = ops.record(w);
    if (error.empty()) error = ops.release(w);
    if (!error.empty()) ops.keep(w, error);
  }
  return why;
}

/// What Work::wait() must refuse with ("" when it may wait): the communicator's failure first
/// (`comm_error`, "" if none; it names the cause, e.g. the failed group end), else that the
/// collective `what` was never launched.
inline std::string wait_refusal(const std::string& comm_error, bool recorded,
                                const std::string& what) {
  if (!comm_error.empty()) return comm_error;
  if (!recorded) {
    return "NCCL " + what +
           " was never launched: wait() inside an open CollectiveGroup; end the group before "
           "waiting";
  }
  return "";
}

}  // namespace mirror::dist::detail
