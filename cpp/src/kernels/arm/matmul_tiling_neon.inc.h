// Register tiling shared by every NEON matmul: an R-row × C-column tile computes R·C dot products
// in one pass over K, so each weight block is unpacked once per tile and reused for C activation
// columns (prefill), while decode (ncols = 1) streams R weight rows at once to keep independent
// accumulation chains in flight. Row groups are the outer loop: a group of R weight rows stays
// in L1 while the activation columns come from L2, so weights are read from memory once per call.
#pragma once
#include "kernels/kernels.h"

namespace edgellm::kernels {
namespace {

// TileFn<R, C>::run(args, r, c) computes rows [r, r+R) × columns [c, c+C).
template <template <int, int> class TileFn, int R>
inline void neon_column_groups(const MatmulArgs& a, int64_t r) {
  int64_t c = 0;
  for (; c + 4 <= a.ncols; c += 4) TileFn<R, 4>::run(a, r, c);
  switch (a.ncols - c) {
    case 3: TileFn<R, 3>::run(a, r, c); break;
    case 2: TileFn<R, 2>::run(a, r, c); break;
    case 1: TileFn<R, 1>::run(a, r, c); break;
    default: break;
  }
}

// kDecodeRows: rows per tile when ncols == 1; kTileRows: rows per tile otherwise (4 columns).
template <template <int, int> class TileFn, int kDecodeRows, int kTileRows>
void neon_run_tiles(const MatmulArgs& a) {
  int64_t r = a.r0;
  if (a.ncols == 1) {
    for (; r + kDecodeRows <= a.r1; r += kDecodeRows) TileFn<kDecodeRows, 1>::run(a, r, 0);
    for (; r < a.r1; ++r) TileFn<1, 1>::run(a, r, 0);
    return;
  }
  for (; r + kTileRows <= a.r1; r += kTileRows) neon_column_groups<TileFn, kTileRows>(a, r);
  for (; r < a.r1; ++r) neon_column_groups<TileFn, 1>(a, r);
}

}  // namespace
}  // namespace edgellm::kernels
