// Micro-benchmark of the matmul kernels of every kernel table this CPU runs (not a test).
//
//   decode (ncols = 1): GB/s of weight bytes streamed. The weights cycle through a pool larger
//                       than the last-level cache, so every call reads them from DRAM, as decode
//                       does (each weight is read once per token). Beside it, bytes per cycle per
//                       core: of that DRAM stream (B/c 1T, 2T: GB/s ÷ threads ÷ the core clock), and
//                       "hot": one thread, the first rows of the matrix that fit in 512 KiB every
//                       call (from L2, no DRAM), best call — the most the kernel consumes per cycle, its compute bound. A kernel
//                       keeps up with memory when hot B/c is above the DRAM B/c its core gets.
//                       The clock is measured at start (a chain of dependent adds, best of 20).
//   prefill (ncols = 64, or cols=N): GFLOP/s-equivalent (2·K·rows·ncols per call), weights from cache
//                       (with "dram": cycling through the DRAM-sized pool, as a batched decode
//                       step of a model larger than the caches does).
// 1 and 2 threads; threads split the rows of each matmul ([r0, r1) per thread, as the model's
// parallel matmul does) and meet at a spin barrier after every call.
//
// Build (after scripts/dev-build.sh build/<dir>):
//   g++ -O2 -std=c++17 -Icpp/src bench/kernels_bench.cpp build/<dir>/libedgellm_core.a -lpthread -o /tmp/kb
//   /tmp/kb [table ...] [type ...] [cols=N] [dram] [prefill] [shape=KxROWS ...]
//     tables: avx512, avx2, scalar, and avx512-packed, avx2-packed: that table's matmul over
//     row-interleaved weights (kernels/packed.h, Q8_R activations), what the loader uses for the
//     packable types; its GB/s count the GGUF bytes the packed matrix holds (default: all this
//     CPU runs; scalar is measured for decode only).
//     types: Q4_0 .. MXFP4, F16, F32, BF16 (default: all). cols=N: prefill columns (default 64);
//     prefill: those columns only (no decode). shape=KxROWS: only
//     these matrix shapes (default: the six below).
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/dtype.h"
#include "common/fp16.h"
#include "kernels/kernels.h"
#include "kernels/packed.h"
#include "quant/quant.h"

using namespace edgellm;
using Clock = std::chrono::steady_clock;

struct Variant {
  std::string name;
  const kernels::KernelTable* table;
  bool packed;  // the table's packed_matmul over row-interleaved weights
};

namespace {

// Random weight rows with finite scales: random bytes, then every block's fp16 scale fields set.
std::vector<uint8_t> random_weights(DType t, int64_t rows, int64_t K, std::mt19937& rng) {
  const DTypeInfo& info = dtype_info(t);
  std::vector<uint8_t> w(row_bytes(t, K) * rows);
  for (auto& b : w) b = static_cast<uint8_t>(rng());
  std::vector<int> half_offsets;
  switch (t) {
    case DType::Q4_0: case DType::Q5_0: case DType::Q8_0: case DType::IQ4_XS: half_offsets = {0}; break;
    case DType::MXFP4:  // e8m0 scale byte first: 2^0, no subnormal scales
      for (size_t b = 0; b < w.size() / info.block_bytes; ++b) w[b * info.block_bytes] = 127;
      return w;
    case DType::Q4_1: case DType::Q5_1: case DType::Q4_K: case DType::Q5_K: half_offsets = {0, 2}; break;
    case DType::Q2_K: half_offsets = {80, 82}; break;
    case DType::Q3_K: half_offsets = {108}; break;
    case DType::Q6_K: half_offsets = {208}; break;
    case DType::F16: case DType::BF16: {
      auto* h = reinterpret_cast<uint16_t*>(w.data());
      for (size_t i = 0; i < w.size() / 2; ++i)
        h[i] = t == DType::F16 ? fp32_to_fp16(static_cast<float>(rng() % 2001) / 1000.0f - 1.0f)
                               : fp32_to_bf16(static_cast<float>(rng() % 2001) / 1000.0f - 1.0f);
      return w;
    }
    case DType::F32: {
      auto* f = reinterpret_cast<float*>(w.data());
      for (size_t i = 0; i < w.size() / 4; ++i) f[i] = static_cast<float>(rng() % 2001) / 1000.0f - 1.0f;
      return w;
    }
    default: break;
  }
  const uint16_t d = fp32_to_fp16(0.01f);
  for (size_t b = 0; b < w.size() / info.block_bytes; ++b)
    for (int off : half_offsets) std::memcpy(&w[b * info.block_bytes + off], &d, 2);
  return w;
}

struct SpinBarrier {
  std::atomic<int> count{0};
  std::atomic<int> generation{0};
  int n;
  explicit SpinBarrier(int n_) : n(n_) {}
  void wait() {
    const int gen = generation.load(std::memory_order_acquire);
    if (count.fetch_add(1, std::memory_order_acq_rel) == n - 1) {
      count.store(0, std::memory_order_relaxed);
      generation.fetch_add(1, std::memory_order_acq_rel);
    } else {
      // Spin, then yield: on a shared, oversubscribed machine a pure spin starves the other thread.
      for (int spins = 0; generation.load(std::memory_order_acquire) == gen; ++spins)
        if (spins > 2000) std::this_thread::yield();
    }
  }
};

// The core clock in GHz: a chain of dependent adds (one per cycle on every x86 core since the
// P6), timed for 2^22 adds, best of 20 (a shared machine's time slices only make it slower).
double core_ghz() {
  double best = 1e9;
  for (int rep = 0; rep < 20; ++rep) {
    uint64_t v = 0;
    const auto t0 = Clock::now();
    for (int i = 0; i < (1 << 19); ++i)
      asm volatile("add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\t"
                   "add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0" : "+r"(v));
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return (1 << 22) / best / 1e9;
}

struct Timing {
  double median, best;  // seconds per call
};

// Seconds per matmul over `calls` calls cycling through `mats` weight matrices. Each call is timed
// on its own (thread 0, barrier to barrier); the median is the sustained figure and the best one
// what the kernel does when nothing else runs — on a shared machine the two differ.
Timing time_matmul(const Variant& v, DType wt, int64_t K, int64_t rows, int64_t ncols,
                   const std::vector<std::vector<uint8_t>>& mats, int nthreads, int calls) {
  const kernels::KernelTable& t = *v.table;
  const DType at = v.packed ? DType::Q8_R : quant::vec_dot_type(wt);
  const int wi = static_cast<int>(wt);  // float weights: matmul_wide, the encoders' many-column GEMM
  const kernels::MatmulFn fn = v.packed ? t.packed_matmul[wi] : (t.matmul_wide[wi] ? t.matmul_wide[wi] : t.matmul[wi]);
  const int64_t align = v.packed ? kernels::kPackRows : 1;  // packed rows split on 16-row groups
  const size_t xs = row_bytes(at, K);
  std::vector<float> xf(K * ncols);
  std::mt19937 rng(7);
  for (auto& v : xf) v = static_cast<float>(rng() % 2001) / 1000.0f - 1.0f;
  std::vector<uint8_t> xq(xs * ncols + 64);
  for (int64_t c = 0; c < ncols; ++c) t.quantize[static_cast<int>(at)](&xf[c * K], &xq[c * xs], K);
  std::vector<float> y(rows * ncols);
  SpinBarrier barrier(nthreads);
  std::vector<double> secs(calls);
  auto worker = [&](int ith) {
    const int64_t r0 = rows / align * ith / nthreads * align, r1 = rows / align * (ith + 1) / nthreads * align;
    barrier.wait();
    auto t0 = Clock::now();
    for (int i = 0; i < calls; ++i) {
      kernels::MatmulArgs a{mats[i % mats.size()].data(), K, r0, r1, xq.data(), xs, ncols, y.data(), rows};
      fn(a);
      barrier.wait();
      if (ith == 0) {
        const auto t1 = Clock::now();
        secs[i] = std::chrono::duration<double>(t1 - t0).count();
        t0 = t1;
      }
    }
  };
  // warm-up
  {
    std::vector<std::thread> th;
    for (int i = 1; i < nthreads; ++i) th.emplace_back(worker, i);
    worker(0);
    for (auto& x : th) x.join();
  }
  std::vector<std::thread> th;
  for (int i = 1; i < nthreads; ++i) th.emplace_back(worker, i);
  worker(0);
  for (auto& x : th) x.join();
  std::sort(secs.begin(), secs.end());
  return {secs[secs.size() / 2], secs[0]};
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<Variant> all;
  for (kernels::Isa isa : {kernels::Isa::Avx512, kernels::Isa::Avx2, kernels::Isa::Scalar})
    if (const kernels::KernelTable* t = kernels::table_for(isa)) {
      all.push_back({kernels::isa_name(isa), t, false});
      if (isa != kernels::Isa::Scalar) all.push_back({std::string(kernels::isa_name(isa)) + "-packed", t, true});
    }
  const DType all_types[] = {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0, DType::Q4_K,
                             DType::Q5_K, DType::Q6_K, DType::IQ4_XS, DType::MXFP4, DType::F16, DType::F32,
                             DType::BF16};
  std::vector<Variant> variants;
  std::vector<DType> types;
  for (const Variant& v : all)
    for (int i = 1; i < argc; ++i)
      if (v.name == argv[i]) variants.push_back(v);
  for (DType wt : all_types)
    for (int i = 1; i < argc; ++i)
      if (std::string(dtype_name(wt)) == argv[i]) types.push_back(wt);
  if (variants.empty()) variants = all;
  if (types.empty()) types.assign(std::begin(all_types), std::end(all_types));
  int64_t pcols = 64;  // prefill columns; "cols=N" overrides (model prefill runs 128..512)
  bool dram = false;   // "dram": the multi-column calls cycle the DRAM-sized pool too
  bool prefill_only = false;  // "prefill": the multi-column columns only (no decode, no hot)
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "prefill") == 0) prefill_only = true;
    if (std::strncmp(argv[i], "cols=", 5) == 0) pcols = std::max(2, std::atoi(argv[i] + 5));
    if (std::strcmp(argv[i], "dram") == 0) dram = true;
  }
  // (K, rows): SmolLM2-135M, 1.7B-shape attention/FFN, Qwen2.5-0.5B FFN up and down (the
  // down projection is its K-quant matrix), 1.7B-shape FFN up and down.
  std::vector<std::array<int64_t, 2>> shapes = {{576, 1536}, {2048, 2048}, {896, 4864},
                                                {4864, 896}, {2048, 8192}, {8192, 2048}};
  std::vector<std::array<int64_t, 2>> chosen;
  for (int i = 1; i < argc; ++i) {
    long long k = 0, r = 0;
    if (std::sscanf(argv[i], "shape=%lldx%lld", &k, &r) == 2) chosen.push_back({k, r});
  }
  if (!chosen.empty()) shapes = chosen;
  const size_t kPoolBytes = 256u << 20;  // well above the L3 the weights would otherwise sit in
  std::mt19937 rng(1);

  const double ghz = core_ghz();
  std::printf("decode: GB/s of weights from DRAM, median (best) per call, and bytes per cycle per core (median) at "
              "%.2f GHz; hot: 1 thread, weights from cache, best call; prefill: GFLOP/s, %lld columns, median (best)\n",
              ghz, static_cast<long long>(pcols));
  std::printf("%-13s %-6s %5s %5s | %-15s %-15s %5s %5s %5s | %-15s %-15s\n", "isa", "type", "K", "rows", "decode 1T",
              "decode 2T", "B/c1T", "B/c2T", "hot", "prefill 1T", "prefill 2T");
  for (DType wt : types)
    for (const auto& s : shapes) {
      const int64_t K = s[0], rows = s[1];
      if (K % dtype_info(wt).block_elems != 0) continue;  // a model stores such rows in another type
      const size_t mbytes = row_bytes(wt, K) * rows;
      const std::vector<uint8_t> gguf = random_weights(wt, rows, K, rng);
      std::vector<uint8_t> packed;
      if (kernels::packable(wt) && rows % kernels::kPackRows == 0) {
        packed.resize(kernels::packed_group_bytes(wt, K) * (rows / kernels::kPackRows));
        kernels::pack_rows(wt, gguf.data(), packed.data(), K, 0, rows / kernels::kPackRows);
      }
      for (const Variant& v : variants) {
        if (v.packed && (packed.empty() || !v.table->packed_matmul[static_cast<int>(wt)])) continue;
        const std::vector<uint8_t>& w = v.packed ? packed : gguf;
        std::vector<std::vector<uint8_t>> pool(1, w);
        while (pool.size() * w.size() < kPoolBytes) pool.push_back(w);
        const std::vector<std::vector<uint8_t>> one(1, w);
        const bool scalar = v.table->isa == kernels::Isa::Scalar;
        const int calls = scalar ? 8 : static_cast<int>(std::max<size_t>(200, (1024u << 20) / mbytes));
        char cells[4][32] = {"-", "-", "-", "-"};
        double bpc[3] = {0, 0, 0};  // bytes per cycle per core: DRAM 1T, 2T; hot
        for (int nt = 1; nt <= 2; ++nt) {
          if (!prefill_only) {
            const Timing d = time_matmul(v, wt, K, rows, 1, pool, nt, calls);
            std::snprintf(cells[nt - 1], 32, "%6.1f (%5.1f)", mbytes / d.median / 1e9, mbytes / d.best / 1e9);
            bpc[nt - 1] = mbytes / d.median / nt / (ghz * 1e9);
          }
          if (!scalar) {
            const Timing p = time_matmul(v, wt, K, rows, pcols, dram ? pool : one, nt, dram ? static_cast<int>(pool.size()) * 2 : 12);
            const double flop = 2.0 * K * rows * pcols;
            std::snprintf(cells[nt + 1], 32, "%6.1f (%5.1f)", flop / p.median / 1e9, flop / p.best / 1e9);
          }
        }
        if (!prefill_only) {
          // Hot: the first rows of the matrix that fit in 512 KiB (L2), whole 16-row groups.
          const int64_t hr = std::max<int64_t>(16, std::min<int64_t>(rows, (512 << 10) / static_cast<int64_t>(row_bytes(wt, K))) / 16 * 16);
          bpc[2] = row_bytes(wt, K) * hr / time_matmul(v, wt, K, hr, 1, one, 1, scalar ? 8 : 400).best / (ghz * 1e9);
        }
        std::printf("%-13s %-6s %5lld %5lld | %-15s %-15s %5.2f %5.2f %5.2f | %-15s %-15s\n", v.name.c_str(),
                    dtype_name(wt), static_cast<long long>(K), static_cast<long long>(rows), cells[0], cells[1], bpc[0],
                    bpc[1], bpc[2], cells[2], cells[3]);
        std::fflush(stdout);
      }
    }
  return 0;
}
