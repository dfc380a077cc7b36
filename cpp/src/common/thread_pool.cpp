#include "common/thread_pool.h"

#include "common/cpu_features.h"

#include <chrono>

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define EDGELLM_CPU_RELAX() _mm_pause()
#elif defined(__aarch64__)
#define EDGELLM_CPU_RELAX() __asm__ __volatile__("yield")
#else
#define EDGELLM_CPU_RELAX() ((void)0)
#endif

namespace edgellm {
namespace {

// How a waiting worker passes the time until the next job. Ops of one forward pass follow each
// other within microseconds, so it first polls with `pause` (no futex round trip per op); then
// it keeps polling but yields the core between polls, because on a machine with more runnable
// threads than cores a pure spin would take the core from the very thread that is about to
// publish the next job (or from a worker still inside one); after that it sleeps, so an idle
// engine burns no CPU.
constexpr int kSpinRounds = 256;
constexpr auto kYieldFor = std::chrono::microseconds(300);

// How long the caller polls with `pause` for the last tasks of a job before it yields between
// polls (a worker holding the last task may be waiting for this very core).
constexpr int kCallerSpinRounds = 1024;

// Set while a thread executes a task of some pool: a nested run() then runs inline.
thread_local bool t_in_task = false;

bool published(uint64_t gen) { return (gen & 1) == 0; }

}  // namespace

ThreadPool::ThreadPool(int n_threads) {
  if (n_threads <= 0) n_threads = cpu_features().physical_cores;
  if (n_threads <= 0) n_threads = 1;
  n_threads_ = n_threads;
  active_.store(n_threads);
  workers_.reserve(n_threads_ - 1);
  for (int t = 1; t < n_threads_; ++t) workers_.emplace_back([this, t] { worker_loop(t); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  {
    std::lock_guard<std::mutex> lock(wake_mutex_);
    generation_.fetch_add(2);
  }
  wake_.notify_all();
  {
    std::lock_guard<std::mutex> lock(park_mutex_);
  }
  park_.notify_all();
  for (std::thread& w : workers_) w.join();
}

void ThreadPool::work(int thread) {
  const bool outer = t_in_task;
  t_in_task = true;
  for (;;) {
    const int64_t task = next_task_.fetch_add(1, std::memory_order_relaxed);
    if (task >= job_tasks_) break;
    try {
      job_fn_(job_ctx_, task, thread);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex_);
      if (!error_) error_ = std::current_exception();
    }
    tasks_done_.fetch_add(1, std::memory_order_acq_rel);
  }
  t_in_task = outer;
}

void ThreadPool::set_active(int n_threads) {
  if (n_threads < 1) n_threads = 1;
  if (n_threads > n_threads_) n_threads = n_threads_;
  {
    std::lock_guard<std::mutex> lock(park_mutex_);
    active_.store(n_threads);
  }
  park_.notify_all();
}

void ThreadPool::park(int thread) {
  std::unique_lock<std::mutex> lock(park_mutex_);
  park_.wait(lock, [&] { return thread < active_.load() || stop_.load(); });
}

void ThreadPool::worker_loop(int thread) {
  uint64_t seen = 0;
  auto fresh = [&](uint64_t g) { return g != seen && published(g); };
  for (;;) {
    if (thread >= active_.load()) park(thread);
    if (stop_.load()) return;
    uint64_t gen = generation_.load();
    for (int i = 0; !fresh(gen) && i < kSpinRounds; ++i) {
      EDGELLM_CPU_RELAX();
      gen = generation_.load();
    }
    if (!fresh(gen)) {
      const auto until = std::chrono::steady_clock::now() + kYieldFor;
      while (!fresh(gen = generation_.load()) && std::chrono::steady_clock::now() < until) std::this_thread::yield();
    }
    if (!fresh(gen)) {
      std::unique_lock<std::mutex> lock(wake_mutex_);
      sleepers_.fetch_add(1);
      wake_.wait(lock, [&] { return fresh(generation_.load()) || stop_.load(); });
      sleepers_.fetch_sub(1);
      gen = generation_.load();
    }
    if (stop_.load()) return;
    if (!fresh(gen) || thread >= active_.load()) continue;  // an inactive worker parks above
    // Enter, then make sure the job was not closed in between (seq_cst on both sides: either
    // we see the close, or the caller sees us inside and waits for us to leave).
    workers_inside_.fetch_add(1);
    if (generation_.load() == gen) {
      work(thread);
      seen = gen;
    }
    workers_inside_.fetch_sub(1);
  }
}

void ThreadPool::run_job(int64_t n_tasks, TaskFn fn, void* ctx) {
  if (n_tasks <= 0) return;
  if (n_threads_ == 1 || n_tasks == 1 || t_in_task || active() == 1) {
    // Inline: a single task, a single (active) thread, or a nested call from inside a task.
    const bool outer = t_in_task;
    t_in_task = true;
    struct Restore {
      bool v;
      ~Restore() { t_in_task = v; }
    } restore{outer};
    for (int64_t t = 0; t < n_tasks; ++t) fn(ctx, t, 0);
    return;
  }
  // Close the previous job and wait until no worker is inside it, then write this one.
  generation_.fetch_add(1);
  while (workers_inside_.load() != 0) EDGELLM_CPU_RELAX();
  job_fn_ = fn;
  job_ctx_ = ctx;
  job_tasks_ = n_tasks;
  error_ = nullptr;
  next_task_.store(0, std::memory_order_relaxed);
  tasks_done_.store(0, std::memory_order_relaxed);
  generation_.fetch_add(1);  // publish
  if (sleepers_.load() > 0) {
    { std::lock_guard<std::mutex> lock(wake_mutex_); }
    wake_.notify_all();
  }
  work(0);
  for (int i = 0; tasks_done_.load(std::memory_order_acquire) < n_tasks; ++i) {
    if (i < kCallerSpinRounds) EDGELLM_CPU_RELAX();
    else std::this_thread::yield();
  }
  if (error_) {
    std::exception_ptr e = error_;
    error_ = nullptr;
    std::rethrow_exception(e);
  }
}

}  // namespace edgellm
