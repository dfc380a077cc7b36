// Row-interleaved ("packed") weights, kernels/packed.h:
// - pack_rows / unpack_row round-trip every 32-element type byte for byte (random blocks; MXFP4
//   also with every exponent byte, its subnormal scales included);
// - the scalar reference packed_matmul_ref equals a float64 dot of the dequantized operands
//   (weights dequantized from the GGUF blocks by quant::dequantize_row, activations from the Q8_R
//   blocks) within 1e-6·Σ|w·x|, for every packable type (Q4_0..Q8_0, Q4_K, Q5_K, Q6_K, IQ4_NL,
//   IQ4_XS, MXFP4);
// - every kernel table's packed_matmul equals packed_matmul_ref within 1e-5·Σ|w·x|: row-group
//   sub-ranges, ncols 1..9, 16, 17 and 70 (crosses the 64-column block), sentinel rows and
//   padding outside [r0, r1) untouched, extreme levels, decode (ncols 1) over several groups and
//   sub-ranges (its prefetch reaches past the call's rows); rows not on 16-row groups are refused;
// - every table's Q8_R quantizer is byte-identical to quantize_q8_r_ref (ties, zeros, and its
//   quants equal Q8_0's).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/fp16.h"
#include "kernels/kernels.h"
#include "kernels/packed.h"
#include "quant/blocks.h"
#include "quant/quant.h"
#include "kernel_test_data.h"
#include "test_util.h"

using namespace edgellm;
using kernels::block_q8_r;
using kernels::Isa;
using kernels::KernelTable;

namespace {

// The 32-element types (unpack_row round-trips them).
const DType kLegacy[] = {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0, DType::IQ4_NL, DType::MXFP4};
const DType kTypes[] = {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0, DType::Q4_K,
                        DType::Q5_K, DType::Q6_K, DType::IQ4_NL, DType::IQ4_XS, DType::MXFP4};
bool is_k(DType t) { return t == DType::Q4_K || t == DType::Q5_K || t == DType::Q6_K || t == DType::IQ4_XS; }
// A K that is whole units of t: n units of 32 (legacy) or 256 (K-quants).
int64_t units(DType t, int n) { return n * (is_k(t) ? 256 : 32); }
int idx(DType t) { return static_cast<int>(t); }

using kernel_test::half_fields;
using kernel_test::random_activations;

// How test weights are made: random bytes (valid scales), all-extreme levels, or quant::quantize_row
// of normal values (the blocks a real model file holds).
enum Fill { kRandom = 0, kExtreme = 1, kQuantized = 2 };

std::vector<uint8_t> random_weights(DType t, int rows, int64_t K, std::mt19937& rng, int fill = kRandom) {
  std::vector<uint8_t> w(row_bytes(t, K) * rows);
  if (fill == kQuantized) {
    std::normal_distribution<float> g(0.0f, 0.1f);
    std::vector<float> x(K);
    for (int r = 0; r < rows; ++r) {
      for (auto& v : x) v = g(rng);
      quant::quantize_row(t, x.data(), &w[row_bytes(t, K) * r], K);
    }
    return w;
  }
  const bool extreme = fill == kExtreme;
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> mag(0.002f, 0.05f);
  for (auto& b : w) b = extreme ? (byte(rng) & 1 ? 0xFF : 0x00) : static_cast<uint8_t>(byte(rng));
  if (extreme && t == DType::Q8_0)  // the extreme signed levels: −128 and 127
    for (auto& b : w) b = b ? 0x80 : 0x7F;
  const size_t bb = row_bytes(t, is_k(t) ? 256 : 32);
  for (size_t off = 0; off < w.size(); off += bb) {
    if (t == DType::MXFP4) {
      w[off] = kernel_test::mxfp4_exponent(rng);
      continue;
    }
    const std::vector<size_t> f = half_fields(t);
    const uint16_t d = fp32_to_fp16(mag(rng) * (byte(rng) & 1 ? 1.0f : -1.0f));
    std::memcpy(&w[off + f[0]], &d, 2);
    if (f.size() > 1) {
      const uint16_t m = fp32_to_fp16(mag(rng) * (byte(rng) & 1 ? 4.0f : -4.0f));
      std::memcpy(&w[off + f[1]], &m, 2);
    }
  }
  return w;
}

std::vector<uint8_t> pack(DType t, const std::vector<uint8_t>& w, int rows, int64_t K) {
  std::vector<uint8_t> p(kernels::packed_group_bytes(t, K) * (rows / kernels::kPackRows));
  kernels::pack_rows(t, w.data(), p.data(), K, 0, rows / kernels::kPackRows);
  return p;
}

void test_round_trip(std::mt19937& rng) {
  for (DType t : kLegacy)
    for (int64_t K : {32, 96, 576}) {
      const int rows = 32;
      const auto w = random_weights(t, rows, K, rng);
      if (t != DType::MXFP4)  // same size as the GGUF rows (MXFP4 keeps f32 scales: 320 vs 272 bytes a unit)
        CHECK(kernels::packed_group_bytes(t, K) * 2 == w.size());
      const auto p = pack(t, w, rows, K);
      std::vector<uint8_t> back(row_bytes(t, K));
      bool same = true;
      for (int r = 0; r < rows; ++r) {
        kernels::unpack_row(t, p.data(), back.data(), K, r);
        same = same && std::memcmp(back.data(), &w[r * back.size()], back.size()) == 0;
      }
      if (!same) std::fprintf(stderr, "  FAIL: round trip %s K=%lld\n", dtype_name(t), static_cast<long long>(K));
      CHECK(same);
    }
  {  // MXFP4 with every exponent byte: the packed f32 scale 2^(e−128) maps back to e, e = 0 and 1 included
    const int rows = 16;
    const int64_t K = 32 * 16;
    auto w = random_weights(DType::MXFP4, rows, K, rng);
    for (size_t b = 0; b < w.size() / sizeof(block_mxfp4); ++b) w[b * sizeof(block_mxfp4)] = static_cast<uint8_t>(b);
    const auto p = pack(DType::MXFP4, w, rows, K);
    std::vector<uint8_t> back(row_bytes(DType::MXFP4, K));
    bool same = true;
    for (int r = 0; r < rows; ++r) {
      kernels::unpack_row(DType::MXFP4, p.data(), back.data(), K, r);
      same = same && std::memcmp(back.data(), &w[r * back.size()], back.size()) == 0;
    }
    if (!same) std::fprintf(stderr, "  FAIL: round trip MXFP4, every exponent\n");
    CHECK(same);
  }
  bool threw = false;
  try {
    std::vector<uint8_t> dummy(1024);
    kernels::pack_rows(DType::Q2_K, dummy.data(), dummy.data(), 256, 0, 1);
  } catch (const std::invalid_argument&) {
    threw = true;
  }
  CHECK(threw);
}


std::vector<uint8_t> quantize_r(const std::vector<float>& x, int ncols, int64_t K) {
  const size_t xs = row_bytes(DType::Q8_R, K);
  std::vector<uint8_t> q(xs * ncols);
  for (int c = 0; c < ncols; ++c) kernels::quantize_q8_r_ref(&x[c * K], &q[c * xs], K);
  return q;
}

// Σ|w·x| and the float64 dot, per (row, column), from the dequantized operands.
void exact(DType t, const std::vector<uint8_t>& w, const std::vector<uint8_t>& xq, int rows, int ncols, int64_t K,
           std::vector<double>& dot, std::vector<double>& bound) {
  std::vector<float> wf(static_cast<size_t>(rows) * K);
  for (int r = 0; r < rows; ++r) quant::dequantize_row(t, &w[row_bytes(t, K) * r], &wf[r * K], K);
  const size_t xs = row_bytes(DType::Q8_R, K);
  dot.assign(static_cast<size_t>(rows) * ncols, 0.0);
  bound.assign(dot.size(), 0.0);
  for (int c = 0; c < ncols; ++c) {
    const auto* xb = reinterpret_cast<const block_q8_r*>(&xq[c * xs]);
    for (int r = 0; r < rows; ++r) {
      double s = 0, b = 0;
      for (int64_t k = 0; k < K; ++k) {
        const double v = static_cast<double>(wf[r * K + k]) * xb[k / 32].d * xb[k / 32].qs[k % 32];
        s += v;
        b += std::fabs(v);
      }
      dot[c * rows + r] = s;
      bound[c * rows + r] = b;
    }
  }
}

void test_reference(std::mt19937& rng) {
  for (DType t : kTypes)
    for (bool extreme : {false, true}) {
      const int rows = 32, ncols = 3;
      const int64_t K = units(t, is_k(t) ? 2 : 4);
      const auto w = random_weights(t, rows, K, rng, extreme ? kExtreme : kRandom);
      const auto p = pack(t, w, rows, K);
      const auto xq = quantize_r(random_activations(ncols, K, rng), ncols, K);
      std::vector<float> y(static_cast<size_t>(rows) * ncols);
      kernels::MatmulArgs a{p.data(), K, 0, rows, xq.data(), row_bytes(DType::Q8_R, K), ncols, y.data(), rows};
      kernels::packed_matmul_ref(t, a);
      std::vector<double> dot, bound;
      exact(t, w, xq, rows, ncols, K, dot, bound);
      int bad = 0;
      for (size_t i = 0; i < y.size(); ++i)
        if (!(std::fabs(y[i] - dot[i]) <= 1e-6 * bound[i] + 1e-30)) ++bad;
      if (bad) std::fprintf(stderr, "  FAIL: reference %s extreme=%d: %d bad\n", dtype_name(t), extreme, bad);
      CHECK(bad == 0);
    }
}

void check_table(const KernelTable& k, DType t, int rows, int64_t K, int ncols, int r0, int r1, int fill,
                 std::mt19937& rng) {
  const bool extreme = fill == kExtreme;
  const auto w = random_weights(t, rows, K, rng, fill);
  const auto p = pack(t, w, rows, K);
  const auto xq = quantize_r(random_activations(ncols, K, rng), ncols, K);
  const size_t xs = row_bytes(DType::Q8_R, K);
  const int64_t ldy = rows + 5;
  const float kSentinel = 12345.5f;
  std::vector<float> y(ldy * ncols, kSentinel), y_ref(ldy * ncols, kSentinel);
  kernels::MatmulArgs a{p.data(), K, r0, r1, xq.data(), xs, ncols, y.data(), ldy};
  k.packed_matmul[idx(t)](a);
  kernels::MatmulArgs ar{p.data(), K, r0, r1, xq.data(), xs, ncols, y_ref.data(), ldy};
  kernels::packed_matmul_ref(t, ar);
  std::vector<double> dot, bound;
  exact(t, w, xq, rows, ncols, K, dot, bound);
  int bad = 0;
  double worst = 0;
  for (int c = 0; c < ncols; ++c)
    for (int64_t r = 0; r < ldy; ++r) {
      const float got = y[c * ldy + r];
      if (r < r0 || r >= r1) {
        if (got != kSentinel) ++bad;
        continue;
      }
      const double tol = 1e-5 * bound[c * rows + r] + 1e-30;
      const double err = std::fabs(static_cast<double>(got) - y_ref[c * ldy + r]);
      worst = std::max(worst, err / tol);
      if (!(err <= tol)) ++bad;
    }
  if (bad) {
    std::ostringstream s;
    s << kernels::isa_name(k.isa) << " packed " << dtype_name(t) << " K=" << K << " rows [" << r0 << "," << r1 << ") of "
      << rows << " ncols=" << ncols << (extreme ? " extreme" : fill == kQuantized ? " quantized" : "") << ": " << bad << " bad, worst err/tol " << worst;
    std::fprintf(stderr, "  FAIL: %s\n", s.str().c_str());
  }
  CHECK(bad == 0);
}

void test_tables(std::mt19937& rng) {
  int tables = 0;
  std::string per_table;
  for (Isa isa : kernels::kAllIsas) {
    const KernelTable* k = kernels::table_for(isa);
    if (!k) continue;
    int types = 0;
    for (DType t : kTypes) {
      if (!k->packed_matmul[idx(t)]) continue;
      ++tables, ++types;
      for (int ncols : {1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 17, 70})
        check_table(*k, t, 48, units(t, 3), ncols, 0, 48, kRandom, rng);
      check_table(*k, t, 64, units(t, is_k(t) ? 2 : 18), 4, 16, 48, kRandom, rng);  // a row-group sub-range
      check_table(*k, t, 32, units(t, 1), 1, 16, 32, kRandom, rng);                 // one unit
      check_table(*k, t, 32, units(t, is_k(t) ? 6 : 48), 9, 0, 32, kExtreme, rng);  // extreme levels, long rows
      for (int ncols : {1, 14})                                                      // our quantizer's blocks
        check_table(*k, t, 96, units(t, is_k(t) ? 1 : 8), ncols, 0, 96, kQuantized, rng);
      // decode (one column, prefetching ahead of its stream): several groups, and a sub-range
      // starting and ending inside the matrix
      check_table(*k, t, 128, units(t, 2), 1, 0, 128, kRandom, rng);
      check_table(*k, t, 176, units(t, 2), 1, 0, 176, kRandom, rng);
      check_table(*k, t, 176, units(t, 1), 1, 32, 160, kExtreme, rng);
      bool threw = false;
      try {
        std::vector<float> y(64);
        const int64_t K = units(t, 1);
        std::vector<uint8_t> p(kernels::packed_group_bytes(t, K) * 2), x(row_bytes(DType::Q8_R, K));
        kernels::MatmulArgs a{p.data(), K, 8, 32, x.data(), x.size(), 1, y.data(), 32};
        k->packed_matmul[idx(t)](a);
      } catch (const std::invalid_argument&) {
        threw = true;
      }
      CHECK(threw);
    }
    if (types) per_table += std::string(per_table.empty() ? "" : ", ") + kernels::isa_name(isa) + " " + std::to_string(types);
  }
  std::printf("packed matmul: %d (table, type) pairs checked (%s)\n", tables, per_table.c_str());
}

void test_quantizer(std::mt19937& rng) {
  for (Isa isa : kernels::kAllIsas) {
    const KernelTable* k = kernels::table_for(isa);
    if (!k) continue;
    CHECK(k->quantize[idx(DType::Q8_R)] != nullptr);
    const int64_t K = 256;
    std::vector<float> x = random_activations(1, K, rng);
    for (int i = 0; i < 32; ++i) x[i] = 0.0f;                      // an all-zero block
    for (int i = 32; i < 64; ++i) x[i] = (i % 2 ? 1.0f : -0.5f) * 127.0f / 127.0f * (i - 32) / 2.0f;  // ties
    std::vector<uint8_t> a(row_bytes(DType::Q8_R, K)), b(a.size()), q80(row_bytes(DType::Q8_0, K));
    k->quantize[idx(DType::Q8_R)](x.data(), a.data(), K);
    kernels::quantize_q8_r_ref(x.data(), b.data(), K);
    CHECK(std::memcmp(a.data(), b.data(), a.size()) == 0);
    quant::quantize_row(DType::Q8_0, x.data(), q80.data(), K);
    const auto* r = reinterpret_cast<const block_q8_r*>(b.data());
    const auto* q = reinterpret_cast<const block_q8_0*>(q80.data());
    bool same = true;
    for (int64_t blk = 0; blk < K / 32; ++blk) {
      int32_t s0 = 0, s1 = 0;
      for (int i = 0; i < 16; ++i) s0 += q[blk].qs[i], s1 += q[blk].qs[i + 16];
      same = same && std::memcmp(r[blk].qs, q[blk].qs, 32) == 0 && r[blk].d == fp16_to_fp32(q[blk].d) &&
             r[blk].s[0] == s0 && r[blk].s[1] == s1;
    }
    CHECK(same);
  }
}

}  // namespace

int main() {
  const char* seed_env = std::getenv("EDGELLM_TEST_SEED");
  std::mt19937 rng(seed_env ? static_cast<unsigned>(std::strtoul(seed_env, nullptr, 10)) : 1234u);
  test_round_trip(rng);
  test_reference(rng);
  test_tables(rng);
  test_quantizer(rng);
  return test_util::report();
}
