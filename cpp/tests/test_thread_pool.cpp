// ThreadPool: every task runs exactly once, per-thread ids are in range, exceptions reach the
// caller, nested runs work, and many back-to-back jobs (the forward-pass pattern) complete.
#include <atomic>
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

}  // namespace

int main() {
  for (int t : {1, 2, 4}) each_task_once(t);
  parallel_for_covers_range();
  many_jobs_back_to_back();
  exceptions_reach_the_caller();
  nested_runs_are_inline();
  idle_workers_wake_up();
  ThreadPool defaulted;
  CHECK(defaulted.size() >= 1);
  return test_util::report();
}
