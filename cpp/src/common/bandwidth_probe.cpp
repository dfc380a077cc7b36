#include "common/bandwidth_probe.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <new>
#include <stdexcept>
#include <thread>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace edgellm {
namespace {

constexpr size_t kAlign = size_t(1) << 21;  // a huge page

// Bytes ahead of the stream each 64-byte line is prefetched into L1, as the decode kernels do
// (kernels/packed_driver.inc.h, kDecodePrefetch). A plain stream leaves part of the bandwidth
// unused: on a Zen 4 VM, 2 threads, a plain stream read 38-44 GB/s where the same loop with this
// prefetch read 47-49 (alternating runs), and the decode kernels reached 107 % of the plain
// probe — a floor the engine beats is no floor.
constexpr size_t kPrefetchBytes = 4608;

// Sum of n 64-bit words; eight independent accumulators so the adds never wait on each other
// (the compiler vectorizes the loop at the baseline ISA: two 16-byte loads a cycle already
// exceed one core's share of DRAM bandwidth many times).
uint64_t sum_words(const uint64_t* p, size_t n) {
  uint64_t a[8] = {};
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    // Past the end of the buffer only near its end: a prefetch never faults.
    __builtin_prefetch(reinterpret_cast<const char*>(p + i) + kPrefetchBytes, 0, 3);
    for (int j = 0; j < 8; ++j) a[j] += p[i + j];
  }
  for (; i < n; ++i) a[0] += p[i];
  uint64_t s = 0;
  for (uint64_t v : a) s += v;
  return s;
}

}  // namespace

BandwidthProbe::BandwidthProbe(int n_threads, size_t bytes_per_thread) {
  if (n_threads < 1) throw std::invalid_argument("BandwidthProbe: n_threads must be at least 1");
  if (bytes_per_thread < 4096) throw std::invalid_argument("BandwidthProbe: buffers of at least 4 KiB");
  n_threads_ = n_threads;
  bytes_ = (bytes_per_thread + 4095) / 4096 * 4096;
  const size_t words = bytes_ / 8;
  for (int t = 0; t < n_threads_; ++t) {
    const size_t alloc = (bytes_ + kAlign - 1) / kAlign * kAlign;
    auto* p = static_cast<uint64_t*>(std::aligned_alloc(kAlign, alloc));
    if (!p) {
      for (uint64_t* q : bufs_) std::free(q);
      throw std::bad_alloc();
    }
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    madvise(p, alloc, MADV_HUGEPAGE);
#endif
    bufs_.push_back(p);
  }
  // Each thread writes its own buffer (first touch: its memory comes from its node).
  std::vector<std::thread> th;
  for (int t = 0; t < n_threads_; ++t)
    th.emplace_back([this, t, words] {
      uint64_t* p = bufs_[t];
      for (size_t i = 0; i < words; ++i) p[i] = i * 2654435761u + static_cast<uint64_t>(t);
    });
  for (std::thread& x : th) x.join();
  for (int t = 0; t < n_threads_; ++t) {
    // Σ (i·c + t) over i < words, mod 2^64.
    const uint64_t w = words;
    const uint64_t tri = (w % 2 == 0) ? (w / 2) * (w - 1) : w * ((w - 1) / 2);
    expected_ += tri * 2654435761u + w * static_cast<uint64_t>(t);
  }
}

BandwidthProbe::~BandwidthProbe() {
  for (uint64_t* p : bufs_) std::free(p);
}

BandwidthProbe::Pass BandwidthProbe::run() {
  using Clock = std::chrono::steady_clock;
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<uint64_t> sums(n_threads_);
  std::vector<Clock::time_point> ends(n_threads_);
  Clock::time_point start;
  auto body = [&](int t) {
    ready.fetch_add(1);
    while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
    sums[t] = sum_words(bufs_[t], bytes_ / 8);
    ends[t] = Clock::now();
  };
  std::vector<std::thread> th;
  for (int t = 1; t < n_threads_; ++t) th.emplace_back(body, t);
  while (ready.load() != n_threads_ - 1) std::this_thread::yield();
  ready.fetch_add(1);
  start = Clock::now();
  go.store(true, std::memory_order_release);
  body(0);
  for (std::thread& x : th) x.join();
  Pass p;
  p.seconds = std::chrono::duration<double>(*std::max_element(ends.begin(), ends.end()) - start).count();
  p.gb_per_s = static_cast<double>(bytes_) * n_threads_ / std::max(p.seconds, 1e-9) / 1e9;
  for (uint64_t s : sums) p.checksum += s;
  return p;
}

}  // namespace edgellm
