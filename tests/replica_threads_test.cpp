// Determinism across in-process replica threads: every replica thread computes under the
// caller's OpenMP thread count (Note [Replica threads], distributed/strategy.cpp), and the
// oneDNN primitive caches key their entries by the creating thread's count (Note [Primitives
// and thread counts], src/cpu/cpu_dnnl.h), so which replica thread first creates a primitive
// cannot change another replica's bits.
#include <gtest/gtest.h>
#include <omp.h>

#include <mutex>

#include "cpu/cpu_dnnl.h"
#include "distributed/strategy_replica.h"
#include "mirror/distributed/strategy.h"
#include "mirror/ops.h"
#include "mpi/strategy_testing.h"
#include "ops_test_util.h"

namespace mirror::testing {
namespace {

/// Restores the calling thread's OpenMP thread count when the test ends.
struct ThreadCountGuard {
  int saved = omp_get_max_threads();
  ~ThreadCountGuard() { omp_set_num_threads(saved); }
};

TEST(ReplicaThreads, EveryReplicaRunsUnderTheCallersThreadCount) {
  ThreadCountGuard guard;
  dist::ReplicaWorkers workers(3);
  // A count no process default gives here (the default is the number of cores), and then back.
  for (int threads : {5, 1, 3}) {
    omp_set_num_threads(threads);
    std::mutex mutex;
    std::vector<int> seen(3, -1);
    workers.run([&](int i) {
      std::lock_guard<std::mutex> lock(mutex);
      seen[static_cast<std::size_t>(i)] = omp_get_max_threads();
    });
    EXPECT_EQ(seen, std::vector<int>(3, threads));
  }
}

TEST(ReplicaThreads, OneDnnPrimitivesAreCachedPerThreadCount) {
  ThreadCountGuard guard;
  const Tensor x = ops_test::random({2, 3, 9, 9}, 1, DType::kFloat32);
  const Tensor w = ops_test::random({5, 3, 3, 3}, 2, DType::kFloat32);
  const auto g = ops::Conv2DGeometry::same(9, 9, 3, 3, 1, 1);
  omp_set_num_threads(1);
  const auto one = ops::conv2d_forward(x, w, Tensor(), g).to_vector<float>();
  const std::int64_t after_one = cpu::dnnl_primitives_created();
  omp_set_num_threads(2);
  ops::conv2d_forward(x, w, Tensor(), g);  // another plan: a primitive of its own
  EXPECT_GT(cpu::dnnl_primitives_created(), after_one);
  const std::int64_t after_two = cpu::dnnl_primitives_created();
  omp_set_num_threads(1);
  EXPECT_EQ(ops::conv2d_forward(x, w, Tensor(), g).to_vector<float>(), one);
  EXPECT_EQ(cpu::dnnl_primitives_created(), after_two);  // the 1-thread one again
}

/// Trains a BatchNorm CNN on two in-process replicas under the calling thread's count and
/// returns replica 0's fingerprint after every step.
std::vector<std::uint64_t> train_fingerprints() {
  dist::StrategyOptions o;
  o.seed = 3;
  o.buckets = {1, 1};  // several buckets: the replicas overlap more work
  dist::MirroredStrategy s(
      cpu_devices(0, 2), [](Device d) { return small_resnet(d, 100, false); }, adam, o);
  std::vector<std::uint64_t> out;
  for (int step = 0; step < 4; ++step) {
    const data::Batch g = global_batch(ModelKind::kResBn, step, 16, 16);
    auto batches = local_batches(g, s, 8);
    s.train_step(batches, 0.01);
    out.push_back(s.weights_fingerprint(0));
  }
  return out;
}

TEST(ReplicaThreads, InProcessReplicasReproduceWhateverTheCallersThreadCount) {
  ThreadCountGuard guard;
  for (int threads : {1, 2}) {
    SCOPED_TRACE(std::to_string(threads) + " threads");
    omp_set_num_threads(threads);
    const auto first = train_fingerprints();
    for (int run = 0; run < 3; ++run) EXPECT_EQ(train_fingerprints(), first) << "run " << run;
  }
}

}  // namespace
}  // namespace mirror::testing
