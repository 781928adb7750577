// defines: SamplePool, the decode threads one rank's loaders share (Note [Sample pool]).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace mirror::data {

/// Note [Sample pool]
/// A Loader's workers each assemble whole batches, so without a pool a batch of 256 photographs
/// is decoded by one thread, and a rank needs as many workers (and as many batches in flight,
/// each ~150 MB at 224x224) as it has cores to keep a GPU fed. With a pool the samples of a
/// batch are decoded in parallel by threads that one rank's loaders share: every local replica's
/// training and test loader, so the cores given to the rank serve whichever replica needs a
/// batch next, and the batches in flight stay few. Only the pool's threads decode (the
/// assembling threads wait for their batch), so a rank decodes with exactly its --data-workers
/// threads however many replicas and batches are in flight; pool threads never wait on a job,
/// so nothing can deadlock.
///
/// Which thread decodes a sample never changes what is decoded: a sample's pixels and random
/// draws are a function of (seed, epoch, sample) (Note [Augmentation draws]), and a bad sample's
/// replacement of the dataset alone (Note [Bad samples]), so batches are the same with any pool
/// size, and as without one.
class SamplePool {
 public:
  /// `threads` >= 0 decoding threads (0: run() calls fn on the caller, one item after another).
  explicit SamplePool(int threads);
  /// Joins the threads; no run() may be in progress.
  ~SamplePool();
  SamplePool(const SamplePool&) = delete;
  SamplePool& operator=(const SamplePool&) = delete;

  int threads() const { return static_cast<int>(threads_.size()); }

  /// Calls fn(i) for every i in [0, n) on the pool's threads (on the caller's for a pool of
  /// none), and returns when all calls have returned. When calls throw, the exception of the lowest failing i is
  /// rethrown (so a batch's error does not depend on thread timing); items not yet started
  /// after a failure still run, since their outcome is needed to know that none failed lower.
  /// Safe to call from several threads at once (jobs are served in the order they came).
  void run(std::int64_t n, const std::function<void(std::int64_t)>& fn);

 private:
  struct Job;
  void serve();
  /// Claims and runs items of `job` until none is left unclaimed.
  static void work_on(Job& job);

  std::mutex mutex_;
  std::condition_variable work_cv_;
  std::deque<std::shared_ptr<Job>> jobs_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace mirror::data
