// StagedCommunicator (distributed/staged_communicator.h, Note [Staged collectives]) over the
// in-process group, with CPU tensors and ordinary host buffers standing in for a GPU's tensors and
// pinned memory: the staging logic of `--comm mpi` with no GPU. A recording buffer checks the
// order of a collective's steps (device -> host copy at launch, the staging thread's wait for it,
// the host collective, the copy back in wait()), the pool checks that the steady state allocates
// nothing, and the strategy runs end to end over staged communicators.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "distributed/staged_communicator.h"
#include "mirror/distributed/inproc_communicator.h"
#include "mirror/distributed/strategy.h"
#include "mpi/strategy_testing.h"

namespace mirror::dist {
namespace {

/// `n` in-process replicas, each staged on cpu:i.
std::vector<std::unique_ptr<Communicator>> staged_group(
    int n, StagedCommunicator::BufferFactory factory = make_host_buffer) {
  auto inner = make_inproc_group(n, nullptr, 0, n);
  std::vector<std::unique_ptr<Communicator>> out;
  for (int i = 0; i < n; ++i) {
    out.push_back(std::make_unique<StagedCommunicator>(
        std::move(inner[static_cast<std::size_t>(i)]), Device::cpu(i), factory));
  }
  return out;
}

/// Runs fn(i) on one thread per replica (each replica's collectives come from its own thread).
void on_replicas(int n, const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) threads.emplace_back(fn, i);
  for (auto& t : threads) t.join();
}

TEST(StagedComm, CollectivesGiveTheHostCommunicatorsResults) {
  constexpr int kN = 3;
  auto comms = staged_group(kN);
  EXPECT_EQ(comms[1]->name(), "inproc+staged");
  EXPECT_EQ(comms[2]->rank(), 2);
  EXPECT_EQ(comms[2]->size(), kN);
  on_replicas(kN, [&](int i) {
    Communicator& c = *comms[static_cast<std::size_t>(i)];
    const Device d = Device::cpu(i);
    Tensor sum = Tensor::from_vector<float>({1.0f * (i + 1), 10.0f}, {2}).to(d);
    Tensor avg = Tensor::from_vector<double>({2.0 * i}, {1}).to(d);
    Tensor ids = Tensor::from_vector<std::int64_t>({i + 1}, {1}).to(d);
    Tensor bcast = Tensor::from_vector<float>({i == 1 ? 7.0f : -1.0f}, {1}).to(d);
    Tensor mine = Tensor::from_vector<std::int32_t>({i, 100 + i}, {2}).to(d);
    Tensor all = Tensor::zeros({2 * kN}, DType::kInt32, d);
    // Issued back to back, waited afterwards: they run in issue order on the staging thread.
    auto w1 = c.all_reduce(sum, sum, ReduceOp::kSum, "sum");
    auto w2 = c.all_reduce(avg, avg, ReduceOp::kAvg, "avg");
    auto w3 = c.all_reduce(ids, ids, ReduceOp::kSum, "ids");
    auto w4 = c.broadcast(bcast, 1, "bcast");
    auto w5 = c.all_gather(mine, all, "gather");
    for (auto* w : {&w1, &w2, &w3, &w4, &w5}) (*w)->wait();
    c.barrier();
    c.settle();
    EXPECT_EQ(sum.to_vector<float>(), (std::vector<float>{6.0f, 30.0f}));
    EXPECT_EQ(avg.to_vector<double>(), std::vector<double>{2.0});
    EXPECT_EQ(ids.to_vector<std::int64_t>(), std::vector<std::int64_t>{6});
    EXPECT_EQ(bcast.to_vector<float>(), std::vector<float>{7.0f});
    EXPECT_EQ(all.to_vector<std::int32_t>(), (std::vector<std::int32_t>{0, 100, 1, 101, 2, 102}));
  });
}

TEST(StagedComm, LaunchReturnsBeforeTheHostCollectiveCompletes) {
  auto comms = staged_group(2);
  Tensor a = Tensor::from_vector<float>({1.0f}, {1}).to(Device::cpu(0));
  // Replica 1 has not issued its part: the host collective cannot complete, yet launching does.
  auto work = comms[0]->all_reduce(a, a, ReduceOp::kSum, "early");
  EXPECT_FALSE(work->done());
  std::thread other([&] {
    Tensor b = Tensor::from_vector<float>({2.0f}, {1}).to(Device::cpu(1));
    comms[1]->all_reduce(b, b, ReduceOp::kSum, "early")->wait();
    EXPECT_EQ(b.to_vector<float>(), std::vector<float>{3.0f});
  });
  work->wait();
  other.join();
  EXPECT_EQ(a.to_vector<float>(), std::vector<float>{3.0f});
}

/// A host buffer that logs its transfers into a shared log.
class RecordingBuffer final : public HostBuffer {
 public:
  RecordingBuffer(std::unique_ptr<HostBuffer> inner, std::vector<std::string>& log,
                  std::mutex& mutex)
      : inner_(std::move(inner)), log_(log), mutex_(mutex) {}
  void* data() const override { return inner_->data(); }
  std::size_t bytes() const override { return inner_->bytes(); }
  bool pinned() const override { return inner_->pinned(); }
  void copy_to(Tensor& dst) override {
    note("copy back to the device");
    inner_->copy_to(dst);
  }
  void copy_from(const Tensor& src) override {
    note("copy from the device");
    inner_->copy_from(src);
  }
  bool ready() override { return inner_->ready(); }
  void wait() override {
    note("wait for the copy");
    inner_->wait();
  }

 private:
  void note(const std::string& what) {
    std::lock_guard<std::mutex> lock(mutex_);
    log_.push_back(what);
  }
  std::unique_ptr<HostBuffer> inner_;
  std::vector<std::string>& log_;
  std::mutex& mutex_;
};

/// A host communicator that logs the collectives it is given.
class RecordingHost final : public Communicator {
 public:
  RecordingHost(std::unique_ptr<Communicator> inner, std::vector<std::string>& log,
                std::mutex& mutex)
      : inner_(std::move(inner)), log_(log), mutex_(mutex) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string name() const override { return inner_->name(); }
  std::shared_ptr<Work> all_reduce(const Tensor& in, Tensor& out, ReduceOp op,
                                   const std::string& tag) override {
    note("host all_reduce " + tag + (in.device().is_cpu() ? " on the host" : " ON THE DEVICE"));
    return inner_->all_reduce(in, out, op, tag);
  }
  std::shared_ptr<Work> broadcast(Tensor& t, int root, const std::string& tag) override {
    return inner_->broadcast(t, root, tag);
  }
  std::shared_ptr<Work> all_gather(const Tensor& in, Tensor& out, const std::string& tag) override {
    return inner_->all_gather(in, out, tag);
  }
  void barrier() override { inner_->barrier(); }

 private:
  void note(const std::string& what) {
    std::lock_guard<std::mutex> lock(mutex_);
    log_.push_back(what);
  }
  std::unique_ptr<Communicator> inner_;
  std::vector<std::string>& log_;
  std::mutex& mutex_;
};

TEST(StagedComm, EachCollectiveCopiesOutWaitsReducesOnTheHostThenCopiesBack) {
  std::vector<std::string> log;
  std::mutex mutex;
  auto inner = make_inproc_group(1, nullptr, 0, 1);
  StagedCommunicator c(std::make_unique<RecordingHost>(std::move(inner[0]), log, mutex),
                       Device::cpu(0), [&](std::size_t bytes, Device d) {
                         return std::make_unique<RecordingBuffer>(make_host_buffer(bytes, d), log,
                                                                  mutex);
                       });
  Tensor t = Tensor::from_vector<float>({4.0f, 5.0f}, {2});
  auto work = c.all_reduce(t, t, ReduceOp::kSum, "bucket 0");
  work->wait();
  EXPECT_EQ(log, (std::vector<std::string>{"copy from the device", "wait for the copy",
                                           "host all_reduce bucket 0 on the host",
                                           "copy back to the device"}));
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{4.0f, 5.0f}));
}

TEST(StagedComm, TheSteadyStateReusesItsHostBuffers) {
  auto comms = staged_group(2);
  auto* staged = static_cast<StagedCommunicator*>(comms[0].get());
  on_replicas(2, [&](int i) {
    Communicator& c = *comms[static_cast<std::size_t>(i)];
    for (int step = 0; step < 5; ++step) {
      // A step: two buckets in flight at once, then the metrics.
      Tensor b0 = Tensor::zeros({100}, DType::kFloat32, Device::cpu(i));
      Tensor b1 = Tensor::zeros({300}, DType::kFloat32, Device::cpu(i));
      Tensor m = Tensor::zeros({7}, DType::kFloat64, Device::cpu(i));
      auto w0 = c.all_reduce(b0, b0, ReduceOp::kSum, "b0");
      auto w1 = c.all_reduce(b1, b1, ReduceOp::kSum, "b1");
      auto wm = c.all_reduce(m, m, ReduceOp::kSum, "m");
      w0->wait();
      w1->wait();
      wm->wait();
    }
  });
  EXPECT_EQ(staged->buffers_made(), 3) << "one buffer per distinct tensor in flight";
}

TEST(StagedComm, AHostFailureReachesWaitAndSettle) {
  auto comms = staged_group(2);
  on_replicas(2, [&](int i) {
    Communicator& c = *comms[static_cast<std::size_t>(i)];
    // The replicas disagree on the element count: the in-process group refuses the collective.
    Tensor t = Tensor::zeros({i == 0 ? 4 : 5}, DType::kFloat32, Device::cpu(i));
    EXPECT_THROW(c.all_reduce(t, t, ReduceOp::kSum, "mismatch")->wait(), CommError);
    EXPECT_THROW(c.settle(), CommError);
    EXPECT_THROW(c.all_reduce(t, t, ReduceOp::kSum, "later"), CommError) << "stays failed";
  });
}

TEST(StagedComm, ArgumentsAreCheckedAtLaunch) {
  auto comms = staged_group(1);
  Tensor a = Tensor::zeros({3}, DType::kFloat32), b = Tensor::zeros({4}, DType::kFloat32);
  EXPECT_THROW(comms[0]->all_reduce(a, b, ReduceOp::kSum), InvalidArgument);
  Tensor ints = Tensor::zeros({3}, DType::kInt32);
  EXPECT_THROW(comms[0]->all_reduce(ints, ints, ReduceOp::kAvg), InvalidArgument);
  EXPECT_THROW(parse_device_comm("gloo"), InvalidArgument);
  EXPECT_EQ(parse_device_comm("mpi"), DeviceComm::kMpi);
  EXPECT_STREQ(device_comm_name(parse_device_comm("nccl")), "nccl");
}

// The whole strategy over staged communicators trains exactly like over the plain in-process
// group (the staging moves bytes, never changes them).
TEST(StagedComm, AStrategyOverStagedCommunicatorsTrainsBitForBitLikeWithout) {
  using namespace mirror::testing;
  auto run = [](bool staged) {
    StrategyOptions o;
    o.seed = 11;
    o.buckets = {1, 1};
    o.divergence_check_every = 1;
    if (staged) {
      o.wrap_communicator = [](std::unique_ptr<Communicator> c,
                               int i) -> std::unique_ptr<Communicator> {
        return std::make_unique<StagedCommunicator>(std::move(c), Device::cpu(i));
      };
    }
    MirroredStrategy s(
        cpu_devices(0, 2), [](Device d) { return small_resnet(d, 100); }, adam, o);
    const std::int64_t per = 3, global = per * s.world_replicas();
    for (std::int64_t k = 0; k < 3; ++k) {
      auto batches = local_batches(global_batch(ModelKind::kCnn, k, global, global - 1), s, per);
      s.train_step(batches, 0.01);
    }
    return s.weights_fingerprint(0);
  };
  EXPECT_EQ(run(true), run(false));
}

}  // namespace
}  // namespace mirror::dist
