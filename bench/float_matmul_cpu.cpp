// One thread, one float-weight matmul repeated (not a test): work per CPU cycle of the float GEMM /
// tile (kernels/matmul_float.inc.h) where hardware counters are unavailable (this VM's `perf stat -e
// cycles` is "not supported"): run it under `perf stat -e task-clock` and divide the printed flop by
// task-clock × the core clock (3.69 GHz here); best of several runs.
//   g++ -O2 -std=c++17 -Icpp/src bench/float_matmul_cpu.cpp build/dev/libedgellm_core.a -lpthread -o /tmp/fm
//   perf stat -e task-clock /tmp/fm ISA TYPE K ROWS COLS CALLS     (ISA avx512|avx2|scalar, TYPE F32|F16|BF16)
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>
#include "common/dtype.h"
#include "common/fp16.h"
#include "kernels/kernels.h"
#include "quant/quant.h"
using namespace edgellm;
int main(int argc, char** argv) {
  const char* isa = argv[1];
  DType wt = !strcmp(argv[2], "F32") ? DType::F32 : !strcmp(argv[2], "F16") ? DType::F16 : DType::BF16;
  int64_t K = atoll(argv[3]), rows = atoll(argv[4]), cols = atoll(argv[5]); int calls = atoi(argv[6]);
  const kernels::KernelTable* t = nullptr;
  for (auto i : kernels::kAllIsas) if (!strcmp(kernels::isa_name(i), isa)) t = kernels::table_for(i);
  std::mt19937 rng(1);
  std::vector<uint8_t> w(row_bytes(wt, K) * rows);
  std::vector<float> wf(K * rows); for (auto& v : wf) v = (rng() % 2001) / 1000.0f - 1;
  quant::quantize_row(wt, wf.data(), w.data(), K * rows);
  DType at = quant::vec_dot_type(wt); size_t xs = row_bytes(at, K);
  std::vector<float> xf(K * cols); for (auto& v : xf) v = (rng() % 2001) / 1000.0f - 1;
  std::vector<uint8_t> xq(xs * cols);
  for (int64_t c = 0; c < cols; ++c) t->quantize[(int)at](&xf[c * K], &xq[c * xs], K);
  std::vector<float> y(rows * cols);
  for (int i = 0; i < calls; ++i) {
    kernels::MatmulArgs a{w.data(), K, 0, rows, xq.data(), xs, cols, y.data(), rows};
    t->matmul_wide[(int)wt](a);
  }
  double s = 0; for (float v : y) s += v;
  printf("flop %.4g checksum %g\n", 2.0 * K * rows * cols * calls, s);
}
