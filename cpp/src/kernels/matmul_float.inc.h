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

template <class V, int kDecodeRows, int kTileRows>
void fill_matmul_float(KernelTable& t) {
  t.matmul[static_cast<int>(DType::F32)] = run_tiles<FloatTile<V, DType::F32>::template Fn, kDecodeRows, kTileRows>;
  t.matmul[static_cast<int>(DType::F16)] = run_tiles<FloatTile<V, DType::F16>::template Fn, kDecodeRows, kTileRows>;
  t.matmul[static_cast<int>(DType::BF16)] = run_tiles<FloatTile<V, DType::BF16>::template Fn, kDecodeRows, kTileRows>;
}

}  // namespace
}  // namespace edgellm::kernels
