// Register tiling shared by every GGUF-layout matmul, whatever the ISA (x86/, arm/): an R-row ×
// C-column tile computes R·C dot products in one pass over K, so each weight block is loaded and
// unpacked once per tile and reused for C activation columns ("prefill as GEMM"), while decode
// (ncols = 1) streams R weight rows at once to keep several independent accumulation chains in
// flight.
//
// Loop order: row groups outside, column groups inside. A group of R weight rows (a few KB)
// stays in L1 while the activation columns (ncols · K bytes) come from L2, so the weights are
// read from memory once per matmul call whatever ncols is.
//
// No intrinsics here: the ISA units include this file (through their *.inc.h kernel bodies), so
// like those it lives in an anonymous namespace and each unit compiles its own copy with its own
// flags (see x86/simd_x86.h).
#pragma once
#include <cstdint>

#include "kernels/kernel_errors.h"
#include "kernels/kernels.h"

namespace edgellm::kernels {
namespace {

// TileFn<R, C>::run(args, r, c) computes rows [r, r+R) × columns [c, c+C).
template <template <int, int> class TileFn, int R>
inline void run_column_groups(const MatmulArgs& a, int64_t r) {
  int64_t c = 0;
  for (; c + 4 <= a.ncols; c += 4) TileFn<R, 4>::run(a, r, c);
  switch (a.ncols - c) {
    case 3: TileFn<R, 3>::run(a, r, c); break;
    case 2: TileFn<R, 2>::run(a, r, c); break;
    case 1: TileFn<R, 1>::run(a, r, c); break;
    default: break;
  }
}

// kDecodeRows: rows per tile when ncols == 1; kTileRows: rows per tile for ncols > 1 (4 columns).
template <template <int, int> class TileFn, int kDecodeRows, int kTileRows>
void run_tiles(const MatmulArgs& a) {
  int64_t r = a.r0;
  if (a.ncols == 1) {
    for (; r + kDecodeRows <= a.r1; r += kDecodeRows) TileFn<kDecodeRows, 1>::run(a, r, 0);
    for (; r < a.r1; ++r) TileFn<1, 1>::run(a, r, 0);
    return;
  }
  for (; r + kTileRows <= a.r1; r += kTileRows) run_column_groups<TileFn, kTileRows>(a, r);
  for (; r < a.r1; ++r) run_column_groups<TileFn, 1>(a, r);
}

// The operands of a tile: its R weight rows (`per_row` elements of type W apart: blocks, or
// floats) from row r, and its C activation rows of type X (x_stride bytes apart) from column c.
template <class W, class X, int R, int C>
struct TileOperands {
  const W* w[R];
  const X* x[C];
  TileOperands(const MatmulArgs& a, int64_t r, int64_t c, int64_t per_row) {
    for (int i = 0; i < R; ++i) w[i] = static_cast<const W*>(a.w) + (r + i) * per_row;
    for (int j = 0; j < C; ++j)
      x[j] = reinterpret_cast<const X*>(static_cast<const uint8_t*>(a.x) + (c + j) * a.x_stride);
  }
};

// Every accumulator of an R × C tile set to v.
template <class V, int R, int C>
inline void fill_tile(V (&acc)[R][C], V v) {
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < C; ++j) acc[i][j] = v;
}

// The matmul of one block-quantized weight type: T is the type's traits (T::kType), Tile<T> its
// tile family, kBlock the elements of one block (K must be a multiple of it).
template <template <class> class Tile, class T, int kBlock, int kDecodeRows, int kTileRows>
void matmul_tiled(const MatmulArgs& a) {
  if (a.K % kBlock != 0) throw_bad_row_length("matmul", T::kType, a.K);
  run_tiles<Tile<T>::template Fn, kDecodeRows, kTileRows>(a);
}

// t.matmul[Ts::kType] for each of the traits Ts.
template <template <class> class Tile, int kBlock, int kDecodeRows, int kTileRows, class... Ts>
void fill_tiled(KernelTable& t) {
  ((t.matmul[static_cast<int>(Ts::kType)] = matmul_tiled<Tile, Ts, kBlock, kDecodeRows, kTileRows>), ...);
}

}  // namespace
}  // namespace edgellm::kernels
