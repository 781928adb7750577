// The in-process replica group: replicas meet in numbered slots; a worker thread runs each
// complete slot (local ordered sum, optional MPI step, copy back). See inproc_communicator.h.
#include "mirror/distributed/inproc_communicator.h"

#include <condition_variable>
#include <cstring>
#include <map>
#include <thread>

#include "distributed/collective_op.h"
#include "distributed/collective_util.h"
#include "distributed/completion.h"
#include "distributed/runtime_internal.h"
#include "mirror/error.h"

namespace mirror::dist {

namespace {

using Kind = detail::Collective;

// What every replica's k-th collective must agree on.
struct Descriptor {
  Kind kind = Kind::kBarrier;
  DType dtype = DType::kFloat32;
  std::int64_t numel = 0;
  ReduceOp reduce = ReduceOp::kSum;
  int root = 0;

  bool operator==(const Descriptor&) const = default;
  std::string str() const {
    std::string s = detail::collective_name(kind);
    if (kind == Kind::kBarrier) return s;
    s += std::string(" ") + dtype_name(dtype) + "[" + std::to_string(numel) + "]";
    if (kind == Kind::kAllReduce) s += std::string(" ") + detail::reduce_op_name(reduce);
    if (kind == Kind::kBroadcast) s += " root " + std::to_string(root);
    return s;
  }
};

struct Slot {
  std::uint64_t seq = 0;
  Descriptor desc;
  std::string tag;
  std::vector<Tensor> in, out;  // per local replica
  std::vector<bool> arrived;
  int arrived_count = 0;
  std::string mismatch;
  std::shared_ptr<detail::Completion> done = std::make_shared<detail::Completion>();
};

}  // namespace

// ------------------------------------------------------------------ the group

class InProcGroup {
 public:
  InProcGroup(int local, MpiCommunicator* cross, int first, int total)
      : local_(local), first_(first), total_(total), cross_(cross), next_seq_(local, 0) {
    const bool multi_rank =
        (cross && cross->size() > 1) || (Runtime::active() && Runtime::get().world_size() > 1);
    abort_on_timeout_ = multi_rank;
    worker_ = std::thread([this] { run_worker(); });
  }
  ~InProcGroup() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    cv_.notify_all();
    worker_.join();
  }

  int local() const { return local_; }
  int first() const { return first_; }
  int total() const { return total_; }
  MpiCommunicator* cross() const { return cross_; }
  /// The group's first failure, "" while it works.
  std::string broken() {
    std::lock_guard lock(mutex_);
    return broken_;
  }

  /// Registers replica `r`'s next collective; returns its slot.
  std::shared_ptr<Slot> arrive(int r, const Descriptor& d, const std::string& tag, Tensor in,
                               Tensor out);
  /// Called by a replica's wait() when its deadline passed: aborts or throws.
  [[noreturn]] void timed_out(int r, const std::shared_ptr<Slot>& slot,
                              std::chrono::milliseconds timeout);

 private:
  void run_worker();
  void execute(Slot& s);
  void all_reduce(Slot& s);
  void broadcast(Slot& s);
  void all_gather(Slot& s);

  const int local_, first_, total_;
  MpiCommunicator* const cross_;
  bool abort_on_timeout_ = false;

  std::mutex mutex_;  // guards everything below
  std::condition_variable cv_;
  std::map<std::uint64_t, std::shared_ptr<Slot>> slots_;  // issued, not yet run
  std::vector<std::uint64_t> next_seq_;                   // per replica
  std::uint64_t next_to_run_ = 0;
  bool stopping_ = false;
  std::string broken_;
  std::thread worker_;
};

std::shared_ptr<Slot> InProcGroup::arrive(int r, const Descriptor& d, const std::string& tag,
                                          Tensor in, Tensor out) {
  std::shared_ptr<Slot> slot;
  bool complete = false;
  {
    std::lock_guard lock(mutex_);
    if (!broken_.empty())
      throw CommError("in-process communicator group unusable after an earlier failure: " +
                      broken_);
    const std::uint64_t seq = next_seq_[r]++;
    auto& entry = slots_[seq];
    if (!entry) {
      entry = std::make_shared<Slot>();
      entry->seq = seq;
      entry->desc = d;
      entry->tag = tag;
      entry->in.resize(local_);
      entry->out.resize(local_);
      entry->arrived.assign(local_, false);
    } else if (!(entry->desc == d) && entry->mismatch.empty()) {
      int other = 0;
      while (!entry->arrived[other]) ++other;
      entry->mismatch = "in-process collective #" + std::to_string(seq) + " mismatch: replica " +
                        std::to_string(first_ + other) + " issued " + entry->desc.str() + " '" +
                        entry->tag + "', replica " + std::to_string(first_ + r) + " issued " +
                        d.str() + " '" + tag +
                        "'; every replica must issue the same collectives "
                        "in the same order";
    }
    slot = entry;
    slot->in[r] = std::move(in);
    slot->out[r] = std::move(out);
    slot->arrived[r] = true;
    complete = ++slot->arrived_count == local_;
  }
  if (complete) cv_.notify_all();
  return slot;
}

void InProcGroup::timed_out(int r, const std::shared_ptr<Slot>& slot,
                            std::chrono::milliseconds timeout) {
  std::string arrived, missing;
  {
    std::lock_guard lock(mutex_);
    for (int j = 0; j < local_; ++j) {
      std::string& list = slot->arrived[j] ? arrived : missing;
      list += (list.empty() ? "" : " ") + std::to_string(first_ + j);
    }
  }
  std::string peers = "local replicas arrived [" + arrived + "], missing [" + missing + "]";
  if (missing.empty() && cross_)
    peers += "; waiting for the cross-rank MPI step among " + detail::world_peers();
  const std::string line =
      detail::timeout_line(detail::collective_name(slot->desc.kind), slot->tag, timeout,
                           peers + " (replica " + std::to_string(first_ + r) + " waited)");
  if (abort_on_timeout_) detail::abort_with_line(line);
  {
    std::lock_guard lock(mutex_);
    if (broken_.empty()) broken_ = line;
  }
  cv_.notify_all();
  throw CommError(line);
}

void InProcGroup::run_worker() {
  while (true) {
    std::shared_ptr<Slot> slot;
    std::string failure;
    {
      std::unique_lock lock(mutex_);
      cv_.wait(lock, [&] {
        if (stopping_) return true;
        auto it = slots_.find(next_to_run_);
        return it != slots_.end() && it->second->arrived_count == local_;
      });
      auto it = slots_.find(next_to_run_);
      const bool ready = it != slots_.end() && it->second->arrived_count == local_;
      if (!ready) {  // stopping: fail what can never run
        for (auto& [seq, s] : slots_)
          s->done->finish(std::make_exception_ptr(CommError(
              "in-process communicator group destroyed before every replica issued collective #" +
              std::to_string(seq))));
        return;
      }
      slot = it->second;
      slots_.erase(it);
      ++next_to_run_;
      failure = !broken_.empty() ? "in-process communicator group unusable after an earlier "
                                   "failure: " +
                                       broken_
                                 : slot->mismatch;
      if (!slot->mismatch.empty() && broken_.empty()) broken_ = slot->mismatch;
    }
    if (!failure.empty()) {
      slot->done->finish(std::make_exception_ptr(CommError(failure)));
      continue;
    }
    std::exception_ptr error;
    try {
      execute(*slot);
    } catch (const std::exception& e) {
      error = std::current_exception();
      std::lock_guard lock(mutex_);
      if (broken_.empty()) broken_ = e.what();
    }
    slot->done->finish(error);
  }
}

void InProcGroup::execute(Slot& s) {
  switch (s.desc.kind) {
    case Kind::kAllReduce:
      return all_reduce(s);
    case Kind::kBroadcast:
      return broadcast(s);
    case Kind::kAllGather:
      return all_gather(s);
    case Kind::kBarrier:
      if (cross_) cross_->barrier();
      return;
  }
}

void InProcGroup::all_reduce(Slot& s) {
  const std::int64_t n = s.desc.numel;
  std::vector<const void*> srcs;
  for (const Tensor& t : s.in) srcs.push_back(t.raw_data());
  Tensor& result = s.out[0];
  detail::ordered_sum(srcs, result.raw_data(), n, s.desc.dtype);
  if (cross_ && cross_->size() > 1)
    cross_->all_reduce(result, result, ReduceOp::kSum, s.tag)->wait();
  if (s.desc.reduce == ReduceOp::kAvg)
    detail::divide_in_place(result.raw_data(), n, s.desc.dtype, total_);
  for (int j = 1; j < local_; ++j)
    if (n) std::memcpy(s.out[j].raw_data(), result.raw_data(), result.nbytes());
}

void InProcGroup::broadcast(Slot& s) {
  const int root_rank = s.desc.root / local_;
  const int root_local = s.desc.root % local_;
  Tensor* src = &s.out[root_local];
  if (cross_ && cross_->size() > 1) {
    if (cross_->rank() != root_rank) src = &s.out[0];
    cross_->broadcast(*src, root_rank, s.tag)->wait();
  }
  for (int j = 0; j < local_; ++j)
    if (&s.out[j] != src && src->nbytes())
      std::memcpy(s.out[j].raw_data(), src->raw_data(), src->nbytes());
}

void InProcGroup::all_gather(Slot& s) {
  const std::int64_t n = s.desc.numel;  // elements per replica
  Tensor flat = s.out[0].reshape({-1});
  for (int j = 0; j < local_; ++j) {
    Tensor block = flat.view((first_ + j) * n, {n});
    if (n) std::memmove(block.raw_data(), s.in[j].raw_data(), s.in[j].nbytes());
  }
  if (cross_ && cross_->size() > 1) {
    Tensor mine = flat.view(first_ * n, {local_ * n});
    cross_->all_gather(mine, flat, s.tag)->wait();
  }
  for (int j = 1; j < local_; ++j)
    if (n) std::memcpy(s.out[j].raw_data(), s.out[0].raw_data(), s.out[0].nbytes());
}

// ------------------------------------------------------------------ one replica's view

namespace {

class InProcWork final : public Work {
 public:
  InProcWork(std::shared_ptr<InProcGroup> group, std::shared_ptr<Slot> slot, int replica,
             std::chrono::milliseconds timeout)
      : group_(std::move(group)),
        slot_(std::move(slot)),
        replica_(replica),
        timeout_(timeout),
        deadline_(detail::deadline_after(timeout)) {}

  void wait() override {
    if (!slot_->done->wait_until(deadline_)) group_->timed_out(replica_, slot_, timeout_);
  }
  bool done() override { return slot_->done->done(); }

 private:
  std::shared_ptr<InProcGroup> group_;
  std::shared_ptr<Slot> slot_;
  int replica_;
  std::chrono::milliseconds timeout_;
  detail::Clock::time_point deadline_;
};

class InProcCommunicator final : public Communicator {
 public:
  InProcCommunicator(std::shared_ptr<InProcGroup> group, int replica)
      : group_(std::move(group)), replica_(replica) {
    if (group_->cross()) timeout_ = group_->cross()->timeout();
  }

  int rank() const override { return group_->first() + replica_; }
  int size() const override { return group_->total(); }
  std::string name() const override { return group_->cross() ? "inproc+mpi" : "inproc"; }

  std::shared_ptr<Work> all_reduce(const Tensor& in, Tensor& out, ReduceOp op,
                                   const std::string& tag) override {
    detail::check_collective(name(), detail::TensorHome::cpu(), size(),
                             {Kind::kAllReduce, &in, &out, op, 0});
    return issue({Kind::kAllReduce, in.dtype(), in.numel(), op, 0}, tag, in, out);
  }
  std::shared_ptr<Work> broadcast(Tensor& t, int root, const std::string& tag) override {
    detail::check_collective(name(), detail::TensorHome::cpu(), size(),
                             {Kind::kBroadcast, &t, nullptr, ReduceOp::kSum, root});
    return issue({Kind::kBroadcast, t.dtype(), t.numel(), ReduceOp::kSum, root}, tag, t, t);
  }
  std::shared_ptr<Work> all_gather(const Tensor& in, Tensor& out, const std::string& tag) override {
    detail::check_collective(name(), detail::TensorHome::cpu(), size(),
                             {Kind::kAllGather, &in, &out, ReduceOp::kSum, 0});
    return issue({Kind::kAllGather, in.dtype(), in.numel(), ReduceOp::kSum, 0}, tag, in, out);
  }
  void barrier() override {
    issue({}, detail::collective_name(Kind::kBarrier), Tensor(), Tensor())->wait();
  }
  void settle() override {
    const std::string broken = group_->broken();
    if (!broken.empty()) throw CommError("in-process communicator group failed: " + broken);
    if (group_->cross()) group_->cross()->settle();
  }

 private:
  std::shared_ptr<Work> issue(const Descriptor& d, const std::string& tag, const Tensor& in,
                              const Tensor& out) {
    auto slot = group_->arrive(replica_, d, tag, in, out);
    return std::make_shared<InProcWork>(group_, std::move(slot), replica_, timeout_);
  }

  std::shared_ptr<InProcGroup> group_;
  int replica_;
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> make_inproc_group(int local_replicas,
                                                             MpiCommunicator* cross_rank,
                                                             int first_global_replica,
                                                             int total_replicas) {
  const std::string args = "make_inproc_group(local_replicas " + std::to_string(local_replicas) +
                           ", first_global_replica " + std::to_string(first_global_replica) +
                           ", total_replicas " + std::to_string(total_replicas) + ")";
  MIRROR_CHECK(local_replicas >= 1, InvalidArgument, args + ": need at least one replica");
  if (!cross_rank) {
    MIRROR_CHECK(first_global_replica == 0 && total_replicas == local_replicas, InvalidArgument,
                 args +
                     ": without a cross-rank communicator the group is the whole world "
                     "(first 0, total = local replicas)");
  } else {
    // Collective: gather every rank's arguments first, so a rank with odd arguments makes
    // every rank fail (not only itself while the others wait).
    const int ranks = cross_rank->size(), rank = cross_rank->rank();
    Tensor mine = Tensor::from_vector<std::int64_t>(
        {local_replicas, first_global_replica, total_replicas}, {3});
    Tensor all = Tensor::zeros({3 * ranks}, DType::kInt64);
    cross_rank->all_gather(mine, all, "make_inproc_group")->wait();
    const auto got = all.to_vector<std::int64_t>();
    for (int r = 0; r < ranks; ++r) {
      const std::int64_t local = got[3 * r], first = got[3 * r + 1], total = got[3 * r + 2];
      MIRROR_CHECK(local == local_replicas && first == r * local && total == ranks * local,
                   InvalidArgument,
                   "make_inproc_group: rank " + std::to_string(r) + " has local_replicas " +
                       std::to_string(local) + ", first_global_replica " + std::to_string(first) +
                       ", total_replicas " + std::to_string(total) + " while rank " +
                       std::to_string(rank) + " has " + std::to_string(local_replicas) +
                       " local replicas; every rank must drive the same number of replicas, "
                       "numbered rank by rank (first = rank * local, total = ranks * local)");
    }
  }
  auto group = std::make_shared<InProcGroup>(local_replicas, cross_rank, first_global_replica,
                                             total_replicas);
  std::vector<std::unique_ptr<Communicator>> comms;
  for (int i = 0; i < local_replicas; ++i)
    comms.push_back(std::make_unique<InProcCommunicator>(group, i));
  return comms;
}

}  // namespace mirror::dist
