// The in-process communicator group without MPI: closed-form collectives among replica threads,
// fixed reduction order (bitwise-identical replicas), FIFO order, mismatch and timeout errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "comm_test_util.h"
#include "mirror/distributed/inproc_communicator.h"
#include "mirror/error.h"

namespace mirror::dist {
namespace {

using testing_util::kReducible;
using testing_util::pattern;
using testing_util::pattern_sum;
using testing_util::period_for;
using testing_util::run_replicas;
using testing_util::tensor_of;
using testing_util::values_of;

constexpr int kReplicas = 3;

TEST(InProcGroup, Identity) {
  auto comms = make_inproc_group(kReplicas, nullptr, 0, kReplicas);
  ASSERT_EQ(comms.size(), 3u);
  for (int r = 0; r < kReplicas; ++r) {
    EXPECT_EQ(comms[r]->rank(), r);
    EXPECT_EQ(comms[r]->size(), kReplicas);
    EXPECT_EQ(comms[r]->name(), "inproc");
  }
}

TEST(InProcGroup, AllReduceSumEveryDtypeSizeAndPlacement) {
  auto comms = make_inproc_group(kReplicas, nullptr, 0, kReplicas);
  for (DType dtype : kReducible) {
    for (std::int64_t n : {0, 1, 1001}) {
      for (bool in_place : {true, false}) {
        const int period = period_for(dtype);
        std::vector<Tensor> outs(kReplicas);
        run_replicas(kReplicas, [&](int r) {
          Tensor in = tensor_of(dtype, pattern(r, n, period));
          Tensor out = in_place ? in : Tensor::zeros({n}, dtype);
          comms[r]->all_reduce(in, out, ReduceOp::kSum, "sum")->wait();
          outs[r] = out;
        });
        for (int r = 0; r < kReplicas; ++r)
          EXPECT_EQ(values_of(outs[r]), pattern_sum(kReplicas, n, period))
              << dtype_name(dtype) << " n=" << n << " in_place=" << in_place << " replica " << r;
      }
    }
  }
}

TEST(InProcGroup, AllReduceAverage) {
  auto comms = make_inproc_group(kReplicas, nullptr, 0, kReplicas);
  for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16}) {
    const std::int64_t n = 257;
    const int period = period_for(dtype);
    std::vector<Tensor> outs(kReplicas);
    run_replicas(kReplicas, [&](int r) {
      Tensor t = tensor_of(dtype, pattern(r, n, period));
      comms[r]->all_reduce(t, t, ReduceOp::kAvg, "avg")->wait();
      outs[r] = t;
    });
    auto expected = pattern_sum(kReplicas, n, period);
    for (double& v : expected) v /= kReplicas;  // 1 + (i % period): exact
    for (int r = 0; r < kReplicas; ++r)
      EXPECT_EQ(values_of(outs[r]), expected) << dtype_name(dtype);
  }
}

TEST(InProcGroup, InexactSumsAreBitwiseIdenticalAndInReplicaOrder) {
  auto comms = make_inproc_group(kReplicas, nullptr, 0, kReplicas);
  const std::int64_t n = 4099;
  std::vector<std::vector<float>> inputs(kReplicas, std::vector<float>(n));
  for (int r = 0; r < kReplicas; ++r)
    for (std::int64_t i = 0; i < n; ++i) inputs[r][i] = std::sin(0.37f * (r * n + i)) * 1e3f;
  std::vector<Tensor> outs(kReplicas);
  run_replicas(kReplicas, [&](int r) {
    Tensor t = Tensor::from_vector(inputs[r], {n});
    comms[r]->all_reduce(t, t, ReduceOp::kSum)->wait();
    outs[r] = t;
  });
  for (std::int64_t i = 0; i < n; ++i) {
    const float expected = (inputs[0][i] + inputs[1][i]) + inputs[2][i];
    ASSERT_EQ(outs[0].data<float>()[i], expected) << "element " << i;
  }
  for (int r = 1; r < kReplicas; ++r)
    EXPECT_EQ(std::memcmp(outs[r].raw_data(), outs[0].raw_data(), outs[0].nbytes()), 0);
}

TEST(InProcGroup, BroadcastFromEveryRoot) {
  auto comms = make_inproc_group(kReplicas, nullptr, 0, kReplicas);
  for (int root = 0; root < kReplicas; ++root) {
    std::vector<Tensor> ts(kReplicas);
    run_replicas(kReplicas, [&](int r) {
      std::vector<double> v(777);
      for (std::size_t i = 0; i < v.size(); ++i) v[i] = 1000.0 * r + i;
      ts[r] = tensor_of(DType::kInt64, v);
      comms[r]->broadcast(ts[r], root, "bcast")->wait();
    });
    for (int r = 0; r < kReplicas; ++r)
      for (int i = 0; i < 777; ++i) ASSERT_EQ(ts[r].data<std::int64_t>()[i], 1000 * root + i);
  }
}

TEST(InProcGroup, AllGather) {
  auto comms = make_inproc_group(kReplicas, nullptr, 0, kReplicas);
  for (std::int64_t n : {0, 1, 1001}) {
    std::vector<Tensor> outs(kReplicas);
    run_replicas(kReplicas, [&](int r) {
      std::vector<double> v(static_cast<std::size_t>(n));
      for (std::int64_t i = 0; i < n; ++i) v[i] = 100.0 * r + i;
      Tensor in = tensor_of(DType::kFloat32, v);
      outs[r] = Tensor::zeros({kReplicas * n}, DType::kFloat32);
      comms[r]->all_gather(in, outs[r], "gather")->wait();
    });
    for (int r = 0; r < kReplicas; ++r)
      for (int src = 0; src < kReplicas; ++src)
        for (std::int64_t i = 0; i < n; ++i)
          ASSERT_EQ(outs[r].data<float>()[src * n + i], 100.0f * src + i);
  }
}

TEST(InProcGroup, SeveralOperationsInFlightRunInOrder) {
  auto comms = make_inproc_group(kReplicas, nullptr, 0, kReplicas);
  std::vector<std::vector<Tensor>> results(kReplicas);
  run_replicas(kReplicas, [&](int r) {
    Tensor t = tensor_of(DType::kFloat64, pattern(r, 64, 13));
    Tensor b = tensor_of(DType::kFloat32, std::vector<double>(8, r + 1.0));
    std::vector<std::shared_ptr<Work>> works;
    works.push_back(comms[r]->all_reduce(t, t, ReduceOp::kSum, "first"));   // sum
    works.push_back(comms[r]->all_reduce(t, t, ReduceOp::kSum, "second"));  // 3 x sum
    works.push_back(comms[r]->broadcast(b, 2, "bcast"));
    for (auto it = works.rbegin(); it != works.rend(); ++it) (*it)->wait();
    for (auto& w : works) EXPECT_TRUE(w->done());
    results[r] = {t, b};
  });
  auto expected = pattern_sum(kReplicas, 64, 13);
  for (double& v : expected) v *= kReplicas;
  for (int r = 0; r < kReplicas; ++r) {
    EXPECT_EQ(values_of(results[r][0]), expected);
    EXPECT_EQ(values_of(results[r][1]), std::vector<double>(8, 3.0));
  }
}

TEST(InProcGroup, BarrierCompletesEarlierWork) {
  auto comms = make_inproc_group(kReplicas, nullptr, 0, kReplicas);
  run_replicas(kReplicas, [&](int r) {
    Tensor t = tensor_of(DType::kFloat32, pattern(r, 100, 13));
    auto work = comms[r]->all_reduce(t, t, ReduceOp::kSum);
    comms[r]->barrier();
    EXPECT_TRUE(work->done());
    EXPECT_EQ(values_of(t), pattern_sum(kReplicas, 100, 13));
  });
}

TEST(InProcGroup, MismatchedCollectivesFailOnEveryReplica) {
  auto comms = make_inproc_group(2, nullptr, 0, 2);
  std::vector<std::string> errors(2);
  run_replicas(2, [&](int r) {
    Tensor t = Tensor::zeros({4});
    try {
      if (r == 0)
        comms[r]->all_reduce(t, t, ReduceOp::kSum, "grads")->wait();
      else
        comms[r]->broadcast(t, 0, "weights")->wait();
    } catch (const CommError& e) {
      errors[r] = e.what();
    }
  });
  for (const auto& e : errors) {
    EXPECT_NE(e.find("mismatch"), std::string::npos) << e;
    EXPECT_NE(e.find("all_reduce float32[4] sum 'grads'"), std::string::npos) << e;
    EXPECT_NE(e.find("broadcast float32[4] root 0 'weights'"), std::string::npos) << e;
  }
  Tensor t = Tensor::zeros({4});
  EXPECT_THROW(comms[0]->all_reduce(t, t, ReduceOp::kSum), CommError) << "group stays unusable";
}

TEST(InProcGroup, MissingReplicaTimesOutWithAMessage) {
  auto comms = make_inproc_group(kReplicas, nullptr, 0, kReplicas);
  comms[0]->set_timeout(std::chrono::milliseconds(200));
  Tensor t = Tensor::zeros({16});
  auto work = comms[0]->all_reduce(t, t, ReduceOp::kSum, "step 3 bucket 1");
  try {
    work->wait();
    FAIL() << "expected a timeout";
  } catch (const CommError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("collective all_reduce 'step 3 bucket 1' did not complete within 0.2s"),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("arrived [0], missing [1 2]"), std::string::npos) << msg;
  }
  EXPECT_FALSE(work->done());
  EXPECT_THROW(comms[1]->all_reduce(t, t, ReduceOp::kSum), CommError);
}

TEST(InProcGroup, BadArgumentsAreRejectedWhenIssued) {
  auto comms = make_inproc_group(2, nullptr, 0, 2);
  Tensor f = Tensor::zeros({4}), d = Tensor::zeros({4}, DType::kFloat64);
  Tensor i = Tensor::zeros({4}, DType::kInt32), u = Tensor::zeros({4}, DType::kUInt8);
  Tensor small = Tensor::zeros({3});
  EXPECT_THROW(comms[0]->all_reduce(f, d, ReduceOp::kSum), InvalidArgument);
  EXPECT_THROW(comms[0]->all_reduce(f, small, ReduceOp::kSum), InvalidArgument);
  EXPECT_THROW(comms[0]->all_reduce(i, i, ReduceOp::kAvg), InvalidArgument);
  EXPECT_THROW(comms[0]->all_reduce(u, u, ReduceOp::kSum), InvalidArgument);
  EXPECT_THROW(comms[0]->all_reduce(Tensor(), f, ReduceOp::kSum), InvalidArgument);
  Tensor overlap = Tensor::zeros({6});
  Tensor a = overlap.view(0, {4}), b = overlap.view(2, {4});
  EXPECT_THROW(comms[0]->all_reduce(a, b, ReduceOp::kSum), InvalidArgument);
  EXPECT_THROW(comms[0]->broadcast(f, 2, ""), InvalidArgument);
  EXPECT_THROW(comms[0]->all_gather(f, f, ""), InvalidArgument);
}

TEST(InProcGroup, BadGroupArguments) {
  EXPECT_THROW(make_inproc_group(0, nullptr, 0, 0), InvalidArgument);
  EXPECT_THROW(make_inproc_group(2, nullptr, 1, 3), InvalidArgument);
  EXPECT_THROW(make_inproc_group(2, nullptr, 0, 4), InvalidArgument);
}

TEST(InProcGroup, SingleReplicaIsACopy) {
  auto comms = make_inproc_group(1, nullptr, 0, 1);
  Tensor in = tensor_of(DType::kFloat32, {1, 2, 3}), out = Tensor::zeros({3});
  comms[0]->all_reduce(in, out, ReduceOp::kAvg)->wait();
  EXPECT_EQ(values_of(out), (std::vector<double>{1, 2, 3}));
}

}  // namespace
}  // namespace mirror::dist
