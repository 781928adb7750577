// The stop request: stop signals are taken by one thread of their own (Note [Stop signals]).
#include "mirror/distributed/preemption.h"

#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdlib>
#include <mutex>
#include <string>
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

// Note [Stop hand-off]: mpirun forwards a signal to whatever processes of the job exist, and a
// rank that has not yet installed its handlers (mpirun's daemon forks it, resets its signals to
// the defaults and execs it; the program's main() comes milliseconds later) dies of it: SIGUSR1's
// default action ends the process, "exited on signal 10", and the stop is lost. No mask set
// before the exec survives, since Open MPI's launcher unblocks every signal in the child. So
// launch/mirrorrun holds the signal back until the ranks can take it, and leaves a note they
// read meanwhile:
//   - mirrorrun exports MIRROR_STOP_FILE (a path in its own temporary folder) to the ranks;
//   - on its first stop signal it creates that file, then forwards SIGUSR1 to mpirun only if
//     MIRROR_STOP_FILE.ready exists; otherwise it waits for that file and forwards then;
//   - a rank installs its handlers, then looks for the stop file (install_stop_handlers): found,
//     it is a stop request like a signal, carried to every rank by the next step's all-reduce;
//   - once every rank has its handlers, a rank creates MIRROR_STOP_FILE.ready
//     (report_stop_handlers_ready; mirror-train: after the Runtime's start-up, whose all-gather
//     every rank reaches only after installing its handlers first thing in main).
// A rank that looked before the file existed has its handlers, and so gets the forwarded signal
// once the ready file appears; a rank that looks after finds the file. Either way no stop is
// lost and no rank is killed. Ranks on other nodes see neither file (mirrorrun's folder is
// local): mirrorrun forwards after MIRRORRUN_STOP_WAIT_S without the ready file (launch/mirrorrun).
bool stop_file_exists() {
  const char* path = std::getenv(kStopFileVariable);
  return path != nullptr && *path != '\0' && ::access(path, F_OK) == 0;
}

}  // namespace

void report_stop_handlers_ready() {
  const char* path = std::getenv(kStopFileVariable);
  if (path == nullptr || *path == '\0') return;
  const std::string ready = std::string(path) + ".ready";
  const int fd = ::open(ready.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd >= 0) ::close(fd);
}

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
  if (stop_file_exists()) g_stop.store(1);  // Note [Stop hand-off]
}

bool stop_requested() { return g_stop.load(std::memory_order_relaxed) != 0; }
void request_stop() { g_stop.store(1); }
void clear_stop_request() { g_stop.store(0); }

}  // namespace mirror::dist
