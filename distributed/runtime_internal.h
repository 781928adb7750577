// defines: what the distributed code shares privately about MPI: the Runtime's MPI handles, the
// process-wide MPI mutex, polling a request against a deadline, and the abort path.
#pragma once

#include <mpi.h>

#include <chrono>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "mirror/distributed/mpi_check.h"
#include "mirror/distributed/runtime.h"

namespace mirror::dist {

struct Runtime::Impl {
  MPI_Comm control = MPI_COMM_NULL;  // dup of MPI_COMM_WORLD for the bootstrap collectives
  MPI_Comm local = MPI_COMM_NULL;    // ranks sharing this node's memory
  std::vector<std::string> hosts;    // host of every rank, in rank order
  bool owns_mpi = true;              // false when MPI was initialized before the Runtime
};

namespace detail {

using Clock = std::chrono::steady_clock;

/// Note [MPI mutex]: every MPI call Mirror makes (except MPI_Abort) holds this mutex, and none
/// holds it while blocking: collectives are started non-blocking and polled. That makes the
/// calls legal under MPI_THREAD_SERIALIZED and keeps the communication threads and the main
/// thread from ever waiting on each other inside MPI.
std::mutex& mpi_mutex();

/// The deadline `timeout` from now; a timeout <= 0 means "never".
Clock::time_point deadline_after(std::chrono::milliseconds timeout);

/// Polls `request` with MPI_Test (mutex held only during each test) until it completes. Between
/// tests it calls `pause` (default: yield the CPU). When `deadline` passes first, calls
/// `on_timeout`, which must not return (it aborts the job or throws). MPI errors throw
/// CommError.
void poll_until_done(MPI_Request& request, Clock::time_point deadline,
                     const std::function<void()>& on_timeout,
                     const std::function<void()>& pause = {});

/// This process's world rank, or -1 before MPI is up.
int world_rank_or_unknown();

/// Prints "[mirror rank R] <line>" (one write) to stderr and ends the job: MPI_Abort on
/// MPI_COMM_WORLD while MPI is initialized and not finalized, std::_Exit(1) otherwise.
[[noreturn]] void abort_with_line(const std::string& line);

/// The timeout message every communicator prints before aborting:
///   "collective <op> '<tag>' did not complete within <N>s; peers: <peers>"
std::string timeout_line(const std::string& op, const std::string& tag,
                         std::chrono::milliseconds timeout, const std::string& peers);

/// "2 ranks: 0@host-a 1@host-a" from the live Runtime (empty text when none).
std::string world_peers();

/// Elements per MPI call: MPI counts are int, so larger tensors go in chunks of this many.
inline constexpr std::int64_t kMaxMpiCount = std::int64_t{1} << 30;

}  // namespace detail
}  // namespace mirror::dist
