// The matmul over row-interleaved weights (kernels/packed.h), once for every ISA: the tile (per
// 32-element sub-block: the rows' constants, the unpacked slices, per column an exact int32 dot
// with the offset removed as −offset·Σx, one convert and one FMA by d_w·d_x, one FMA for the
// mins) and the driver (column blocks, 16-row groups, tiles). Everything that touches registers
// is the ISA's, in I (x86/avx2, x86/avx512, arm/neon_dotprod, arm/neon_i8mm matmul_packed_*.cpp):
//
//   kPartRows                 rows one register holds (a "part" of the 16-row group: 8, 16, 4)
//   kTileParts                parts a multi-column tile takes (a single column takes the whole group)
//   kDecodePrefetch           bytes ahead of its stream a single-column matmul prefetches (0: none)
//   offset<T>(), max_cols<T>()  the offset the dots remove (0 where quants are dotted signed), the
//                             widest tile; cols<T>(ncols) the width used for a matmul of ncols
//   Slices<T>, unpack<T>(sub, part, s)  the 8 slices of one part of one sub-block
//   dot<T>(s, xq, init), dot_half<T, H>(s, xq, init)  init + the part's rows' int32 dots of all 32
//                             elements / of elements 16H..16H+15 with the activation quants xq
//   optionally kColumnPairs = true and dot_pair<T, H>(s, xq0, xq1, init0, init1, out0, out1): the
//                             same for two columns at once (H = -1: all 32 elements), which the
//                             tiles then use for each pair of their columns (neon-i8mm's smmla)
//   F, I32 and zero, set1, set1_i32, mul, fmadd (acc + a·b), fnmadd (acc − a·b), cvt, store;
//   half_rows / f32_rows / u8_rows / i8_rows(p): kPartRows fp16 / f32 / u8 / i8 per-row constants as f32
//
// Like tiling.inc.h it has no intrinsics and lives in an anonymous namespace (each ISA unit
// compiles its own copy with its own flags).
#pragma once
#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "kernels/kernel_errors.h"
#include "kernels/kernels.h"
#include "kernels/packed.h"

namespace edgellm::kernels {
namespace {

// What the tile needs of one activation block besides its quants, in the form it is used: the
// min term's d_x·Σx as f32 and the offset correction −offset·Σx as int32 (whole block, halves).
// Made once per column block by prepare_aux, so a tile reads each with one broadcast load
// instead of converting the block's int16 sums per (row group, column) — in the 6-column tiles
// that scalar chain (two loads, add, int→float, multiply, broadcast) was a fifth of the work.
struct alignas(16) PackedColAux {
  float sx;         // d·(s[0] + s[1])
  int32_t off;      // −offset·(s[0] + s[1])
  int32_t off_h[2];  // −offset·s[h]
};

// Columns [0, ncols) of x, nsub blocks each, into this thread's scratch (column j at j·nsub).
template <int kOffset>
const PackedColAux* prepare_aux(const uint8_t* x, size_t x_stride, int64_t ncols, int64_t nsub) {
  static thread_local std::vector<PackedColAux> scratch;
  const size_t n = static_cast<size_t>(ncols * nsub);
  if (scratch.size() < n) scratch.resize(n);
  PackedColAux* out = scratch.data();
  for (int64_t j = 0; j < ncols; ++j) {
    const auto* xb = reinterpret_cast<const block_q8_r*>(x + j * x_stride);
    for (int64_t i = 0; i < nsub; ++i) {
      const int32_t s0 = xb[i].s[0], s1 = xb[i].s[1];
      out[j * nsub + i] = {xb[i].d * static_cast<float>(s0 + s1), -kOffset * (s0 + s1), {-kOffset * s0, -kOffset * s1}};
    }
  }
  return out;
}

// Whether I dots two columns at once (I::kColumnPairs, see top).
template <class I, class = void>
struct ColumnPairs : std::false_type {};
template <class I>
struct ColumnPairs<I, std::void_t<decltype(I::kColumnPairs)>> : std::bool_constant<I::kColumnPairs> {};

// Parts [p0, p0 + NP) of one group × C columns, all K. y points at (column 0, first row of part
// p0); columns are ldy apart; aux: column 0's PackedColAux, columns nsub apart. With PF > 0 the
// bytes PF ahead of each unit are prefetched into L1 as the unit begins (packed_matmul's decode).
template <class I, DType T, int C, int NP, int PF = 0>
void packed_tile(const uint8_t* group, int p0, int64_t nu, const uint8_t* x, size_t x_stride, const PackedColAux* aux,
                 float* y, int64_t ldy, const uint8_t* next = nullptr, int share = 0, int shares = 1) {
  using Fmt = PackedFormat<T>;
  using F = typename I::F;
  constexpr int kOffset = I::template offset<T>();
  constexpr int kR = I::kPartRows;
  const int64_t nsub = nu * Fmt::kSubs;
  F acc[NP][C];
  for (int pp = 0; pp < NP; ++pp)
    for (int j = 0; j < C; ++j) acc[pp][j] = I::zero();
  for (int64_t b = 0; b < nu; ++b) {
    const uint8_t* unit = group + b * Fmt::kUnitBytes;
    if constexpr (PF > 0 && Fmt::kSubs == 1) {
      // May reach past this call's rows: a prefetch never faults, and those lines are usually
      // the next chunk's. (256-element units spread theirs over the sub-blocks, below.)
      for (size_t o = 0; o < Fmt::kUnitBytes; o += 64) __builtin_prefetch(unit + PF + o, 0, 3);
    }
    if (next) {
      // Several columns: each group's weights are reused from L1/L2 by every column tile, so
      // the tiles run compute-bound and the hardware prefetcher alone leaves the first tile of
      // each group waiting on DRAM. The group's tiles fetch the next group meanwhile, each its
      // share of every unit's lines (all in the first tile, as before, stalled it: Qwen2.5-Coder-
      // 0.5B's Q8_0 output head at 16 columns took 4.5-5.1 ms a step, spread 3.9-4.2).
      constexpr int kLines = static_cast<int>((Fmt::kUnitBytes + 63) / 64);
      const uint8_t* n = next + b * Fmt::kUnitBytes;
      for (int l = kLines * share / shares; l < kLines * (share + 1) / shares; ++l) __builtin_prefetch(n + 64 * l, 0, 2);
    }
    for (int sb = 0; sb < Fmt::kSubs; ++sb) {
      const int64_t xi = b * Fmt::kSubs + sb;
      if constexpr (PF > 0 && Fmt::kSubs > 1) {
        // A 256-element unit's lines (37-53) prefetched at once as the unit begins left its
        // stream at two thirds of Q4_0's rate, at the same compute per byte (kernels_bench,
        // Zen 4, 1 thread: Q4_K / Q6_K 13 GB/s against Q4_0's 24, hot B/cycle 12.7 / 10.8 / 12.9):
        // a burst that exceeds the core's outstanding-miss capacity stalls the loads behind it.
        // Each sub-block requests its eighth of the unit's bytes PF ahead instead, as a 32-element
        // unit does: a fixed count of lines 64 bytes apart from the eighth's start (the gap to the
        // next eighth is under a line, so every line is requested; Q4_K 5, Q6_K 7 a sub-block),
        // unrolled (the unit-wide loop cost an add, a compare and a branch per line besides).
        constexpr size_t kChunk = Fmt::kUnitBytes / Fmt::kSubs;
        static_assert(Fmt::kUnitBytes % Fmt::kSubs == 0, "unit bytes split into sub-block eighths");
        const uint8_t* pf = unit + PF + sb * kChunk;
#pragma GCC unroll 8
        for (size_t o = 0; o < kChunk; o += 64) __builtin_prefetch(pf + o, 0, 3);
      }
      for (int pp = 0; pp < NP; ++pp) {
        const int p = p0 + pp;
        // Per-row constants of this sub-block and part (packed.h): da, db (Q6_K only differs), mn.
        F d;
        if constexpr (Fmt::kF32Scale)
          d = I::f32_rows(unit + 4 * kR * p);  // MXFP4
        else
          d = I::half_rows(unit + 2 * kR * p);
        F da = d, db = d, mn = I::zero();
        if constexpr (Fmt::kSubScale) da = db = I::mul(I::i8_rows(unit + 32 + 16 * sb + kR * p), d);  // IQ4_XS
        if constexpr (Fmt::kMin) mn = I::half_rows(unit + 32 + 2 * kR * p);  // Q4_1/Q5_1: m itself; K: dmin
        if constexpr (Fmt::kK && Fmt::kMin) {
          da = db = I::mul(I::u8_rows(unit + 64 + 16 * sb + kR * p), d);
          mn = I::mul(I::u8_rows(unit + 192 + 16 * sb + kR * p), mn);  // subtracted below
        }
        if constexpr (Fmt::kSix) {
          da = I::mul(I::i8_rows(unit + 32 + 16 * (2 * sb) + kR * p), d);
          db = I::mul(I::i8_rows(unit + 32 + 16 * (2 * sb + 1) + kR * p), d);
        }
        typename I::template Slices<T> s;
        I::template unpack<T>(unit + Fmt::kHeader + sb * Fmt::kSubBytes, p, s);
        // Pairs of columns first where I dots two at once (kPaired = 0: every column alone).
        constexpr int kPaired = ColumnPairs<I>::value ? C - C % 2 : 0;
        if constexpr (kPaired > 0) {
          for (int j = 0; j < kPaired; j += 2) {
            const block_q8_r* xb[2] = {&reinterpret_cast<const block_q8_r*>(x + j * x_stride)[xi],
                                       &reinterpret_cast<const block_q8_r*>(x + (j + 1) * x_stride)[xi]};
            const PackedColAux* ax[2] = {&aux[j * nsub + xi], &aux[(j + 1) * nsub + xi]};
            decltype(I::set1_i32(0)) lo[2], hi[2];  // dots of elements 0..31 (Q6_K: 0..15), 16..31 (Q6_K)
            if constexpr (Fmt::kSix) {
              I::template dot_pair<T, 0>(s, xb[0]->qs, xb[1]->qs, I::set1_i32(ax[0]->off_h[0]), I::set1_i32(ax[1]->off_h[0]),
                                         lo[0], lo[1]);
              I::template dot_pair<T, 1>(s, xb[0]->qs, xb[1]->qs, I::set1_i32(ax[0]->off_h[1]), I::set1_i32(ax[1]->off_h[1]),
                                         hi[0], hi[1]);
            } else {
              I::template dot_pair<T, -1>(s, xb[0]->qs, xb[1]->qs, I::set1_i32(kOffset ? ax[0]->off : 0),
                                          I::set1_i32(kOffset ? ax[1]->off : 0), lo[0], lo[1]);
            }
            for (int i = 0; i < 2; ++i) {
              const F dx = I::set1(xb[i]->d);
              F& a = acc[pp][j + i];
              if constexpr (Fmt::kSix)
                a = I::fmadd(I::fmadd(I::cvt(lo[i]), da, I::mul(I::cvt(hi[i]), db)), dx, a);  // see below
              else
                a = I::fmadd(I::cvt(lo[i]), I::mul(da, dx), a);
              if constexpr (Fmt::kMin) a = Fmt::kK ? I::fnmadd(mn, I::set1(ax[i]->sx), a) : I::fmadd(mn, I::set1(ax[i]->sx), a);
            }
          }
        }
        for (int j = kPaired; j < C; ++j) {
          const block_q8_r& xb = reinterpret_cast<const block_q8_r*>(x + j * x_stride)[xi];
          const PackedColAux& ax = aux[j * nsub + xi];
          const F dx = I::set1(xb.d);
          F& a = acc[pp][j];
          if constexpr (Fmt::kSix) {
            // Elements 0..15 and 16..31 have their own scales.
            const auto sa = I::template dot_half<T, 0>(s, xb.qs, I::set1_i32(ax.off_h[0]));
            const auto sbv = I::template dot_half<T, 1>(s, xb.qs, I::set1_i32(ax.off_h[1]));
            // The halves are combined under the row scales first and then scaled by the column's
            // once: 3 float multiplies a column instead of 4. They, vpdpbusd and vmulps all issue
            // on the same two pipes of a Zen 4 core (FP0/FP1, one zmm op a cycle; converts and
            // adds go to FP2/FP3), so a column's 32 elements cost 8 + 3 cycles there, not 8 + 4.
            a = I::fmadd(I::fmadd(I::cvt(sa), da, I::mul(I::cvt(sbv), db)), dx, a);
          } else {
            const auto sum = I::template dot<T>(s, xb.qs, kOffset ? I::set1_i32(ax.off) : I::set1_i32(0));
            a = I::fmadd(I::cvt(sum), I::mul(da, dx), a);
          }
          if constexpr (Fmt::kMin) {
            if constexpr (Fmt::kK)
              a = I::fnmadd(mn, I::set1(ax.sx), a);
            else
              a = I::fmadd(mn, I::set1(ax.sx), a);
          }
        }
      }
    }
  }
  for (int pp = 0; pp < NP; ++pp)
    for (int j = 0; j < C; ++j) I::store(y + j * ldy + kR * pp, acc[pp][j]);
}

// Runs packed_tile<I, T, n, I::kTileParts> for 1 ≤ n ≤ C.
template <class I, DType T, int C>
void packed_tile_n(int n, const uint8_t* group, int p0, int64_t nu, const uint8_t* x, size_t xs,
                   const PackedColAux* aux, float* y, int64_t ldy, const uint8_t* next, int share, int shares) {
  if constexpr (C > 1)
    if (n < C) return packed_tile_n<I, T, C - 1>(n, group, p0, nu, x, xs, aux, y, ldy, next, share, shares);
  packed_tile<I, T, C, I::kTileParts>(group, p0, nu, x, xs, aux, y, ldy, next, share, shares);
}

// Columns are taken in blocks of kPackedColBlock so that a block's activations (64 · K · 1.25
// bytes) stay in L2 while every row group of the chunk passes over them.
constexpr int64_t kPackedColBlock = 64;

template <class I, DType T>
void packed_matmul(const MatmulArgs& a) {
  constexpr int64_t kUnit = PackedFormat<T>::kUnitElems;
  constexpr int kParts = kPackRows / I::kPartRows;
  if (a.K % kUnit != 0) throw_bad_row_length("matmul", T, a.K);
  if (a.r0 % kPackRows != 0 || a.r1 % kPackRows != 0) throw_bad_packed_rows(a.r0, a.r1);
  const int64_t nu = a.K / kUnit;
  const size_t group_bytes = PackedFormat<T>::kUnitBytes * static_cast<size_t>(nu);
  const auto* w = static_cast<const uint8_t*>(a.w);
  const auto* x = static_cast<const uint8_t*>(a.x);
  const int W = I::template cols<T>(a.ncols);
  for (int64_t cb = 0; cb < a.ncols; cb += kPackedColBlock) {
    const int64_t ce = std::min(a.ncols, cb + kPackedColBlock);
    const int64_t nsub = nu * PackedFormat<T>::kSubs;
    const PackedColAux* aux = prepare_aux<I::template offset<T>()>(x + cb * a.x_stride, a.x_stride, ce - cb, nsub);
    if (ce - cb == 1) {
      // One column (decode): each group in one pass, so each 64-byte line of a DRAM-bound matrix
      // is consumed whole when it arrives (there is no column to reuse slices for), with a
      // prefetch I::kDecodePrefetch bytes ahead of the stream. One sequential stream is bounded
      // by what the hardware prefetcher fetches ahead of it: without the prefetch one thread
      // streamed 22-24 GB/s through this kernel, where the GGUF-layout kernel (a prefetch one
      // tile ahead) streamed 37-40; with it 32-36 (AVX2: 14-18 -> 29-31), and 41-44 with 2
      // threads against 29-32 (kernels_bench, Zen 4, same-run A/B, Q4_K and Q6_K 3072 x 8192).
      // Walking 2 or 4 groups side by side instead (several streams) reached only 25-28.
      for (int64_t r = a.r0; r < a.r1; r += kPackRows)
        packed_tile<I, T, 1, kParts, I::kDecodePrefetch>(w + static_cast<size_t>(r / kPackRows) * group_bytes, 0, nu,
                                                         x + cb * a.x_stride, a.x_stride, aux, a.y + cb * a.ldy + r,
                                                         a.ldy);
      continue;
    }
    const int tiles = kParts / I::kTileParts * static_cast<int>((ce - cb + W - 1) / W);  // per group
    for (int64_t r = a.r0; r < a.r1; r += kPackRows) {
      const uint8_t* group = w + static_cast<size_t>(r / kPackRows) * group_bytes;
      // The next group of this call, prefetched by this group's tiles (none past the last).
      const uint8_t* next = r + kPackRows < a.r1 ? group + group_bytes : nullptr;
      int k = 0;  // this tile's share of that prefetch
      for (int p0 = 0; p0 < kParts; p0 += I::kTileParts)
        for (int64_t c = cb; c < ce; c += W, ++k) {
          const int n = static_cast<int>(std::min<int64_t>(W, ce - c));
          packed_tile_n<I, T, I::template max_cols<T>()>(n, group, p0, nu, x + c * a.x_stride, a.x_stride,
                                                         aux + (c - cb) * nsub, a.y + c * a.ldy + r + I::kPartRows * p0, a.ldy,
                                                         next, k, tiles);
        }
    }
  }
}

// t.packed_matmul for every packable type.
template <class I>
void fill_packed_matmul(KernelTable& t) {
  t.packed_matmul[static_cast<int>(DType::Q4_0)] = packed_matmul<I, DType::Q4_0>;
  t.packed_matmul[static_cast<int>(DType::Q4_1)] = packed_matmul<I, DType::Q4_1>;
  t.packed_matmul[static_cast<int>(DType::Q5_0)] = packed_matmul<I, DType::Q5_0>;
  t.packed_matmul[static_cast<int>(DType::Q5_1)] = packed_matmul<I, DType::Q5_1>;
  t.packed_matmul[static_cast<int>(DType::Q8_0)] = packed_matmul<I, DType::Q8_0>;
  t.packed_matmul[static_cast<int>(DType::Q4_K)] = packed_matmul<I, DType::Q4_K>;
  t.packed_matmul[static_cast<int>(DType::Q5_K)] = packed_matmul<I, DType::Q5_K>;
  t.packed_matmul[static_cast<int>(DType::Q6_K)] = packed_matmul<I, DType::Q6_K>;
  t.packed_matmul[static_cast<int>(DType::IQ4_NL)] = packed_matmul<I, DType::IQ4_NL>;
  t.packed_matmul[static_cast<int>(DType::IQ4_XS)] = packed_matmul<I, DType::IQ4_XS>;
  t.packed_matmul[static_cast<int>(DType::MXFP4)] = packed_matmul<I, DType::MXFP4>;
}

}  // namespace
}  // namespace edgellm::kernels
