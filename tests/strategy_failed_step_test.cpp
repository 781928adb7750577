// A failed collective never becomes a step (Note [Failed step], docs/architecture.md invariant
// 8), with in-process replicas whose communicators are wrapped by a stand-in of a GPU
// communicator whose watchdog aborts a collective after its Work::wait() returned: the bucket then
// holds partial sums (here: garbage), and the only place the failure shows is the communicator's
// error state. The step must throw CommError on every replica and change no weight, no optimizer
// state and no step count; the next step fails too (the communicator stays failed).
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <limits>
#include <memory>
#include <string>

#include "mirror/distributed/communicator.h"
#include "mirror/distributed/strategy.h"
#include "mirror/ops.h"
#include "mpi/strategy_testing.h"

namespace mirror::testing {
namespace {

using dist::Communicator;
using dist::MirroredStrategy;
using dist::ReduceOp;
using dist::StrategyOptions;
using dist::Work;

/// What the stand-in watchdogs share: from `abort_step` on, every replica's bucket all-reduces
/// complete "successfully" as far as wait() can tell, but with their buffer overwritten (the
/// partial sums an abort leaves), and every communicator reports the abort from settle().
struct AbortPlan {
  std::int64_t abort_step = -1;  // the strategy step whose buckets are aborted
  std::atomic<std::int64_t> step{0};
  std::atomic<int> settled_failures{0};
};

class AbortedAfterWaitComm final : public Communicator {
 public:
  AbortedAfterWaitComm(std::unique_ptr<Communicator> inner, AbortPlan& plan)
      : inner_(std::move(inner)), plan_(plan) {
    timeout_ = inner_->timeout();
  }
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string name() const override { return inner_->name(); }
  std::shared_ptr<Work> all_reduce(const Tensor& in, Tensor& out, ReduceOp op,
                                   const std::string& tag) override {
    auto work = inner_->all_reduce(in, out, op, tag);
    const bool bucket = tag.find(" bucket ") != std::string::npos;
    if (!bucket || tag.rfind("step " + std::to_string(plan_.abort_step) + " ", 0) != 0) {
      return work;
    }
    return std::make_shared<AbortedWork>(std::move(work), out, *this);
  }
  std::shared_ptr<Work> broadcast(Tensor& t, int root, const std::string& tag) override {
    return inner_->broadcast(t, root, tag);
  }
  std::shared_ptr<Work> all_gather(const Tensor& in, Tensor& out, const std::string& tag) override {
    return inner_->all_gather(in, out, tag);
  }
  void barrier() override { inner_->barrier(); }
  void settle() override {
    inner_->settle();
    if (aborted_) {
      ++plan_.settled_failures;
      throw CommError("NCCL communicator on cuda:" + std::to_string(rank()) +
                      " aborted: all_reduce did not complete within the communicator's timeout");
    }
  }

 private:
  /// wait() returns normally; the abort happened behind it.
  class AbortedWork final : public Work {
   public:
    AbortedWork(std::shared_ptr<Work> inner, Tensor out, AbortedAfterWaitComm& comm)
        : inner_(std::move(inner)), out_(std::move(out)), comm_(comm) {}
    void wait() override {
      inner_->wait();
      ops::fill(out_, 1.0e6);  // the partial sums the aborted kernels left
      comm_.aborted_ = true;
    }
    bool done() override { return inner_->done(); }

   private:
    std::shared_ptr<Work> inner_;
    Tensor out_;
    AbortedAfterWaitComm& comm_;
  };

  std::unique_ptr<Communicator> inner_;
  AbortPlan& plan_;
  bool aborted_ = false;
};

StrategyOptions aborting_options(AbortPlan& plan) {
  StrategyOptions o;
  o.seed = 5;
  o.divergence_check_every = 0;  // the check's own collectives are not what is tested
  o.buckets = {1, 1};            // several buckets, launched during backward
  o.wrap_communicator = [&plan](std::unique_ptr<Communicator> c, int) {
    return std::make_unique<AbortedAfterWaitComm>(std::move(c), plan);
  };
  return o;
}

/// Every parameter and buffer of every local replica, and its optimizer's state and step count.
std::vector<std::uint64_t> state_of(MirroredStrategy& s) {
  std::vector<std::uint64_t> out;
  for (int i = 0; i < s.local_replicas(); ++i) {
    out.push_back(s.weights_fingerprint(i));
    for (const auto& [name, t] : s.optimizer(i).state()) out.push_back(ops::fingerprint(t));
    out.push_back(static_cast<std::uint64_t>(s.optimizer(i).steps()));
  }
  return out;
}

TEST(StrategyFailedStep, AnAbortAfterWaitReturnedRaisesCommErrorAndAppliesNothing) {
  AbortPlan plan;
  plan.abort_step = 1;
  MirroredStrategy s(
      cpu_devices(0, 2), [](Device d) { return small_cnn(d, 100); }, adam, aborting_options(plan));
  const std::int64_t per = 3, global = per * s.world_replicas();
  auto step = [&](std::int64_t k) {
    auto batches = local_batches(global_batch(ModelKind::kCnn, k, global, global), s, per);
    return s.train_step(batches, 0.01);
  };
  step(0);  // a normal step
  const auto before = state_of(s);
  const std::int64_t steps_before = s.steps();
  EXPECT_THROW(step(1), CommError);
  EXPECT_EQ(plan.settled_failures.load(), s.local_replicas()) << "every replica raises";
  EXPECT_EQ(state_of(s), before) << "a replica applied the aborted step's partial sums";
  EXPECT_EQ(s.steps(), steps_before);
  for (int i = 0; i < s.local_replicas(); ++i) {
    for (nn::Parameter* p : s.model(i).parameters()) {
      const auto v = p->value.to_vector<float>();
      for (float x : v) ASSERT_LT(std::fabs(x), 1.0e5f) << p->name << " on replica " << i;
    }
  }
  EXPECT_THROW(step(2), CommError) << "a failed communicator stays failed";
  EXPECT_EQ(state_of(s), before);
}

TEST(StrategyFailedStep, AHealthyRunIsUnchangedBySettling) {
  // The same wrapper with no abort planned: settle() passes and the replicas train as usual.
  AbortPlan plan;
  MirroredStrategy s(
      cpu_devices(0, 2), [](Device d) { return small_cnn(d, 100); }, adam, aborting_options(plan));
  const std::int64_t per = 3, global = per * s.world_replicas();
  for (std::int64_t k = 0; k < 3; ++k) {
    auto batches = local_batches(global_batch(ModelKind::kCnn, k, global, global), s, per);
    EXPECT_NO_THROW(s.train_step(batches, 0.01));
  }
  EXPECT_EQ(s.steps(), 3);
  EXPECT_EQ(s.weights_fingerprint(1), s.weights_fingerprint(0));
  EXPECT_EQ(plan.settled_failures.load(), 0);
}

}  // namespace
}  // namespace mirror::testing
