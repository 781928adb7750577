// defines: DeviceMutex, the recursive lock of one GPU's DeviceContext, which a thread can let go
// of entirely while it waits for that GPU (wait_unlocked), and copy_between_devices, the order
// of one peer copy's steps. Plain C++ (no CUDA header), so the lock discipline is unit-tested
// with stand-in devices (tests/cuda_lock_order_test.cpp).
//
// Note [No device lock across a wait]: every op on cuda:i holds context(i).mutex() (cuBLAS and
// cuDNN handles and the caches are not safe for concurrent use), and an op that reads a result
// back (a download: all_finite, channel sums, the error word) blocks the host until the device
// got there. What the device waits for may need another host thread to act first: a collective
// completes only once the replica thread of every other GPU has launched its own part, and that
// thread may be copying a tensor to this GPU, which needs this GPU's lock. Holding the lock
// through the wait would deadlock the two threads. So:
//   1. a thread never blocks on a device while it holds a device lock: downloads enqueue the
//      copy and an event under the lock, then wait for the event with every level of the lock
//      released (wait_unlocked), and take it back afterwards;
//   2. a thread never holds two devices' locks at once: a peer copy takes the source's lock to
//      record an event, lets go, takes the destination's to enqueue the copy, lets go, and takes
//      the source's again to order its later work after the copy (copy_between_devices).
// Rule 2 rules out lock-order cycles among the devices; rule 1 rules out a cycle through the
// device (a lock held while waiting for work that needs it). Between the steps other threads may
// enqueue on the same streams; each step's events order exactly what the copy needs.
#pragma once

#include <atomic>
#include <concepts>
#include <mutex>
#include <thread>
#include <utility>

namespace mirror::cuda {

/// A recursive mutex whose owner can release every level at once and take them back.
class DeviceMutex {
 public:
  void lock() {
    const std::thread::id me = std::this_thread::get_id();
    if (owner_.load(std::memory_order_relaxed) == me) {
      ++depth_;
      return;
    }
    mutex_.lock();
    owner_.store(me, std::memory_order_relaxed);
    depth_ = 1;
  }
  bool try_lock() {
    const std::thread::id me = std::this_thread::get_id();
    if (owner_.load(std::memory_order_relaxed) == me) {
      ++depth_;
      return true;
    }
    if (!mutex_.try_lock()) return false;
    owner_.store(me, std::memory_order_relaxed);
    depth_ = 1;
    return true;
  }
  void unlock() {
    if (--depth_ > 0) return;
    owner_.store(std::thread::id(), std::memory_order_relaxed);
    mutex_.unlock();
  }
  /// Whether the calling thread holds the lock (at any depth).
  bool held() const { return owner_.load(std::memory_order_relaxed) == std::this_thread::get_id(); }
  /// Releases every level the calling thread holds; returns how many (0: it held none).
  int release_all() {
    if (!held()) return 0;
    const int levels = std::exchange(depth_, 0);
    owner_.store(std::thread::id(), std::memory_order_relaxed);
    mutex_.unlock();
    return levels;
  }
  /// Takes back `levels` levels released by release_all (nothing for 0).
  void reacquire(int levels) {
    if (levels == 0) return;
    mutex_.lock();
    owner_.store(std::this_thread::get_id(), std::memory_order_relaxed);
    depth_ = levels;
  }

 private:
  std::mutex mutex_;
  std::atomic<std::thread::id> owner_{};
  int depth_ = 0;  // written only by the owner
};

/// Runs `wait()` (a blocking wait for the device) with every level of `m` this thread holds
/// released, and takes them back afterwards, also when `wait` throws (Note [No device lock
/// across a wait], rule 1).
template <class Wait>
decltype(auto) wait_unlocked(DeviceMutex& m, Wait&& wait) {
  struct Relock {
    DeviceMutex& m;
    int levels;
    ~Relock() { m.reacquire(levels); }
  } relock{m, m.release_all()};
  return std::forward<Wait>(wait)();
}

/// The calls of one copy from device `src` to device `dst`, each enqueued on one device's compute
/// stream. `Event` is what record returns and wait takes.
template <class Ops>
concept PeerCopyOps = requires(Ops& ops, int device, const typename Ops::Event& e) {
  { ops.mutex(device) } -> std::same_as<DeviceMutex&>;
  { ops.record(device) } -> std::same_as<typename Ops::Event>;  // an event after queued work
  { ops.wait(device, e) } -> std::same_as<void>;                // the stream waits for e
  { ops.copy(device, device) } -> std::same_as<void>;           // copy(dst, src) on dst's stream
};

/// Copies from `src` to `dst` (Note [No device lock across a wait], rule 2): ordered after the
/// source's queued work and before the destination's later work; the source's later work (which
/// may reuse the source memory) waits for the copy. One device lock at a time, never a host wait.
template <PeerCopyOps Ops>
void copy_between_devices(Ops& ops, int dst, int src) {
  typename Ops::Event ready = [&] {
    std::lock_guard<DeviceMutex> lock(ops.mutex(src));
    return ops.record(src);
  }();
  typename Ops::Event done = [&] {
    std::lock_guard<DeviceMutex> lock(ops.mutex(dst));
    ops.wait(dst, ready);
    ops.copy(dst, src);
    return ops.record(dst);
  }();
  std::lock_guard<DeviceMutex> lock(ops.mutex(src));
  ops.wait(src, done);
}

}  // namespace mirror::cuda
