// SamplePool: shared decode threads (Note [Sample pool] in sample_pool.h).
#include "mirror/data/sample_pool.h"

#include <atomic>
#include <exception>

#include "mirror/error.h"

namespace mirror::data {

struct SamplePool::Job {
  std::int64_t n = 0;
  const std::function<void(std::int64_t)>* fn = nullptr;
  std::atomic<std::int64_t> next{0};  // the next unclaimed item
  std::atomic<std::int64_t> finished{0};
  std::mutex mutex;  // guards the error and the wait for the last item
  std::condition_variable done_cv;
  std::int64_t failed_at = -1;
  std::exception_ptr error;
};

SamplePool::SamplePool(int threads) {
  MIRROR_CHECK(threads >= 0, InvalidArgument,
               "a sample pool needs 0 or more threads, got " + std::to_string(threads));
  threads_.reserve(static_cast<std::size_t>(threads));
  for (int t = 0; t < threads; ++t) threads_.emplace_back([this] { serve(); });
}

SamplePool::~SamplePool() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void SamplePool::work_on(Job& job) {
  for (;;) {
    const std::int64_t i = job.next.fetch_add(1);
    if (i >= job.n) return;
    std::exception_ptr error;
    try {
      (*job.fn)(i);
    } catch (...) {
      error = std::current_exception();
    }
    if (error) {
      std::lock_guard lock(job.mutex);
      if (job.failed_at < 0 || i < job.failed_at) {
        job.failed_at = i;
        job.error = error;
      }
    }
    if (job.finished.fetch_add(1) + 1 == job.n) {
      // Under the mutex, so the owner cannot miss the notification between its check and its
      // wait.
      std::lock_guard lock(job.mutex);
      job.done_cv.notify_all();
    }
  }
}

void SamplePool::serve() {
  for (;;) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock lock(mutex_);
      work_cv_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
      if (stop_) return;
      job = jobs_.front();
      // Every item of the front job is claimed: the job leaves the queue (its owner waits for
      // the items still running), and the next one is served.
      if (job->next.load() >= job->n) {
        jobs_.pop_front();
        continue;
      }
    }
    work_on(*job);
  }
}

void SamplePool::run(std::int64_t n, const std::function<void(std::int64_t)>& fn) {
  if (n <= 0) return;
  auto job = std::make_shared<Job>();
  job->n = n;
  job->fn = &fn;
  if (threads_.empty()) {
    work_on(*job);
  } else {
    {
      std::lock_guard lock(mutex_);
      jobs_.push_back(job);
    }
    work_cv_.notify_all();
  }
  std::unique_lock lock(job->mutex);
  job->done_cv.wait(lock, [&] { return job->finished.load() == job->n; });
  // A helper may still hold the job (it found nothing left to claim); `fn` is not called again.
  if (job->error) std::rethrow_exception(job->error);
}

}  // namespace mirror::data
