#include "gguf/file_guard.h"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <mutex>

namespace edgellm::file_guard {
namespace {

// A fixed table the handler can read without locks: an entry is live while `end` is non-zero.
// `begin` and `end` are written before / cleared before the entry is published / reused.
struct Entry {
  std::atomic<uintptr_t> begin{0}, end{0};
  std::atomic<bool> faulted{false};
  std::atomic<bool> used{false};
};
constexpr int kEntries = 256;
Entry g_entries[kEntries];

std::mutex g_mu;  // registration and (re)installation; never taken by the handler
struct sigaction g_previous;
std::atomic<bool> g_have_previous{false};

void on_sigbus(int sig, siginfo_t* info, void* ctx) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(info ? info->si_addr : nullptr);
  for (Entry& e : g_entries) {
    const uintptr_t end = e.end.load(std::memory_order_acquire);
    const uintptr_t begin = e.begin.load(std::memory_order_acquire);
    if (end == 0 || a < begin || a >= end) continue;
    // Zero pages over the whole mapping: the faulting read re-executes and reads 0, as does
    // every later read of a page the file no longer backs (one fault per mapping, not per page).
    void* p = ::mmap(reinterpret_cast<void*>(begin), end - begin, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
                     -1, 0);
    if (p == MAP_FAILED) break;  // cannot recover: the previous handler decides
    e.faulted.store(true, std::memory_order_release);
    return;
  }
  if (g_have_previous.load(std::memory_order_acquire)) {
    const struct sigaction& prev = g_previous;
    if (prev.sa_flags & SA_SIGINFO) {
      if (prev.sa_sigaction) {
        prev.sa_sigaction(sig, info, ctx);
        return;
      }
    } else if (prev.sa_handler != SIG_DFL && prev.sa_handler != SIG_IGN && prev.sa_handler) {
      prev.sa_handler(sig);
      return;
    }
  }
  // No handler before ours: the default action, as if we were not here (the read faults again).
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  ::sigaction(SIGBUS, &dfl, nullptr);
}

void install_locked() {
  struct sigaction cur {};
  if (::sigaction(SIGBUS, nullptr, &cur) != 0) return;
  if ((cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == on_sigbus) return;  // ours already
  struct sigaction sa {};
  sa.sa_sigaction = on_sigbus;
  sa.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  g_have_previous.store(false, std::memory_order_release);
  g_previous = cur;
  g_have_previous.store(true, std::memory_order_release);
  ::sigaction(SIGBUS, &sa, nullptr);
}

}  // namespace

int add(const void* base, size_t size) {
  if (!base || size == 0) return -1;
  std::lock_guard<std::mutex> lock(g_mu);
  install_locked();
  for (int i = 0; i < kEntries; ++i) {
    Entry& e = g_entries[i];
    if (e.used.load(std::memory_order_relaxed)) continue;
    e.used.store(true, std::memory_order_relaxed);
    e.faulted.store(false, std::memory_order_relaxed);
    e.begin.store(reinterpret_cast<uintptr_t>(base), std::memory_order_release);
    e.end.store(reinterpret_cast<uintptr_t>(base) + size, std::memory_order_release);
    return i;
  }
  return -1;
}

void remove(int handle) {
  if (handle < 0 || handle >= kEntries) return;
  std::lock_guard<std::mutex> lock(g_mu);
  Entry& e = g_entries[handle];
  e.end.store(0, std::memory_order_release);
  e.begin.store(0, std::memory_order_release);
  e.used.store(false, std::memory_order_relaxed);
}

bool faulted(int handle) {
  return handle >= 0 && handle < kEntries && g_entries[handle].faulted.load(std::memory_order_acquire);
}

}  // namespace edgellm::file_guard
