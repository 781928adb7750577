// defines: CommGate, a communicator handle together with the lock every library call on it
// holds; take_all, how an abort takes the handles of several gates away; and settle_call, the
// poll loop that waits for a non-blocking call to finish. Written against a small table of
// library calls (GateOps), so the rules are unit-tested with stand-in communicators and threads
// (tests/dist_comm_gate_test.cpp); the NCCL table is NcclGateOps in
// distributed/cuda/nccl_communicator.cpp.
//
// Note [Comm gate]: ncclCommAbort frees the communicator, and NCCL's fault-tolerance rule is that
// no thread may be inside an NCCL call on it meanwhile. A watchdog (or a clique sibling) aborts
// while the replica thread may be enqueueing a collective, so:
//   1. every NCCL call on a communicator is made holding its gate's `calls` lock, and reads the
//      handle under it; a handle taken away (null) means "failed": the call is not made and the
//      caller reports the communicator's error;
//   2. the communicators are non-blocking (ncclCommInitRankConfig with blocking = 0): a call
//      returns at once, ncclInProgress when NCCL finishes it in the background, so the lock is
//      only ever held for a moment and an abort never waits long for it;
//   3. an in-progress call is waited for by polling the communicator's state (settle_call), with
//      the lock taken for each poll only, so an abort can come in between; the poll gives up at
//      the communicator's timeout (--comm-timeout), and the caller aborts;
//   4. an abort takes the handles of all the gates it aborts (a clique) at once: it locks every
//      gate with a back-off (never holding one while blocking on another), so a thread that holds
//      several gates through an open group (locked one by one, released at the group's end)
//      cannot deadlock with it; then it nulls the handles, unlocks, and only then calls
//      ncclCommAbort on what it took, where no other thread can reach them any more.
#pragma once

#include <chrono>
#include <concepts>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace mirror::dist::detail {

/// A communicator handle and the lock of the calls on it (Note [Comm gate]).
template <class Comm>
class CommGate {
 public:
  explicit CommGate(Comm comm = Comm{}) : comm_(comm) {}
  CommGate(const CommGate&) = delete;
  CommGate& operator=(const CommGate&) = delete;

  /// Held around every library call on the handle.
  std::mutex& calls() { return calls_; }
  /// The handle (null once taken); the caller holds calls().
  Comm get_locked() const { return comm_; }
  /// Hands the gate its handle; the caller holds calls().
  void put_locked(Comm comm) { comm_ = comm; }
  /// Takes the handle away (the caller now owns it); the caller holds calls().
  Comm take_locked() { return std::exchange(comm_, Comm{}); }
  /// Runs call(comm) under the lock and returns true, or returns false without calling when the
  /// handle was taken away.
  template <class Call>
  bool with(Call&& call) {
    std::lock_guard<std::mutex> lock(calls_);
    if (comm_ == Comm{}) return false;
    std::forward<Call>(call)(comm_);
    return true;
  }

 private:
  std::mutex calls_;
  Comm comm_{};
};

/// Locks every gate in `gates` (Note [Comm gate], rule 4: lock one, try the others, on a miss let
/// go of all and start over from the one that was busy), takes every handle away, unlocks, and
/// returns the non-null handles in gate order.
template <class Comm>
std::vector<Comm> take_all(std::span<CommGate<Comm>* const> gates) {
  const std::size_t n = gates.size();
  if (n == 0) return {};
  std::size_t first = 0;
  for (;;) {
    std::vector<std::unique_lock<std::mutex>> held;
    held.emplace_back(gates[first]->calls());
    std::size_t busy = n;
    for (std::size_t k = 1; k < n && busy == n; ++k) {
      const std::size_t i = (first + k) % n;
      std::unique_lock<std::mutex> lock(gates[i]->calls(), std::try_to_lock);
      if (lock.owns_lock()) {
        held.push_back(std::move(lock));
      } else {
        busy = i;
      }
    }
    if (busy == n) {
      std::vector<Comm> taken;
      for (CommGate<Comm>* g : gates) {
        if (Comm c = g->take_locked(); c != Comm{}) taken.push_back(c);
      }
      return taken;
    }
    held.clear();  // let go of everything before blocking on the busy one
    first = busy;
    std::this_thread::yield();
  }
}

/// The state of a communicator's last call, as its library reports it.
struct CallState {
  bool in_progress = false;
  std::string error;  // "" unless the communicator failed
};

/// What settle_call needs of the library.
template <class Ops>
concept GateOps = requires(Ops& ops, typename Ops::Comm comm) {
  { ops.state(comm) } -> std::same_as<CallState>;  // ncclCommGetAsyncError
  { ops.pause() } -> std::same_as<void>;           // between two polls
};

/// Waits until the last call on `gate` finished in the background (Note [Comm gate], rule 3):
/// "" then; else why not: the communicator's error, "aborted" when its handle was taken away
/// meanwhile, or the timeout when `deadline` passed first. The caller aborts on an error.
template <GateOps Ops, class Clock = std::chrono::steady_clock>
std::string settle_call(CommGate<typename Ops::Comm>& gate, Ops& ops,
                        typename Clock::time_point deadline, const std::string& what) {
  for (;;) {
    CallState state;
    if (!gate.with([&](typename Ops::Comm c) { state = ops.state(c); })) return "aborted";
    if (!state.error.empty()) return state.error;
    if (!state.in_progress) return "";
    if (Clock::now() >= deadline) return what + " did not finish within the communicator's timeout";
    ops.pause();
  }
}

}  // namespace mirror::dist::detail
