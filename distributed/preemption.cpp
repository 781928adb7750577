// The stop request: stop signals are taken by one thread of their own (Note [Stop signals]).
#include "mirror/distributed/preemption.h"

#include <pthread.h>

#include <atomic>
#include <csignal>
#include <mutex>
#include <thread>

namespace mirror::dist {
namespace {

std::atomic<int> g_stop{0};

// Note [Stop signals]: a signal handler that runs on a compute thread interrupts whatever that
// thread is doing, and oneDNN's sgemm does not survive it: on the development machine a
// single-threaded loop of dnnl_sgemm calls with a no-op SIGTERM handler (even on an alternate
// signal stack) hit "corrupted size vs. prev_size" within a second of signals, and mirror-train
// ranks sent SIGTERM mid-training crashed or diverged in about 1 stop of 5 to 30. So no compute
// thread ever runs a handler: install_stop_handlers() blocks the stop signals in the calling
// thread, every thread it creates later inherits the block (the replicas' workers, the
// communicators', the loaders', Open MPI's and OpenMP's), and one thread takes the signals
// synchronously with sigwait() and sets the flag. Hence it must run first in main(), before any
// thread exists. The handler below stays installed for a thread created earlier that does not
// block the signals (a library's own): it only sets the flag.
constexpr int kStopSignals[] = {SIGTERM, SIGINT, SIGUSR1};

sigset_t stop_signal_set() {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : kStopSignals) sigaddset(&set, sig);
  return set;
}

/// A second SIGINT (Ctrl-C twice) ends the process at once, by the default action; repeated
/// SIGTERMs are expected (Slurm signals every process, mpirun forwards) and change nothing.
void on_stop(int sig) {
  if (g_stop.exchange(1) != 0 && sig == SIGINT) {
    std::signal(SIGINT, SIG_DFL);
    sigset_t only;
    sigemptyset(&only);
    sigaddset(&only, SIGINT);
    pthread_sigmask(SIG_UNBLOCK, &only, nullptr);
    std::raise(SIGINT);
  }
}

extern "C" void on_stop_signal(int sig) { on_stop(sig); }  // async-signal-safe: atomics only

void take_stop_signals() {
  const sigset_t set = stop_signal_set();
  for (;;) {
    int sig = 0;
    if (sigwait(&set, &sig) == 0) on_stop(sig);
  }
}

}  // namespace

void install_stop_handlers() {
  struct sigaction action = {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // collectives and file writes in progress carry on
  for (int sig : kStopSignals) sigaction(sig, &action, nullptr);
  const sigset_t set = stop_signal_set();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  static std::once_flag started;
  std::call_once(started, [] {
    // Detached: it lives as long as the process and holds nothing to clean up.
    std::thread(take_stop_signals).detach();
  });
}

bool stop_requested() { return g_stop.load(std::memory_order_relaxed) != 0; }
void request_stop() { g_stop.store(1); }
void clear_stop_request() { g_stop.store(0); }

}  // namespace mirror::dist
