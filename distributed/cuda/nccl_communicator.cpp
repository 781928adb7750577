// NcclCommunicator: NCCL collectives on each device's communication stream, ordered against
// its compute stream with events, guarded by a watchdog (Note [NCCL watchdog]).
#include "distributed/cuda/nccl_communicator.h"

#include <algorithm>
#include <cstdio>
#include <set>
#include <string>
#include <utility>

#include "cuda/context.h"
#include "distributed/collective_op.h"
#include "distributed/comm_teardown.h"
#include "distributed/cuda/nccl_collectives.h"
#include "mirror/error.h"

namespace mirror::cuda {
namespace {

using Clock = std::chrono::steady_clock;
using dist::detail::check_collective;
using dist::detail::Collective;
using dist::detail::collective_name;
using dist::detail::TensorHome;

// Collectives issued inside an open CollectiveGroup are launched by ncclGroupEnd; their
// completion events can only be recorded after it (Note [Group launch]).
thread_local int group_depth = 0;
thread_local std::vector<std::shared_ptr<NcclWork>> group_pending;

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::kFloat32:
      return ncclFloat32;
    case DType::kFloat64:
      return ncclFloat64;
    case DType::kFloat16:
      return ncclFloat16;
    case DType::kBFloat16:
      return ncclBfloat16;
    case DType::kInt32:
      return ncclInt32;
    case DType::kInt64:
      return ncclInt64;
    case DType::kUInt8:
      return ncclUint8;
  }
  throw InvalidArgument("nccl: unsupported dtype");
}

// A destructor waits at most this long for pending collectives before aborting instead.
constexpr std::chrono::milliseconds kDrainLimit{30000};

/// event_done for noexcept paths: an error counts as done (the watchdog / destructor move on).
bool done_quietly(cudaEvent_t e) noexcept {
  const cudaError_t status = cudaEventQuery(e);
  (void)cudaGetLastError();
  return status != cudaErrorNotReady;
}

std::string quoted(const char* op, const std::string& tag) {
  return std::string(op) + (tag.empty() ? "" : " '" + tag + "'");
}

/// The NCCL calls of a teardown (Note [Grouped teardown], distributed/comm_teardown.h).
struct NcclTeardownOps {
  using Comm = ncclComm_t;
  static std::string text(ncclResult_t r) { return r == ncclSuccess ? "" : ncclGetErrorString(r); }
  std::string group_start() { return text(ncclGroupStart()); }
  std::string group_end() { return text(ncclGroupEnd()); }
  std::string finalize(ncclComm_t c) { return text(ncclCommFinalize(c)); }
  std::string destroy(ncclComm_t c) { return text(ncclCommDestroy(c)); }
  std::string abort(ncclComm_t c) { return text(ncclCommAbort(c)); }
};

void abort_comms(const std::vector<ncclComm_t>& comms) noexcept {
  NcclTeardownOps ops;
  try {
    const std::string errors = dist::detail::abort_together<NcclTeardownOps>(ops, comms);
    if (!errors.empty()) std::fprintf(stderr, "mirror: aborting NCCL: %s\n", errors.c_str());
  } catch (const std::exception& e) {  // std::bad_alloc from the message
    std::fprintf(stderr, "mirror: aborting NCCL: %s\n", e.what());
  }
}

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

std::string describe(const NcclState& s) {
  return "cuda:" + std::to_string(s.device) + " (replica " + std::to_string(s.rank) + " of " +
         std::to_string(s.size) + ")";
}

}  // namespace

// ---------------------------------------------------------------- NcclState
void NcclState::throw_if_failed() {
  std::lock_guard<std::mutex> lock(mutex);
  if (failed) throw CommError(error);
}

ncclComm_t NcclState::fail_locked(const std::string& message) {
  if (failed) return nullptr;
  failed = true;
  error = message;
  outstanding.clear();
  return std::exchange(comm, nullptr);
}

void NcclState::abort(const std::string& why) {
  if (auto c = clique.lock()) return c->abort(index, why);
  // The clique is gone: its teardown already released the comm; only the state is left.
  std::lock_guard<std::mutex> lock(mutex);
  (void)fail_locked("NCCL communicator on " + describe(*this) +
                    " failed after it was destroyed: " + why);
}

// ---------------------------------------------------------------- NcclClique
void NcclClique::abort(int origin, const std::string& why) {
  std::lock_guard<std::mutex> clique_lock(mutex);
  const NcclState& first = *members.at(static_cast<std::size_t>(origin));
  const std::string cause = "NCCL communicator on " + describe(first) + " aborted: " + why +
                            ". Another rank probably failed or stalled; check its log";
  std::vector<ncclComm_t> comms;
  for (auto& m : members) {
    std::lock_guard<std::mutex> lock(m->mutex);
    const std::string message = m->index == origin
                                    ? cause
                                    : "NCCL communicator on " + describe(*m) +
                                          " aborted together with " + describe(first) +
                                          " (created together, Note [NCCL clique]): " + why;
    if (ncclComm_t c = m->fail_locked(message)) comms.push_back(c);
  }
  if (comms.empty()) return;  // already aborted
  std::fprintf(stderr, "mirror: %s\n", cause.c_str());
  abort_comms(comms);  // Note [Grouped teardown]: all of them in one group
}

NcclClique::~NcclClique() {
  std::lock_guard<std::mutex> clique_lock(mutex);
  // Pending collectives must finish before finalize; if they cannot within the timeout the
  // peers are gone, and aborting is the only way not to hang here.
  std::chrono::milliseconds limit{0};
  for (auto& m : members) limit = std::max(limit, std::chrono::milliseconds(m->enqueue_limit_ms));
  const auto deadline = Clock::now() + std::min(limit, kDrainLimit);
  bool idle = false;
  for (;;) {
    idle = true;
    for (auto& m : members) {
      std::lock_guard<std::mutex> lock(m->mutex);
      for (const auto& p : m->outstanding) idle = idle && done_quietly(*p.done);
    }
    if (idle || Clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::vector<ncclComm_t> comms;
  for (auto& m : members) {
    std::lock_guard<std::mutex> lock(m->mutex);
    // Drained: Works of completed collectives stay usable, so the state does not fail.
    ncclComm_t c = idle ? std::exchange(m->comm, nullptr)
                        : m->fail_locked("NCCL communicator on " + describe(*m) +
                                         " aborted: collectives still pending when it was "
                                         "destroyed");
    if (c != nullptr) comms.push_back(c);
  }
  if (comms.empty()) return;  // aborted before
  if (!idle) std::fprintf(stderr, "mirror: %s\n", members.front()->error.c_str());
  NcclTeardownOps ops;
  try {
    const std::string errors = dist::detail::destroy_together<NcclTeardownOps>(ops, comms, idle);
    if (!errors.empty())
      std::fprintf(stderr, "mirror: tearing down NCCL communicators: %s\n", errors.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mirror: tearing down NCCL communicators: %s\n", e.what());
  }
}

// ---------------------------------------------------------------- NcclWork
NcclWork::NcclWork(std::shared_ptr<NcclState> state, std::string what, std::vector<Tensor> keep,
                   std::chrono::milliseconds timeout)
    : state_(std::move(state)), what_(std::move(what)), keep_(std::move(keep)), timeout_(timeout) {
  use_device(state_->device);
  done_ = std::make_shared<Event>(make_event());
}

NcclWork::~NcclWork() {
  // Order the compute stream after the collective before its tensors may be reused.
  if (!recorded_ || waited_) return;
  try {
    MIRROR_CUDA_WARN(cudaStreamWaitEvent(context(state_->device).compute(), *done_, 0));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mirror: warning: dropping NCCL %s: %s\n", what_.c_str(), e.what());
  }
}

void NcclWork::record() {
  MIRROR_CUDA_CHECK(cudaEventRecord(*done_, context(state_->device).comm()));
  recorded_ = true;
  std::lock_guard<std::mutex> lock(state_->mutex);
  state_->outstanding.push_back({done_, Clock::now() + timeout_, what_});
}

void NcclWork::abort_comms(const std::string& why) { state_->abort(why); }

std::string NcclWork::record_after_abort() noexcept {
  try {
    const cudaError_t status = cudaEventRecord(*done_, context(state_->device).comm());
    (void)cudaGetLastError();
    recorded_ = status == cudaSuccess;
    return recorded_ ? "" : std::string("cudaEventRecord: ") + cudaGetErrorString(status);
  } catch (const std::exception& e) {  // context() of a device that became unusable
    return e.what();
  }
}

std::string NcclWork::release() noexcept {
  try {
    const cudaError_t status = cudaStreamWaitEvent(context(state_->device).compute(), *done_, 0);
    (void)cudaGetLastError();
    if (status != cudaSuccess)
      return std::string("cudaStreamWaitEvent: ") + cudaGetErrorString(status);
  } catch (const std::exception& e) {
    return e.what();
  }
  waited_ = true;
  keep_.clear();  // later uses are ordered after the record on the compute stream
  return "";
}

void NcclWork::keep_forever(const std::string& why) noexcept {
  // Reachable from a static, never destroyed: the rank fails anyway (Note [Failed group launch]).
  static std::mutex mutex;
  static auto* held = new std::vector<Tensor>();
  try {
    std::lock_guard<std::mutex> lock(mutex);
    held->insert(held->end(), keep_.begin(), keep_.end());
    keep_.clear();
    waited_ = true;  // nothing left for the destructor to order
    std::fprintf(stderr,
                 "mirror: warning: NCCL %s: its buffers are never given back, since their reuse "
                 "cannot be ordered after the aborted group (%s)\n",
                 what_.c_str(), why.c_str());
  } catch (const std::exception& e) {  // std::bad_alloc: the Work keeps them instead
    std::fprintf(stderr, "mirror: warning: NCCL %s: %s\n", what_.c_str(), e.what());
  }
}

void NcclWork::wait() {
  std::string comm_error;
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    if (state_->failed) comm_error = state_->error;
  }
  const std::string refusal = dist::detail::wait_refusal(comm_error, recorded_, what_);
  if (!refusal.empty()) throw CommError(refusal);
  DeviceContext& ctx = context(state_->device);
  MIRROR_CUDA_CHECK(cudaStreamWaitEvent(ctx.compute(), *done_, 0));
  waited_ = true;
  keep_.clear();  // later uses are ordered after the collective on the compute stream
}

bool NcclWork::done() {
  state_->throw_if_failed();
  if (!recorded_) return false;
  use_device(state_->device);
  return event_done(*done_);
}

void NcclWork::wait_host(std::chrono::milliseconds timeout) {
  const auto start = Clock::now();
  while (!done()) {
    ncclResult_t async = ncclSuccess;
    std::string why;
    {
      std::lock_guard<std::mutex> lock(state_->mutex);
      if (state_->comm != nullptr) MIRROR_NCCL_CHECK(ncclCommGetAsyncError(state_->comm, &async));
    }
    if (async != ncclSuccess && async != ncclInProgress) {
      why = std::string("asynchronous error ") + ncclGetErrorString(async) + " during " + what_;
    } else if (Clock::now() - start > timeout) {
      why = what_ + " did not complete within " + std::to_string(timeout.count()) + " ms";
    }
    if (!why.empty()) state_->abort(why);  // the whole clique (Note [NCCL clique])
    state_->throw_if_failed();
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  wait();
}

// ---------------------------------------------------------------- NcclCommunicator
NcclCommunicator::NcclCommunicator(std::shared_ptr<NcclClique> clique, int index)
    : clique_(std::move(clique)), state_(clique_->members.at(static_cast<std::size_t>(index))) {
  use_device(state_->device);
  ready_ = make_event();
  barrier_buf_ = Tensor::zeros({1}, DType::kFloat32, Device::cuda(state_->device));
  watchdog_ = std::thread([this] { watchdog(); });
}

NcclCommunicator::~NcclCommunicator() {
  {
    std::lock_guard<std::mutex> lock(stop_mutex_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();
  // The last communicator of the clique finalizes and destroys them all together
  // (~NcclClique, Note [NCCL clique]); destroying one alone would hang in finalize.
  clique_.reset();
}

template <class Call>
std::shared_ptr<NcclWork> NcclCommunicator::launch(const char* op, const std::string& tag,
                                                   std::vector<Tensor> keep, Call&& call) {
  DeviceContext& ctx = context(state_->device);
  std::lock_guard<std::timed_mutex> enqueue(state_->enqueue);
  state_->throw_if_failed();
  // The collective sees every kernel queued on the compute stream before this call.
  MIRROR_CUDA_CHECK(cudaEventRecord(ready_, ctx.compute()));
  MIRROR_CUDA_CHECK(cudaStreamWaitEvent(ctx.comm(), ready_, 0));
  // The watchdog reads deadlines and this limit, never timeout() (set by the owner thread).
  state_->enqueue_limit_ms = timeout().count();
  auto work = std::make_shared<NcclWork>(state_, quoted(op, tag), std::move(keep), timeout());
  MIRROR_NCCL_CHECK(call(state_->comm, ctx.comm()));
  // Note [Group launch]: inside a group NCCL enqueues nothing until ncclGroupEnd.
  if (group_depth > 0) {
    group_pending.push_back(work);
  } else {
    work->record();
  }
  return work;
}

std::shared_ptr<dist::Work> NcclCommunicator::all_reduce(const Tensor& in, Tensor& out,
                                                         dist::ReduceOp op,
                                                         const std::string& tag) {
  check_collective("nccl", TensorHome::gpu(state_->device), size(),
                   {Collective::kAllReduce, &in, &out, op, 0});
  const ncclRedOp_t red = op == dist::ReduceOp::kAvg ? ncclAvg : ncclSum;
  const ncclDataType_t type = nccl_type(in.dtype());
  const auto count = static_cast<std::size_t>(in.numel());
  return launch(collective_name(Collective::kAllReduce), tag, {in, out},
                [&](ncclComm_t comm, cudaStream_t s) {
                  return ncclAllReduce(in.raw_data(), out.raw_data(), count, type, red, comm, s);
                });
}

std::shared_ptr<dist::Work> NcclCommunicator::broadcast(Tensor& t, int root,
                                                        const std::string& tag) {
  check_collective("nccl", TensorHome::gpu(state_->device), size(),
                   {Collective::kBroadcast, &t, nullptr, dist::ReduceOp::kSum, root});
  const ncclDataType_t type = nccl_type(t.dtype());
  const auto count = static_cast<std::size_t>(t.numel());
  return launch(collective_name(Collective::kBroadcast), tag, {t},
                [&](ncclComm_t comm, cudaStream_t s) {
                  return ncclBroadcast(t.raw_data(), t.raw_data(), count, type, root, comm, s);
                });
}

std::shared_ptr<dist::Work> NcclCommunicator::all_gather(const Tensor& in, Tensor& out,
                                                         const std::string& tag) {
  check_collective("nccl", TensorHome::gpu(state_->device), size(),
                   {Collective::kAllGather, &in, &out, dist::ReduceOp::kSum, 0});
  const ncclDataType_t type = nccl_type(in.dtype());
  const auto count = static_cast<std::size_t>(in.numel());
  return launch(collective_name(Collective::kAllGather), tag, {in, out},
                [&](ncclComm_t comm, cudaStream_t s) {
                  return ncclAllGather(in.raw_data(), out.raw_data(), count, type, comm, s);
                });
}

void NcclCommunicator::barrier() {
  MIRROR_CHECK(group_depth == 0, CommError, "nccl barrier inside an open CollectiveGroup");
  auto work = launch(collective_name(Collective::kBarrier), "", {barrier_buf_},
                     [&](ncclComm_t comm, cudaStream_t s) {
                       return ncclAllReduce(barrier_buf_.raw_data(), barrier_buf_.raw_data(), 1,
                                            ncclFloat32, ncclSum, comm, s);
                     });
  work->wait_host(timeout());
}

void NcclCommunicator::watchdog() {
  bool device_set = false;
  for (;;) {
    {
      std::unique_lock<std::mutex> stop_lock(stop_mutex_);
      if (stop_cv_.wait_for(stop_lock, std::chrono::milliseconds(50), [this] { return stop_; })) {
        return;
      }
    }
    if (!device_set) device_set = cudaSetDevice(state_->device) == cudaSuccess;
    poll();
  }
}

void NcclCommunicator::poll() {
  // Abort only between enqueues (the comm must not vanish under an NCCL call), unless an
  // enqueue itself is stuck for longer than the timeout: then abort is the way out.
  std::unique_lock<std::timed_mutex> enqueue(state_->enqueue, std::defer_lock);
  const bool quiet =
      enqueue.try_lock_for(std::chrono::milliseconds(state_->enqueue_limit_ms.load()));
  const std::string why = overdue_or_failed(quiet);
  // The clique takes every member's mutex, so it is called without ours (Note [NCCL clique]).
  if (!why.empty()) state_->abort(why);
}

std::string NcclCommunicator::overdue_or_failed(bool quiet) {
  std::lock_guard<std::mutex> lock(state_->mutex);
  if (state_->failed || state_->comm == nullptr) return "";
  if (!quiet) return "an NCCL call blocked for longer than the timeout";
  ncclResult_t async = ncclSuccess;
  if (ncclCommGetAsyncError(state_->comm, &async) == ncclSuccess && async != ncclSuccess &&
      async != ncclInProgress) {
    const std::string during =
        state_->outstanding.empty() ? "" : " during " + state_->outstanding.front().what;
    return std::string("asynchronous error: ") + ncclGetErrorString(async) + during;
  }
  while (!state_->outstanding.empty() && done_quietly(*state_->outstanding.front().done)) {
    state_->outstanding.pop_front();
  }
  const auto now = Clock::now();
  for (const auto& p : state_->outstanding) {
    if (now > p.deadline) return p.what + " did not complete within the communicator's timeout";
  }
  return "";
}

}  // namespace mirror::cuda

// ---------------------------------------------------------------- factory and groups
namespace mirror::dist {
namespace {

void nccl_group_start() {
  MIRROR_NCCL_CHECK(ncclGroupStart());
  ++cuda::group_depth;
}

void nccl_group_end() {
  --cuda::group_depth;
  const ncclResult_t r = ncclGroupEnd();
  if (cuda::group_depth > 0) {  // an inner group: NCCL launches at the outermost end
    MIRROR_NCCL_CHECK(r);
    return;
  }
  const auto pending = std::move(cuda::group_pending);
  cuda::group_pending.clear();
  std::string error;
  if (r != ncclSuccess) {
    error = ncclGetErrorString(r);
    const char* last = ncclGetLastError(nullptr);
    if (last != nullptr && last[0] != '\0') error += std::string(" [") + last + "]";
  }
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

std::vector<std::unique_ptr<Communicator>> make_nccl_communicators_cuda(
    const std::vector<Device>& devices, const NcclBootstrap& boot) {
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
  for (const Device& d : devices) cuda::context(d.index);  // streams first; throws if unusable
  ncclUniqueId id{};
  if (boot.first_rank == 0) MIRROR_NCCL_CHECK(ncclGetUniqueId(&id));
  if (boot.broadcast_from_root) boot.broadcast_from_root(&id, sizeof id);
  std::vector<ncclComm_t> comms(devices.size(), nullptr);
  // ncclCommInitRank blocks until every rank has joined, so one thread creating several
  // communicators must do it inside a group.
  MIRROR_NCCL_CHECK(ncclGroupStart());
  ncclResult_t first_error = ncclSuccess;
  for (int i = 0; i < local; ++i) {
    cuda::use_device(devices[i].index);
    const ncclResult_t r = ncclCommInitRank(&comms[i], boot.world_size, id, boot.first_rank + i);
    if (r != ncclSuccess && first_error == ncclSuccess) first_error = r;
  }
  const ncclResult_t end = ncclGroupEnd();
  if (first_error != ncclSuccess || end != ncclSuccess) {
    cuda::abort_comms(comms);  // together, like every abort (Note [Grouped teardown])
    MIRROR_NCCL_CHECK(first_error);
    MIRROR_NCCL_CHECK(end);
  }
  auto clique = std::make_shared<cuda::NcclClique>();
  for (int i = 0; i < local; ++i) {
    auto state = std::make_shared<cuda::NcclState>();
    state->comm = comms[i];
    state->device = devices[i].index;
    state->rank = boot.first_rank + i;
    state->size = boot.world_size;
    state->index = i;
    state->clique = clique;
    clique->members.push_back(std::move(state));
  }
  // From here the clique owns the comms: if a constructor below throws, its destructor tears
  // down every member together.
  std::vector<std::unique_ptr<Communicator>> out;
  for (int i = 0; i < local; ++i)
    out.push_back(std::make_unique<cuda::NcclCommunicator>(clique, i));
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
