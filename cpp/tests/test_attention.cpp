// Paged attention: the scalar reference against a dense float64 softmax attention over the same
// (dequantized) keys and values, with scrambled page tables, blocks of query tokens, GQA groups,
// sliding windows, score soft-capping, attention sinks and every KV element type; then every
// kernel table this machine runs against the reference (each distinct paged_attention once), so
// a SIMD override is covered as soon as it lands.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/attention.h"
#include "kernels/kernels.h"
#include "quant/quant.h"
#include "test_util.h"

using namespace edgellm;
using kernels::PagedAttentionArgs;

namespace {

// Attention geometry: query heads per KV head, head dims, page size.
struct Shape {
  int n_q = 3, hd_k = 64, hd_v = 32, page_size = 8;
};

struct PagedKV {
  int n_kv = 2, page_size = 8, hd_k = 64, hd_v = 32, n_pages = 0;
  DType type = DType::F32;
  size_t k_row = 0, v_row = 0, page_stride = 0;
  std::vector<uint8_t> storage;
  std::vector<int32_t> table;               // position / page_size -> page
  std::vector<float> k_dense, v_dense;      // [pos][head][dim], as stored (after rounding)

  PagedKV(DType t, int n_positions, std::mt19937& rng, const Shape& shape)
      : page_size(shape.page_size), hd_k(shape.hd_k), hd_v(shape.hd_v), type(t) {
    k_row = row_bytes(t, hd_k);
    v_row = row_bytes(t, hd_v);
    page_stride = static_cast<size_t>(n_kv) * page_size * (k_row + v_row);
    const int used = (n_positions + page_size - 1) / page_size;
    n_pages = used + 3;
    storage.assign(page_stride * n_pages, 0xCD);
    std::vector<int32_t> perm(n_pages);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    table.assign(perm.begin(), perm.begin() + used);
    std::normal_distribution<float> g;
    k_dense.resize(static_cast<size_t>(n_positions) * n_kv * hd_k);
    v_dense.resize(static_cast<size_t>(n_positions) * n_kv * hd_v);
    std::vector<float> row(std::max(hd_k, hd_v));
    for (int p = 0; p < n_positions; ++p)
      for (int h = 0; h < n_kv; ++h) {
        for (int kind = 0; kind < 2; ++kind) {
          const int d = kind ? hd_v : hd_k;
          for (int i = 0; i < d; ++i) row[i] = g(rng);
          uint8_t* dst = kind ? v_at(p, h) : k_at(p, h);
          quant::quantize_row(t, row.data(), dst, d);
          float* dense = kind ? &v_dense[(static_cast<size_t>(p) * n_kv + h) * hd_v]
                              : &k_dense[(static_cast<size_t>(p) * n_kv + h) * hd_k];
          quant::dequantize_row(t, dst, dense, d);
        }
      }
  }
  uint8_t* k_base(int h) { return storage.data() + h * page_size * k_row; }
  uint8_t* v_base(int h) { return storage.data() + n_kv * page_size * k_row + h * page_size * v_row; }
  uint8_t* k_at(int p, int h) { return k_base(h) + table[p / page_size] * page_stride + (p % page_size) * k_row; }
  uint8_t* v_at(int p, int h) { return v_base(h) + table[p / page_size] * page_stride + (p % page_size) * v_row; }
};

// Dense float64 attention of query (token j, head i) of kv head `hk`.
// With `sink` (an attention-sink logit; NaN: none) its exp joins the denominator.
void naive(const PagedKV& kv, int hk, const float* q, int32_t pos, int32_t window, float softcap, float* out,
           float sink = NAN) {
  std::vector<double> s;
  const int32_t lo = window > 0 ? std::max(0, pos - window + 1) : 0;
  double mx = -1e300;
  for (int32_t p = lo; p <= pos; ++p) {
    const float* k = &kv.k_dense[(static_cast<size_t>(p) * kv.n_kv + hk) * kv.hd_k];
    double d = 0;
    for (int i = 0; i < kv.hd_k; ++i) d += static_cast<double>(q[i]) * k[i];
    if (softcap > 0) d = softcap * std::tanh(d / softcap);
    s.push_back(d);
    mx = std::max(mx, d);
  }
  if (!std::isnan(sink)) mx = std::max(mx, static_cast<double>(sink));
  double sum = 0;
  for (double& x : s) sum += (x = std::exp(x - mx));
  if (!std::isnan(sink)) sum += std::exp(sink - mx);
  std::vector<double> acc(kv.hd_v, 0.0);
  for (int32_t p = lo; p <= pos; ++p) {
    const float* v = &kv.v_dense[(static_cast<size_t>(p) * kv.n_kv + hk) * kv.hd_v];
    for (int i = 0; i < kv.hd_v; ++i) acc[i] += s[p - lo] / sum * v[i];
  }
  for (int i = 0; i < kv.hd_v; ++i) out[i] = static_cast<float>(acc[i]);
}

struct Case {
  int n_tokens;
  int32_t q_pos0;
  int32_t window;
  float softcap = 0.0f;  // Gemma 2's attention-logit soft-cap; the random scores have sd ~2.4
  int sinks = 0;         // gpt-oss's attention sinks: 0 none, 1 logits ~ N(0, 2), 2 logits ~ 6 (dominant)
};

// The sink logits of a case, one per (kv head, query head) of every call: the same for a block
// and for its tokens alone.
std::vector<float> sink_logits(const Case& c, int n_kv, int n_q, uint32_t seed) {
  if (!c.sinks) return {};
  std::mt19937 rng(seed);
  std::normal_distribution<float> g;
  std::vector<float> z(static_cast<size_t>(n_kv) * n_q);
  for (float& x : z) x = c.sinks == 1 ? 2.0f * g(rng) : 6.0f + g(rng);
  return z;
}

const std::vector<Case> kBasicCases = {Case{1, 0, 0},   Case{1, 69, 0},  Case{16, 0, 0}, Case{16, 40, 0}, Case{5, 33, 0},
                                       Case{1, 69, 5},  Case{16, 20, 5}, Case{7, 2, 5},  Case{3, 60, 1},
                                       Case{1, 69, 0, 2.0f}, Case{16, 40, 0, 3.0f}, Case{5, 33, 5, 1.5f},
                                       Case{16, 20, 5, 50.0f}, Case{1, 0, 0, 0.0f, 1}, Case{1, 69, 0, 0.0f, 1},
                                       Case{16, 40, 0, 0.0f, 1}, Case{7, 2, 5, 0.0f, 2}, Case{5, 33, 5, 1.5f, 1},
                                       Case{1, 69, 5, 0.0f, 2}, Case{3, 60, 1, 0.0f, 1}};

// The arguments of one call: KV head hk of `kv`, the block of case c, queries and outputs of
// all heads at the given token strides.
PagedAttentionArgs head_args(PagedKV& kv, int hk, int n_q, const Case& c, const float* q, int64_t q_token_stride,
                             float* out, int64_t out_token_stride, float* scratch, const std::vector<float>& sinks) {
  PagedAttentionArgs a{};
  a.sinks = sinks.empty() ? nullptr : sinks.data() + hk * n_q;
  a.n_tokens = c.n_tokens;
  a.q_pos0 = c.q_pos0;
  a.window = c.window;
  a.softcap = c.softcap;
  a.q = q + hk * n_q * kv.hd_k;
  a.q_token_stride = q_token_stride;
  a.q_head_stride = kv.hd_k;
  a.n_q = n_q;
  a.kv_type = kv.type;
  a.head_dim_k = kv.hd_k;
  a.head_dim_v = kv.hd_v;
  a.pages = kv.table.data();
  a.page_size = kv.page_size;
  a.k_base = kv.k_base(hk);
  a.v_base = kv.v_base(hk);
  a.page_stride = kv.page_stride;
  a.k_row_bytes = kv.k_row;
  a.v_row_bytes = kv.v_row;
  a.out = out + hk * n_q * kv.hd_v;
  a.out_token_stride = out_token_stride;
  a.out_head_stride = kv.hd_v;
  a.scratch = scratch;
  return a;
}

// Max |difference| of `table` over `cases` against the dense float64 attention (against_naive)
// or against the table `other`, on a cache of n_positions random keys and values.
float max_error(const kernels::KernelTable& table, DType type, uint32_t seed, bool against_naive,
                const kernels::KernelTable* other = nullptr, const Shape& shape = Shape{},
                const std::vector<Case>& cases = kBasicCases, int n_positions = 70) {
  std::mt19937 rng(seed);
  const int n_q = shape.n_q;
  PagedKV kv(type, n_positions, rng, shape);
  std::normal_distribution<float> g;
  float worst = 0;
  for (Case c : cases) {
    const int64_t q_token_stride = kv.n_kv * n_q * kv.hd_k + 5;  // padded strides are allowed
    std::vector<float> q(c.n_tokens * q_token_stride);
    for (float& x : q) x = g(rng) * 0.3f;
    const int64_t out_token_stride = kv.n_kv * n_q * kv.hd_v + 3;
    std::vector<float> scratch(kernels::paged_attention_scratch_floats(n_q, kv.hd_k, kv.hd_v, kv.page_size));
    const std::vector<float> sinks = sink_logits(c, kv.n_kv, n_q, seed + c.n_tokens + c.q_pos0);
    for (int hk = 0; hk < kv.n_kv; ++hk) {
      std::vector<float> out(c.n_tokens * out_token_stride, -7.0f), ref(out.size(), -7.0f);
      PagedAttentionArgs a = head_args(kv, hk, n_q, c, q.data(), q_token_stride, out.data(), out_token_stride,
                                       scratch.data(), sinks);
      table.paged_attention(a);
      if (other) {
        PagedAttentionArgs b = a;
        b.out = ref.data() + hk * n_q * kv.hd_v;
        other->paged_attention(b);
      }
      for (int j = 0; j < c.n_tokens; ++j)
        for (int h = 0; h < n_q; ++h) {
          const float* got = a.out + j * out_token_stride + h * kv.hd_v;
          std::vector<float> want(kv.hd_v);
          if (against_naive) naive(kv, hk, a.q + j * q_token_stride + h * kv.hd_k, c.q_pos0 + j, c.window, c.softcap,
                                  want.data(), a.sinks ? a.sinks[h] : NAN);
          else std::memcpy(want.data(), ref.data() + hk * n_q * kv.hd_v + j * out_token_stride + h * kv.hd_v, 4 * kv.hd_v);
          for (int i = 0; i < kv.hd_v; ++i) worst = std::max(worst, std::fabs(got[i] - want[i]));
        }
      // padding between tokens is left alone
      CHECK(out[out_token_stride - 1] == -7.0f);
    }
  }
  return worst;
}

// Number of outputs of `table` where a block of c.n_tokens tokens under exact_rows differs in any
// bit from the same tokens each computed as a one-token block (what decode runs).
int exact_rows_mismatches(const kernels::KernelTable& table, DType type, uint32_t seed, const Shape& shape,
                          const std::vector<Case>& cases, int n_positions) {
  std::mt19937 rng(seed);
  const int n_q = shape.n_q;
  PagedKV kv(type, n_positions, rng, shape);
  std::normal_distribution<float> g;
  int bad = 0;
  for (Case c : cases) {
    const int64_t q_token_stride = kv.n_kv * n_q * kv.hd_k;
    std::vector<float> q(c.n_tokens * q_token_stride);
    for (float& x : q) x = g(rng) * 0.3f;
    const int64_t out_token_stride = kv.n_kv * n_q * kv.hd_v;
    std::vector<float> scratch(kernels::paged_attention_scratch_floats(n_q, kv.hd_k, kv.hd_v, kv.page_size));
    const std::vector<float> sinks = sink_logits(c, kv.n_kv, n_q, seed + c.n_tokens + c.q_pos0);
    for (int hk = 0; hk < kv.n_kv; ++hk) {
      std::vector<float> block(c.n_tokens * out_token_stride, -7.0f), alone(block.size(), -7.0f);
      PagedAttentionArgs a = head_args(kv, hk, n_q, c, q.data(), q_token_stride, block.data(), out_token_stride,
                                       scratch.data(), sinks);
      a.exact_rows = true;
      table.paged_attention(a);
      for (int j = 0; j < c.n_tokens; ++j) {
        PagedAttentionArgs b = a;
        b.n_tokens = 1;
        b.q_pos0 = c.q_pos0 + j;
        b.q = a.q + j * q_token_stride;
        b.out = alone.data() + hk * n_q * kv.hd_v + j * out_token_stride;
        b.exact_rows = false;
        table.paged_attention(b);
      }
      for (int j = 0; j < c.n_tokens; ++j)
        for (int h = 0; h < n_q; ++h) {
          const size_t at = hk * n_q * kv.hd_v + j * out_token_stride + h * kv.hd_v;
          if (std::memcmp(&block[at], &alone[at], sizeof(float) * kv.hd_v) != 0) ++bad;
        }
    }
  }
  return bad;
}

}  // namespace

// The SIMD tables this CPU runs, one per distinct paged_attention (neon-dotprod and neon-i8mm
// keep neon's: testing it once keeps this test's time under qemu flat as tables are added).
std::vector<const kernels::KernelTable*> simd_attention_tables() {
  std::vector<const kernels::KernelTable*> out;
  for (kernels::Isa isa : kernels::kAllIsas) {
    const kernels::KernelTable* t = kernels::table_for(isa);
    if (!t || isa == kernels::Isa::Scalar) continue;
    bool seen = false;
    for (const kernels::KernelTable* o : out) seen = seen || o->paged_attention == t->paged_attention;
    if (!seen) out.push_back(t);
  }
  return out;
}

int main() {
  const kernels::KernelTable& ref = kernels::generic_table();
  CHECK(ref.paged_attention != nullptr);
  for (DType t : {DType::F32, DType::F16, DType::Q8_0}) {
    const float e = max_error(ref, t, 11 + static_cast<int>(t), true);
    if (!(e < 2e-5f)) std::fprintf(stderr, "generic %s: max error %g vs dense float64\n", dtype_name(t), e);
    CHECK(e < 2e-5f);
  }
  const std::vector<const kernels::KernelTable*> simd = simd_attention_tables();
  for (const kernels::KernelTable* t : simd) {
    const kernels::Isa isa = t->isa;
    CHECK(t->paged_attention != nullptr);
    for (DType dt : {DType::F32, DType::F16, DType::Q8_0}) {
      const float e = max_error(*t, dt, 100 + static_cast<int>(dt), false, &ref);
      if (!(e < 1e-4f)) std::fprintf(stderr, "%s %s: max error %g vs generic\n", kernels::isa_name(isa), dtype_name(dt), e);
      CHECK(e < 1e-4f);
    }
  }
  // The SIMD tables pick their code path by the block's query count (tokens × GQA group) and tile
  // keys and queries: sweep every block size 1..16 at varied positions, windows that end inside
  // page runs (and a one-key window), with and without a score soft-cap and attention sinks, page sizes that are not
  // multiples of the key tile, the models' group sizes (1, 3 SmolLM2, 4 Gemma 3, 7 Qwen2.5) and
  // head dims (64, 128, 256), and head dims that are not a multiple of any vector width (F32/F16
  // only: Q8_0 blocks are 32 wide).
  std::vector<Case> sweep;
  for (int nt = 1; nt <= kernels::kAttentionMaxBlockTokens; ++nt) {
    const int32_t windows[] = {0, 13, 40, 1};
    const float caps[] = {0.0f, 2.5f, 0.0f, 20.0f};
    sweep.push_back(Case{nt, static_cast<int32_t>((nt * 37) % (100 - nt)), windows[nt % 4], caps[nt % 4], nt % 3});
    sweep.push_back(Case{nt, static_cast<int32_t>(100 - nt), windows[(nt + 1) % 4], caps[(nt + 3) % 4], (nt + 1) % 3});
  }
  const Shape shapes[] = {{1, 64, 64, 16}, {3, 64, 64, 32}, {4, 256, 256, 32}, {7, 64, 64, 8},
                          {4, 128, 128, 64}, {2, 40, 20, 13}, {5, 24, 8, 7}};
  for (const kernels::KernelTable* t : simd) {
    const kernels::Isa isa = t->isa;
    for (const Shape& sh : shapes)
      for (DType dt : {DType::F32, DType::F16, DType::Q8_0}) {
        if (dt == DType::Q8_0 && (sh.hd_k % 32 || sh.hd_v % 32)) continue;
        const float e = max_error(*t, dt, 7 * sh.n_q + sh.hd_k + static_cast<int>(dt), false, &ref, sh, sweep, 100);
        if (!(e < 1e-4f))
          std::fprintf(stderr, "%s %s n_q %d hd %d/%d page %d: max error %g vs generic\n", kernels::isa_name(isa),
                       dtype_name(dt), sh.n_q, sh.hd_k, sh.hd_v, sh.page_size, e);
        CHECK(e < 1e-4f);
      }
  }
  // exact_rows (speculative verification): a block reproduces each token's one-token result bit
  // for bit on every table, at every block size, with windows and page runs cut anywhere, at the
  // group sizes where the one-token path is row-wise (1, 2, 3), tiled 8-lane (5-7, 4 at 128) and
  // 16-lane (4 at 256, 8+), and at head dims that are not a multiple of 16 (the P·V tail).
  const Shape exact_shapes[] = {{1, 64, 64, 16}, {3, 64, 64, 32}, {4, 256, 256, 32}, {6, 128, 128, 16},
                                {7, 64, 64, 8},  {8, 128, 128, 16}, {2, 40, 24, 13}, {6, 72, 40, 7},
                                {5, 24, 8, 7},   {12, 64, 64, 16}};
  std::vector<const kernels::KernelTable*> tables = {&ref};
  tables.insert(tables.end(), simd.begin(), simd.end());
  for (const kernels::KernelTable* t : tables)
    for (const Shape& sh : exact_shapes)
      for (DType dt : {DType::F32, DType::F16, DType::Q8_0}) {
        if (dt == DType::Q8_0 && (sh.hd_k % 32 || sh.hd_v % 32)) continue;
        const int bad = exact_rows_mismatches(*t, dt, 31 * sh.n_q + sh.hd_v + static_cast<int>(dt), sh, sweep, 100);
        if (bad)
          std::fprintf(stderr, "%s %s n_q %d hd %d/%d page %d: %d outputs of exact_rows blocks differ from one-token blocks\n",
                       kernels::isa_name(t->isa), dtype_name(dt), sh.n_q, sh.hd_k, sh.hd_v, sh.page_size, bad);
        CHECK(bad == 0);
      }
  return test_util::report();
}
