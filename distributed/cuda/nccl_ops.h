// defines: the NCCL tables of the library-neutral rules (NcclTeardownOps for Note [Grouped
// teardown], NcclGateOps for Note [Comm gate]) and small helpers shared by the NCCL files.
#pragma once

#include <nccl.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "distributed/comm_gate.h"

namespace mirror::cuda {

/// NCCL's text for `r`, "" for success. ncclInProgress counts as success: with non-blocking
/// communicators it means "finishing in the background", which the caller then polls for.
inline std::string nccl_text(ncclResult_t r) {
  return r == ncclSuccess || r == ncclInProgress ? "" : ncclGetErrorString(r);
}

/// The NCCL calls of a teardown (Note [Grouped teardown], distributed/comm_teardown.h).
struct NcclTeardownOps {
  using Comm = ncclComm_t;
  std::chrono::milliseconds settle_limit{30000};  // how long a finalize may take
  std::string group_start() { return nccl_text(ncclGroupStart()); }
  std::string group_end() { return nccl_text(ncclGroupEnd()); }
  std::string finalize(ncclComm_t c) { return nccl_text(ncclCommFinalize(c)); }
  std::string settle(ncclComm_t c);  // polls the non-blocking finalize until it is done
  std::string destroy(ncclComm_t c) { return nccl_text(ncclCommDestroy(c)); }
  std::string abort(ncclComm_t c) { return nccl_text(ncclCommAbort(c)); }
};

/// What settle_call asks of NCCL (Note [Comm gate]).
struct NcclGateOps {
  using Comm = ncclComm_t;
  int polls = 0;
  dist::detail::CallState state(ncclComm_t c) {
    ncclResult_t async = ncclSuccess;
    const ncclResult_t r = ncclCommGetAsyncError(c, &async);
    if (r != ncclSuccess)
      return {false, std::string("ncclCommGetAsyncError: ") + ncclGetErrorString(r)};
    if (async == ncclInProgress) return {true, ""};
    return {false, nccl_text(async)};
  }
  /// Yields for the first polls (most calls finish within microseconds), then sleeps briefly.
  void pause() {
    if (++polls < 64) return std::this_thread::yield();
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
};

/// Aborts `comms` together (Note [Grouped teardown]); prints what failed, never throws.
void abort_comms(const std::vector<ncclComm_t>& comms) noexcept;

}  // namespace mirror::cuda
