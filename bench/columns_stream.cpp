// The multi-column (batched decode) packed matmul of one weight format on a matrix larger than the
// caches, as a many-stream decode step runs a big output head (not a test): the packed weights in
// huge pages as the loader allocates them (weight_packing.cpp), N columns of Q8_R activations,
// rows split over T threads the way parallel_matmul does (4 chunks a thread, handed out in order),
// a spin barrier after each call. Prints per thread count the best and median call as GFLOP/s and
// as GB/s of weights streamed, beside the same matrix at 1 column (decode's stream, for scale).
// Run two builds alternately and compare best-of-N (a loaded machine moves single figures by 2x).
//
// Build (after scripts/dev-build.sh build/<dir>):
//   g++ -O2 -std=c++17 -Icpp/src bench/columns_stream.cpp build/<dir>/libedgellm_core.a -lpthread -o /tmp/cs
//   /tmp/cs [type=Q8_0] [shape=640x262144] [cols=16] [calls=12] [threads=1,2]
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/dtype.h"
#include "common/fp16.h"
#include "kernels/kernels.h"
#include "kernels/packed.h"

using namespace edgellm;
using Clock = std::chrono::steady_clock;

namespace {

struct SpinBarrier {
  std::atomic<int> count{0}, generation{0};
  int n;
  explicit SpinBarrier(int n_) : n(n_) {}
  void wait() {
    const int gen = generation.load(std::memory_order_acquire);
    if (count.fetch_add(1, std::memory_order_acq_rel) == n - 1) {
      count.store(0, std::memory_order_relaxed);
      generation.fetch_add(1, std::memory_order_acq_rel);
    } else {
      for (int spins = 0; generation.load(std::memory_order_acquire) == gen; ++spins)
        if (spins > 2000) std::this_thread::yield();
    }
  }
};

uint8_t* huge_alloc(size_t bytes) {
  void* p = nullptr;
  if (posix_memalign(&p, 1 << 21, bytes) != 0) std::abort();
  madvise(p, bytes, MADV_HUGEPAGE);
  return static_cast<uint8_t*>(p);
}

}  // namespace

int main(int argc, char** argv) {
  DType wt = DType::Q8_0;
  long long K = 640, rows = 262144;
  int cols = 16, calls = 12;
  bool shared_out = false;  // "shared_out": every column writes the same 4·rows bytes (the cost of the logits' own stream)
  std::vector<int> threads = {1, 2};
  for (int i = 1; i < argc; ++i) {
    char name[32];
    int t1 = 0, t2 = 0;
    if (std::sscanf(argv[i], "type=%31s", name) == 1) {
      for (int id = 0; id < kDTypeIdLimit; ++id)
        if (const DTypeInfo* info = dtype_info(static_cast<uint32_t>(id)); info && std::strcmp(info->name, name) == 0)
          wt = static_cast<DType>(id);
    }
    std::sscanf(argv[i], "shape=%lldx%lld", &K, &rows);
    std::sscanf(argv[i], "cols=%d", &cols);
    if (std::strcmp(argv[i], "shared_out") == 0) shared_out = true;
    std::sscanf(argv[i], "calls=%d", &calls);
    if (const int n = std::sscanf(argv[i], "threads=%d,%d", &t1, &t2); n >= 1) threads = n == 2 ? std::vector<int>{t1, t2} : std::vector<int>{t1};
  }
  const kernels::KernelTable& t = kernels::active();
  const kernels::MatmulFn fn = t.packed_matmul[static_cast<int>(wt)];
  if (!kernels::packable(wt) || !fn) {
    std::fprintf(stderr, "not a packed type on this CPU\n");
    return 1;
  }
  const DTypeInfo& info = dtype_info(wt);
  const size_t rb = static_cast<size_t>(K / info.block_elems * info.block_bytes);
  std::mt19937 rng(1);
  std::vector<uint8_t> g(rb * 16);
  const size_t pb = kernels::packed_group_bytes(wt, K) * static_cast<size_t>(rows / kernels::kPackRows);
  // Matrices smaller than 256 MB: a pool of copies cycled call by call, so every call streams its
  // weights from DRAM (a decode step's layer matrices were pushed out of the caches by the others).
  const int npool = static_cast<int>(std::max<size_t>(1, (256u << 20) / pb));
  uint8_t* pool = huge_alloc(pb * npool);
  uint8_t* w = pool;
  for (long long grp = 0; grp < rows / 16; ++grp) {
    for (auto& b : g) b = static_cast<uint8_t>(rng());
    for (size_t b = 0; b < g.size() / info.block_bytes; ++b) {  // finite fp16 scales at each block's start
      const uint16_t d = fp32_to_fp16(0.01f);
      std::memcpy(&g[b * info.block_bytes], &d, 2);
      if (wt == DType::Q4_K || wt == DType::Q5_K) std::memcpy(&g[b * info.block_bytes + 2], &d, 2);
      if (wt == DType::Q6_K) std::memcpy(&g[b * info.block_bytes + 208], &d, 2);
    }
    kernels::pack_rows(wt, g.data(), w + grp * kernels::packed_group_bytes(wt, K), K, 0, 1);
  }
  for (int i = 1; i < npool; ++i) std::memcpy(pool + pb * i, pool, pb);
  const size_t xs = row_bytes(DType::Q8_R, K);
  std::vector<float> xf(K);
  std::vector<uint8_t> xq(xs * cols + 64);
  for (int c = 0; c < cols; ++c) {
    for (auto& v : xf) v = static_cast<float>(rng() % 2001) / 1000.0f - 1.0f;
    t.quantize[static_cast<int>(DType::Q8_R)](xf.data(), &xq[c * xs], K);
  }
  std::vector<float> y(static_cast<size_t>(rows) * cols);
  std::printf("%s %lldx%lld (%.1f MB packed, %d copies), huge pages\n", info.name, K, rows, pb / 1e6, npool);
  for (int nc : {1, cols}) {
    for (int nt : threads) {
      // parallel_matmul's plan: 4 chunks a thread, whole 16-row groups, handed out in order.
      const long long chunk = ((rows + 4 * nt - 1) / (4 * nt) + 15) / 16 * 16;
      std::atomic<long long> next{0};
      SpinBarrier bar(nt);
      std::vector<double> times;
      auto work = [&](int id) {
        for (int call = 0; call < calls + 1; ++call) {
          bar.wait();
          const auto t0 = Clock::now();
          for (long long c; (c = next.fetch_add(1)) * chunk < rows;) {
            kernels::MatmulArgs a{pool + pb * (call % npool), K, c * chunk, std::min(rows, (c + 1) * chunk), xq.data(), xs, nc, y.data(), shared_out ? 0 : rows};
            fn(a);
          }
          bar.wait();
          if (id == 0) {
            if (call > 0) times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
            if (getenv("CS_TRACE") && nc > 1) std::printf("    call %d copy %d: %.2f ms\n", call, call % npool, 1e3 * std::chrono::duration<double>(Clock::now() - t0).count());
            next.store(0);
          }
          bar.wait();
        }
      };
      std::vector<std::thread> ts;
      for (int i = 1; i < nt; ++i) ts.emplace_back(work, i);
      work(0);
      for (auto& th : ts) th.join();
      std::sort(times.begin(), times.end());
      const double flop = 2.0 * K * rows * nc, bytes = static_cast<double>(pb);
      std::printf("  %2d cols %d threads: best %.2f ms = %6.1f GFLOP/s %5.1f GB/s; median %.2f ms = %6.1f GFLOP/s %5.1f GB/s\n", nc,
                  nt, 1e3 * times[0], flop / times[0] / 1e9, bytes / times[0] / 1e9, 1e3 * times[times.size() / 2],
                  flop / times[times.size() / 2] / 1e9, bytes / times[times.size() / 2] / 1e9);
    }
  }
  return 0;
}
