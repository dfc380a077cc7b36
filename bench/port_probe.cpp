// Which execution pipes the packed tile's instructions compete for (not a test): cycles of a
// block of 8 independent zmm vpdpbusd (the tile's dots, activation broadcast from memory) alone
// and with one or two other instructions added. Where the block stays at 8 cycles the addition
// issues on another pipe; where it grows by one cycle per instruction it shares the VNNI pipes.
// Zen 4 (2026-12-07): vmulps, vfmadd231ps, vpmulld, vpmaddwd +1 each (FP0/FP1 with vpdpbusd);
// vcvtdq2ps, vaddps, vpaddd, vpandd, vpsrlw free (FP2/FP3). So a tile's float work per column
// and 32-element block (vmulps d_w·d_x + vfmadd) costs 2 of every 10 VNNI-pipe cycles.
//
//   g++ -O2 -mavx512f -mavx512bw -mavx512vl -mavx512vnni bench/port_probe.cpp -o /tmp/pp && /tmp/pp
#include <algorithm>
#include <chrono>
#include <cstdio>

using Clock = std::chrono::steady_clock;

namespace {
// The core clock: a chain of dependent adds, one a cycle (best of 10).
double ghz() {
  double best = 1e9;
  for (int rep = 0; rep < 10; ++rep) {
    unsigned long v = 0;
    const auto t0 = Clock::now();
    for (int i = 0; i < (1 << 19); ++i)
      asm volatile("add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0" : "+r"(v));
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return (1 << 22) / best / 1e9;
}
template <class F>
double best_of(F f) {
  double best = 1e9;
  for (int r = 0; r < 15; ++r) {
    const auto t0 = Clock::now();
    f();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return best;
}
}  // namespace

#define DPM(a) "vpdpbusd (%0)%{1to16%}, %%zmm17, %%zmm" #a "\n\t"
#define BLOCK DPM(0) DPM(1) DPM(2) DPM(3) DPM(4) DPM(5) DPM(6) DPM(7)
#define CLOBBER "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", \
                "xmm12", "xmm13", "xmm14", "xmm15"
#define CASE(name, extra)                                                                           \
  {                                                                                                 \
    const double t = best_of([&] {                                                                  \
      for (int i = 0; i < N; ++i) asm volatile(BLOCK extra ::"r"(buf) : CLOBBER);                   \
    });                                                                                             \
    std::printf("%-44s %5.2f cycles\n", name, t * g * 1e9 / N);                                     \
  }

int main() {
  const double g = ghz();
  const int N = 1 << 20;
  alignas(64) static int buf[16] = {1};
  std::printf("core clock %.2f GHz; cycles per block of 8 independent vpdpbusd zmm:\n", g);
  CASE("alone", "")
  CASE("+ vcvtdq2ps + vmulps + vfmadd231ps", "vcvtdq2ps %%zmm8, %%zmm9\n\tvmulps %%zmm10, %%zmm11, %%zmm12\n\tvfmadd231ps %%zmm9, %%zmm12, %%zmm13\n\t")
  CASE("+ vmulps + vfmadd231ps", "vmulps %%zmm10, %%zmm11, %%zmm12\n\tvfmadd231ps %%zmm9, %%zmm15, %%zmm13\n\t")
  CASE("+ vfmadd231ps", "vfmadd231ps %%zmm9, %%zmm15, %%zmm13\n\t")
  CASE("+ 3 vcvtdq2ps", "vcvtdq2ps %%zmm8, %%zmm9\n\tvcvtdq2ps %%zmm10, %%zmm11\n\tvcvtdq2ps %%zmm12, %%zmm14\n\t")
  CASE("+ 2 vaddps", "vaddps %%zmm9, %%zmm15, %%zmm13\n\tvaddps %%zmm9, %%zmm15, %%zmm14\n\t")
  CASE("+ 2 vpaddd + vpandd + vpsrlw", "vpaddd %%zmm8, %%zmm9, %%zmm9\n\tvpaddd %%zmm10, %%zmm11, %%zmm11\n\tvpandd %%zmm12, %%zmm14, %%zmm14\n\tvpsrlw $4, %%zmm12, %%zmm15\n\t")
  CASE("+ vpmulld", "vpmulld %%zmm9, %%zmm15, %%zmm13\n\t")
  CASE("+ vpmaddwd", "vpmaddwd %%zmm9, %%zmm15, %%zmm13\n\t")
  return 0;
}
