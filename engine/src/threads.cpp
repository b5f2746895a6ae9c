// A small persistent pool: workers sleep on a condition variable between jobs, so repeated calls from a
// benchmark or a decode loop do not pay for thread creation each time.
#include "kdtree/threads.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace kdtree {
namespace {

thread_local bool t_in_pool = false;  // a nested parallel_for runs inline instead of deadlocking

struct Job {
  const std::function<void(int64_t)>* fn = nullptr;
  int64_t n = 0;
  std::atomic<int64_t> next{0};
  std::atomic<int> active{0};  // workers still inside this job
  std::mutex err_mu;
  std::exception_ptr err;

  void work() {
    for (int64_t i = next.fetch_add(1); i < n; i = next.fetch_add(1)) {
      try {
        (*fn)(i);
      } catch (...) {
        std::lock_guard<std::mutex> g(err_mu);
        if (!err) err = std::current_exception();
        next.store(n);  // stop handing out work
      }
    }
  }
};

class Pool {
 public:
  ~Pool() {
    {
      std::lock_guard<std::mutex> g(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
  }

  void run(int64_t n, int threads, const std::function<void(int64_t)>& fn) {
    std::lock_guard<std::mutex> one_job_at_a_time(run_mu_);
    grow(threads - 1);
    Job job;
    job.fn = &fn;
    job.n = n;
    const int helpers = int(std::min<int64_t>(threads - 1, n - 1));
    {
      std::lock_guard<std::mutex> g(mu_);
      job_ = &job;
      wanted_ = helpers;
      ++generation_;
    }
    cv_.notify_all();
    job.work();
    {
      std::unique_lock<std::mutex> g(mu_);
      done_cv_.wait(g, [&] { return wanted_ == 0 && job.active.load() == 0; });
      job_ = nullptr;
    }
    if (job.err) std::rethrow_exception(job.err);
  }

 private:
  void grow(int count) {
    while (int(workers_.size()) < count) workers_.emplace_back([this] { loop(); });
  }

  void loop() {
    uint64_t seen = 0;
    std::unique_lock<std::mutex> g(mu_);
    for (;;) {
      cv_.wait(g, [&] { return stop_ || (generation_ != seen && wanted_ > 0); });
      if (stop_) return;
      seen = generation_;
      --wanted_;
      Job* job = job_;
      job->active.fetch_add(1);
      g.unlock();
      t_in_pool = true;
      job->work();
      t_in_pool = false;
      g.lock();
      job->active.fetch_sub(1);
      done_cv_.notify_all();
    }
  }

  std::mutex run_mu_, mu_;
  std::condition_variable cv_, done_cv_;
  std::vector<std::thread> workers_;
  Job* job_ = nullptr;
  int wanted_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
};

Pool& pool() {
  static Pool p;
  return p;
}

}  // namespace

int default_threads() {
  const unsigned n = std::thread::hardware_concurrency();
  return n ? int(n) : 1;
}

void parallel_for(int64_t n, int threads, const std::function<void(int64_t)>& fn) {
  if (n <= 0) return;
  if (threads <= 0) threads = default_threads();
  threads = std::min(threads, kMaxThreads);
  if (threads == 1 || n == 1 || t_in_pool) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  t_in_pool = true;
  try {
    pool().run(n, threads, fn);
  } catch (...) {
    t_in_pool = false;
    throw;
  }
  t_in_pool = false;
}

}  // namespace kdtree
