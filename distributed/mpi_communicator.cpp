// MpiCommunicator: a FIFO of collectives run by one communication thread with non-blocking MPI.
#include "mirror/distributed/mpi_communicator.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>

#include "distributed/collective_op.h"
#include "distributed/collective_util.h"
#include "distributed/completion.h"
#include "distributed/runtime_internal.h"
#include "mirror/error.h"

namespace mirror::dist {

namespace {

using OpKind = detail::Collective;

struct Op {
  OpKind kind = OpKind::kBarrier;
  Tensor in, out;
  ReduceOp reduce = ReduceOp::kSum;
  int root = 0;
  std::string tag;
  std::chrono::milliseconds timeout{0};
  std::shared_ptr<detail::Completion> done = std::make_shared<detail::Completion>();
};

// The user-defined MPI operations for the 16-bit float types (see the header's note).
void mpi_add_half(void* in, void* inout, int* len, MPI_Datatype*) {
  detail::add_half(static_cast<const std::uint16_t*>(in), static_cast<std::uint16_t*>(inout), *len);
}
void mpi_add_bfloat16(void* in, void* inout, int* len, MPI_Datatype*) {
  detail::add_bfloat16(static_cast<const std::uint16_t*>(in), static_cast<std::uint16_t*>(inout),
                       *len);
}

bool mpi_is_up() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
}

// Note [Polling while the caller computes]: Open MPI moves a collective forward only inside MPI
// calls, so the communication thread polls. While the caller is computing (buckets launched during
// backward) that thread shares the caller's cores; polling flat out would take a fair share of
// them from backward and delay it more than the all-reduce saves. So it tests every
// kPollInterval while nobody waits, and flat out (yielding) once a caller blocks in wait(), when
// the core is free and latency is all that matters.
constexpr std::chrono::microseconds kPollInterval{250};

/// How many callers are blocked in wait() on this communicator's work, and a way to wake the
/// communication thread from its pause when the first one arrives. Shared with the Work handles,
/// which may outlive the communicator.
class Waiters {
 public:
  void enter() {
    {
      std::lock_guard lock(mutex_);
      ++count_;
    }
    cv_.notify_all();
  }
  void leave() {
    std::lock_guard lock(mutex_);
    --count_;
  }
  /// Between two MPI_Tests: yield when somebody waits, else sleep up to kPollInterval (cut short
  /// when a caller starts waiting).
  void pause() {
    std::unique_lock lock(mutex_);
    if (count_ > 0) {
      lock.unlock();
      std::this_thread::yield();
      return;
    }
    cv_.wait_for(lock, kPollInterval, [&] { return count_ > 0; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  int count_ = 0;
};

/// A Work on the MPI communication thread; wait() tells the thread that a caller now waits.
class MpiWork final : public Work {
 public:
  MpiWork(std::shared_ptr<detail::Completion> completion, std::shared_ptr<Waiters> waiters)
      : completion_(std::move(completion)), waiters_(std::move(waiters)) {}
  void wait() override {
    if (completion_->done()) return completion_->wait();  // rethrows a failure
    waiters_->enter();
    struct Leave {
      Waiters& w;
      ~Leave() { w.leave(); }
    } leave{*waiters_};
    completion_->wait();
  }
  bool done() override { return completion_->done(); }

 private:
  std::shared_ptr<detail::Completion> completion_;
  std::shared_ptr<Waiters> waiters_;
};

}  // namespace

struct MpiCommunicator::Impl {
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Op half_sum = MPI_OP_NULL, bf16_sum = MPI_OP_NULL;
  int rank = 0, size = 1;

  mutable std::mutex mutex;  // guards queue, stopping, broken, running
  std::condition_variable cv;
  std::deque<Op> queue;
  bool stopping = false;
  bool running = false;
  std::atomic<std::size_t> queued{0};  // queue.size(), readable without the mutex
  std::string broken;                  // the first failure; later operations fail with it
  std::shared_ptr<Waiters> waiters = std::make_shared<Waiters>();
  std::thread thread;

  void loop();
  void execute(Op& op);
  void start_and_poll(const Op& op, const std::function<int(MPI_Request*)>& start);
  void all_reduce(Op& op);
  void chunked_bytes(const Op& op, char* data, std::size_t bytes,
                     const std::function<int(char*, int, MPI_Request*)>& start);
  std::pair<MPI_Datatype, MPI_Op> mpi_type(DType dtype) const;
};

MpiCommunicator::MpiCommunicator(Runtime& runtime) : impl_(std::make_unique<Impl>()) {
  timeout_ = runtime.default_timeout();
  {
    std::lock_guard lock(detail::mpi_mutex());
    MIRROR_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &impl_->comm));
    MIRROR_MPI_CHECK(MPI_Comm_set_errhandler(impl_->comm, MPI_ERRORS_RETURN));
    MIRROR_MPI_CHECK(MPI_Comm_rank(impl_->comm, &impl_->rank));
    MIRROR_MPI_CHECK(MPI_Comm_size(impl_->comm, &impl_->size));
    MIRROR_MPI_CHECK(MPI_Op_create(&mpi_add_half, 1, &impl_->half_sum));
    MIRROR_MPI_CHECK(MPI_Op_create(&mpi_add_bfloat16, 1, &impl_->bf16_sum));
  }
  impl_->thread = std::thread([impl = impl_.get()] { impl->loop(); });
}

MpiCommunicator::~MpiCommunicator() {
  {
    std::lock_guard lock(impl_->mutex);
    impl_->stopping = true;
  }
  impl_->cv.notify_all();
  if (impl_->thread.joinable()) impl_->thread.join();
  if (!mpi_is_up()) return;
  std::lock_guard lock(detail::mpi_mutex());
  if (impl_->half_sum != MPI_OP_NULL) MPI_Op_free(&impl_->half_sum);
  if (impl_->bf16_sum != MPI_OP_NULL) MPI_Op_free(&impl_->bf16_sum);
  if (impl_->comm != MPI_COMM_NULL) MPI_Comm_free(&impl_->comm);
}

int MpiCommunicator::rank() const { return impl_->rank; }
int MpiCommunicator::size() const { return impl_->size; }

std::size_t MpiCommunicator::pending() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->queue.size() + (impl_->running ? 1 : 0);
}

// ------------------------------------------------------------------ submission (caller thread)

namespace {

std::shared_ptr<Work> submit(MpiCommunicator::Impl& impl, Op op) {
  auto work = std::make_shared<MpiWork>(op.done, impl.waiters);
  {
    std::lock_guard lock(impl.mutex);
    if (!impl.broken.empty())
      throw CommError("MPI communicator unusable after an earlier failure: " + impl.broken);
    impl.queue.push_back(std::move(op));
    impl.queued.store(impl.queue.size(), std::memory_order_release);
  }
  impl.cv.notify_one();
  return work;
}

}  // namespace

std::shared_ptr<Work> MpiCommunicator::all_reduce(const Tensor& in, Tensor& out, ReduceOp op,
                                                  const std::string& tag) {
  detail::check_collective("mpi", detail::TensorHome::cpu(), size(),
                           {detail::Collective::kAllReduce, &in, &out, op, 0});
  Op o;
  o.kind = OpKind::kAllReduce;
  o.in = in;
  o.out = out;
  o.reduce = op;
  o.tag = tag;
  o.timeout = timeout_;
  return submit(*impl_, std::move(o));
}

std::shared_ptr<Work> MpiCommunicator::broadcast(Tensor& t, int root, const std::string& tag) {
  detail::check_collective("mpi", detail::TensorHome::cpu(), size(),
                           {detail::Collective::kBroadcast, &t, nullptr, ReduceOp::kSum, root});
  Op o;
  o.kind = OpKind::kBroadcast;
  o.out = t;
  o.root = root;
  o.tag = tag;
  o.timeout = timeout_;
  return submit(*impl_, std::move(o));
}

std::shared_ptr<Work> MpiCommunicator::all_gather(const Tensor& in, Tensor& out,
                                                  const std::string& tag) {
  detail::check_collective("mpi", detail::TensorHome::cpu(), size(),
                           {detail::Collective::kAllGather, &in, &out, ReduceOp::kSum, 0});
  MIRROR_CHECK(in.nbytes() <= static_cast<std::size_t>(detail::kMaxMpiCount), InvalidArgument,
               "mpi all_gather: " + std::to_string(in.nbytes()) +
                   " bytes per rank is more than the 2^30 supported; gather in pieces");
  Op o;
  o.kind = OpKind::kAllGather;
  o.in = in;
  o.out = out;
  o.tag = tag;
  o.timeout = timeout_;
  return submit(*impl_, std::move(o));
}

void MpiCommunicator::barrier() {
  Op o;
  o.kind = OpKind::kBarrier;
  o.tag = detail::collective_name(OpKind::kBarrier);
  o.timeout = timeout_;
  submit(*impl_, std::move(o))->wait();
}

void MpiCommunicator::settle() {
  std::lock_guard lock(impl_->mutex);
  if (!impl_->broken.empty()) throw CommError("MPI communicator failed: " + impl_->broken);
}

// ------------------------------------------------------------------ communication thread

void MpiCommunicator::Impl::loop() {
  while (true) {
    Op op;
    // Note [Brief spin] (completion.h): the next collective usually follows at once.
    const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(50);
    while (queued.load(std::memory_order_acquire) == 0 && std::chrono::steady_clock::now() < until)
      std::this_thread::yield();
    {
      std::unique_lock lock(mutex);
      cv.wait(lock, [&] { return stopping || !queue.empty(); });
      if (queue.empty()) return;  // stopping, and everything issued has finished
      op = std::move(queue.front());
      queue.pop_front();
      queued.store(queue.size(), std::memory_order_release);
      running = true;
      if (!broken.empty()) {
        running = false;
        op.done->finish(std::make_exception_ptr(
            CommError("MPI communicator unusable after an earlier failure: " + broken)));
        continue;
      }
    }
    std::exception_ptr error;
    try {
      execute(op);
    } catch (const std::exception& e) {
      error = std::current_exception();
      std::lock_guard lock(mutex);
      if (broken.empty())
        broken = std::string(detail::collective_name(op.kind)) + " '" + op.tag + "': " + e.what();
    }
    {
      std::lock_guard lock(mutex);
      running = false;
    }
    op.done->finish(error);
  }
}

void MpiCommunicator::Impl::start_and_poll(const Op& op,
                                           const std::function<int(MPI_Request*)>& start) {
  MPI_Request request;
  {
    std::lock_guard lock(detail::mpi_mutex());
    MIRROR_MPI_CHECK(start(&request));
  }
  detail::poll_until_done(
      request, detail::deadline_after(op.timeout),
      [&] {
        detail::abort_with_line(detail::timeout_line(detail::collective_name(op.kind), op.tag,
                                                     op.timeout, detail::world_peers()));
      },
      [this] { waiters->pause(); });
}

void MpiCommunicator::Impl::execute(Op& op) {
  switch (op.kind) {
    case OpKind::kAllReduce:
      return all_reduce(op);
    case OpKind::kBroadcast:
      return chunked_bytes(op, static_cast<char*>(op.out.raw_data()), op.out.nbytes(),
                           [&](char* p, int n, MPI_Request* r) {
                             return MPI_Ibcast(p, n, MPI_BYTE, op.root, comm, r);
                           });
    case OpKind::kAllGather: {
      if (op.in.nbytes() == 0) return;
      const int n = static_cast<int>(op.in.nbytes());
      char* out = static_cast<char*>(op.out.raw_data());
      const bool in_place = op.in.raw_data() == out + static_cast<std::size_t>(rank) * n;
      return start_and_poll(op, [&](MPI_Request* r) {
        return MPI_Iallgather(in_place ? MPI_IN_PLACE : op.in.raw_data(), n, MPI_BYTE, out, n,
                              MPI_BYTE, comm, r);
      });
    }
    case OpKind::kBarrier:
      return start_and_poll(op, [&](MPI_Request* r) { return MPI_Ibarrier(comm, r); });
  }
}

std::pair<MPI_Datatype, MPI_Op> MpiCommunicator::Impl::mpi_type(DType dtype) const {
  switch (dtype) {
    case DType::kFloat32:
      return {MPI_FLOAT, MPI_SUM};
    case DType::kFloat64:
      return {MPI_DOUBLE, MPI_SUM};
    case DType::kInt32:
      return {MPI_INT32_T, MPI_SUM};
    case DType::kInt64:
      return {MPI_INT64_T, MPI_SUM};
    case DType::kFloat16:
      return {MPI_UINT16_T, half_sum};
    case DType::kBFloat16:
      return {MPI_UINT16_T, bf16_sum};
    default:
      throw InvalidArgument(std::string("mpi: cannot reduce ") + dtype_name(dtype));
  }
}

void MpiCommunicator::Impl::all_reduce(Op& op) {
  const std::int64_t n = op.in.numel();
  if (n == 0) return;
  const auto [type, mpi_op] = mpi_type(op.in.dtype());
  const bool in_place = detail::same_memory(op.in, op.out);
  const std::size_t elem = dtype_size(op.in.dtype());
  auto* in = static_cast<char*>(op.in.raw_data());
  auto* out = static_cast<char*>(op.out.raw_data());
  for (std::int64_t first = 0; first < n; first += detail::kMaxMpiCount) {
    const int count = static_cast<int>(std::min(n - first, detail::kMaxMpiCount));
    const std::size_t offset = static_cast<std::size_t>(first) * elem;
    start_and_poll(op, [&](MPI_Request* r) {
      return MPI_Iallreduce(in_place ? MPI_IN_PLACE : in + offset, out + offset, count, type,
                            mpi_op, comm, r);
    });
  }
  if (op.reduce == ReduceOp::kAvg) detail::divide_in_place(out, n, op.out.dtype(), size);
}

void MpiCommunicator::Impl::chunked_bytes(
    const Op& op, char* data, std::size_t bytes,
    const std::function<int(char*, int, MPI_Request*)>& start) {
  const auto chunk = static_cast<std::size_t>(detail::kMaxMpiCount);
  for (std::size_t first = 0; first < bytes; first += chunk) {
    const int count = static_cast<int>(std::min(bytes - first, chunk));
    start_and_poll(op, [&](MPI_Request* r) { return start(data + first, count, r); });
  }
}

}  // namespace mirror::dist
