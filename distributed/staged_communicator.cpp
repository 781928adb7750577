// StagedCommunicator: a device's collectives through a host communicator over pooled host
// buffers, run by one staging thread (Note [Staged collectives]).
#include "distributed/staged_communicator.h"

#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "distributed/collective_op.h"
#include "distributed/completion.h"
#include "mirror/error.h"

namespace mirror::dist {
namespace {

using detail::Collective;

/// One pooled host copy: page-locked transfer memory and the CPU tensor the host communicator
/// reduces (the tensor is the host communicator's operand; the buffer is what the device's DMA
/// reaches).
struct Entry {
  DType dtype = DType::kFloat32;
  std::int64_t numel = 0;
  std::unique_ptr<HostBuffer> buffer;
  Tensor host;
  bool busy = false;  // from acquire until its copy back was issued (or the op was dropped)
};

struct Op {
  Collective kind = Collective::kBarrier;
  ReduceOp reduce = ReduceOp::kSum;
  int root = 0;
  std::string tag;
  std::chrono::milliseconds timeout{0};
  Entry* entry = nullptr;  // null for a barrier
  std::size_t in_bytes = 0;
  Tensor out;  // the device tensor the result goes back to (kept alive until then)
  Tensor in;   // kept alive until the device -> host copy has been waited for
  std::shared_ptr<detail::Completion> done = std::make_shared<detail::Completion>();
  bool abandoned = false;  // its Work was dropped before wait(): release the entry when done
};

}  // namespace

struct StagedCommunicator::Impl {
  std::unique_ptr<Communicator> host;
  Device device;
  BufferFactory make_buffer;
  int rank = 0, size = 1;

  std::mutex mutex;  // guards everything below
  std::condition_variable cv;
  std::deque<std::shared_ptr<Op>> queue;
  std::vector<std::unique_ptr<Entry>> pool;
  bool running = false, stopping = false;
  std::string broken;  // the first failure; later collectives fail with it
  std::thread thread;

  Entry* acquire(DType dtype, std::int64_t numel);
  std::shared_ptr<Work> submit(std::shared_ptr<Op> op, std::shared_ptr<Impl> self);
  void loop();
  void execute(Op& op);
  void finished(Op& op);
};

namespace {

/// The Work of a staged collective: wait() blocks until the host communicator is done, then
/// copies the result back to the device (ordered before the device's later work).
class StagedWork final : public Work {
 public:
  StagedWork(std::shared_ptr<Op> op, std::shared_ptr<StagedCommunicator::Impl> impl)
      : op_(std::move(op)), impl_(std::move(impl)) {}
  ~StagedWork() override {
    if (waited_ || op_->entry == nullptr) return;
    std::lock_guard<std::mutex> lock(impl_->mutex);
    if (op_->done->done()) {
      op_->entry->busy = false;
    } else {
      op_->abandoned = true;  // the staging thread releases it
    }
  }
  void wait() override {
    if (waited_) return;
    op_->done->wait();  // rethrows the host communicator's failure
    waited_ = true;
    if (op_->entry == nullptr) return;
    op_->entry->buffer->copy_to(op_->out);
    std::lock_guard<std::mutex> lock(impl_->mutex);
    op_->entry->busy = false;  // reusable once the copy back is done (acquire checks)
  }
  bool done() override { return op_->done->done(); }

 private:
  std::shared_ptr<Op> op_;
  std::shared_ptr<StagedCommunicator::Impl> impl_;
  bool waited_ = false;
};

}  // namespace

Entry* StagedCommunicator::Impl::acquire(DType dtype, std::int64_t numel) {
  for (auto& e : pool) {
    if (!e->busy && e->dtype == dtype && e->numel == numel && e->buffer->ready()) {
      e->busy = true;
      return e.get();
    }
  }
  auto e = std::make_unique<Entry>();
  e->dtype = dtype;
  e->numel = numel;
  e->host = Tensor::empty({numel}, dtype, Device::cpu());
  e->buffer = make_buffer(e->host.nbytes(), device);
  MIRROR_CHECK(e->buffer != nullptr && e->buffer->bytes() >= e->host.nbytes(), Error,
               "staged collectives: no host buffer of " + std::to_string(e->host.nbytes()) +
                   " bytes for " + device.str());
  e->busy = true;
  pool.push_back(std::move(e));
  return pool.back().get();
}

std::shared_ptr<Work> StagedCommunicator::Impl::submit(std::shared_ptr<Op> op,
                                                       std::shared_ptr<Impl> self) {
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (!broken.empty()) {
      if (op->entry) op->entry->busy = false;
      throw CommError("staged communicator unusable after an earlier failure: " + broken);
    }
    queue.push_back(op);
  }
  cv.notify_all();
  return std::make_shared<StagedWork>(std::move(op), std::move(self));
}

void StagedCommunicator::Impl::loop() {
  for (;;) {
    std::shared_ptr<Op> op;
    {
      std::unique_lock<std::mutex> lock(mutex);
      cv.wait(lock, [&] { return stopping || !queue.empty(); });
      if (queue.empty()) return;  // stopping, and everything issued has finished
      op = std::move(queue.front());
      queue.pop_front();
      running = true;
    }
    std::exception_ptr error;
    try {
      std::string earlier;
      {
        std::lock_guard<std::mutex> lock(mutex);
        earlier = broken;
      }
      if (!earlier.empty()) {
        throw CommError("staged communicator unusable after an earlier failure: " + earlier);
      }
      execute(*op);
    } catch (const std::exception& e) {
      error = std::current_exception();
      std::lock_guard<std::mutex> lock(mutex);
      if (broken.empty()) {
        broken = std::string(detail::collective_name(op->kind)) + " '" + op->tag + "': " + e.what();
      }
    }
    op->done->finish(error);
    finished(*op);
  }
}

void StagedCommunicator::Impl::finished(Op& op) {
  {
    std::lock_guard<std::mutex> lock(mutex);
    running = false;
    if (op.abandoned && op.entry) op.entry->busy = false;
    op.in = Tensor();
  }
  cv.notify_all();  // settle() waits for the queue to drain
}

void StagedCommunicator::Impl::execute(Op& op) {
  host->set_timeout(op.timeout);
  if (op.kind == Collective::kBarrier) return host->barrier();
  Entry& e = *op.entry;
  e.buffer->wait();  // the device -> host copy issued at launch
  char* staged = static_cast<char*>(e.buffer->data());
  char* h = static_cast<char*>(e.host.raw_data());
  const std::size_t bytes = e.host.nbytes();
  switch (op.kind) {
    case Collective::kAllReduce:
      std::memcpy(h, staged, bytes);
      host->all_reduce(e.host, e.host, op.reduce, op.tag)->wait();
      break;
    case Collective::kBroadcast:
      std::memcpy(h, staged, bytes);
      host->broadcast(e.host, op.root, op.tag)->wait();
      break;
    case Collective::kAllGather: {
      const std::int64_t n = e.numel / size;
      Tensor mine = e.host.view(rank * n, {n});  // this replica's block: gathered in place
      std::memcpy(mine.raw_data(), staged, op.in_bytes);
      host->all_gather(mine, e.host, op.tag)->wait();
      break;
    }
    case Collective::kBarrier:
      break;
  }
  std::memcpy(staged, h, bytes);
}

// ---------------------------------------------------------------- StagedCommunicator
StagedCommunicator::StagedCommunicator(std::unique_ptr<Communicator> host, Device device,
                                       BufferFactory make_buffer)
    : impl_(std::make_shared<Impl>()) {
  MIRROR_CHECK(host != nullptr && make_buffer, InvalidArgument,
               "StagedCommunicator needs a host communicator and a buffer factory");
  impl_->rank = host->rank();
  impl_->size = host->size();
  timeout_ = host->timeout();
  impl_->host = std::move(host);
  impl_->device = device;
  impl_->make_buffer = std::move(make_buffer);
  impl_->thread = std::thread([impl = impl_.get()] { impl->loop(); });
}

StagedCommunicator::~StagedCommunicator() {
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    impl_->stopping = true;
  }
  impl_->cv.notify_all();
  if (impl_->thread.joinable()) impl_->thread.join();
}

int StagedCommunicator::rank() const { return impl_->rank; }
int StagedCommunicator::size() const { return impl_->size; }
std::string StagedCommunicator::name() const { return impl_->host->name() + "+staged"; }

namespace {

detail::TensorHome home_of(Device d) {
  return d.is_cuda() ? detail::TensorHome::gpu(d.index) : detail::TensorHome::cpu();
}

std::shared_ptr<Op> new_op(Collective kind, const std::string& tag,
                           std::chrono::milliseconds timeout) {
  auto o = std::make_shared<Op>();
  o->kind = kind;
  o->tag = tag;
  o->timeout = timeout;
  return o;
}

}  // namespace

std::shared_ptr<Work> StagedCommunicator::all_reduce(const Tensor& in, Tensor& out, ReduceOp op,
                                                     const std::string& tag) {
  detail::check_collective(name(), home_of(impl_->device), size(),
                           {Collective::kAllReduce, &in, &out, op, 0});
  auto o = new_op(Collective::kAllReduce, tag, timeout_);
  o->reduce = op;
  o->in = in;
  o->out = out;
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    o->entry = impl_->acquire(in.dtype(), in.numel());
  }
  o->entry->buffer->copy_from(in);  // after the work queued on the device
  return impl_->submit(std::move(o), impl_);
}

std::shared_ptr<Work> StagedCommunicator::broadcast(Tensor& t, int root, const std::string& tag) {
  detail::check_collective(name(), home_of(impl_->device), size(),
                           {Collective::kBroadcast, &t, nullptr, ReduceOp::kSum, root});
  auto o = new_op(Collective::kBroadcast, tag, timeout_);
  o->root = root;
  o->in = t;
  o->out = t;
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    o->entry = impl_->acquire(t.dtype(), t.numel());
  }
  o->entry->buffer->copy_from(t);
  return impl_->submit(std::move(o), impl_);
}

std::shared_ptr<Work> StagedCommunicator::all_gather(const Tensor& in, Tensor& out,
                                                     const std::string& tag) {
  detail::check_collective(name(), home_of(impl_->device), size(),
                           {Collective::kAllGather, &in, &out, ReduceOp::kSum, 0});
  auto o = new_op(Collective::kAllGather, tag, timeout_);
  o->in = in;
  o->out = out;
  o->in_bytes = in.nbytes();
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    o->entry = impl_->acquire(out.dtype(), out.numel());
  }
  o->entry->buffer->copy_from(in);  // into the buffer's start; placed in its block on the host
  return impl_->submit(std::move(o), impl_);
}

void StagedCommunicator::barrier() {
  impl_
      ->submit(
          new_op(Collective::kBarrier, detail::collective_name(Collective::kBarrier), timeout_),
          impl_)
      ->wait();
}

void StagedCommunicator::settle() {
  std::string broken;
  {
    std::unique_lock<std::mutex> lock(impl_->mutex);
    impl_->cv.wait(lock, [&] { return impl_->queue.empty() && !impl_->running; });
    broken = impl_->broken;
  }
  if (!broken.empty()) throw CommError("staged communicator failed: " + broken);
  impl_->host->settle();  // the staging thread is idle: nobody else calls the host now
}

int StagedCommunicator::buffers_made() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return static_cast<int>(impl_->pool.size());
}

// ---------------------------------------------------------------- the transport choice
DeviceComm parse_device_comm(const std::string& text) {
  if (text == "auto") return DeviceComm::kAuto;
  if (text == "nccl") return DeviceComm::kNccl;
  if (text == "mpi") return DeviceComm::kMpi;
  throw InvalidArgument("unknown --comm '" + text +
                        "': expected auto, nccl (GPUs: NCCL) or mpi (GPUs: MPI over pinned host "
                        "copies, see docs/gpu-kit.md)");
}

const char* device_comm_name(DeviceComm c) {
  switch (c) {
    case DeviceComm::kNccl:
      return "nccl";
    case DeviceComm::kMpi:
      return "mpi";
    case DeviceComm::kAuto:
      break;
  }
  return "auto";
}

}  // namespace mirror::dist
