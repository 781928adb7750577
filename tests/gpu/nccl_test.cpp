// NCCL communicators in one process over every visible GPU (replicas 0..k-1, no MPI needed),
// with closed-form results. Before each collective a kernel sleeps on the compute stream and
// only then writes the input, so a collective that does not wait for the compute stream reads
// stale zeros and the test fails; a sleep on the communication stream before a collective
// checks that Work::wait() orders the compute stream after it. Without a usable GPU every
// test skips with discover_gpus()'s reason.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "distributed/device_collectives.h"
#include "gpu/device_sleep.h"
#include "gpu/gpu_test_util.h"
#include "mirror/ops.h"

namespace mirror {
namespace {

using dist::CollectiveGroup;
using dist::NcclBootstrap;
using std::chrono::microseconds;
using testing::device_sleep;
constexpr microseconds kSleep{100000};  // 100 ms: far longer than launching the collective

class Nccl : public testing::GpuTest {
 protected:
  void SetUp() override {
    GpuTest::SetUp();
    if (IsSkipped()) return;
    for (const GpuDevice& d : discover_gpus().devices) devices_.push_back(Device::cuda(d.index));
    NcclBootstrap boot;
    boot.world_size = static_cast<int>(devices_.size());
    comms_ = make_nccl_communicators(devices_, boot);
  }
  int k() const { return static_cast<int>(devices_.size()); }
  /// A tensor on device i that holds `value` only after a kSleep on the compute stream.
  Tensor late_fill(int i, std::int64_t n, double value) {
    Tensor t = Tensor::zeros({n}, DType::kFloat32, devices_[i]);
    device_sleep(devices_[i], kSleep);
    ops::fill(t, value);
    return t;
  }
  std::vector<Device> devices_;
  std::vector<std::unique_ptr<dist::Communicator>> comms_;
};

TEST_F(Nccl, RanksAndNames) {
  ASSERT_EQ(static_cast<int>(comms_.size()), k());
  for (int i = 0; i < k(); ++i) {
    EXPECT_EQ(comms_[i]->rank(), i);
    EXPECT_EQ(comms_[i]->size(), k());
    EXPECT_EQ(comms_[i]->name(), "nccl");
  }
}

// Out of place, so a collective that ran too early leaves zeros even with a single GPU.
TEST_F(Nccl, AllReduceSumWaitsForComputeStream) {
  std::vector<Tensor> in, out;
  for (int i = 0; i < k(); ++i) {
    in.push_back(late_fill(i, 1000, i + 1));
    out.push_back(Tensor::zeros({1000}, DType::kFloat32, devices_[i]));
  }
  std::vector<std::shared_ptr<dist::Work>> work;
  {
    CollectiveGroup group;  // one thread drives every GPU
    for (int i = 0; i < k(); ++i) {
      work.push_back(comms_[i]->all_reduce(in[i], out[i], dist::ReduceOp::kSum, "sum"));
    }
  }
  for (auto& w : work) w->wait();
  const float expected = k() * (k() + 1) / 2.0f;
  for (int i = 0; i < k(); ++i) {
    EXPECT_EQ(out[i].to_vector<float>(), std::vector<float>(1000, expected)) << "replica " << i;
    EXPECT_EQ(in[i].to_vector<float>(), std::vector<float>(1000, i + 1.0f)) << "input kept";
  }
}

TEST_F(Nccl, AllReduceAvgInPlace) {
  std::vector<Tensor> t;
  for (int i = 0; i < k(); ++i) t.push_back(late_fill(i, 257, 2.0 * (i + 1)));
  std::vector<std::shared_ptr<dist::Work>> work;
  {
    CollectiveGroup group;
    for (int i = 0; i < k(); ++i)
      work.push_back(comms_[i]->all_reduce(t[i], t[i], dist::ReduceOp::kAvg));
  }
  for (auto& w : work) w->wait();
  for (int i = 0; i < k(); ++i) {
    EXPECT_EQ(t[i].to_vector<float>(), std::vector<float>(257, static_cast<float>(k() + 1)));
  }
}

TEST_F(Nccl, WaitOrdersComputeAfterCommunication) {
  std::vector<Tensor> in, out;
  for (int i = 0; i < k(); ++i) {
    in.push_back(late_fill(i, 64, 1.0));
    out.push_back(Tensor::zeros({64}, DType::kFloat32, devices_[i]));
  }
  std::vector<std::shared_ptr<dist::Work>> work;
  {
    CollectiveGroup group;
    for (int i = 0; i < k(); ++i) {
      device_sleep(devices_[i], kSleep, /*on_comm_stream=*/true);  // delays the collective
      work.push_back(comms_[i]->all_reduce(in[i], out[i], dist::ReduceOp::kSum, "ordered"));
    }
  }
  for (int i = 0; i < k(); ++i) {
    work[i]->wait();  // the read below runs on the compute stream: it must see the result
    EXPECT_EQ(out[i].to_vector<float>(), std::vector<float>(64, static_cast<float>(k())));
    EXPECT_TRUE(work[i]->done());
  }
}

TEST_F(Nccl, BarrierFromOneThreadPerGpu) {
  // barrier() blocks the host, so each replica calls it from its own thread (no group).
  std::vector<std::thread> threads;
  std::vector<int> ok(k(), 0);
  for (int i = 0; i < k(); ++i) {
    threads.emplace_back([&, i] {
      try {
        comms_[i]->barrier();
        ok[i] = 1;
      } catch (const std::exception& e) {
        ADD_FAILURE() << "replica " << i << ": " << e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok, std::vector<int>(k(), 1));
}

TEST_F(Nccl, BroadcastAndAllGather) {
  std::vector<Tensor> b, in, out;
  for (int i = 0; i < k(); ++i) {
    b.push_back(late_fill(i, 33, 10.0 + i));
    in.push_back(late_fill(i, 5, i));
    out.push_back(Tensor::zeros({5 * k()}, DType::kFloat32, devices_[i]));
  }
  std::vector<std::shared_ptr<dist::Work>> work;
  {
    CollectiveGroup group;
    for (int i = 0; i < k(); ++i) work.push_back(comms_[i]->broadcast(b[i], k() - 1, "bcast"));
    for (int i = 0; i < k(); ++i) work.push_back(comms_[i]->all_gather(in[i], out[i], "gather"));
  }
  for (auto& w : work) w->wait();
  std::vector<float> gathered;
  for (int j = 0; j < k(); ++j) gathered.insert(gathered.end(), 5, static_cast<float>(j));
  for (int i = 0; i < k(); ++i) {
    EXPECT_EQ(b[i].to_vector<float>(), std::vector<float>(33, 10.0f + k() - 1));
    EXPECT_EQ(out[i].to_vector<float>(), gathered);
  }
}

// Note [NCCL express lane]: a small collective on the express lane completes while the main
// lane is still busy (here: asleep before a bucket), instead of queueing behind it.
TEST_F(Nccl, TheExpressLaneDoesNotQueueBehindTheMainLane) {
  std::vector<Tensor> big, small;
  std::vector<std::shared_ptr<dist::Work>> slow, fast;
  for (int i = 0; i < k(); ++i) {
    big.push_back(Tensor::zeros({4096}, DType::kFloat32, devices_[i]));
    small.push_back(Tensor::zeros({7}, DType::kFloat64, devices_[i]));
  }
  {
    CollectiveGroup group;
    for (int i = 0; i < k(); ++i) {
      device_sleep(devices_[i], 10 * kSleep, /*on_comm_stream=*/true);  // the main lane is busy
      slow.push_back(comms_[i]->all_reduce(big[i], big[i], dist::ReduceOp::kSum, "bucket 0"));
    }
  }
  {
    CollectiveGroup group;
    for (int i = 0; i < k(); ++i) {
      fast.push_back(
          comms_[i]->express().all_reduce(small[i], small[i], dist::ReduceOp::kSum, "bn stats"));
    }
  }
  for (int i = 0; i < k(); ++i) {
    const auto start = std::chrono::steady_clock::now();
    while (!fast[i]->done() && std::chrono::steady_clock::now() - start < 10 * kSleep) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    EXPECT_TRUE(fast[i]->done()) << "replica " << i << ": the express lane waited";
    EXPECT_FALSE(slow[i]->done()) << "replica " << i << ": the main lane did not sleep";
  }
  // settle() waits on the host for both lanes.
  for (int i = 0; i < k(); ++i) comms_[i]->settle();
  for (int i = 0; i < k(); ++i) EXPECT_TRUE(slow[i]->done()) << i;
  for (auto& w : slow) w->wait();
  for (auto& w : fast) w->wait();
}

TEST_F(Nccl, RejectsTensorsOnAnotherDevice) {
  Tensor cpu = Tensor::zeros({4});
  EXPECT_THROW(comms_[0]->all_reduce(cpu, cpu, dist::ReduceOp::kSum), InvalidArgument);
}

TEST_F(Nccl, StalledCollectiveIsAbortedWithItsTag) {
  if (k() < 2)
    GTEST_SKIP() << "needs 2 GPUs to stall a collective (this process sees " << k() << ")";
  comms_[0]->set_timeout(std::chrono::milliseconds(500));
  Tensor t = Tensor::zeros({16}, DType::kFloat32, devices_[0]);
  // Only replica 0 joins: the collective can never complete; the watchdog must abort it.
  auto work = comms_[0]->all_reduce(t, t, dist::ReduceOp::kSum, "step 7 bucket 2");
  const auto start = std::chrono::steady_clock::now();
  bool threw = false;
  while (std::chrono::steady_clock::now() - start < std::chrono::seconds(30)) {
    try {
      if (work->done()) break;
    } catch (const CommError& e) {
      threw = true;
      EXPECT_NE(std::string(e.what()).find("step 7 bucket 2"), std::string::npos) << e.what();
      break;
    }
  }
  EXPECT_TRUE(threw) << "the stalled collective was not aborted";
  EXPECT_THROW(comms_[0]->all_reduce(t, t, dist::ReduceOp::kSum), CommError);
  // Note [NCCL clique]: the siblings were aborted in the same group, naming the first.
  for (int i = 1; i < k(); ++i) {
    Tensor u = Tensor::zeros({16}, DType::kFloat32, devices_[i]);
    try {
      comms_[i]->all_reduce(u, u, dist::ReduceOp::kSum);
      ADD_FAILURE() << "replica " << i << " was not aborted with replica 0";
    } catch (const CommError& e) {
      EXPECT_NE(std::string(e.what()).find("aborted together with cuda:"), std::string::npos)
          << e.what();
    }
  }
  comms_.clear();  // the clique is already aborted: tearing it down must not hang
}

// Note [Grouped teardown]: the communicators of one thread are finalized in one group. Were
// they destroyed one by one, the first ncclCommFinalize would wait for its siblings forever
// (ctest's timeout reports that hang). A second clique made afterwards must work.
TEST_F(Nccl, TeardownOfEveryCommunicatorTogetherReturnsAndAllowsANewClique) {
  for (int round = 0; round < 2; ++round) {
    std::vector<Tensor> t;
    for (int i = 0; i < k(); ++i) t.push_back(late_fill(i, 8, 1.0));
    std::vector<std::shared_ptr<dist::Work>> work;
    {
      CollectiveGroup group;
      for (int i = 0; i < k(); ++i)
        work.push_back(comms_[i]->all_reduce(t[i], t[i], dist::ReduceOp::kSum));
    }
    for (auto& w : work) w->wait();
    for (int i = 0; i < k(); ++i)
      EXPECT_EQ(t[i].to_vector<float>(), std::vector<float>(8, static_cast<float>(k())));
    while (!comms_.empty()) comms_.pop_back();  // the last one tears the clique down
    for (auto& w : work) EXPECT_TRUE(w->done()) << "a drained Work stays usable";
    NcclBootstrap boot;
    boot.world_size = k();
    comms_ = make_nccl_communicators(devices_, boot);
  }
}

}  // namespace
}  // namespace mirror
