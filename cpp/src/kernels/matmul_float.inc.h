// Matmul for float weights: F32 × F32, F16 × F16, BF16 × BF16, the one tile skeleton of every
// ISA. Products accumulate in f32 lanes; each V::kLanes-element weight slice is converted once per
// tile and reused for C activation columns. K need not be a multiple of the lane count (scalar
// tail).
//
// V is the ISA's f32 vector (x86/matmul_float_x86.inc.h, arm/matmul_float_neon.inc.h):
//   F, kLanes                      the register type and its lanes
//   zero(), fmadd(a, b, acc), sum  acc + a·b (fused), the horizontal sum
//   load<T>(p)                     kLanes elements of float type T as f32
//   half_to_float(h)               one F16 value
//   kPrefetch, prefetch(p)         whether (and how) to fetch the next row group one tile ahead
#pragma once
#include <cstring>
#include <type_traits>
#include <vector>

#include "kernels/tiling.inc.h"

namespace edgellm::kernels {
namespace {

template <class V, DType T>
struct FloatTile {
  using E = std::conditional_t<T == DType::F32, float, uint16_t>;

  static float load1(const E* p) {
    if constexpr (T == DType::F32) {
      return *p;
    } else if constexpr (T == DType::F16) {
      return V::half_to_float(*p);
    } else {  // BF16: the high half of an f32
      const uint32_t u = static_cast<uint32_t>(*p) << 16;
      float f;
      std::memcpy(&f, &u, 4);
      return f;
    }
  }

  template <int R, int C>
  struct Fn {
    static void run(const MatmulArgs& a, int64_t r, int64_t c) {
      const TileOperands<E, E, R, C> op(a, r, c, a.K);
      const E* const* w = op.w;
      const E* const* x = op.x;
      typename V::F acc[R][C];
      fill_tile(acc, V::zero());
      int64_t k = 0;
      constexpr int64_t kLine = 64 / sizeof(E);  // elements per cache line
      for (; k + V::kLanes <= a.K; k += V::kLanes) {
        if constexpr (V::kPrefetch)
          if (k % kLine == 0)  // the next row group's line, one tile ahead (see matmul_kquant_x86.inc.h)
            for (int i = 0; i < R; ++i) V::prefetch(w[i] + k + R * a.K);
        typename V::F wv[R];
        for (int i = 0; i < R; ++i) wv[i] = V::template load<T>(w[i] + k);
        for (int j = 0; j < C; ++j) {
          const typename V::F xv = V::template load<T>(x[j] + k);
          for (int i = 0; i < R; ++i) acc[i][j] = V::fmadd(wv[i], xv, acc[i][j]);
        }
      }
      for (int i = 0; i < R; ++i)
        for (int j = 0; j < C; ++j) {
          float s = V::sum(acc[i][j]);
          for (int64_t t = k; t < a.K; ++t) s += load1(w[i] + t) * load1(x[j] + t);
          a.y[(c + j) * a.ldy + r + i] = s;
        }
    }
  };
};

// ---- Many columns (prefill, encoders, vision towers): an outer-product GEMM ----
//
// The dot-product tile above loads a weight slice and an activation slice per FMA pair and
// ends every output in a horizontal sum; at 4 × 4 it runs F32 at ~55 % of the FMA peak. With
// ncols ≥ kGemmMinCols the call instead
//   1. packs its rows [r0, r1) one panel of G::kRowVecs · G::kLanes rows at a time into a
//      k-major F32 buffer (wp[k · width + i]; F16 / BF16 widened here, a narrower last panel
//      for the remainder) that stays in L2 while every column runs over it: one pass over
//      the weights a call, amortized over the columns (F16 / BF16 activations are widened to
//      F32 once a call; F32 ones are read in place, streamed once per panel);
//   2. runs a register-blocked micro-kernel per (panel, G::kCols columns): per k one vector
//      load per kLanes weight rows and one broadcast per column feed kRowVecs × kCols
//      independent FMAs (AVX-512: 2 × 12 zmm accumulators, AVX2: 2 × 6 ymm, NEON: 4 × 6), and
//      each accumulator is kLanes consecutive outputs of one column: stored as they are, no
//      horizontal sum. A short last group of columns reuses its first column and stores only
//      the valid ones.
// Products and sums are F32 in both paths; only the summation order differs from the tile's.
//
// G is the ISA's GEMM vector (x86/matmul_float_x86.inc.h, arm/matmul_float_neon.inc.h):
//   F, kLanes, kRowVecs, kCols    register type, lanes, vectors of rows, columns per micro-tile
//   zero(), fmadd(a, b, acc)      acc + a·b (fused)
//   load(p), bcast(p), store(p, v) kLanes floats, one float on every lane
//   widen<T>(src, dst, n)         n elements of float type T as f32 (dst may not alias src)
//   half_to_float(h)              one F16 value
//   kPackK, pack_block<T>(src, k, dst, ld)  0, or: rows src[0..kPackK) × elements [k, k+kPackK)
//                                 written transposed, dst[kk · ld + i] (the panel packing)
constexpr int64_t kGemmMinCols = 24;            // below: the dot-product tile (decode, short batches)

template <class G, DType T>
struct FloatGemm {
  using E = std::conditional_t<T == DType::F32, float, uint16_t>;
  using F = typename G::F;
  static constexpr int L = G::kLanes, kMaxVecs = G::kRowVecs, kCols = G::kCols;
  static float load1(const E* p) { return FloatTile<G, T>::load1(p); }

  // Rows [0, nrows) of a panel of nv vectors' width, one micro-tile of columns x[0..ncv).
  template <int NV>
  static void micro(const float* wp, const float* const* x, int64_t K, float* y, int64_t ldy, int nrows, int ncv) {
    F acc[NV][kCols];
    for (int v = 0; v < NV; ++v)
      for (int c = 0; c < kCols; ++c) acc[v][c] = G::zero();
    for (int64_t k = 0; k < K; ++k) {
      F w[NV];
      for (int v = 0; v < NV; ++v) w[v] = G::load(wp + k * (NV * L) + v * L);
      for (int c = 0; c < kCols; ++c) {
        const F xb = G::bcast(x[c] + k);
        for (int v = 0; v < NV; ++v) acc[v][c] = G::fmadd(w[v], xb, acc[v][c]);
      }
    }
    // (constant indices only: a runtime index into acc would keep it in memory, in the loop too)
#pragma GCC unroll 32
    for (int c = 0; c < kCols; ++c)
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) {
        if (c >= ncv) continue;
        float* out = y + c * ldy + v * L;
        const int n = nrows - v * L;
        if (n >= L) {
          G::store(out, acc[v][c]);
        } else if (n > 0) {
          alignas(64) float tmp[L];
          G::store(tmp, acc[v][c]);
          for (int i = 0; i < n; ++i) out[i] = tmp[i];
        }
      }
  }

  template <int NV>
  static void panel_columns(const float* wp, const float* const* xrows, int64_t cn, int64_t K, float* y, int64_t ldy,
                            int nrows) {
    for (int64_t j = 0; j < cn; j += kCols) {
      const int ncv = static_cast<int>(cn - j < kCols ? cn - j : kCols);
      const float* x[kCols];
      for (int c = 0; c < kCols; ++c) x[c] = xrows[j + (c < ncv ? c : 0)];
      micro<NV>(wp, x, K, y + j * ldy, ldy, nrows, ncv);
    }
  }

  // Dispatch on the panel's width in vectors (1 .. kMaxVecs).
  template <int NV = kMaxVecs>
  static void panel(int nv, const float* wp, const float* const* xrows, int64_t cn, int64_t K, float* y, int64_t ldy,
                    int nrows) {
    if constexpr (NV > 1)
      if (nv < NV) return panel<NV - 1>(nv, wp, xrows, cn, K, y, ldy, nrows);
    panel_columns<NV>(wp, xrows, cn, K, y, ldy, nrows);
  }

  static void run(const MatmulArgs& a) {
    const int64_t K = a.K, rows = a.r1 - a.r0;
    if (rows <= 0 || a.ncols <= 0) return;
    constexpr int64_t kPanel = kMaxVecs * L;
    thread_local std::vector<float> wbuf, xbuf;
    thread_local std::vector<const float*> xrows;
    // The activation rows as f32: F32 read in place, F16 / BF16 widened once per call.
    if (xrows.size() < static_cast<size_t>(a.ncols)) xrows.resize(a.ncols);
    if constexpr (T != DType::F32)
      if (xbuf.size() < static_cast<size_t>(a.ncols * K)) xbuf.resize(a.ncols * K);
    for (int64_t j = 0; j < a.ncols; ++j) {
      const E* src = reinterpret_cast<const E*>(static_cast<const uint8_t*>(a.x) + j * a.x_stride);
      if constexpr (T == DType::F32) {
        xrows[j] = src;
      } else {
        G::template widen<T>(src, xbuf.data() + j * K, K);
        xrows[j] = xbuf.data() + j * K;
      }
    }
    if (wbuf.size() < static_cast<size_t>(kPanel * K)) wbuf.resize(kPanel * K);
    float* const wp = wbuf.data();
    for (int64_t pr = 0; pr < rows; pr += kPanel) {
      // Pack the panel (L2-resident while every column runs over it): wp[k · width + i].
      const int64_t nr = rows - pr < kPanel ? rows - pr : kPanel;
      const int nv = static_cast<int>((nr + L - 1) / L);
      const int64_t width = nv * L;
      const E* src[kPanel];
      for (int64_t i = 0; i < width; ++i) src[i] = static_cast<const E*>(a.w) + (a.r0 + pr + (i < nr ? i : 0)) * K;
      int64_t k = 0;
      if constexpr (G::kPackK > 0)  // blocks of kPackK rows × kPackK k transposed in registers
        for (; k + G::kPackK <= K; k += G::kPackK)
          for (int64_t i = 0; i < width; i += G::kPackK) G::template pack_block<T>(src + i, k, wp + k * width + i, width);
      for (; k < K; ++k)
        for (int64_t i = 0; i < width; ++i) wp[k * width + i] = load1(src[i] + k);
      if (nr < width)  // the rows past the matrix were read from its first row: zero them
        for (int64_t kk = 0; kk < K; ++kk)
          for (int64_t i = nr; i < width; ++i) wp[kk * width + i] = 0.0f;
      panel(nv, wp, xrows.data(), a.ncols, K, a.y + a.r0 + pr, a.ldy, static_cast<int>(nr));
    }
  }
};

// The float matmul with the GEMM path: the tile below kGemmMinCols columns.
template <class V, class G, DType T, int kDecodeRows, int kTileRows>
void matmul_float(const MatmulArgs& a) {
  if (a.ncols >= kGemmMinCols)
    FloatGemm<G, T>::run(a);
  else
    run_tiles<FloatTile<V, T>::template Fn, kDecodeRows, kTileRows>(a);
}

// t.matmul (the tile: every column's sums in the same order whatever the column count) and
// t.matmul_wide (the GEMM from kGemmMinCols columns) for F32, F16 and BF16 weights: V the tile's
// vector, G the GEMM's.
template <class V, class G, int kDecodeRows, int kTileRows>
void fill_matmul_float_gemm(KernelTable& t) {
  t.matmul[static_cast<int>(DType::F32)] = run_tiles<FloatTile<V, DType::F32>::template Fn, kDecodeRows, kTileRows>;
  t.matmul[static_cast<int>(DType::F16)] = run_tiles<FloatTile<V, DType::F16>::template Fn, kDecodeRows, kTileRows>;
  t.matmul[static_cast<int>(DType::BF16)] = run_tiles<FloatTile<V, DType::BF16>::template Fn, kDecodeRows, kTileRows>;
  t.matmul_wide[static_cast<int>(DType::F32)] = matmul_float<V, G, DType::F32, kDecodeRows, kTileRows>;
  t.matmul_wide[static_cast<int>(DType::F16)] = matmul_float<V, G, DType::F16, kDecodeRows, kTileRows>;
  t.matmul_wide[static_cast<int>(DType::BF16)] = matmul_float<V, G, DType::BF16, kDecodeRows, kTileRows>;
}

}  // namespace
}  // namespace edgellm::kernels
