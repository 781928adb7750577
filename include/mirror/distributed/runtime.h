// defines: Runtime, the process's MPI life cycle (init, world and node-local rank, host name,
// the abort path) and the small bootstrap collectives other parts build on (NCCL id exchange,
// cross-rank consistency checks); run_main, the wrapper that turns an escaping exception on one
// rank into a clean job abort.
//
// This header does not include <mpi.h>: NCCL and training code use the Runtime through it
// without seeing MPI (STYLE.md, "MPI to bootstrap, NCCL to move tensors").
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "mirror/device.h"

namespace mirror {
struct GpuReport;
}

namespace mirror::dist {

struct DeviceRequest;
struct DeviceSelection;

/// Note [Thread level]: Mirror needs MPI_THREAD_SERIALIZED at least. Each MpiCommunicator owns
/// a communication thread that makes that communicator's MPI calls, while the main thread makes
/// the Runtime's (bootstrap) calls; the two never call MPI at the same time because every MPI
/// call in Mirror holds one process-wide mutex, and no call holds it while blocking (collectives
/// are non-blocking and polled with MPI_Test, releasing the mutex between polls). The Runtime
/// asks for MPI_THREAD_MULTIPLE (so code outside Mirror, e.g. a user's own MPI calls from other
/// threads, stays legal when the library offers it), accepts SERIALIZED, and throws Unavailable
/// for less. Open MPI 4.1 as packaged by Debian provides MULTIPLE.
enum class ThreadLevel { kSingle, kFunneled, kSerialized, kMultiple };
const char* thread_level_name(ThreadLevel level);

/// The process's MPI runtime. Create exactly one, first thing in main() (or use run_main), and
/// keep it alive until every communicator is gone; its destructor finalizes MPI. Works when the
/// program is started without mpirun (an MPI singleton: world size 1).
///
/// Every MPI communicator Mirror creates sets MPI_ERRORS_RETURN, so an MPI failure comes back as
/// a CommError (see MIRROR_MPI_CHECK in mpi_check.h) instead of killing the process silently.
/// The bootstrap collectives below are collective over all ranks: call them on every rank in
/// the same order. They are not meant for tensor traffic (use a Communicator).
class Runtime {
 public:
  /// Initializes MPI (MPI_Init_thread asking MULTIPLE). Throws Error when a Runtime already
  /// exists or existed (MPI cannot be initialized twice), Unavailable for a thread level below
  /// SERIALIZED.
  Runtime(int& argc, char**& argv);
  /// Finalizes MPI. If an exception is unwinding through the Runtime while other ranks are
  /// alive, it aborts the job instead (MPI_Finalize would wait for ranks that wait for us).
  /// MPI_Finalize runs under a watchdog (Note [Finalize watchdog], runtime.cpp): when it has not
  /// returned within default_timeout() (a rank cut off by a partition), the process prints why
  /// and ends with the code of set_exit_code() instead of hanging.
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  /// The live Runtime; throws Error when none exists.
  static Runtime& get();
  /// Whether a Runtime exists right now (MPI initialized and not finalized).
  static bool active();

  int world_rank() const { return world_rank_; }
  int world_size() const { return world_size_; }
  /// Rank among the ranks on this node, from MPI_Comm_split_type(MPI_COMM_TYPE_SHARED), never
  /// from launcher environment variables or rank arithmetic.
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }
  /// Number of distinct nodes (hosts with shared memory) in the job.
  int node_count() const { return node_count_; }
  const std::string& host() const { return host_; }
  ThreadLevel thread_level() const { return thread_level_; }
  /// "rank 1/4 (local 1/2 on node-a)"
  std::string describe() const;

  /// Timeout given to communicators created from now on and used by the bootstrap
  /// collectives. Default 600 s, or the MIRROR_COMM_TIMEOUT environment variable (seconds).
  std::chrono::milliseconds default_timeout() const { return default_timeout_; }
  void set_default_timeout(std::chrono::milliseconds timeout);
  /// The code this process ends with when MPI_Finalize does not return in time (Note [Finalize
  /// watchdog]): the program's own result (run_main sets it to the body's); 1 unless set.
  void set_exit_code(int code) { exit_code_ = code; }

  // ---- bootstrap collectives (every rank, same order) ----
  void barrier();
  /// Root's bytes are copied into every rank's `bytes` (same size on every rank).
  void broadcast_bytes(std::span<std::byte> bytes, int root);
  /// Every rank contributes `mine` (same size on every rank); returns size * mine.size() bytes
  /// in rank order.
  std::vector<std::byte> all_gather_bytes(std::span<const std::byte> mine);
  /// Every rank's string (any lengths), in rank order.
  std::vector<std::string> all_gather_string(const std::string& mine);
  /// Every rank's value of a trivially copyable T, in rank order.
  template <class T>
  std::vector<T> all_gather_value(const T& mine);

  /// Throws CommError on every rank when `value` is not identical on all ranks, naming `what`,
  /// the first rank that differs from rank 0, and both values (long values are shortened):
  ///   "model fingerprint differs across ranks: rank 0 has '...', rank 2 has '...'"
  /// Compares a 64-bit hash first, so long values (fingerprints) cost one small all-gather.
  void check_same_across_ranks(const std::string& what, const std::string& value);

  // ---- devices and the start-up line ----
  /// The usual start: checks that the --devices text and memory policy agree across ranks,
  /// selects this rank's devices (select_devices with discover_gpus() and what every local
  /// rank sees of its GPUs, all-gathered: Note [Per-rank GPU binding]), prints the CPU-fallback
  /// warning on every rank that falls back, applies the memory policy to every selected device,
  /// checks that every rank drives the same number of replicas, and prints the start-up lines.
  /// Collective. Throws what select_devices throws.
  DeviceSelection setup_devices(const DeviceRequest& request);
  /// What every rank of this node sees of its GPUs, by local rank: the gpu_identity of each
  /// GPU in `gpus` (this rank's), all-gathered (NodeGpuViews, Note [Per-rank GPU binding] in
  /// device_selection.h). Collective.
  std::vector<std::vector<std::string>> node_gpu_views(const GpuReport& gpus);
  /// Prints one line per rank to stderr, in rank order (gathered to rank 0), e.g.
  ///   "[mirror] rank 0/2 local 0/2 host node-a devices cuda:0 (MPI thread level multiple)".
  /// Collective.
  void log_startup(const std::vector<Device>& devices, const std::string& note = "");
  /// Rank 0 prints each distinct device-selection warning (`mine`: this rank's, "" for none)
  /// once to stderr, naming the ranks it is about by host (Note [One fallback banner] in
  /// runtime.cpp). Collective.
  void print_fallback_warnings(const std::string& mine);

  // ---- failure ----
  /// Prints "[mirror rank R] fatal: <message>" to stderr and ends the whole job: MPI_Abort on
  /// MPI_COMM_WORLD while MPI is up (every rank exits non-zero; nothing hangs), otherwise
  /// std::exit(1). Callable from any thread, with or without a Runtime.
  [[noreturn]] static void abort_job(const std::string& message);

  struct Impl;  // MPI handles; defined in distributed/runtime_internal.h
  Impl& impl() const { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
  int world_rank_ = 0, world_size_ = 1;
  int local_rank_ = 0, local_size_ = 1;
  int node_count_ = 1;
  int exit_code_ = 1;  // when MPI_Finalize hangs (Note [Finalize watchdog])
  std::string host_;
  ThreadLevel thread_level_ = ThreadLevel::kSingle;
  std::chrono::milliseconds default_timeout_{std::chrono::seconds(600)};
};

/// Exit code of a rank whose start-up watchdog fired (see RunOptions::startup_timeout).
inline constexpr int kExitStartupTimeout = 4;

struct RunOptions {
  /// Note [Start-up watchdog]: MPI_Init_thread and the first collectives of the Runtime block
  /// until every rank has joined, so one stopped or lost rank hangs all the others before any
  /// collective timeout exists. A watchdog thread, armed before MPI starts, ends this rank with
  /// kExitStartupTimeout and a line naming the stage it was stuck in when start-up takes longer;
  /// mpirun then takes the rest of the job down. 0 disables it.
  std::chrono::milliseconds startup_timeout{std::chrono::seconds(120)};
};

/// Runs `body` with a fresh Runtime and returns its exit code. An exception escaping `body`
/// becomes abort_job(e.what()) while MPI is still up, so the whole job ends with the message
/// instead of hanging in MPI_Finalize; in a world of size 1 it prints the same line and returns
/// 1 after finalizing normally. The Runtime's start-up runs under the watchdog of `options`.
int run_main(int& argc, char**& argv, const std::function<int(Runtime&)>& body,
             const RunOptions& options = {});

template <class T>
std::vector<T> Runtime::all_gather_value(const T& mine) {
  static_assert(std::is_trivially_copyable_v<T>, "all_gather_value needs a trivially copyable T");
  const auto bytes = all_gather_bytes(std::as_bytes(std::span<const T, 1>(&mine, 1)));
  std::vector<T> out(bytes.size() / sizeof(T));
  if (!out.empty()) std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

}  // namespace mirror::dist
