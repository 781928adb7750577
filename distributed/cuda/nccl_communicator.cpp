// NcclCommunicator: NCCL collectives on each device's communication stream, ordered against
// its compute stream with events, guarded by a watchdog (Note [NCCL watchdog]); every NCCL call
// goes through the communicator's gate (Note [Comm gate], distributed/comm_gate.h). Creation,
// groups and the factory: nccl_setup.cpp.
#include "distributed/cuda/nccl_communicator.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>

#include "cuda/context.h"
#include "distributed/collective_op.h"
#include "distributed/comm_teardown.h"
#include "distributed/cuda/nccl_group.h"
#include "distributed/cuda/nccl_ops.h"
#include "mirror/error.h"

namespace mirror::cuda {
namespace {

using Clock = std::chrono::steady_clock;
using dist::detail::check_collective;
using dist::detail::Collective;
using dist::detail::collective_name;
using dist::detail::TensorHome;

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

std::string describe(const NcclState& s) {
  return "cuda:" + std::to_string(s.device) + " (replica " + std::to_string(s.rank) + " of " +
         std::to_string(s.size) + (s.express ? ", express lane" : "") + ")";
}

/// The gates of `members`, for take_all.
std::vector<dist::detail::CommGate<ncclComm_t>*> gates_of(
    const std::vector<std::shared_ptr<NcclState>>& members) {
  std::vector<dist::detail::CommGate<ncclComm_t>*> gates;
  for (const auto& m : members) gates.push_back(&m->gate);
  return gates;
}

}  // namespace

cudaStream_t lane_stream(const NcclState& s) {
  DeviceContext& ctx = context(s.device);
  return s.express ? ctx.express() : ctx.comm();
}

void abort_comms(const std::vector<ncclComm_t>& comms) noexcept {
  NcclTeardownOps ops;
  try {
    const std::string errors = dist::detail::abort_together<NcclTeardownOps>(ops, comms);
    if (!errors.empty()) std::fprintf(stderr, "mirror: aborting NCCL: %s\n", errors.c_str());
  } catch (const std::exception& e) {  // std::bad_alloc from the message
    std::fprintf(stderr, "mirror: aborting NCCL: %s\n", e.what());
  }
}

std::string NcclTeardownOps::settle(ncclComm_t c) {
  dist::detail::CommGate<ncclComm_t> gate(c);  // the comm is the caller's alone by now
  NcclGateOps ops;
  return dist::detail::settle_call(gate, ops, Clock::now() + settle_limit, "ncclCommFinalize");
}

// ---------------------------------------------------------------- NcclState
void NcclState::throw_if_failed() {
  std::lock_guard<std::mutex> lock(mutex);
  if (failed) throw CommError(error);
}

bool NcclState::fail_locked(const std::string& message) {
  if (failed) return false;
  failed = true;
  error = message;
  outstanding.clear();
  return true;
}

void NcclState::abort(const std::string& why) {
  if (auto c = clique.lock()) return c->abort(index, why);
  // The clique is gone: its teardown already released the comm; only the state is left.
  std::lock_guard<std::mutex> lock(mutex);
  (void)fail_locked("NCCL communicator on " + describe(*this) +
                    " failed after it was destroyed: " + why);
}

std::string NcclState::review(bool* idle) {
  // NCCL first, through the gate and without `mutex` (the gate comes first).
  dist::detail::CallState async;
  NcclGateOps ops;
  (void)gate.with([&](ncclComm_t c) { async = ops.state(c); });
  std::lock_guard<std::mutex> lock(mutex);
  if (idle) *idle = outstanding.empty();
  if (failed) return "";  // reported already
  if (!async.error.empty()) {
    const std::string during = outstanding.empty() ? "" : " during " + outstanding.front().what;
    return "asynchronous error: " + async.error + during;
  }
  while (!outstanding.empty() && done_quietly(*outstanding.front().done)) outstanding.pop_front();
  if (idle) *idle = outstanding.empty();
  const auto now = Clock::now();
  for (const auto& p : outstanding) {
    if (now > p.deadline) return p.what + " did not complete within the communicator's timeout";
  }
  return "";
}

// ---------------------------------------------------------------- NcclClique
void NcclClique::abort(int origin, const std::string& why) {
  std::lock_guard<std::mutex> clique_lock(mutex);
  const NcclState& first = *members.at(static_cast<std::size_t>(origin));
  const std::string cause = "NCCL communicator on " + describe(first) + " aborted: " + why +
                            ". Another rank probably failed or stalled; check its log";
  bool any = false;
  // Failed first, handles second: a caller that finds the handle gone finds the error set.
  for (auto& m : members) {
    std::lock_guard<std::mutex> lock(m->mutex);
    const std::string message = m->index == origin
                                    ? cause
                                    : "NCCL communicator on " + describe(*m) +
                                          " aborted together with " + describe(first) +
                                          " (created together, Note [NCCL clique]): " + why;
    any = m->fail_locked(message) || any;
  }
  const auto gates = gates_of(members);
  const std::vector<ncclComm_t> comms =
      dist::detail::take_all<ncclComm_t>(std::span<dist::detail::CommGate<ncclComm_t>* const>(gates));
  if (comms.empty()) return;  // already aborted or torn down
  if (any) std::fprintf(stderr, "mirror: %s\n", cause.c_str());
  abort_comms(comms);  // Note [Grouped teardown]: all of them in one group
}

NcclClique::~NcclClique() {
  std::lock_guard<std::mutex> clique_lock(mutex);
  // Pending collectives must finish before finalize; if they cannot within the timeout the
  // peers are gone, and aborting is the only way not to hang here.
  std::chrono::milliseconds limit{0};
  for (auto& m : members) limit = std::max(limit, std::chrono::milliseconds(m->timeout_ms));
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
  if (!idle) {
    for (auto& m : members) {
      std::lock_guard<std::mutex> lock(m->mutex);
      (void)m->fail_locked("NCCL communicator on " + describe(*m) +
                           " aborted: collectives still pending when it was destroyed");
    }
    std::fprintf(stderr, "mirror: %s\n", members.front()->error.c_str());
  }
  // Drained: Works of completed collectives stay usable, so the states do not fail.
  const auto gates = gates_of(members);
  const std::vector<ncclComm_t> comms =
      dist::detail::take_all<ncclComm_t>(std::span<dist::detail::CommGate<ncclComm_t>* const>(gates));
  if (comms.empty()) return;  // aborted before
  NcclTeardownOps ops;
  ops.settle_limit = kDrainLimit;
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
  MIRROR_CUDA_CHECK(cudaEventRecord(*done_, lane_stream(*state_)));
  recorded_ = true;
  std::lock_guard<std::mutex> lock(state_->mutex);
  state_->outstanding.push_back({done_, Clock::now() + timeout_, what_});
}

void NcclWork::abort_comms(const std::string& why) { state_->abort(why); }

std::string NcclWork::record_after_abort() noexcept {
  try {
    const cudaError_t status = cudaEventRecord(*done_, lane_stream(*state_));
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
    std::string why = state_->review();
    if (why.empty() && Clock::now() - start > timeout) {
      why = what_ + " did not complete within " + std::to_string(timeout.count()) + " ms";
    }
    if (!why.empty()) state_->abort(why);  // the whole clique (Note [NCCL clique])
    state_->throw_if_failed();
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  wait();
}

// ---------------------------------------------------------------- NcclCommunicator
NcclCommunicator::NcclCommunicator(std::shared_ptr<NcclClique> clique, int index, int express)
    : clique_(std::move(clique)), state_(clique_->members.at(static_cast<std::size_t>(index))) {
  use_device(state_->device);
  ready_ = make_event();
  barrier_buf_ = Tensor::zeros({1}, DType::kFloat32, Device::cuda(state_->device));
  if (express >= 0) express_ = std::make_unique<NcclCommunicator>(clique_, express);
  watchdog_ = std::thread([this] { watchdog(); });
}

dist::Communicator& NcclCommunicator::express() {
  if (!express_) return *this;
  express_->set_timeout(timeout());  // one timeout for both lanes (set by the owner thread)
  return *express_;
}

NcclCommunicator::~NcclCommunicator() {
  {
    std::lock_guard<std::mutex> lock(stop_mutex_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();
  express_.reset();
  // The last communicator of the clique finalizes and destroys them all together
  // (~NcclClique, Note [NCCL clique]); destroying one alone would hang in finalize.
  clique_.reset();
}

template <class Call>
std::shared_ptr<NcclWork> NcclCommunicator::launch(const char* op, const std::string& tag,
                                                   std::vector<Tensor> keep, Call&& call) {
  DeviceContext& ctx = context(state_->device);
  state_->throw_if_failed();
  // The watchdog and group ends read this, never timeout() (set by the owner thread).
  state_->timeout_ms = timeout().count();
  auto work = std::make_shared<NcclWork>(state_, quoted(op, tag), std::move(keep), timeout());
  const bool grouped = nccl_group_open();
  ncclResult_t r = ncclSuccess;
  {
    // Note [Comm gate]: the call holds the gate; inside a group, until the group's end.
    std::unique_lock<std::mutex> gate = nccl_gate_lock(*state_);
    const ncclComm_t comm = state_->gate.get_locked();
    if (comm == nullptr) {
      gate = {};
      state_->throw_if_failed();  // failed and taken away by an abort
      throw CommError("NCCL " + quoted(op, tag) + " on a communicator that was torn down");
    }
    // The collective sees every kernel queued on the compute stream before this call.
    const cudaStream_t stream = lane_stream(*state_);
    MIRROR_CUDA_CHECK(cudaEventRecord(ready_, ctx.compute()));
    MIRROR_CUDA_CHECK(cudaStreamWaitEvent(stream, ready_, 0));
    r = call(comm, stream);
    if (grouped) nccl_group_hold(*state_, std::move(gate));
  }
  if (r != ncclSuccess && r != ncclInProgress) {
    // A bad argument leaves the communicator usable (NCCL's rule); anything else is fatal. In a
    // group the group's end aborts (this thread holds the gates until then).
    if (!grouped && r != ncclInvalidArgument) {
      state_->abort(quoted(op, tag) + ": " + ncclGetErrorString(r));
    }
    MIRROR_NCCL_CHECK(r);
  }
  // Note [Group launch]: inside a group NCCL enqueues nothing until ncclGroupEnd.
  if (grouped) {
    nccl_group_add(work);
    return work;
  }
  if (r == ncclInProgress) {
    // Note [Comm gate], rule 3: the enqueue finishes in the background (e.g. connecting to the
    // peers on the first collective); nothing may be queued on the stream before it did.
    NcclGateOps ops;
    const std::string why = dist::detail::settle_call(
        state_->gate, ops, Clock::now() + timeout(), "enqueueing NCCL " + quoted(op, tag));
    if (!why.empty()) state_->abort(why);
    state_->throw_if_failed();
  }
  work->record();
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
  MIRROR_CHECK(!nccl_group_open(), CommError, "nccl barrier inside an open CollectiveGroup");
  auto work = launch(collective_name(Collective::kBarrier), "", {barrier_buf_},
                     [&](ncclComm_t comm, cudaStream_t s) {
                       return ncclAllReduce(barrier_buf_.raw_data(), barrier_buf_.raw_data(), 1,
                                            ncclFloat32, ncclSum, comm, s);
                     });
  work->wait_host(timeout());
}

void NcclCommunicator::settle() {
  MIRROR_CHECK(!nccl_group_open(), CommError,
               "NcclCommunicator::settle inside an open CollectiveGroup: end the group first");
  use_device(state_->device);
  const auto deadline = Clock::now() + timeout();
  for (;;) {
    bool idle = false;
    std::string why = state_->review(&idle);
    if (why.empty() && !idle && Clock::now() > deadline) {
      why = "collectives still running " + std::to_string(timeout().count()) +
            " ms after the step waited for them";
    }
    if (!why.empty()) state_->abort(why);
    state_->throw_if_failed();
    if (idle) break;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  if (express_) express().settle();
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
    // One round: asynchronous errors, completed and overdue collectives. The clique takes
    // every member's gate and mutex, so it is called holding neither (Note [NCCL clique]).
    const std::string why = state_->review();
    if (!why.empty()) state_->abort(why);
  }
}

}  // namespace mirror::cuda
