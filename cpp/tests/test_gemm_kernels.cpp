// KernelTable::gemm_f32 (kernels/gemm_kernels.h): the scalar reference against a float64 loop,
// then every kernel table this machine runs against the float64 loop too — random shapes m 1..40
// (row tails of the register tiles), n 1..200 (column vectors and a masked last one), k 1..300
// (several k slices, and head-dimension sizes like 72), strides wider than the operands, random
// alpha, overwrite and accumulate. C's padding columns (between n and ldc) must stay untouched.
// |got − want| ≤ 1e-5 · (Σ|terms| + |C before|). EDGELLM_TEST_SEED varies the draw.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "kernels/kernels.h"
#include "test_util.h"

using namespace edgellm;
using kernels::Isa;
using kernels::KernelTable;

namespace {

void test_case(const KernelTable& t, std::mt19937& rng, int64_t m, int64_t n, int64_t k) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  const int64_t lda = k + static_cast<int64_t>(rng() % 5), ldb = n + static_cast<int64_t>(rng() % 9);
  const int64_t ldc = n + 1 + static_cast<int64_t>(rng() % 7);
  std::vector<float> a(static_cast<size_t>(m * lda)), b(static_cast<size_t>(k * ldb)), c0(static_cast<size_t>(m * ldc));
  for (float& f : a) f = d(rng);
  for (float& f : b) f = d(rng);
  for (float& f : c0) f = d(rng);
  std::vector<float> c = c0;
  kernels::GemmArgs g;
  g.m = m;
  g.n = n;
  g.k = k;
  g.a = a.data();
  g.lda = lda;
  g.b = b.data();
  g.ldb = ldb;
  g.c = c.data();
  g.ldc = ldc;
  g.alpha = rng() % 2 ? 1.0f : d(rng);
  g.accumulate = rng() % 2;
  t.gemm_f32(g);
  int bad = 0;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < ldc; ++j) {
      const size_t at = static_cast<size_t>(i * ldc + j);
      if (j >= n) {
        bad += c[at] != c0[at];
        continue;
      }
      double s = 0, mag = 0;
      for (int64_t p = 0; p < k; ++p) {
        const double term = static_cast<double>(a[static_cast<size_t>(i * lda + p)]) * b[static_cast<size_t>(p * ldb + j)];
        s += term;
        mag += std::fabs(term);
      }
      double want = g.alpha * s;
      mag *= std::fabs(g.alpha);
      if (g.accumulate) {
        want += c0[at];
        mag += std::fabs(c0[at]);
      }
      bad += !(std::fabs(c[at] - want) <= 1e-5 * mag + 1e-30);
    }
  CHECK(bad == 0);
  if (bad) std::fprintf(stderr, "  m %lld n %lld k %lld: %d wrong\n", static_cast<long long>(m), static_cast<long long>(n),
                        static_cast<long long>(k), bad);
}

}  // namespace

int main() {
  const char* seed_env = std::getenv("EDGELLM_TEST_SEED");
  const unsigned seed = seed_env ? static_cast<unsigned>(std::strtoul(seed_env, nullptr, 10)) : 20261207u;
  for (Isa isa : kernels::kAllIsas) {
    const KernelTable* t = kernels::table_for(isa);
    if (!t) continue;
    CHECK(t->gemm_f32 != nullptr);
    if (isa == Isa::Avx2 || isa == Isa::Avx512)  // their own bodies, not the reference's
      CHECK(t->gemm_f32 != kernels::generic_table().gemm_f32);
    std::mt19937 rng(seed + static_cast<unsigned>(isa));
    const int before = test_util::failed();
    std::uniform_int_distribution<int64_t> pm(1, 40), pn(1, 200), pk(1, 300);
    for (int i = 0; i < 80; ++i) test_case(*t, rng, pm(rng), pn(rng), pk(rng));
    // attention's shapes: scores (k = head dim 72) and P·V (n = 72, long k), and k = 0
    test_case(*t, rng, 32, 300, 72);
    test_case(*t, rng, 32, 72, 700);
    test_case(*t, rng, 13, 80, 300);
    test_case(*t, rng, 9, 65, 129);
    test_case(*t, rng, 5, 7, 0);
    std::printf("%s: f32 GEMM %s\n", kernels::isa_name(isa), test_util::failed() == before ? "matches float64" : "MISMATCHES");
  }
  return test_util::report();
}
