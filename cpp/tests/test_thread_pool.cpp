// ThreadPool: every task runs exactly once, per-thread ids are in range, exceptions reach the
// caller, nested runs work, and many back-to-back jobs (the forward-pass pattern) complete;
// set_active limits which threads take tasks and grows back to the whole pool.
#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <thread>
#include <stdexcept>
#include <vector>

#include "common/thread_pool.h"
#include "test_util.h"

using namespace edgellm;

namespace {

void each_task_once(int n_threads) {
  ThreadPool pool(n_threads);
  CHECK(pool.size() == n_threads);
  for (int64_t n : {0, 1, 2, 3, 7, 64, 1000}) {
    std::vector<std::atomic<int>> hits(n);
    std::atomic<bool> bad_thread{false};
    pool.run(n, [&](int64_t task, int thread) {
      hits[task].fetch_add(1);
      if (thread < 0 || thread >= n_threads) bad_thread = true;
    });
    bool once = true;
    for (auto& h : hits) once &= h.load() == 1;
    CHECK(once);
    CHECK(!bad_thread);
  }
}

void parallel_for_covers_range() {
  ThreadPool pool(3);
  std::vector<int> v(101, 0);
  pool.parallel_for(5, 101, [&](int64_t i, int) { v[i] += 1; });
  int sum = 0;
  for (int i = 0; i < 101; ++i) sum += v[i];
  CHECK(sum == 96);
  CHECK(v[4] == 0 && v[5] == 1 && v[100] == 1);
}

void many_jobs_back_to_back() {
  ThreadPool pool(2);
  std::atomic<int64_t> total{0};
  for (int job = 0; job < 20000; ++job) pool.run(3, [&](int64_t t, int) { total.fetch_add(t + 1); });
  CHECK(total.load() == 20000 * 6);
}

void exceptions_reach_the_caller() {
  ThreadPool pool(2);
  bool caught = false;
  try {
    pool.run(50, [&](int64_t t, int) {
      if (t == 17) throw std::runtime_error("task 17");
    });
  } catch (const std::runtime_error& e) {
    caught = std::string(e.what()) == "task 17";
  }
  CHECK(caught);
  // the pool still works afterwards
  std::atomic<int> n{0};
  pool.run(10, [&](int64_t, int) { n.fetch_add(1); });
  CHECK(n.load() == 10);
}

void nested_runs_are_inline() {
  ThreadPool pool(2);
  std::atomic<int> n{0};
  pool.run(4, [&](int64_t, int) { pool.run(5, [&](int64_t, int) { n.fetch_add(1); }); });
  CHECK(n.load() == 20);
}

void idle_workers_wake_up() {
  ThreadPool pool(2);
  std::atomic<int> n{0};
  for (int i = 0; i < 3; ++i) {
    // long enough for the worker to stop spinning and sleep
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    pool.run(8, [&](int64_t, int) { n.fetch_add(1); });
  }
  CHECK(n.load() == 24);
}

// The threads that took a task of a job of `n` tasks, each of which waits (up to `wait_ms`)
// until `want` distinct threads have entered the job, so every thread that can come does.
std::set<int> threads_of_job(ThreadPool& pool, int64_t n, int want, int wait_ms = 2000) {
  std::mutex m;
  std::set<int> seen;
  pool.run(n, [&](int64_t, int thread) {
    {
      std::lock_guard<std::mutex> lock(m);
      seen.insert(thread);
    }
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms);
    for (;;) {
      {
        std::lock_guard<std::mutex> lock(m);
        if (static_cast<int>(seen.size()) >= want) break;
      }
      if (std::chrono::steady_clock::now() > until) break;
      std::this_thread::yield();
    }
  });
  return seen;
}

void active_threads_follow_set_active() {
  ThreadPool pool(4);
  CHECK(pool.active() == 4);
  CHECK(threads_of_job(pool, 16, 4).size() == 4);

  pool.set_active(2);
  CHECK(pool.active() == 2);
  for (int job = 0; job < 5; ++job) {
    // asks for 3 threads: only 2 may come, and only threads 0 and 1 (each task waits 50 ms
    // for a third that must not come)
    const std::set<int> seen = threads_of_job(pool, 4, 3, 50);
    CHECK(seen.size() <= 2);
    CHECK(*seen.rbegin() < 2);
  }
  std::vector<int> v(100, 0);
  std::mutex m;
  std::set<int> pf_threads;
  pool.parallel_for(0, 100, [&](int64_t i, int thread) {
    v[i] += 1;
    std::lock_guard<std::mutex> lock(m);
    pf_threads.insert(thread);
  });
  int sum = 0;
  for (int x : v) sum += x;
  CHECK(sum == 100);
  CHECK(*pf_threads.rbegin() < 2);

  pool.set_active(1);  // one thread: the caller runs every task itself
  const std::set<int> one = threads_of_job(pool, 4, 2, 50);
  CHECK(one.size() == 1 && *one.begin() == 0);

  pool.set_active(4);  // parked workers wake up and take tasks again
  CHECK(threads_of_job(pool, 16, 4).size() == 4);

  pool.set_active(0);  // clamped to 1..size()
  CHECK(pool.active() == 1);
  pool.set_active(99);
  CHECK(pool.active() == 4);
}

void set_active_while_jobs_run() {
  // another thread lowers and raises the count while the caller runs jobs back to back
  ThreadPool pool(3);
  std::atomic<bool> done{false};
  std::thread flipper([&] {
    for (int i = 0; !done.load(); ++i) {
      pool.set_active(1 + i % 3);
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  });
  std::atomic<int64_t> total{0};
  for (int job = 0; job < 5000; ++job) pool.run(7, [&](int64_t t, int) { total.fetch_add(t); });
  done = true;
  flipper.join();
  CHECK(total.load() == 5000 * 21);
}

}  // namespace

int main() {
  for (int t : {1, 2, 4}) each_task_once(t);
  parallel_for_covers_range();
  many_jobs_back_to_back();
  exceptions_reach_the_caller();
  nested_runs_are_inline();
  idle_workers_wake_up();
  active_threads_follow_set_active();
  set_active_while_jobs_run();
  ThreadPool defaulted;
  CHECK(defaulted.size() >= 1);
  return test_util::report();
}
