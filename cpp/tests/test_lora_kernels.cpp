// The LoRA products (kernels/lora_kernels.h): the scalar reference against a float64 loop over
// the same operands, then every kernel table this machine runs against the reference — random
// A / Bᵀ in F32 and F16, ranks 1..64 (row tails of the 4-row tiles), input widths that leave
// vector tails, 1..19 columns gathered from scattered token rows (column tails of the 2- and
// 4-column tiles), output ranges [o0, o1) starting on any 16-row block of the blocked Bᵀ and
// ending anywhere (a partial last block), rows outside the range and tokens not listed left
// untouched.
// |got − want| ≤ 1e-5 · (Σ|terms| + |y before|). EDGELLM_TEST_SEED varies the draw.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "common/fp16.h"
#include "kernels/kernels.h"
#include "test_util.h"

using namespace edgellm;
using kernels::Isa;
using kernels::KernelTable;

namespace {

constexpr Isa kAllIsas[] = {Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Neon, Isa::NeonDotprod};

// A matrix of random values in `type` (F32 or F16) and the same values in double.
struct Mat {
  DType type;
  std::vector<uint8_t> bytes;
  std::vector<double> v;
  Mat(DType t, size_t n, std::mt19937& rng) : type(t), bytes(n * (t == DType::F16 ? 2 : 4)), v(n) {
    std::normal_distribution<float> d(0.0f, 1.0f);
    for (size_t i = 0; i < n; ++i) {
      const float f = d(rng);
      if (t == DType::F16) {
        const uint16_t h = fp32_to_fp16(f);
        std::memcpy(bytes.data() + 2 * i, &h, 2);
        v[i] = fp16_to_fp32(h);
      } else {
        std::memcpy(bytes.data() + 4 * i, &f, 4);
        v[i] = f;
      }
    }
  }
};

bool close(double got, double want, double mag) { return std::fabs(got - want) <= 1e-5 * mag + 1e-30; }

// One random case of each product; `t` is checked against float64 (reference = true) or
// against the generic table's entry.
void test_case(const KernelTable& t, bool reference, DType type, std::mt19937& rng) {
  std::uniform_int_distribution<int> pick_rank(1, 64), pick_cols(1, 19), pick_k(1, 200);
  const int64_t rank = pick_rank(rng), K = pick_k(rng) + (rng() % 2 ? 256 : 0), ncols = pick_cols(rng);
  const int64_t n_tok = ncols + 5, ld = K + 3;  // token rows wider than K: strides are honoured
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n_tok * ld));
  for (float& f : x) f = d(rng);
  std::vector<int32_t> rows(static_cast<size_t>(ncols));
  for (int64_t c = 0; c < ncols; ++c) rows[static_cast<size_t>(c)] = static_cast<int32_t>((c * 7 + 3) % n_tok);
  // distinct rows (up's columns must be distinct tokens): 7 is coprime with n_tok unless n_tok % 7 == 0
  if (n_tok % 7 == 0)
    for (int64_t c = 0; c < ncols; ++c) rows[static_cast<size_t>(c)] = static_cast<int32_t>(c + 2);
  std::vector<float> scale(static_cast<size_t>(ncols));
  for (float& s : scale) s = d(rng);

  // down
  Mat a(type, static_cast<size_t>(rank * K), rng);
  kernels::LoraDownArgs da;
  da.type = type;
  da.a = a.bytes.data();
  da.rank = rank;
  da.K = K;
  da.x = x.data();
  da.ldx = ld;
  da.rows = rows.data();
  da.ncols = ncols;
  da.scale = scale.data();
  std::vector<float> low(static_cast<size_t>(ncols * rank)), want(low.size());
  da.low = low.data();
  t.lora_down(da);
  if (!reference) {
    da.low = want.data();
    kernels::generic_table().lora_down(da);
  }
  int bad = 0;
  for (int64_t c = 0; c < ncols; ++c)
    for (int64_t r = 0; r < rank; ++r) {
      double s = 0, mag = 0;
      for (int64_t i = 0; i < K; ++i) {
        const double term = a.v[static_cast<size_t>(r * K + i)] * x[static_cast<size_t>(rows[c] * ld + i)];
        s += term;
        mag += std::fabs(term);
      }
      const size_t at = static_cast<size_t>(c * rank + r);
      const double w = reference ? s * scale[static_cast<size_t>(c)] : want[at];
      bad += !close(low[at], w, mag * std::fabs(scale[static_cast<size_t>(c)]));
    }
  CHECK(bad == 0);

  // up: blocked Bᵀ, element (r, o) at ((o / 16) · rank + r) · 16 + o % 16
  const int64_t n_out = pick_k(rng) + 17, blocks = (n_out + 15) / 16;
  const int64_t o0 = 16 * static_cast<int64_t>(rng() % 2), o1 = n_out - static_cast<int64_t>(rng() % 5);
  Mat bt(type, static_cast<size_t>(rank * blocks * 16), rng);
  const auto bt_at = [&](int64_t r, int64_t o) { return static_cast<size_t>(((o / 16) * rank + r) * 16 + o % 16); };
  const int64_t ldy = n_out + 2;
  std::vector<float> y0(static_cast<size_t>(n_tok * ldy));
  for (float& f : y0) f = d(rng);
  std::vector<float> y = y0, yr = y0;
  kernels::LoraUpArgs ua;
  ua.type = type;
  ua.bt = bt.bytes.data();
  ua.rank = rank;
  ua.o0 = o0;
  ua.o1 = o1;
  ua.low = low.data();
  ua.ncols = ncols;
  ua.y = y.data();
  ua.rows = rows.data();
  ua.ldy = ldy;
  t.lora_up(ua);
  if (!reference) {
    ua.y = yr.data();
    kernels::generic_table().lora_up(ua);
  }
  bad = 0;
  std::vector<bool> listed(static_cast<size_t>(n_tok), false);
  for (int64_t c = 0; c < ncols; ++c) {
    listed[static_cast<size_t>(rows[c])] = true;
    for (int64_t o = 0; o < ldy; ++o) {
      const size_t at = static_cast<size_t>(rows[c] * ldy + o);
      if (o < o0 || o >= o1) {
        bad += y[at] != y0[at];
        continue;
      }
      double s = y0[at], mag = std::fabs(y0[at]);
      for (int64_t r = 0; r < rank; ++r) {
        const double term = static_cast<double>(low[static_cast<size_t>(c * rank + r)]) *
                            bt.v[bt_at(r, o)];
        s += term;
        mag += std::fabs(term);
      }
      bad += !close(y[at], reference ? s : yr[at], mag);
    }
  }
  for (int64_t tk = 0; tk < n_tok; ++tk)
    if (!listed[static_cast<size_t>(tk)])
      for (int64_t o = 0; o < ldy; ++o) bad += y[static_cast<size_t>(tk * ldy + o)] != y0[static_cast<size_t>(tk * ldy + o)];
  CHECK(bad == 0);
}

}  // namespace

int main() {
  const char* seed_env = std::getenv("EDGELLM_TEST_SEED");
  const unsigned seed = seed_env ? static_cast<unsigned>(std::strtoul(seed_env, nullptr, 10)) : 20261207u;
  for (Isa isa : kAllIsas) {
    const KernelTable* t = kernels::table_for(isa);
    if (!t) continue;
    CHECK(t->lora_down != nullptr && t->lora_up != nullptr);
    if (isa != Isa::Scalar)  // their own bodies (x86, NEON), not the reference's
      CHECK(t->lora_down != kernels::generic_table().lora_down && t->lora_up != kernels::generic_table().lora_up);
    std::mt19937 rng(seed + static_cast<unsigned>(isa));
    const int before = test_util::failed();
    for (int i = 0; i < 60; ++i)
      for (DType type : {DType::F32, DType::F16}) test_case(*t, isa == Isa::Scalar, type, rng);
    std::printf("%s: LoRA products %s\n", kernels::isa_name(isa),
                test_util::failed() == before ? (isa == Isa::Scalar ? "match float64" : "match the scalar table")
                                              : "MISMATCHES");
  }
  return test_util::report();
}
