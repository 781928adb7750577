// Stop signals (Note [Stop signals], distributed/preemption.cpp): they are taken by a thread of
// their own, never by a thread that computes, so a burst of SIGTERMs during oneDNN's sgemm
// neither corrupts the heap nor changes a result.
#include <gtest/gtest.h>
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include "mirror/distributed/preemption.h"
#include "mirror/ops.h"
#include "mirror/tensor.h"
#include "temp_dir.h"

namespace mirror {
namespace {

bool blocked_here(int sig) {
  sigset_t now;
  pthread_sigmask(SIG_BLOCK, nullptr, &now);
  return sigismember(&now, sig) == 1;
}

bool wait_for_stop() {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!dist::stop_requested() && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return dist::stop_requested();
}

TEST(StopSignals, AreBlockedInTheCallerAndInEveryThreadItStartsLater) {
  dist::install_stop_handlers();
  for (int sig : {SIGTERM, SIGINT, SIGUSR1}) EXPECT_TRUE(blocked_here(sig)) << sig;
  bool in_worker = false;
  std::thread([&] { in_worker = blocked_here(SIGTERM) && blocked_here(SIGUSR1); }).join();
  EXPECT_TRUE(in_worker) << "a thread started after install_stop_handlers() could run a handler";
}

TEST(StopSignals, AProcessSignalSetsTheFlagOnce) {
  dist::clear_stop_request();
  dist::install_stop_handlers();
  EXPECT_FALSE(dist::stop_requested());
  ASSERT_EQ(::kill(::getpid(), SIGUSR1), 0);  // as Slurm or mpirun sends it
  EXPECT_TRUE(wait_for_stop());
  ASSERT_EQ(::kill(::getpid(), SIGTERM), 0);  // repeated SIGTERMs change nothing
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_TRUE(dist::stop_requested());
  dist::clear_stop_request();
  EXPECT_FALSE(dist::stop_requested());
}

// Note [Stop hand-off]: the file launch/mirrorrun creates when it holds a stop back is a stop
// request once the handlers are in place; the ready file tells mirrorrun it may forward signals.
TEST(StopSignals, MirrorrunsStopFileIsAStopAndTheReadyFileIsWritten) {
  testing_util::TempDir dir("mirror-stop-file");
  const std::filesystem::path stop = dir.path() / "stop";
  ASSERT_EQ(::setenv(dist::kStopFileVariable, stop.c_str(), 1), 0);
  dist::clear_stop_request();
  dist::install_stop_handlers();
  EXPECT_FALSE(dist::stop_requested()) << "no stop file yet";
  std::ofstream(stop).put('\n');
  dist::install_stop_handlers();
  EXPECT_TRUE(dist::stop_requested()) << "the stop file was not taken as a stop";
  dist::clear_stop_request();

  EXPECT_FALSE(std::filesystem::exists(stop.string() + ".ready"));
  dist::report_stop_handlers_ready();
  EXPECT_TRUE(std::filesystem::exists(stop.string() + ".ready"));
  ::unsetenv(dist::kStopFileVariable);
  dist::install_stop_handlers();
  EXPECT_FALSE(dist::stop_requested()) << "without MIRROR_STOP_FILE nothing is read";
}

// Before the fix this test died within a second: "corrupted size vs. prev_size while
// consolidating" from a SIGTERM handler interrupting dnnl_sgemm.
TEST(StopSignals, ABurstDuringGemmChangesNothing) {
  dist::install_stop_handlers();
  const std::int64_t m = 64, k = 784, n = 256;
  std::vector<float> av(static_cast<std::size_t>(m * k)), bv(static_cast<std::size_t>(k * n));
  for (std::size_t i = 0; i < av.size(); ++i) av[i] = static_cast<float>((i * 7919) % 1000) / 1e3f;
  for (std::size_t i = 0; i < bv.size(); ++i) bv[i] = static_cast<float>((i * 104729) % 997) / 1e3f;
  const Tensor a = Tensor::from_vector(av, {m, k}), b = Tensor::from_vector(bv, {k, n});
  Tensor c = Tensor::zeros({m, n}, DType::kFloat32, Device::cpu());
  ops::gemm(false, false, 1.0, a, b, 0.0, c);
  const std::vector<float> want = c.to_vector<float>();

  std::atomic<bool> done{false};
  std::atomic<long> sent{0};
  std::thread sender([&] {
    while (!done.load()) {
      if (::kill(::getpid(), SIGTERM) == 0) sent.fetch_add(1);
    }
  });
  int differing = 0;
  for (int it = 0; it < 400; ++it) {
    Tensor out = Tensor::zeros({m, n}, DType::kFloat32, Device::cpu());
    ops::gemm(false, false, 1.0, a, b, 0.0, out);
    std::vector<char> churn(static_cast<std::size_t>(100 + it));  // the heap in use meanwhile
    if (out.to_vector<float>() != want) ++differing;
  }
  done = true;
  sender.join();
  EXPECT_EQ(differing, 0);
  EXPECT_GT(sent.load(), 100) << "the burst did not happen";
  EXPECT_TRUE(wait_for_stop());
  dist::clear_stop_request();
}

}  // namespace
}  // namespace mirror
