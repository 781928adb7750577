// The lock discipline of the CUDA backend's device locks (Note [No device lock across a wait],
// src/cuda/device_mutex.h) with stand-in devices: no GPU, no CUDA. The stand-in records, for each
// enqueue of a peer copy, which device locks the calling thread holds, and plays the deadlock the
// discipline exists for: a replica thread waiting for its GPU (inside an op, so holding that GPU's
// lock) until another thread's peer copy into that GPU has been enqueued.
#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "cuda/device_mutex.h"

namespace mirror::cuda {
namespace {

/// Two stand-in GPUs: each call is logged with the locks its thread holds.
struct StandInDevices {
  using Event = std::string;
  std::array<DeviceMutex, 2> locks;
  std::mutex log_mutex;
  std::vector<std::string> log;
  int calls_with_two_locks = 0, calls_without_own_lock = 0;
  // Set when the copy into device 0 has been enqueued (what the waiting thread's GPU needs).
  std::mutex progress_mutex;
  std::condition_variable progress_cv;
  bool copy_enqueued = false;

  DeviceMutex& mutex(int device) { return locks.at(static_cast<std::size_t>(device)); }
  void note(const std::string& call, int device) {
    std::lock_guard<std::mutex> lock(log_mutex);
    log.push_back(call);
    if (locks[0].held() && locks[1].held()) ++calls_with_two_locks;
    if (!mutex(device).held()) ++calls_without_own_lock;
  }
  Event record(int device) {
    note("record " + std::to_string(device), device);
    return "event on " + std::to_string(device);
  }
  void wait(int device, const Event& e) {
    note("wait " + std::to_string(device) + " for " + e, device);
  }
  void copy(int dst, int src) {
    note("copy " + std::to_string(src) + "->" + std::to_string(dst), dst);
    {
      std::lock_guard<std::mutex> lock(progress_mutex);
      copy_enqueued = true;
    }
    progress_cv.notify_all();
  }
};

TEST(CudaLockOrder, APeerCopyHoldsOneDeviceLockAtATimeInTheOrderTheEventsNeed) {
  StandInDevices d;
  copy_between_devices(d, /*dst=*/0, /*src=*/1);
  EXPECT_EQ(d.log, (std::vector<std::string>{"record 1", "wait 0 for event on 1", "copy 1->0",
                                             "record 0", "wait 1 for event on 0"}));
  EXPECT_EQ(d.calls_with_two_locks, 0);
  EXPECT_EQ(d.calls_without_own_lock, 0) << "every enqueue holds its own device's lock";
  EXPECT_FALSE(d.locks[0].held());
  EXPECT_FALSE(d.locks[1].held());
}

TEST(CudaLockOrder, AWaitForTheDeviceLetsGoOfEveryLevelAndTakesThemBack) {
  DeviceMutex m;
  std::lock_guard<DeviceMutex> op(m);     // the op
  std::lock_guard<DeviceMutex> inner(m);  // a nested call inside it
  bool free_meanwhile = false;
  wait_unlocked(m, [&] {
    std::thread other([&] {
      free_meanwhile = m.try_lock();
      if (free_meanwhile) m.unlock();
    });
    other.join();
  });
  EXPECT_TRUE(free_meanwhile) << "another thread could not take the lock during the wait";
  EXPECT_TRUE(m.held());
}

TEST(CudaLockOrder, ALockIsTakenBackWhenTheWaitThrows) {
  DeviceMutex m;
  m.lock();
  EXPECT_THROW(wait_unlocked(m, []() -> int { throw std::runtime_error("device lost"); }),
               std::runtime_error);
  EXPECT_TRUE(m.held());
  m.unlock();
  EXPECT_FALSE(m.held());
}

// Thread A runs an op on device 0 that downloads a result: its GPU cannot get there until
// thread B has enqueued a copy into device 0 (in the real case: a collective that needs B's
// launch). B copies from device 1 to device 0. Holding device 0's lock through A's wait, or B
// taking both locks at once, deadlocks them; the discipline lets both finish. The wait is
// bounded only so that a regression fails instead of hanging the suite.
TEST(CudaLockOrder, AWaitingOpAndAPeerCopyIntoItsDeviceDoNotDeadlock) {
  StandInDevices d;
  bool device_got_there = false;
  std::mutex started_mutex;
  std::condition_variable started_cv;
  bool a_holds_lock = false;
  std::thread a([&] {
    std::lock_guard<DeviceMutex> op(d.mutex(0));
    {
      std::lock_guard<std::mutex> lock(started_mutex);
      a_holds_lock = true;
    }
    started_cv.notify_all();
    wait_unlocked(d.mutex(0), [&] {
      std::unique_lock<std::mutex> lock(d.progress_mutex);
      device_got_there =
          d.progress_cv.wait_for(lock, std::chrono::seconds(20), [&] { return d.copy_enqueued; });
    });
  });
  // B starts once A holds device 0's lock, as a replica thread inside an op would.
  std::thread b([&] {
    {
      std::unique_lock<std::mutex> lock(started_mutex);
      started_cv.wait(lock, [&] { return a_holds_lock; });
    }
    copy_between_devices(d, /*dst=*/0, /*src=*/1);
  });
  a.join();
  b.join();
  EXPECT_TRUE(device_got_there) << "the op's wait never saw the copy: the threads deadlocked";
  EXPECT_EQ(d.calls_with_two_locks, 0);
}

}  // namespace
}  // namespace mirror::cuda
