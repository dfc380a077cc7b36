// Packing GGUF rows into the row-interleaved layout of kernels/packed.h, and the scalar
// references of the packed matmul and of the Q8_R activation quantizer.
//
// Everything goes through one decoded form: per 32-element sub-block and row, the 32 unsigned
// quants u and the constants (da, db, off, mn) of packed.h. Packing decodes GGUF blocks into it
// and writes the layout; the reference matmul reads the layout back into it.
#include <cstring>
#include <stdexcept>
#include <string>

#include "common/fp16.h"
#include "kernels/packed.h"
#include "quant/blocks.h"
#include "quant/quant.h"
#include "quant/reference.h"

namespace edgellm::kernels {
namespace {

void need(DType t) {
  if (!packable(t)) throw std::invalid_argument(std::string("packed layout: type ") + dtype_name(t) + " is not packable");
}

// PackedFormat<T> of a run-time type: f(PackedFormat<T>{}).
template <class F>
auto with_format(DType t, F f) {
  switch (t) {
    case DType::Q4_0: return f(PackedFormat<DType::Q4_0>{});
    case DType::Q4_1: return f(PackedFormat<DType::Q4_1>{});
    case DType::Q5_0: return f(PackedFormat<DType::Q5_0>{});
    case DType::Q5_1: return f(PackedFormat<DType::Q5_1>{});
    case DType::Q8_0: return f(PackedFormat<DType::Q8_0>{});
    case DType::Q4_K: return f(PackedFormat<DType::Q4_K>{});
    case DType::Q5_K: return f(PackedFormat<DType::Q5_K>{});
    case DType::Q6_K: return f(PackedFormat<DType::Q6_K>{});
    case DType::IQ4_NL: return f(PackedFormat<DType::IQ4_NL>{});
    case DType::IQ4_XS: return f(PackedFormat<DType::IQ4_XS>{});
    case DType::MXFP4: return f(PackedFormat<DType::MXFP4>{});
    default: need(t); return f(PackedFormat<DType::Q4_0>{});  // not reached: need() throws
  }
}

bool is_k(DType t) { return with_format(t, [](auto f) { return f.kK; }); }
bool has_min(DType t) { return with_format(t, [](auto f) { return f.kMin; }); }
bool has_high_bit(DType t) { return with_format(t, [](auto f) { return f.kHigh; }); }
int offset_of(DType t) { return with_format(t, [](auto f) { return f.kOffset; }); }
// The table of a table type (packed.h), nullptr for the others.
const int8_t* levels_of(DType t) {
  return t == DType::MXFP4 ? kMxfp4Values : (t == DType::IQ4_NL || t == DType::IQ4_XS) ? kIq4nlValues : nullptr;
}
// The E8M0 byte e of an MXFP4 scale 2^(e−128) (the inverse of quant::e8m0_to_fp32_half).
uint8_t e8m0_of(float d) {
  const uint32_t bits = fp32_to_bits(d);
  if (bits >= (1u << 23)) return static_cast<uint8_t>((bits >> 23) + 1);
  return bits == 0x00400000u ? 1 : 0;
}

size_t gguf_block_bytes(DType t) { return row_bytes(t, is_k(t) ? 256 : 32); }

// Byte layout of one unit.
struct Layout {
  size_t header;     // bytes before the first sub-block's quants
  size_t sub;        // bytes of one sub-block's quants (+ high bits)
  size_t qh;         // offset of the high-bit plane inside a sub-block
  int subs;          // sub-blocks per unit (1 or 8)
};

Layout layout_of(DType t) {
  return with_format(t, [](auto f) {
    return Layout{static_cast<size_t>(f.kHeader), f.kSubBytes, static_cast<size_t>(f.kNib ? 256 : 512), f.kSubs};
  });
}

// One unit of one row, decoded.
struct RowUnit {
  uint16_t d = 0, m = 0;          // legacy: fp16 d, m; K: fp16 d, dmin
  float df = 0.0f;                // MXFP4: the f32 scale
  uint8_t sc[16] = {}, mn[8] = {};  // K: sub-block scales (Q6_K: 16 signed, stored as bytes) and mins
  uint8_t u[256];                 // unsigned quants (table types: the table indices), element order
};

void decode_gguf(DType t, const uint8_t* p, RowUnit& o) {
  auto nib32 = [&](const uint8_t* qs, uint8_t* u) {
    for (int i = 0; i < 16; ++i) u[i] = qs[i] & 0x0F, u[i + 16] = qs[i] >> 4;
  };
  auto high32 = [&](const uint8_t* qh, uint8_t* u) {
    uint32_t h;
    std::memcpy(&h, qh, 4);
    for (int i = 0; i < 32; ++i) u[i] |= static_cast<uint8_t>(((h >> i) & 1u) << 4);
  };
  switch (t) {
    case DType::Q4_0: { auto* b = reinterpret_cast<const block_q4_0*>(p); o.d = b->d; nib32(b->qs, o.u); break; }
    case DType::Q4_1: { auto* b = reinterpret_cast<const block_q4_1*>(p); o.d = b->d; o.m = b->m; nib32(b->qs, o.u); break; }
    case DType::Q5_0: {
      auto* b = reinterpret_cast<const block_q5_0*>(p);
      o.d = b->d;
      nib32(b->qs, o.u);
      high32(b->qh, o.u);
      break;
    }
    case DType::Q5_1: {
      auto* b = reinterpret_cast<const block_q5_1*>(p);
      o.d = b->d, o.m = b->m;
      nib32(b->qs, o.u);
      high32(b->qh, o.u);
      break;
    }
    case DType::Q8_0: {
      auto* b = reinterpret_cast<const block_q8_0*>(p);
      o.d = b->d;
      for (int i = 0; i < 32; ++i) o.u[i] = static_cast<uint8_t>(b->qs[i] + 128);
      break;
    }
    case DType::Q4_K: case DType::Q5_K: {
      const uint8_t* scales;
      const uint8_t* qs;
      const uint8_t* qh = nullptr;
      if (t == DType::Q4_K) {
        auto* b = reinterpret_cast<const block_q4_K*>(p);
        o.d = b->d, o.m = b->dmin, scales = b->scales, qs = b->qs;
      } else {
        auto* b = reinterpret_cast<const block_q5_K*>(p);
        o.d = b->d, o.m = b->dmin, scales = b->scales, qs = b->qs, qh = b->qh;
      }
      for (int j = 0; j < 8; ++j) quant::get_scale_min_k4(j, scales, &o.sc[j], &o.mn[j]);
      for (int j = 0; j < 8; ++j)
        for (int l = 0; l < 32; ++l) {
          uint8_t u = (qs[32 * (j / 2) + l] >> (4 * (j % 2))) & 0x0F;
          if (qh) u |= static_cast<uint8_t>(((qh[l] >> j) & 1) << 4);
          o.u[32 * j + l] = u;
        }
      break;
    }
    case DType::Q6_K: {
      auto* b = reinterpret_cast<const block_q6_K*>(p);
      o.d = b->d;
      std::memcpy(o.sc, b->scales, 16);
      for (int half = 0; half < 2; ++half) {
        const uint8_t* ql = b->ql + 64 * half;
        const uint8_t* qh = b->qh + 32 * half;
        uint8_t* u = o.u + 128 * half;
        for (int l = 0; l < 32; ++l) {
          u[l] = static_cast<uint8_t>((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4));
          u[l + 32] = static_cast<uint8_t>((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4));
          u[l + 64] = static_cast<uint8_t>((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4));
          u[l + 96] = static_cast<uint8_t>((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4));
        }
      }
      break;
    }
    case DType::IQ4_NL: { auto* b = reinterpret_cast<const block_iq4_nl*>(p); o.d = b->d; nib32(b->qs, o.u); break; }
    case DType::MXFP4: {
      auto* b = reinterpret_cast<const block_mxfp4*>(p);
      o.df = quant::e8m0_to_fp32_half(b->e);
      nib32(b->qs, o.u);
      break;
    }
    case DType::IQ4_XS: {
      auto* b = reinterpret_cast<const block_iq4_xs*>(p);
      o.d = b->d;
      for (int j = 0; j < 8; ++j) {
        o.sc[j] = static_cast<uint8_t>(quant::iq4_xs_scale(*b, j) - 32);
        nib32(b->qs + 16 * j, o.u + 32 * j);
      }
      break;
    }
    default: need(t);
  }
}

void encode_gguf_legacy(DType t, const RowUnit& o, uint8_t* p) {
  auto nib32 = [&](uint8_t* qs) {
    for (int i = 0; i < 16; ++i) qs[i] = static_cast<uint8_t>((o.u[i] & 0x0F) | (o.u[i + 16] & 0x0F) << 4);
  };
  auto high32 = [&](uint8_t* qh) {
    uint32_t h = 0;
    for (int i = 0; i < 32; ++i) h |= static_cast<uint32_t>((o.u[i] >> 4) & 1u) << i;
    std::memcpy(qh, &h, 4);
  };
  switch (t) {
    case DType::Q4_0: { auto* b = reinterpret_cast<block_q4_0*>(p); b->d = o.d; nib32(b->qs); break; }
    case DType::Q4_1: { auto* b = reinterpret_cast<block_q4_1*>(p); b->d = o.d; b->m = o.m; nib32(b->qs); break; }
    case DType::Q5_0: { auto* b = reinterpret_cast<block_q5_0*>(p); b->d = o.d; nib32(b->qs); high32(b->qh); break; }
    case DType::Q5_1: {
      auto* b = reinterpret_cast<block_q5_1*>(p);
      b->d = o.d, b->m = o.m;
      nib32(b->qs);
      high32(b->qh);
      break;
    }
    case DType::Q8_0: {
      auto* b = reinterpret_cast<block_q8_0*>(p);
      b->d = o.d;
      for (int i = 0; i < 32; ++i) b->qs[i] = static_cast<int8_t>(o.u[i] - 128);
      break;
    }
    case DType::IQ4_NL: { auto* b = reinterpret_cast<block_iq4_nl*>(p); b->d = o.d; nib32(b->qs); break; }
    case DType::MXFP4: { auto* b = reinterpret_cast<block_mxfp4*>(p); b->e = e8m0_of(o.df); nib32(b->qs); break; }
    default: throw std::invalid_argument(std::string("packed layout: unpack_row does not handle ") + dtype_name(t));
  }
}

// Writes row r's decoded unit into a unit of the packed layout. Each byte of row r's lanes is
// written whole (no read-modify-write), the 5th-bit planes are OR-ed in as 4-bit groups.
void write_unit(DType t, const Layout& L, const RowUnit& o, int r, uint8_t* unit) {
  const bool kmin = t == DType::Q4_K || t == DType::Q5_K;
  if (t == DType::MXFP4)
    std::memcpy(unit + 4 * r, &o.df, 4);
  else
    std::memcpy(unit + 2 * r, &o.d, 2);
  if (t == DType::IQ4_XS)
    for (int j = 0; j < 8; ++j) unit[32 + 16 * j + r] = o.sc[j];
  if (has_min(t) || kmin) std::memcpy(unit + 32 + 2 * r, &o.m, 2);
  if (kmin)
    for (int j = 0; j < 8; ++j) unit[64 + 16 * j + r] = o.sc[j], unit[192 + 16 * j + r] = o.mn[j];
  if (t == DType::Q6_K)
    for (int k = 0; k < 16; ++k) unit[32 + 16 * k + r] = o.sc[k];
  const bool q8 = t == DType::Q8_0, high = has_high_bit(t), six = t == DType::Q6_K;
  for (int j = 0; j < L.subs; ++j) {
    uint8_t* sub = unit + L.header + static_cast<size_t>(j) * L.sub;
    const uint8_t* u = o.u + 32 * j;
    if (q8) {
      for (int s = 0; s < 8; ++s) std::memcpy(sub + 64 * s + 4 * r, u + 4 * s, 4);
      continue;
    }
    for (int p = 0; p < 4; ++p)
      for (int q = 0; q < 4; ++q)
        sub[64 * p + 4 * r + q] = static_cast<uint8_t>((u[4 * p + q] & 0x0F) | (u[16 + 4 * p + q] & 0x0F) << 4);
    if (high)
      for (int s = 0; s < 8; ++s) {
        uint64_t bits = 0;
        for (int q = 0; q < 4; ++q) bits |= static_cast<uint64_t>((u[4 * s + q] >> 4) & 1) << q;
        uint64_t h;
        std::memcpy(&h, sub + L.qh + 8 * s, 8);
        h |= bits << (4 * r);
        std::memcpy(sub + L.qh + 8 * s, &h, 8);
      }
    if (six)
      for (int hh = 0; hh < 2; ++hh)
        for (int q = 0; q < 4; ++q) {
          uint8_t b = 0;
          for (int k = 0; k < 4; ++k) b |= static_cast<uint8_t>(((u[4 * (4 * hh + k) + q] >> 4) & 3) << (2 * k));
          sub[L.qh + 64 * hh + 4 * r + q] = b;
        }
  }
}

// Row r's stored quant of element e (0..31) of sub-block j of a packed unit (table types: the index).
uint8_t read_stored(DType t, const Layout& L, const uint8_t* unit, int r, int j, int e) {
  const uint8_t* sub = unit + L.header + static_cast<size_t>(j) * L.sub;
  const int s = e / 4, q = 4 * r + e % 4;
  if (t == DType::Q8_0) return sub[64 * s + q];
  const uint8_t byte = sub[64 * (s % 4) + q];
  uint8_t u = s < 4 ? (byte & 0x0F) : (byte >> 4);
  if (has_high_bit(t)) {
    uint64_t h;
    std::memcpy(&h, sub + L.qh + 8 * s, 8);
    u |= static_cast<uint8_t>(((h >> q) & 1u) << 4);
  }
  if (t == DType::Q6_K) u |= static_cast<uint8_t>(((sub[L.qh + 64 * (s / 4) + q] >> (2 * (s % 4))) & 3) << 4);
  return u;
}

// The same as the quant the dots use: table types look their index up (u = level + 128).
uint8_t read_u(DType t, const Layout& L, const uint8_t* unit, int r, int j, int e) {
  const uint8_t u = read_stored(t, L, unit, r, j, e);
  const int8_t* levels = levels_of(t);
  return levels ? static_cast<uint8_t>(levels[u] + 128) : u;
}

// The constants of sub-block j, row r (packed.h): da, db, mn (offset from offset_of).
struct SubConsts {
  float da, db, mn;
};
SubConsts read_consts(DType t, const uint8_t* unit, int r, int j) {
  if (t == DType::MXFP4) {
    float df;
    std::memcpy(&df, unit + 4 * r, 4);
    return {df, df, 0.0f};
  }
  uint16_t dh, mh;
  std::memcpy(&dh, unit + 2 * r, 2);
  const float d = fp16_to_fp32(dh);
  switch (t) {
    case DType::Q4_1: case DType::Q5_1:
      std::memcpy(&mh, unit + 32 + 2 * r, 2);
      return {d, d, fp16_to_fp32(mh)};
    case DType::Q4_K: case DType::Q5_K: {
      std::memcpy(&mh, unit + 32 + 2 * r, 2);
      const float s = d * unit[64 + 16 * j + r];
      return {s, s, -fp16_to_fp32(mh) * unit[192 + 16 * j + r]};
    }
    case DType::Q6_K: {
      const auto sa = static_cast<int8_t>(unit[32 + 16 * (2 * j) + r]);
      const auto sb = static_cast<int8_t>(unit[32 + 16 * (2 * j + 1) + r]);
      return {d * sa, d * sb, 0.0f};
    }
    case DType::IQ4_XS: {
      const float s = d * static_cast<float>(static_cast<int8_t>(unit[32 + 16 * j + r]));
      return {s, s, 0.0f};
    }
    default: return {d, d, 0.0f};
  }
}

}  // namespace

bool packable(DType t) {
  switch (t) {
    case DType::Q4_0: case DType::Q4_1: case DType::Q5_0: case DType::Q5_1: case DType::Q8_0:
    case DType::Q4_K: case DType::Q5_K: case DType::Q6_K:
    case DType::IQ4_NL: case DType::IQ4_XS: case DType::MXFP4:
      return true;
    default:
      return false;
  }
}

int64_t packed_unit_elems(DType t) { return with_format(t, [](auto f) { return f.kUnitElems; }); }

size_t packed_unit_bytes(DType t) { return with_format(t, [](auto f) { return f.kUnitBytes; }); }

void pack_rows(DType t, const void* src, void* dst, int64_t K, int64_t g0, int64_t g1) {
  need(t);
  const int64_t ue = packed_unit_elems(t);
  if (K % ue != 0)
    throw std::invalid_argument("packed layout: row length " + std::to_string(K) + " is not a multiple of " +
                                std::to_string(ue));
  const Layout L = layout_of(t);
  const size_t unit_bytes = packed_unit_bytes(t), gb = gguf_block_bytes(t);
  const int64_t nu = K / ue;
  const size_t src_row = static_cast<size_t>(nu) * gb;
  RowUnit o;
  for (int64_t grp = g0; grp < g1; ++grp) {
    uint8_t* out = static_cast<uint8_t*>(dst) + static_cast<size_t>(grp) * nu * unit_bytes;
    for (int64_t b = 0; b < nu; ++b) {
      uint8_t* unit = out + static_cast<size_t>(b) * unit_bytes;
      std::memset(unit, 0, unit_bytes);
      for (int r = 0; r < kPackRows; ++r) {
        const uint8_t* blk =
            static_cast<const uint8_t*>(src) + static_cast<size_t>(grp * kPackRows + r) * src_row + static_cast<size_t>(b) * gb;
        decode_gguf(t, blk, o);
        write_unit(t, L, o, r, unit);
      }
    }
  }
}

void unpack_row(DType t, const void* packed, void* dst_row, int64_t K, int64_t row) {
  need(t);
  if (is_k(t)) throw std::invalid_argument(std::string("packed layout: unpack_row does not handle ") + dtype_name(t));
  const Layout L = layout_of(t);
  const size_t unit_bytes = packed_unit_bytes(t), gb = gguf_block_bytes(t);
  const int64_t nb = K / 32;
  const uint8_t* grp = static_cast<const uint8_t*>(packed) + static_cast<size_t>(row / kPackRows) * nb * unit_bytes;
  const int r = static_cast<int>(row % kPackRows);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* unit = grp + static_cast<size_t>(b) * unit_bytes;
    RowUnit o;
    if (t == DType::MXFP4)
      std::memcpy(&o.df, unit + 4 * r, 4);
    else
      std::memcpy(&o.d, unit + 2 * r, 2);
    if (has_min(t)) std::memcpy(&o.m, unit + 32 + 2 * r, 2);
    for (int e = 0; e < 32; ++e) o.u[e] = read_stored(t, L, unit, r, 0, e);
    encode_gguf_legacy(t, o, static_cast<uint8_t*>(dst_row) + static_cast<size_t>(b) * gb);
  }
}

void packed_matmul_ref(DType t, const MatmulArgs& a) {
  need(t);
  const Layout L = layout_of(t);
  const int64_t ue = packed_unit_elems(t);
  if (a.K % ue != 0) throw std::invalid_argument("packed matmul: row length " + std::to_string(a.K) + " is not whole units");
  if (a.r0 % kPackRows != 0 || a.r1 % kPackRows != 0)
    throw std::invalid_argument("packed matmul: rows [" + std::to_string(a.r0) + ", " + std::to_string(a.r1) +
                                ") do not start and end on 16-row groups");
  const size_t unit_bytes = packed_unit_bytes(t);
  const int64_t nu = a.K / ue;
  const int off = offset_of(t);
  uint8_t u[kPackRows][32];
  SubConsts k[kPackRows];
  for (int64_t g = a.r0 / kPackRows; g < a.r1 / kPackRows; ++g) {
    const uint8_t* grp = static_cast<const uint8_t*>(a.w) + static_cast<size_t>(g) * nu * unit_bytes;
    for (int64_t c = 0; c < a.ncols; ++c)
      for (int r = 0; r < kPackRows; ++r) a.y[c * a.ldy + g * kPackRows + r] = 0.0f;
    for (int64_t b = 0; b < nu; ++b) {
      const uint8_t* unit = grp + static_cast<size_t>(b) * unit_bytes;
      for (int j = 0; j < L.subs; ++j) {
        for (int r = 0; r < kPackRows; ++r) {
          k[r] = read_consts(t, unit, r, j);
          for (int e = 0; e < 32; ++e) u[r][e] = read_u(t, L, unit, r, j, e);
        }
        const int64_t xb = b * L.subs + j;  // Q8_R block index
        for (int64_t c = 0; c < a.ncols; ++c) {
          const auto& x = reinterpret_cast<const block_q8_r*>(static_cast<const uint8_t*>(a.x) + c * a.x_stride)[xb];
          for (int r = 0; r < kPackRows; ++r) {
            int32_t ia = 0, ib = 0;
            for (int e = 0; e < 16; ++e) ia += static_cast<int32_t>(u[r][e]) * x.qs[e];
            for (int e = 16; e < 32; ++e) ib += static_cast<int32_t>(u[r][e]) * x.qs[e];
            ia -= off * x.s[0];
            ib -= off * x.s[1];
            float& y = a.y[c * a.ldy + g * kPackRows + r];
            y += static_cast<float>(ia) * (k[r].da * x.d) + static_cast<float>(ib) * (k[r].db * x.d);
            if (k[r].mn != 0.0f) y += k[r].mn * (x.d * static_cast<float>(x.s[0] + x.s[1]));
          }
        }
      }
    }
  }
}

void quantize_q8_r_ref(const float* x, void* y, int64_t n) {
  if (n % 32 != 0) throw std::invalid_argument("Q8_R: row length " + std::to_string(n) + " is not a multiple of 32");
  auto* out = static_cast<block_q8_r*>(y);
  for (int64_t b = 0; b < n / 32; ++b) {
    block_q8_0 q;
    quant::quantize_row(DType::Q8_0, x + b * 32, &q, 32);
    std::memcpy(out[b].qs, q.qs, 32);
    out[b].d = fp16_to_fp32(q.d);
    int s0 = 0, s1 = 0;
    for (int i = 0; i < 16; ++i) s0 += q.qs[i], s1 += q.qs[i + 16];
    out[b].s[0] = static_cast<int16_t>(s0);
    out[b].s[1] = static_cast<int16_t>(s1);
  }
}

}  // namespace edgellm::kernels
