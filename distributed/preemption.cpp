// The stop request: async-signal-safe handlers that set one flag (Note [Preemption]).
#include "mirror/distributed/preemption.h"

#include <atomic>
#include <csignal>

namespace mirror::dist {
namespace {

std::atomic<int> g_stop{0};

extern "C" void on_stop_signal(int sig) {
  // Only async-signal-safe calls here: an atomic store, signal(), raise().
  // A repeated SIGTERM is normal (Slurm signals every process of the step, mpirun forwards it
  // again): only a second SIGINT (Ctrl-C twice) kills at once.
  if (g_stop.exchange(1) != 0 && sig == SIGINT) {
    std::signal(sig, SIG_DFL);
    std::raise(sig);
  }
}

}  // namespace

void install_stop_handlers() {
  struct sigaction action = {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // collectives and file writes in progress carry on
  for (int sig : {SIGTERM, SIGINT, SIGUSR1}) sigaction(sig, &action, nullptr);
}

bool stop_requested() { return g_stop.load(std::memory_order_relaxed) != 0; }
void request_stop() { g_stop.store(1); }
void clear_stop_request() { g_stop.store(0); }

}  // namespace mirror::dist
