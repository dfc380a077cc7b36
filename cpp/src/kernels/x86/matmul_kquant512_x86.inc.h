// AVX-512 (512-bit) form of the K-quant matmul (Q4_K, Q5_K, Q6_K against Q8_K activations).
// Only the AVX-512 unit includes this file; Q2_K / Q3_K stay on the 256-bit body of
// matmul_kquant_x86.inc.h (rare formats, not worth a second body).
//
// Same result as the 256-bit form — per super-block and (row, column) exact int32 dots of
// 16-element groups, then y += d_x·Σ_m (d·scale_m·dot_m − dmin'·min'_m·bsum_m) in f32 — with
// the int8 work in one vpdpbusd per 64 products instead of vpmaddubsw + vpdpwssd per 32:
//
// * Lane-major order. vpdpbusd sums 4 adjacent byte products into a dword, so one accumulator
//   can serve a whole super-block only if every dword lane m always sees elements of the same
//   scale. Both operands are therefore loaded in a permuted order: register g (0..3), dword m
//   (0..15) holds elements 16m+4g .. 16m+4g+3. Lane m then accumulates exactly the 16 elements
//   16m..16m+15 — activation sum bsum_m, and one scale in every K-quant (Q6_K: scale m; Q4_K /
//   Q5_K: sub-block m/2). The activation side is a fixed transpose, done once per column block
//   (~256 KB, L2-sized) into a per-thread scratch buffer (prepare_columns); the weight side is one dword
//   permute of the packed quants per register, then the usual nibble / high-bit unpacking,
//   reused for the C columns of a tile.
// * Scales in f32 per lane. dsc_m = d·scale_m and fmin_m = dmin'·min'_m are 16-lane vectors
//   per row, so a (row, column) pair costs 4 vpdpbusd + cvt + mul + 2 FMA per super-block. The
//   min term shares the main term's accumulator lanes (only their horizontal sum is the result).
//   Q6_K's min is 32·scale with the same d: it is folded into the integer accumulator instead
//   (initialised to −32·bsum_m per column), one FMA fewer.
//
// Tiles are R rows × C columns with C up to kCols (its own runner: run_tiles' 4-column
// grouping is shared with the other matmuls; wider column groups amortize the per-row unpacking,
// which costs about as much as the dots of 4 columns); decode (one column) keeps R-row tiles and
// the one-tile-ahead prefetch of the next row group.
#pragma once
#include <algorithm>
#include <cstddef>
#include <vector>

#include "kernels/x86/matmul_kquant_x86.inc.h"


// The tile body must become straight-line code over registers: GCC otherwise keeps a call to the
// row unpacking and leaves the R×C accumulator array in memory, rolled over i (measured: a third
// slower). `flatten` inlines every call in the tile, the pragmas fully unroll its loops (which
// also folds lanes32's tables into constants).
#define EDGELLM_K512_FLATTEN __attribute__((flatten))
#define EDGELLM_K512_UNROLL _Pragma("GCC unroll 16")

namespace edgellm::kernels {
namespace {

// Dword-lane constant vector, lane m = f(m).
template <class F>
inline __m512i lanes32(F f) {
  alignas(64) int32_t v[16];
  EDGELLM_K512_UNROLL
  for (int m = 0; m < 16; ++m) v[m] = f(m);
  return _mm512_load_si512(v);
}

// One column's activations for one super-block, prepared once per matmul call (see prepare_columns).
struct alignas(64) KCol512 {
  int8_t q[4][64];  // register g, dword m: activation elements 16m+4g .. +3
  union {
    float fb[16];       // Q4_K / Q5_K: d_x·bsum_m (min term)
    int32_t init[16];   // Q6_K: −32·bsum_m, the integer accumulator's start
  };
  float dx;
};

// 64 activation dwords X (element order) → register g dword m = X[4m+g]. Two-source dword
// permutes gather lanes 0..7 of two outputs from each half of the input, then 256-bit halves pair up.
inline void transpose_act(const int8_t* qs, int8_t out[4][64]) {
  const __m512i x0 = _mm512_loadu_si512(qs), x1 = _mm512_loadu_si512(qs + 64);
  const __m512i x2 = _mm512_loadu_si512(qs + 128), x3 = _mm512_loadu_si512(qs + 192);
  const __m512i ia = _mm512_set_epi32(29, 25, 21, 17, 13, 9, 5, 1, 28, 24, 20, 16, 12, 8, 4, 0);
  const __m512i ib = _mm512_set_epi32(31, 27, 23, 19, 15, 11, 7, 3, 30, 26, 22, 18, 14, 10, 6, 2);
  const __m512i ta = _mm512_permutex2var_epi32(x0, ia, x1), tb = _mm512_permutex2var_epi32(x0, ib, x1);
  const __m512i tc = _mm512_permutex2var_epi32(x2, ia, x3), td = _mm512_permutex2var_epi32(x2, ib, x3);
  _mm512_store_si512(out[0], _mm512_shuffle_i64x2(ta, tc, _MM_SHUFFLE(1, 0, 1, 0)));
  _mm512_store_si512(out[1], _mm512_shuffle_i64x2(ta, tc, _MM_SHUFFLE(3, 2, 3, 2)));
  _mm512_store_si512(out[2], _mm512_shuffle_i64x2(tb, td, _MM_SHUFFLE(1, 0, 1, 0)));
  _mm512_store_si512(out[3], _mm512_shuffle_i64x2(tb, td, _MM_SHUFFLE(3, 2, 3, 2)));
}

// Columns [c0, c1) in KCol512 form, in this thread's scratch buffer (column-major: column c,
// super-block b at [(c − c0)·nb + b]). Done once per column block instead of once per row group:
// the transpose costs as much as the int8 dots of a few rows. Each thread of a parallel matmul
// prepares the columns it reads itself (cheap next to its rows' dots; no synchronisation).
template <bool kMinTerm>
const KCol512* prepare_columns(const MatmulArgs& a, int64_t c0, int64_t c1) {
  static thread_local std::vector<KCol512> scratch;
  const int64_t nb = a.K / QK_K;
  const size_t n = static_cast<size_t>(nb * (c1 - c0));
  if (scratch.size() < n) scratch.resize(n);
  KCol512* out = scratch.data();
  for (int64_t j = c0; j < c1; ++j) {
    const block_q8_K* x = act_row_k(a, j);
    for (int64_t b = 0; b < nb; ++b) {
      KCol512& col = out[(j - c0) * nb + b];
      transpose_act(x[b].qs, col.q);
      col.dx = x[b].d;
      const __m512i bs = _mm512_cvtepi16_epi32(load256(x[b].bsums));
      if constexpr (kMinTerm)
        _mm512_store_ps(col.fb, _mm512_mul_ps(_mm512_cvtepi32_ps(bs), _mm512_set1_ps(x[b].d)));
      else
        _mm512_store_si512(col.init, _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(bs, 5)));
    }
  }
  return out;
}

// One super-block of one weight row: quants in lane-major order plus per-lane f32 scales.
struct KRow512 {
  __m512i u[4];  // unsigned quants, same order as KCol512::q
  __m512 dsc;    // d·scale_m
  __m512 fmin;   // dmin'·min'_m, subtracted (unused by Q6_K)
};

// Q4_K / Q5_K: the 12 bytes of 6-bit scales and mins (same layout as unpack_scales_mins_k4, in
// vector form: no scalar round trip) → per-lane f32, lane m: sub-block m/2. `s` points at the
// scales; 16 bytes are read (the 4 after them are the block's quants). `dh`: the block, which
// starts with the fp16 d and dmin.
inline void scales_k4_512(const uint8_t* s, const void* dh, KRow512& k) {
  static_assert(offsetof(block_q4_K, dmin) == 2 && offsetof(block_q5_K, dmin) == 2, "d, dmin first");
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s));  // dwords s0-3, s4-7, s8-11
  // dword 0: s0-3 & 63 (scales 0-3); 1: s8-11 & 15 | (s0-3 >> 6) << 4 (scales 4-7);
  // dword 2: s4-7 & 63 (mins 0-3);   3: s8-11 >> 4 | (s4-7 >> 6) << 4 (mins 4-7).
  const __m128i lo = _mm_srlv_epi32(_mm_shuffle_epi32(v, _MM_SHUFFLE(2, 1, 2, 0)), _mm_setr_epi32(0, 0, 0, 4));
  const __m128i hi = _mm_and_si128(_mm_srli_epi32(_mm_shuffle_epi32(v, _MM_SHUFFLE(1, 1, 0, 0)), 2),
                                   _mm_setr_epi32(0, 0x30303030, 0, 0x30303030));
  const __m128i m = _mm_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f);
  const __m128i sm = _mm_ternarylogic_epi32(lo, m, hi, 0xEA);  // (lo & m) | hi
  const __m512 sc = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_unpacklo_epi8(sm, sm)));
  const __m512 mn = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_unpackhi_epi8(sm, sm)));
  uint32_t dd;
  std::memcpy(&dd, dh, 4);
  const __m512 d2 = _mm512_castps128_ps512(_mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(dd))));  // d, dmin
  k.dsc = _mm512_mul_ps(sc, _mm512_permutexvar_ps(_mm512_setzero_si512(), d2));
  k.fmin = _mm512_mul_ps(mn, _mm512_permutexvar_ps(_mm512_set1_epi32(1), d2));
}

// Q4_K / Q5_K nibbles: element 64c + 32h + l is nibble h of qs[32c + l]. Dword m = 4c + 2h + p of
// register g holds elements 16m+4g.. = 64c + 32h + (16p + 4g).., i.e. nibble h of qs dword 8c + 4p + g.
inline void nibbles_k4_512(const uint8_t* qs, __m512i u[4]) {
  const __m512i q0 = _mm512_loadu_si512(qs), q1 = _mm512_loadu_si512(qs + 64);
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  EDGELLM_K512_UNROLL
  for (int g = 0; g < 4; ++g) {
    const __m512i idx = lanes32([g](int m) { return 8 * (m / 4) + 4 * (m % 2) + g; });
    const __m512i q = _mm512_permutex2var_epi32(q0, idx, q1);
    u[g] = _mm512_and_si512(_mm512_mask_srli_epi32(q, 0xCCCC, q, 4), low4);  // h = 1 lanes: high nibble
  }
}

struct K4x512 {
  static constexpr DType kType = DType::Q4_K;
  static constexpr bool kMinTerm = true;
  using Block = block_q4_K;
  static void row(const Block& b, KRow512& k) {
    scales_k4_512(b.scales, &b, k);
    nibbles_k4_512(b.qs, k.u);
  }
};

struct K5x512 {
  static constexpr DType kType = DType::Q5_K;
  static constexpr bool kMinTerm = true;
  using Block = block_q5_K;
  static void row(const Block& b, KRow512& k) {
    scales_k4_512(b.scales, &b, k);
    nibbles_k4_512(b.qs, k.u);
    // 5th bit of element 64c + 32h + l: bit 2c + h of qh[l]; l = 16p + 4g + t → qh dword 4p + g.
    const __m512i qh = _mm512_zextsi256_si512(load256(b.qh));
    const __m512i bit = lanes32([](int m) { return 0x01010101 << (2 * (m / 4) + (m / 2) % 2); });
    EDGELLM_K512_UNROLL
    for (int g = 0; g < 4; ++g) {
      const __m512i h = _mm512_permutexvar_epi32(lanes32([g](int m) { return 4 * (m % 2) + g; }), qh);
      k.u[g] = _mm512_mask_add_epi8(k.u[g], _mm512_test_epi8_mask(h, bit), k.u[g], _mm512_set1_epi8(16));
    }
  }
};

struct K6x512 {
  static constexpr DType kType = DType::Q6_K;
  static constexpr bool kMinTerm = false;  // folded into KCol512::init
  using Block = block_q6_K;
  static void row(const Block& b, KRow512& k) {
    const __m512 sc = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales))));
    k.dsc = _mm512_mul_ps(sc, _mm512_set1_ps(half_to_float(b.d)));
    k.fmin = _mm512_setzero_ps();
    // Half H = m/8 holds elements 128H + e', e' = 32q + l (q = (m%8)/2, l = 16(m%2) + 4g + t):
    // low 4 bits = nibble q/2 of ql[64H + 32(q%2) + l] (dword 16H + 8(q%2) + 4(m%2) + g),
    // high 2 bits = bits 2q..2q+1 of qh[32H + l] (dword 8H + 4(m%2) + g), rotated to bits 4..5.
    const __m512i l0 = _mm512_loadu_si512(b.ql), l1 = _mm512_loadu_si512(b.ql + 64);
    const __m512i qh = _mm512_loadu_si512(b.qh);
    const __m512i rot = lanes32([](int m) { return (4 - 2 * ((m % 8) / 2)) & 31; });
    const __m512i low4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
    EDGELLM_K512_UNROLL
    for (int g = 0; g < 4; ++g) {
      const __m512i il = lanes32([g](int m) { return 16 * (m / 8) + 8 * ((m % 8) / 2 % 2) + 4 * (m % 2) + g; });
      const __m512i ih = lanes32([g](int m) { return 8 * (m / 8) + 4 * (m % 2) + g; });
      const __m512i l = _mm512_permutex2var_epi32(l0, il, l1);
      const __m512i lo = _mm512_mask_srli_epi32(l, 0xF0F0, l, 4);  // q/2 = 1 lanes: high nibble
      const __m512i hi = _mm512_and_si512(_mm512_rolv_epi32(_mm512_permutexvar_epi32(ih, qh), rot), m30);
      k.u[g] = _mm512_ternarylogic_epi32(lo, low4, hi, 0xEA);  // (lo & low4) | hi
    }
  }
};

template <class T>
struct KQuant512Tile {
  template <int R, int C>
  struct Fn {
    // Rows [r, r+R) × columns [c, c+C); cols: column c's prepared super-blocks (c+j's at j·nb).
    EDGELLM_K512_FLATTEN static void run(const MatmulArgs& a, const KCol512* cols, int64_t r, int64_t c) {
      using Block = typename T::Block;
      const int64_t nb = a.K / QK_K;
      const Block* w[R];
      const KCol512* x[C];
      EDGELLM_K512_UNROLL
      for (int i = 0; i < R; ++i) w[i] = static_cast<const Block*>(a.w) + (r + i) * nb;
      EDGELLM_K512_UNROLL
      for (int j = 0; j < C; ++j) x[j] = cols + j * nb;

      __m512 acc[R][C];
      EDGELLM_K512_UNROLL
      for (int i = 0; i < R; ++i)
        EDGELLM_K512_UNROLL
        for (int j = 0; j < C; ++j) acc[i][j] = _mm512_setzero_ps();

      for (int64_t b = 0; b < nb; ++b) {
        EDGELLM_K512_UNROLL
        for (int i = 0; i < R; ++i) {
          // Reload the activations per row (memory operands of vpdpbusd) rather than letting GCC
          // hoist all C columns into registers across rows, which spills the accumulators instead.
          asm volatile("" ::: "memory");
          const Block& wb = w[i][b];
          // Prefetch the same block of the next row group one tile ahead (see matmul_kquant_x86.inc.h).
          const char* next = reinterpret_cast<const char*>(&wb) + R * nb * sizeof(Block);
          for (size_t off = 0; off < sizeof(Block); off += 64) _mm_prefetch(next + off, _MM_HINT_T0);
          KRow512 k;
          T::row(wb, k);
          EDGELLM_K512_UNROLL
          for (int j = 0; j < C; ++j) {
            const KCol512& xb = x[j][b];
            __m512i s = T::kMinTerm ? _mm512_setzero_si512() : _mm512_load_si512(xb.init);
            EDGELLM_K512_UNROLL
            for (int g = 0; g < 4; ++g) s = _mm512_dpbusd_epi32(s, k.u[g], _mm512_load_si512(xb.q[g]));
            const __m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(s), k.dsc);
            acc[i][j] = _mm512_fmadd_ps(v, _mm512_set1_ps(xb.dx), acc[i][j]);
            if constexpr (T::kMinTerm) acc[i][j] = _mm512_fnmadd_ps(k.fmin, _mm512_load_ps(xb.fb), acc[i][j]);
          }
        }
      }
      EDGELLM_K512_UNROLL
      for (int i = 0; i < R; ++i)
        EDGELLM_K512_UNROLL
        for (int j = 0; j < C; ++j) a.y[(c + j) * a.ldy + r + i] = _mm512_reduce_add_ps(acc[i][j]);
    }
  };
};

// The last `left` (< kCols) columns of a block: one tile of exactly that width.
template <template <int, int> class TileFn, int R, int N>
inline void run_column_tail512(const MatmulArgs& a, const KCol512* cols, int64_t r, int64_t c, int64_t left) {
  if constexpr (N > 0) {
    if (left == N)
      TileFn<R, N>::run(a, cols, r, c);
    else
      run_column_tail512<TileFn, R, N - 1>(a, cols, r, c, left);
  }
}

// Rows [r, r+R) × columns [c0, c1) in kCols-wide groups; `cols` holds the block's prepared columns.
template <template <int, int> class TileFn, int R, int kCols>
inline void run_column_groups512(const MatmulArgs& a, const KCol512* cols, int64_t r, int64_t c0, int64_t c1) {
  const int64_t nb = a.K / QK_K;
  int64_t c = c0;
  for (; c + kCols <= c1; c += kCols) TileFn<R, kCols>::run(a, cols + (c - c0) * nb, r, c);
  run_column_tail512<TileFn, R, kCols - 1>(a, cols + (c - c0) * nb, r, c, c1 - c);
}

// Prepared columns per block: small enough to stay in L2 (1 MB+ on AVX-512 cores) together with
// the weight rows swept across them; the weights are read again once per block (from L2 when the
// caller's row chunk fits there, as the parallel matmul's chunks do).
constexpr size_t kK512ColumnBlockBytes = 256u << 10;

// Column blocks outside (prepare, then sweep); inside, like run_tiles: row groups outside, column
// groups inside (a group of R weight rows stays in L1 across the block's columns).
template <class T, int kDecodeRows, int kTileRows, int kCols>
void matmul_kquant512(const MatmulArgs& a) {
  if (a.K % QK_K != 0) throw_bad_row_length("matmul", T::kType, a.K);
  if (a.r0 >= a.r1 || a.ncols <= 0) return;
  using Tile = KQuant512Tile<T>;
  const int64_t nb = a.K / QK_K;
  if (a.ncols == 1) {
    const KCol512* cols = prepare_columns<T::kMinTerm>(a, 0, 1);
    int64_t r = a.r0;
    for (; r + kDecodeRows <= a.r1; r += kDecodeRows) Tile::template Fn<kDecodeRows, 1>::run(a, cols, r, 0);
    for (; r < a.r1; ++r) Tile::template Fn<1, 1>::run(a, cols, r, 0);
    return;
  }
  const int64_t fit = static_cast<int64_t>(kK512ColumnBlockBytes / (nb * sizeof(KCol512)));
  const int64_t block = std::max<int64_t>(kCols, fit / kCols * kCols);
  for (int64_t c0 = 0; c0 < a.ncols; c0 += block) {
    const int64_t c1 = std::min(a.ncols, c0 + block);
    const KCol512* cols = prepare_columns<T::kMinTerm>(a, c0, c1);
    int64_t r = a.r0;
    for (; r + kTileRows <= a.r1; r += kTileRows)
      run_column_groups512<Tile::template Fn, kTileRows, kCols>(a, cols, r, c0, c1);
    for (; r < a.r1; ++r) run_column_groups512<Tile::template Fn, 1, kCols>(a, cols, r, c0, c1);
  }
}

// Q4_K / Q5_K / Q6_K on the 512-bit tiles; Q2_K / Q3_K keep the 256-bit ones (fill that first).
template <int kDecodeRows, int kTileRows, int kCols>
void fill_matmul_kquant_avx512(KernelTable& t) {
  t.matmul[static_cast<int>(DType::Q4_K)] = matmul_kquant512<K4x512, kDecodeRows, kTileRows, kCols>;
  t.matmul[static_cast<int>(DType::Q5_K)] = matmul_kquant512<K5x512, kDecodeRows, kTileRows, kCols>;
  t.matmul[static_cast<int>(DType::Q6_K)] = matmul_kquant512<K6x512, kDecodeRows, kTileRows, kCols>;
}

}  // namespace
}  // namespace edgellm::kernels
