// The single-column (decode) packed matmul of one weight format, alone, for A/B runs of a kernel
// change (not a test): 1 thread, AVX-512 packed table, a 3072 × 8192 matrix (or shape=KxROWS).
//   dram: the matrix cycles through a 512 MiB pool of copies (beyond L3: every call streams it
//         from memory, as decode does), best and median GB/s over the calls;
//   hot:  the first rows that fit in 512 KiB (L2), best call — what the kernel consumes when it
//         never waits for memory (its compute bound).
// A kernel whose hot rate is well above its dram rate, while another format's dram rate is higher,
// is waiting on its stream, not computing. Run two builds alternately and compare min-of-N
// (a loaded machine moves single figures by 2x).
//
// Build (after scripts/dev-build.sh build/<dir>):
//   g++ -O2 -std=c++17 -Icpp/src bench/decode_stream.cpp build/<dir>/libedgellm_core.a -lpthread -o /tmp/ds
//   /tmp/ds [shape=KxROWS] Q4_0 Q4_K Q6_K ...
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "kernels/kernels.h"
#include "kernels/packed.h"

using namespace edgellm;
using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
  const kernels::KernelTable* tp = kernels::table_for(kernels::Isa::Avx512);
  if (!tp) {
    std::fprintf(stderr, "no AVX-512 table on this CPU\n");
    return 1;
  }
  const kernels::KernelTable& t = *tp;
  int64_t K = 3072, rows = 8192;
  for (int ai = 1; ai < argc; ++ai) {
    long long k = 0, r = 0;
    if (std::sscanf(argv[ai], "shape=%lldx%lld", &k, &r) == 2) {
      K = k, rows = r;
      continue;
    }
    DType wt = DType::F32;
    for (int id = 0; id < kDTypeIdLimit; ++id)
      if (const DTypeInfo* info = dtype_info(static_cast<uint32_t>(id)); info && std::strcmp(info->name, argv[ai]) == 0) wt = static_cast<DType>(id);
    if (wt == DType::F32 || !kernels::packable(wt) || !t.packed_matmul[static_cast<int>(wt)]) {
      std::fprintf(stderr, "%s: not a packed type\n", argv[ai]);
      return 1;
    }
    const DTypeInfo& info = dtype_info(wt);
    const size_t rb = static_cast<size_t>(K / info.block_elems * info.block_bytes);
    std::mt19937 rng(1);
    std::vector<uint8_t> g(rb * rows);
    for (auto& b : g) b = static_cast<uint8_t>(rng());
    for (size_t i = 1; i < g.size(); i += 2) g[i] &= 0x3b;  // keep fp16 scales finite and small
    const size_t pb = kernels::packed_group_bytes(wt, K) * static_cast<size_t>(rows / kernels::kPackRows);
    const int npool = static_cast<int>((512u << 20) / pb) + 1;
    std::vector<std::vector<uint8_t>> pool(npool, std::vector<uint8_t>(pb));
    for (auto& p : pool) kernels::pack_rows(wt, g.data(), p.data(), K, 0, rows / kernels::kPackRows);
    std::vector<float> xf(K);
    for (auto& v : xf) v = static_cast<float>(rng() % 2000) / 1000.0f - 1.0f;
    std::vector<uint8_t> xq(K / 32 * sizeof(kernels::block_q8_r));
    t.quantize[static_cast<int>(DType::Q8_R)](xf.data(), xq.data(), K);
    std::vector<float> y(rows);
    const kernels::MatmulFn fn = t.packed_matmul[static_cast<int>(wt)];
    std::vector<double> ts;
    for (int c = 0; c < std::max(10 * npool, 300); ++c) {
      const kernels::MatmulArgs a{pool[c % npool].data(), K, 0, rows, xq.data(), xq.size(), 1, y.data(), rows};
      const auto t0 = Clock::now();
      fn(a);
      ts.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    }
    std::sort(ts.begin(), ts.end());
    const double gb = static_cast<double>(rb) * static_cast<double>(rows) / 1e9;
    const int64_t hr = std::max<int64_t>(16, std::min<int64_t>(rows, (512 << 10) / static_cast<int64_t>(rb)) / 16 * 16);
    double hot = 1e9;
    for (int c = 0; c < 400; ++c) {
      const kernels::MatmulArgs a{pool[0].data(), K, 0, hr, xq.data(), xq.size(), 1, y.data(), rows};
      const auto t0 = Clock::now();
      fn(a);
      hot = std::min(hot, std::chrono::duration<double>(Clock::now() - t0).count());
    }
    std::printf("%-6s %5lld x %5lld  dram best %5.1f median %5.1f GB/s   hot %5.1f GB/s\n", argv[ai],
                static_cast<long long>(K), static_cast<long long>(rows), gb / ts.front(), gb / ts[ts.size() / 2],
                static_cast<double>(rb) * static_cast<double>(hr) / 1e9 / hot);
  }
}
