// A persistent pool of worker threads for the forward pass. The caller is thread 0 and works
// too; workers 1..n-1 wait for the next job by spinning briefly (the next op of a forward pass
// usually follows within microseconds), then polling with a yield between polls (so on a loaded
// machine they hand the core to whoever has work) and then sleeping on a condition variable (so
// an idle engine burns no CPU). One job runs at a time; `run` returns when every task is done.
//
// Completion counts tasks, not threads: a worker that is late (asleep, or preempted on a busy
// machine) is simply not waited for — whoever is present takes the tasks, so n threads are
// never slower than one because one of them is descheduled. A job is open to workers only
// while its generation number is published (even); the caller closes it (odd) and waits for
// the workers inside to leave before it writes the next job.
//
// Nothing is allocated per call: the job is a function pointer plus a context pointer to the
// caller's callable, which lives on the caller's stack for the duration of `run`.
//
// A task that throws stops the job (remaining tasks are skipped) and the first exception is
// rethrown from `run` in the caller. A `run` issued from inside a task runs inline, serially.
// One thread at a time may call `run` (Model::forward holds a lock).
//
// Active threads: `set_active(k)` lets only threads 0..k-1 take tasks from the next job on
// (k in 1..size()); workers k..size()-1 park on their own condition variable until a later
// set_active includes them again. The thermal back-off (python/edgellm/thermal.py) uses it to
// run fewer threads while the SoC throttles, without rebuilding the pool or the matmul plans.
// Safe to call from any thread at any time: a job already open finishes with whoever entered
// it (completion counts tasks), the next one is shared by the active threads only.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace edgellm {

class ThreadPool {
 public:
  // n_threads <= 0: the machine's physical cores.
  explicit ThreadPool(int n_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }
  // Threads that take tasks (1..size()); size() unless set_active lowered it.
  int active() const { return active_.load(std::memory_order_relaxed); }
  // Clamped to 1..size(); wakes parked workers when it grows.
  void set_active(int n_threads);

  // Calls fn(task, thread) for every task in [0, n_tasks); tasks are handed out dynamically
  // (an atomic counter), so uneven tasks balance themselves. `thread` is in [0, size()) and is
  // stable within one call, for per-thread scratch.
  template <class F>
  void run(int64_t n_tasks, F&& fn) {
    using Fn = std::remove_reference_t<F>;
    run_job(n_tasks, [](void* ctx, int64_t task, int thread) { (*static_cast<Fn*>(ctx))(task, thread); },
            const_cast<void*>(static_cast<const void*>(&fn)));
  }

  // Calls fn(i, thread) for every i in [begin, end), split into one contiguous range per
  // thread: for uniform per-item work (per-token norms, RoPE, KV writes).
  template <class F>
  void parallel_for(int64_t begin, int64_t end, F&& fn) {
    const int64_t n = end - begin;
    if (n <= 0) return;
    const int active_threads = active();
    const int64_t parts = n < active_threads ? n : active_threads;
    run(parts, [&](int64_t part, int thread) {
      const int64_t lo = begin + n * part / parts, hi = begin + n * (part + 1) / parts;
      for (int64_t i = lo; i < hi; ++i) fn(i, thread);
    });
  }

 private:
  using TaskFn = void (*)(void* ctx, int64_t task, int thread);
  void run_job(int64_t n_tasks, TaskFn fn, void* ctx);
  void work(int thread);
  void worker_loop(int thread);
  void park(int thread);

  int n_threads_ = 1;
  std::vector<std::thread> workers_;

  // The current job: written by the caller while the generation is odd (closed), read by
  // workers that entered while it was even (published).
  TaskFn job_fn_ = nullptr;
  void* job_ctx_ = nullptr;
  int64_t job_tasks_ = 0;
  std::atomic<int64_t> next_task_{0};
  std::atomic<int64_t> tasks_done_{0};
  std::atomic<int> workers_inside_{0};
  std::exception_ptr error_;
  std::mutex error_mutex_;

  std::atomic<int> active_{1};
  std::mutex park_mutex_;
  std::condition_variable park_;  // workers with thread >= active_ wait here

  std::atomic<uint64_t> generation_{0};
  std::atomic<int> sleepers_{0};
  std::atomic<bool> stop_{false};
  std::mutex wake_mutex_;
  std::condition_variable wake_;
};

}  // namespace edgellm
