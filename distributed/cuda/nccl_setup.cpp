// NCCL communicators: creation (non-blocking, Note [Comm gate]), CollectiveGroup's NCCL groups
// and the table the factory file registers (Note [Device collectives]).
#include <nccl.h>

#include <chrono>
#include <cstdio>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "cuda/context.h"
#include "distributed/comm_teardown.h"
#include "distributed/cuda/nccl_collectives.h"
#include "distributed/cuda/nccl_communicator.h"
#include "distributed/cuda/nccl_group.h"
#include "distributed/cuda/nccl_ops.h"
#include "distributed/gpu_sharing.h"
#include "mirror/error.h"

namespace mirror::cuda {
namespace {

using Clock = std::chrono::steady_clock;

/// The calling thread's open group (Note [Group launch]): collectives issued in it are launched
/// by ncclGroupEnd, so their completion events can only be recorded after it, and the gates of
/// their communicators stay locked until then.
struct OpenGroup {
  int depth = 0;
  std::vector<std::shared_ptr<NcclWork>> pending;
  std::vector<std::pair<NcclState*, std::unique_lock<std::mutex>>> held;
};
thread_local OpenGroup group;

/// The calls that end a group of collectives (Note [Failed group launch],
/// distributed/comm_teardown.h).
struct NcclGroupLaunchOps {
  using Work = std::shared_ptr<NcclWork>;
  void launched(const Work& w) { w->record(); }
  void abort(const Work& w, const std::string& why) { w->abort_comms(why); }
  std::string record(const Work& w) { return w->record_after_abort(); }
  std::string release(const Work& w) { return w->release(); }
  void keep(const Work& w, const std::string& why) { w->keep_forever(why); }
};

/// NCCL's error and its own last message, for a failed call.
std::string nccl_failure(ncclResult_t r) {
  std::string error = ncclGetErrorString(r);
  const char* last = ncclGetLastError(nullptr);
  if (last != nullptr && last[0] != '\0') error += std::string(" [") + last + "]";
  return error;
}

}  // namespace

bool nccl_group_open() { return group.depth > 0; }

std::unique_lock<std::mutex> nccl_gate_lock(NcclState& s) {
  for (const auto& h : group.held) {
    if (h.first == &s) return {};
  }
  return std::unique_lock<std::mutex>(s.gate.calls());
}

void nccl_group_hold(NcclState& s, std::unique_lock<std::mutex> lock) {
  if (lock.owns_lock()) group.held.emplace_back(&s, std::move(lock));
}

void nccl_group_add(std::shared_ptr<NcclWork> work) { group.pending.push_back(std::move(work)); }

}  // namespace mirror::cuda

namespace mirror::dist {
namespace {

using cuda::Clock;

void nccl_group_start() {
  MIRROR_NCCL_CHECK(ncclGroupStart());
  ++cuda::group.depth;
}

/// The error of a group whose end returned `r` ("" when it launched): NCCL's, or a
/// communicator's while the launch finished in the background (non-blocking communicators).
std::string group_end_error(ncclResult_t r, const std::vector<cuda::NcclState*>& states) {
  if (r != ncclSuccess && r != ncclInProgress) return cuda::nccl_failure(r);
  if (r == ncclSuccess) return "";
  for (cuda::NcclState* s : states) {
    cuda::NcclGateOps ops;
    const auto deadline = Clock::now() + std::chrono::milliseconds(s->timeout_ms.load());
    std::string why = detail::settle_call(s->gate, ops, deadline, "the group's launch");
    if (!why.empty()) return why;
  }
  return "";
}

void nccl_group_end() {
  --cuda::group.depth;
  const ncclResult_t r = ncclGroupEnd();
  if (cuda::group.depth > 0) {  // an inner group: NCCL launches at the outermost end
    MIRROR_CHECK(r == ncclSuccess || r == ncclInProgress, CommError,
                 "ncclGroupEnd of an inner group failed: " + cuda::nccl_failure(r));
    return;
  }
  const auto pending = std::exchange(cuda::group.pending, {});
  std::vector<cuda::NcclState*> states;
  {
    // NCCL has read the handles (what is left finishes in the background, which an abort may
    // interrupt): the gates open again, also for the aborts below.
    const auto held = std::exchange(cuda::group.held, {});
    for (const auto& h : held) states.push_back(h.first);
  }
  const std::string error = group_end_error(r, states);
  // Note [Failed group launch] (distributed/comm_teardown.h): on failure, every communicator is
  // aborted before any Work gives its tensors back.
  cuda::NcclGroupLaunchOps ops;
  const std::string failure =
      detail::finish_group<cuda::NcclGroupLaunchOps>(ops, pending, "ncclGroupEnd", error);
  MIRROR_CHECK(failure.empty(), CommError,
               failure +
                   "; every communicator of the group was aborted. Set NCCL_DEBUG=WARN for "
                   "NCCL's own diagnosis");
}

void check_devices(const std::vector<Device>& devices, const NcclBootstrap& boot) {
  const int local = static_cast<int>(devices.size());
  MIRROR_CHECK(local > 0, InvalidArgument, "make_nccl_communicators: no devices given");
  std::set<int> seen;
  for (const Device& d : devices) {
    MIRROR_CHECK(d.is_cuda() && seen.insert(d.index).second, InvalidArgument,
                 "make_nccl_communicators: expected distinct CUDA devices, got " + d.str());
  }
  MIRROR_CHECK(boot.first_rank >= 0 && boot.first_rank + local <= boot.world_size, InvalidArgument,
               "make_nccl_communicators: replicas " + std::to_string(boot.first_rank) + ".." +
                   std::to_string(boot.first_rank + local - 1) + " do not fit in a world of " +
                   std::to_string(boot.world_size));
  MIRROR_CHECK(boot.broadcast_from_root || local == boot.world_size, InvalidArgument,
               "make_nccl_communicators: a clique spanning several processes needs "
               "broadcast_from_root to share the ncclUniqueId");
  MIRROR_CHECK(boot.timeout.count() > 0, InvalidArgument,
               "make_nccl_communicators: the timeout must be positive");
}

/// Creates the non-blocking communicators of `devices` together and waits (polling, within the
/// bootstrap's timeout) until every rank has joined; "" or what failed, with `comms` holding
/// whatever NCCL handed out (for the abort).
std::string init_comms(const std::vector<Device>& devices, const NcclBootstrap& boot,
                       const ncclUniqueId& id, std::vector<ncclComm_t>& comms) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // Note [Comm gate]: every call returns at once; an abort can come any time
  // ncclCommInitRank* synchronises with every rank, so one thread creating several
  // communicators does it inside a group.
  MIRROR_NCCL_CHECK(ncclGroupStart());
  std::string error;
  for (std::size_t i = 0; i < devices.size(); ++i) {
    cuda::use_device(devices[i].index);
    const ncclResult_t r = ncclCommInitRankConfig(&comms[i], boot.world_size, id,
                                                  boot.first_rank + static_cast<int>(i), &config);
    if (error.empty() && r != ncclSuccess && r != ncclInProgress) {
      error = "ncclCommInitRankConfig: " + cuda::nccl_failure(r);
    }
  }
  const ncclResult_t end = ncclGroupEnd();
  if (error.empty() && end != ncclSuccess && end != ncclInProgress) {
    error = "ncclGroupEnd: " + cuda::nccl_failure(end);
  }
  const auto deadline = Clock::now() + boot.timeout;
  for (std::size_t i = 0; i < comms.size() && error.empty(); ++i) {
    if (comms[i] == nullptr) {
      error = "NCCL returned no communicator for " + devices[i].str();
      break;
    }
    detail::CommGate<ncclComm_t> gate(comms[i]);  // nobody else knows this comm yet
    cuda::NcclGateOps ops;
    error = detail::settle_call(gate, ops, deadline,
                                "joining the other " + std::to_string(boot.world_size - 1) +
                                    " replicas (" + std::to_string(boot.timeout.count()) + " ms)");
    if (!error.empty() && error != "aborted")
      error += " [" + std::string(ncclGetLastError(nullptr)) + "]";
  }
  return error;
}

/// Note [NCCL express lane]: one more communicator per device, split off its main one (same
/// ranks, inherits the non-blocking configuration), waited for like the main ones; "" or what
/// failed, with `express` holding whatever NCCL handed out (for the abort).
std::string split_express(const std::vector<Device>& devices, const NcclBootstrap& boot,
                          const std::vector<ncclComm_t>& comms, std::vector<ncclComm_t>& express) {
  MIRROR_NCCL_CHECK(ncclGroupStart());  // one thread, several ranks: split them together
  std::string error;
  for (std::size_t i = 0; i < comms.size(); ++i) {
    cuda::use_device(devices[i].index);
    const ncclResult_t r = ncclCommSplit(comms[i], 0, boot.first_rank + static_cast<int>(i),
                                         &express[i], nullptr);
    if (error.empty() && r != ncclSuccess && r != ncclInProgress) {
      error = "ncclCommSplit: " + cuda::nccl_failure(r);
    }
  }
  const ncclResult_t end = ncclGroupEnd();
  if (error.empty() && end != ncclSuccess && end != ncclInProgress) {
    error = "ncclGroupEnd after ncclCommSplit: " + cuda::nccl_failure(end);
  }
  const auto deadline = Clock::now() + boot.timeout;
  for (std::size_t i = 0; i < comms.size() && error.empty(); ++i) {
    for (ncclComm_t c : {comms[i], express[i]}) {  // a split is in progress on both
      if (!error.empty() || c == nullptr) continue;
      detail::CommGate<ncclComm_t> gate(c);
      cuda::NcclGateOps ops;
      error = detail::settle_call(gate, ops, deadline, "splitting off the express lane");
    }
  }
  return error;
}

std::vector<std::unique_ptr<Communicator>> make_nccl_communicators_cuda(
    const std::vector<Device>& devices, const NcclBootstrap& boot) {
  check_devices(devices, boot);
  const int local = static_cast<int>(devices.size());
  for (const Device& d : devices) cuda::context(d.index);  // streams first; throws if unusable
  ncclUniqueId id{};
  if (boot.first_rank == 0) MIRROR_NCCL_CHECK(ncclGetUniqueId(&id));
  if (boot.broadcast_from_root) boot.broadcast_from_root(&id, sizeof id);
  std::vector<ncclComm_t> comms(devices.size(), nullptr), express(devices.size(), nullptr);
  std::string error = init_comms(devices, boot, id, comms);
  if (error.empty()) error = split_express(devices, boot, comms, express);
  if (!error.empty()) {
    std::vector<ncclComm_t> all = comms;
    all.insert(all.end(), express.begin(), express.end());
    cuda::abort_comms(all);  // together, like every abort (Note [Grouped teardown])
    int loaded = 0;
    if (ncclGetVersion(&loaded) != ncclSuccess) loaded = 0;
    throw CommError(
        "creating the NCCL communicators of replicas " + std::to_string(boot.first_rank) + ".." +
        std::to_string(boot.first_rank + local - 1) + " of " + std::to_string(boot.world_size) +
        " failed: " + error + ". " + gpu_sharing_advice(loaded, error) +
        "Set NCCL_DEBUG=WARN for NCCL's own diagnosis");
  }
  // Members 0..local-1: the main lanes; local..2*local-1: their express lanes.
  auto clique = std::make_shared<cuda::NcclClique>();
  for (int m = 0; m < 2 * local; ++m) {
    const int i = m % local;
    auto state = std::make_shared<cuda::NcclState>();
    state->device = devices[static_cast<std::size_t>(i)].index;
    state->rank = boot.first_rank + i;
    state->size = boot.world_size;
    state->index = m;
    state->express = m >= local;
    state->clique = clique;
    state->timeout_ms = boot.timeout.count();
    std::lock_guard<std::mutex> lock(state->gate.calls());
    state->gate.put_locked(m < local ? comms[static_cast<std::size_t>(i)]
                                     : express[static_cast<std::size_t>(i)]);
    clique->members.push_back(std::move(state));
  }
  // From here the clique owns the comms: if a constructor below throws, its destructor tears
  // down every member together.
  std::vector<std::unique_ptr<Communicator>> out;
  for (int i = 0; i < local; ++i)
    out.push_back(std::make_unique<cuda::NcclCommunicator>(clique, i, local + i));
  return out;
}

}  // namespace

DeviceCollectives nccl_collectives() {
  DeviceCollectives c;
  c.make_communicators = &make_nccl_communicators_cuda;
  c.group_start = &nccl_group_start;
  c.group_end = &nccl_group_end;
  c.pinned_host_buffer = &make_pinned_host_buffer;
  return c;
}

}  // namespace mirror::dist
