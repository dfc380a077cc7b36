// Micro-benchmark of KernelTable::gemm_f32 (kernels/gemm_kernels.h) on one thread (not a test):
// GFLOP/s (2·m·n·k per call), best of a few calls, operands hot in cache, for the shapes the vision
// towers' attention runs (scores: m 32 queries × n 4096 keys × k 72 head dims; P·V: m 32 × n 72 ×
// k 4096, V rows D = 1152 floats apart) and a square one.
//
// Build (after scripts/dev-build.sh build/<dir>):
//   g++ -O2 -std=c++17 -Icpp/src bench/gemm_bench.cpp build/<dir>/libedgellm_core.a -lpthread -o /tmp/gb
//   /tmp/gb [table ...]            (default: every table this CPU runs but scalar)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/kernels.h"

using namespace edgellm;

namespace {

double run(const kernels::KernelTable& t, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> a(static_cast<size_t>(m * lda)), b(static_cast<size_t>(k * ldb)), c(static_cast<size_t>(m * n));
  for (float& f : a) f = d(rng);
  for (float& f : b) f = d(rng);
  kernels::GemmArgs g;
  g.m = m, g.n = n, g.k = k, g.a = a.data(), g.lda = lda, g.b = b.data(), g.ldb = ldb, g.c = c.data(), g.ldc = n;
  double best = 1e30;
  for (int r = 0; r < 12; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    t.gemm_f32(g);
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return 2.0 * m * n * k / best / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<kernels::Isa> isas;
  for (int i = 1; i < argc; ++i)
    for (kernels::Isa isa : kernels::kAllIsas)
      if (!std::strcmp(argv[i], kernels::isa_name(isa))) isas.push_back(isa);
  if (isas.empty()) isas = {kernels::Isa::Avx2, kernels::Isa::Avx512, kernels::Isa::Neon};
  for (kernels::Isa isa : isas) {
    const kernels::KernelTable* t = kernels::table_for(isa);
    if (!t) continue;
    std::printf("%-8s scores 32x4096x72 %6.1f (ldb 4112: %6.1f)  P.V 32x72x4096 %6.1f  square 256x256x256 %6.1f  GFLOP/s (1 thread)\n",
                kernels::isa_name(isa), run(*t, 32, 4096, 72, 1152, 4096), run(*t, 32, 4096, 72, 1152, 4096 + 16), run(*t, 32, 72, 4096, 4096, 1152),
                run(*t, 256, 256, 256, 256, 256));
  }
}
