// Instructions the single-column (decode) matmul spends per 32 weights, per weight format and
// kernel table, counted exactly and independently of machine load: the call runs in a child
// process that the parent single-steps with ptrace (no performance counters needed, so it works
// in VMs that expose none). Not a test.
//
// Per (format, table) four calls, K ∈ {K1, K2} × rows ∈ {16, 32}; the mixed difference
//   [n(K2, 32) − n(K1, 32) − n(K2, 16) + n(K1, 16)] / ((K2 − K1)/32 · 16 rows)
// is the kernel's work per 32 weights of a long row, with everything per call (entry, the
// activation side-table, the ptrace markers) and per row group (the final stores) cancelled.
// The activation quantization (once per matmul input, shared by every row) is counted apart,
// per 32 activations.
//
// Build (after scripts/dev-build.sh build/<dir>):
//   g++ -O2 -std=c++17 -Icpp/src bench/decode_instructions.cpp build/<dir>/libedgellm_core.a -lpthread -o /tmp/di
//   /tmp/di [table ...] [type ...]     tables: avx512, avx2, scalar (default avx512 avx2); types: default all
//   /tmp/di trace=FILE TABLE TYPE      the instruction addresses of one 16-row, K = 4096 call into FILE
//                                      (build with -no-pie so they match `objdump -d` of the binary)
#include <sys/ptrace.h>
#include <sys/types.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "kernels/kernels.h"
#include "kernels/packed.h"
#include "quant/quant.h"

using namespace edgellm;

namespace {

// With a trace file open, every instruction address the child executes is written to it (one hex
// address a line), for bench/decode_mca.py to map onto the disassembly and feed to llvm-mca.
FILE* g_trace = nullptr;

// Instructions the child executes between its first and second SIGSTOP, single-stepped.
template <class Fn>
long count_instructions(Fn&& fn) {
  const pid_t pid = fork();
  if (pid == 0) {
    ptrace(PTRACE_TRACEME, 0, nullptr, nullptr);
    raise(SIGSTOP);
    fn();
    raise(SIGSTOP);
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);  // first stop
  long n = 0;
  for (;;) {
    ptrace(PTRACE_SINGLESTEP, pid, nullptr, nullptr);
    waitpid(pid, &status, 0);
    if (!WIFSTOPPED(status)) return -1;
    if (WSTOPSIG(status) != SIGTRAP) break;  // the second SIGSTOP
    ++n;
    if (g_trace) {
      user_regs_struct regs;
      ptrace(PTRACE_GETREGS, pid, nullptr, &regs);
      std::fprintf(g_trace, "%llx\n", static_cast<unsigned long long>(regs.rip));
    }
  }
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  return n;
}

struct Case {
  const kernels::KernelTable* table;
  DType wt;
  bool packed;  // the table's packed_matmul over row-interleaved weights (what the loader uses), else its GGUF matmul
  Case(const kernels::KernelTable* t, DType w)
      : table(t), wt(w), packed(kernels::packable(w) && t->packed_matmul[static_cast<int>(w)] != nullptr) {}
};

long count_matmul(const Case& c, int64_t K, int64_t rows) {
  std::mt19937 rng(1);
  const size_t rb = row_bytes(c.wt, K);
  std::vector<uint8_t> w(rb * rows);
  for (auto& b : w) b = static_cast<uint8_t>(rng() & 0x3F);  // small bytes: finite fp16 scales
  std::vector<uint8_t> packed;
  if (c.packed) {
    packed.resize(kernels::packed_group_bytes(c.wt, K) * (rows / kernels::kPackRows));
    kernels::pack_rows(c.wt, w.data(), packed.data(), K, 0, rows / kernels::kPackRows);
  }
  const DType at = c.packed ? DType::Q8_R : quant::vec_dot_type(c.wt);
  std::vector<float> xf(K);
  for (auto& v : xf) v = static_cast<float>(rng() % 2001) / 1000.0f - 1.0f;
  std::vector<uint8_t> xq(row_bytes(at, K) + 64);
  c.table->quantize[static_cast<int>(at)](xf.data(), xq.data(), K);
  std::vector<float> y(rows);
  const kernels::MatmulFn fn = c.packed ? c.table->packed_matmul[static_cast<int>(c.wt)] : c.table->matmul[static_cast<int>(c.wt)];
  kernels::MatmulArgs a{c.packed ? packed.data() : w.data(), K, 0, rows, xq.data(), row_bytes(at, K), 1, y.data(), rows};
  fn(a);  // warm: first-touch and lazy binding happen outside the count
  return count_instructions([&] { fn(a); });
}

long count_quantize(const kernels::KernelTable& t, DType at, int64_t K) {
  std::vector<float> xf(K, 0.5f);
  std::vector<uint8_t> xq(row_bytes(at, K) + 64);
  t.quantize[static_cast<int>(at)](xf.data(), xq.data(), K);
  return count_instructions([&] { t.quantize[static_cast<int>(at)](xf.data(), xq.data(), K); });
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<kernels::Isa> isas;
  const char* trace = nullptr;
  std::vector<DType> types;
  const DType all_types[] = {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q8_0, DType::Q4_K,
                             DType::Q5_K, DType::Q6_K, DType::IQ4_XS, DType::MXFP4, DType::F16};
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "trace=", 6) == 0) trace = argv[i] + 6;
    for (kernels::Isa isa : {kernels::Isa::Avx512, kernels::Isa::Avx2, kernels::Isa::Scalar})
      if (std::strcmp(argv[i], kernels::isa_name(isa)) == 0) isas.push_back(isa);
    for (DType t : all_types)
      if (std::strcmp(argv[i], dtype_name(t)) == 0) types.push_back(t);
  }
  if (isas.empty()) isas = {kernels::Isa::Avx512, kernels::Isa::Avx2};
  if (types.empty()) types.assign(std::begin(all_types), std::end(all_types));
  if (trace) {
    if (isas.size() != 1 || types.size() != 1 || !kernels::table_for(isas[0])) {
      std::fprintf(stderr, "trace= takes one table this CPU runs and one type\n");
      return 2;
    }
    const kernels::KernelTable* t = kernels::table_for(isas[0]);
    const DType wt = types[0];
    g_trace = std::fopen(trace, "w");
    if (!g_trace) return 2;
    const long n = count_matmul(Case(t, wt), 4096, 16);
    std::fclose(g_trace);
    std::printf("%ld instructions traced into %s\n", n, trace);
    return 0;
  }
  std::printf("%-7s %-6s %-7s %10s %10s %14s\n", "isa", "type", "layout", "bytes/32w", "instr/32w", "quantize/32x");
  for (kernels::Isa isa : isas) {
    const kernels::KernelTable* t = kernels::table_for(isa);
    if (!t) {
      std::printf("%-7s (this CPU does not run it)\n", kernels::isa_name(isa));
      continue;
    }
    for (DType wt : types) {
      const Case c(t, wt);
      const int64_t K1 = 512, K2 = 1536;
      const long n11 = count_matmul(c, K1, 16), n21 = count_matmul(c, K2, 16);
      const long n12 = count_matmul(c, K1, 32), n22 = count_matmul(c, K2, 32);
      const double per32 = static_cast<double>(n22 - n12 - n21 + n11) / ((K2 - K1) / 32.0 * 16);
      const DType at = c.packed ? DType::Q8_R : quant::vec_dot_type(wt);
      const double q = static_cast<double>(count_quantize(*t, at, K2) - count_quantize(*t, at, K1)) / ((K2 - K1) / 32.0);
      const double bytes = static_cast<double>(row_bytes(wt, 256)) / 8.0;
      std::printf("%-7s %-6s %-7s %10.2f %10.2f %14.2f\n", kernels::isa_name(isa), dtype_name(wt), c.packed ? "packed" : "gguf",
                  bytes, per32, q);
      std::fflush(stdout);
    }
  }
  return 0;
}
