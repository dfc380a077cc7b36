// KernelTable::gemm_f32 (kernels/gemm_kernels.h) for the x86 tables: register tiles of MR rows of
// C × NV vectors of columns; per k step NV vectors of B's row are loaded and each of the MR A
// elements is broadcast against them (MR·NV FMAs, no horizontal sums). The last column vector of
// a row is masked where n is not a multiple of the lanes. K is cut into kGemmKc-step slices so the B
// panel a tile row walks (kGemmKc × NV vectors) stays in L1 across the M tiles; C is written on the
// first slice and accumulated on the others. V is the vector type below: 8 lanes (AVX2, 16
// registers: 4 × 2 tiles) or 16 lanes (AVX-512, 32 registers: 4 × 4 tiles, 4 × 5 where n is 65..80).
#pragma once
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "kernels/gemm_kernels.h"
#include "kernels/kernels.h"
#include "kernels/x86/simd_x86.h"

namespace edgellm::kernels {
namespace {

struct GemmVec256 {
  using F = __m256;
  static constexpr int kLanes = 8;
  static F zero() { return _mm256_setzero_ps(); }
  static F bcast(const float* p) { return _mm256_broadcast_ss(p); }
  static F set1(float f) { return _mm256_set1_ps(f); }
  static F fmadd(F a, F b, F acc) { return _mm256_fmadd_ps(a, b, acc); }
  static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F add(F a, F b) { return _mm256_add_ps(a, b); }
  static __m256i mask(int n) {  // lanes [0, n) set
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  template <bool M>
  static F load(const float* p, int n) {
    if constexpr (M) return _mm256_maskload_ps(p, mask(n));
    else return _mm256_loadu_ps(p);
  }
  template <bool M>
  static void store(float* p, F v, int n) {
    if constexpr (M) _mm256_maskstore_ps(p, mask(n), v);
    else _mm256_storeu_ps(p, v);
  }
};

#if defined(__AVX512F__)
struct GemmVec512 {
  using F = __m512;
  static constexpr int kLanes = 16;
  static F zero() { return _mm512_setzero_ps(); }
  static F bcast(const float* p) { return _mm512_set1_ps(*p); }
  static F set1(float f) { return _mm512_set1_ps(f); }
  static F fmadd(F a, F b, F acc) { return _mm512_fmadd_ps(a, b, acc); }
  static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F add(F a, F b) { return _mm512_add_ps(a, b); }
  static __mmask16 mask(int n) { return static_cast<__mmask16>((1u << n) - 1u); }
  template <bool M>
  static F load(const float* p, int n) {
    if constexpr (M) return _mm512_maskz_loadu_ps(mask(n), p);
    else return _mm512_loadu_ps(p);
  }
  template <bool M>
  static void store(float* p, F v, int n) {
    if constexpr (M) _mm512_mask_storeu_ps(p, mask(n), v);
    else _mm512_storeu_ps(p, v);
  }
};
#endif

constexpr int64_t kGemmKc = 128;  // k steps per slice

// The tile loops unrolled in full, so the sums stay in registers (GCC at -O2 leaves a 5-trip loop
// rolled and keeps acc[][] on the stack).
#if defined(__clang__)
#define EDGELLM_GEMM_UNROLL _Pragma("unroll")
#else
#define EDGELLM_GEMM_UNROLL _Pragma("GCC unroll 8")
#endif  // k steps per slice

// C[i0 + i][j0 + ...] for i < R, NV vectors of columns (the last one `tail` lanes when M), over
// k steps [p0, p0 + kk); add: accumulate into C (else overwrite).
template <class V, int R, int NV, bool M>
void gemm_tile(const GemmArgs& g, int64_t i0, int64_t j0, int64_t p0, int64_t kk, int tail, bool add) {
  using F = typename V::F;
  F acc[R][NV];
  EDGELLM_GEMM_UNROLL
  for (int i = 0; i < R; ++i)
    EDGELLM_GEMM_UNROLL
    for (int v = 0; v < NV; ++v) acc[i][v] = V::zero();
  const float* a = g.a + i0 * g.lda + p0;
  const float* b = g.b + p0 * g.ldb + j0;
  for (int64_t p = 0; p < kk; ++p, b += g.ldb) {
    F bv[NV];
    EDGELLM_GEMM_UNROLL
    for (int v = 0; v < NV; ++v)
      bv[v] = (M && v == NV - 1) ? V::template load<M>(b + v * V::kLanes, tail) : V::template load<false>(b + v * V::kLanes, 0);
    EDGELLM_GEMM_UNROLL
    for (int i = 0; i < R; ++i) {
      const F av = V::bcast(a + i * g.lda + p);
      EDGELLM_GEMM_UNROLL
      for (int v = 0; v < NV; ++v) acc[i][v] = V::fmadd(av, bv[v], acc[i][v]);
    }
  }
  const F alpha = V::set1(g.alpha);
  EDGELLM_GEMM_UNROLL
  for (int i = 0; i < R; ++i) {
    float* c = g.c + (i0 + i) * g.ldc + j0;
    EDGELLM_GEMM_UNROLL
    for (int v = 0; v < NV; ++v) {
      F r = V::mul(acc[i][v], alpha);
      if (M && v == NV - 1) {
        if (add) r = V::add(V::template load<true>(c + v * V::kLanes, tail), r);
        V::template store<true>(c + v * V::kLanes, r, tail);
      } else {
        if (add) r = V::add(V::template load<false>(c + v * V::kLanes, 0), r);
        V::template store<false>(c + v * V::kLanes, r, 0);
      }
    }
  }
}

// Rows [0, m) of one column panel: full MR-row tiles, then one tile of the remaining rows.
template <class V, int MR, int NV, bool M>
void gemm_panel(const GemmArgs& g, int64_t j0, int64_t p0, int64_t kk, int tail, bool add) {
  int64_t i = 0;
  for (; i + MR <= g.m; i += MR) gemm_tile<V, MR, NV, M>(g, i, j0, p0, kk, tail, add);
  const int64_t rest = g.m - i;
  if constexpr (MR > 1) {
    if (rest == 0) return;
    if constexpr (MR > 3)
      if (rest >= 3) {
        gemm_tile<V, 3, NV, M>(g, i, j0, p0, kk, tail, add);
        i += 3;
        if (rest == 3) return;
      }
    if (g.m - i >= 2) {
      gemm_tile<V, 2, NV, M>(g, i, j0, p0, kk, tail, add);
      i += 2;
    }
    if (g.m - i == 1) gemm_tile<V, 1, NV, M>(g, i, j0, p0, kk, tail, add);
  }
}

// A panel of nv < NV vectors (the right edge), the last masked when M.
template <class V, int MR, int NV, bool M>
void gemm_edge(const GemmArgs& g, int nv, int64_t j0, int64_t p0, int64_t kk, int tail, bool add) {
  if constexpr (NV >= 1) {
    if (nv == NV) return gemm_panel<V, MR, NV, M>(g, j0, p0, kk, tail, add);
    if constexpr (NV > 1) gemm_edge<V, MR, NV - 1, M>(g, nv, j0, p0, kk, tail, add);
  }
}

template <class V, int MR, int NV>
void gemm_f32_run(const GemmArgs& g) {
  constexpr int64_t kPanel = NV * V::kLanes;
  if (g.k <= 0) {  // an empty sum: C = 0 (or unchanged)
    if (!g.accumulate)
      for (int64_t i = 0; i < g.m; ++i) std::fill(g.c + i * g.ldc, g.c + i * g.ldc + g.n, 0.0f);
    return;
  }
  for (int64_t p0 = 0; p0 < g.k; p0 += kGemmKc) {
    const int64_t kk = std::min(kGemmKc, g.k - p0);
    const bool add = g.accumulate || p0 > 0;
    int64_t j0 = 0;
    for (; j0 + kPanel <= g.n; j0 += kPanel) gemm_panel<V, MR, NV, false>(g, j0, p0, kk, V::kLanes, add);
    const int64_t w = g.n - j0;
    if (w == 0) continue;
    const int nv = static_cast<int>((w + V::kLanes - 1) / V::kLanes);
    const int tail = static_cast<int>(w - (nv - 1) * V::kLanes);
    if (tail == V::kLanes) gemm_edge<V, MR, NV, false>(g, nv, j0, p0, kk, tail, add);
    else gemm_edge<V, MR, NV, true>(g, nv, j0, p0, kk, tail, add);
  }
}

// One panel of NWide vectors where n just exceeds NV vectors (a head dimension of 72 = 4.5
// vectors of 16: one 4 × 5 tile instead of a 4-vector panel and a mostly masked 1-vector one).
template <class V, int MR, int NV, int NWide>
void gemm_f32_x86(const GemmArgs& g) {
  if (g.m <= 0 || g.n <= 0) return;
  if (NWide > NV && g.n > NV * V::kLanes && g.n <= NWide * V::kLanes) return gemm_f32_run<V, MR, NWide>(g);
  gemm_f32_run<V, MR, NV>(g);
}

}  // namespace
}  // namespace edgellm::kernels
