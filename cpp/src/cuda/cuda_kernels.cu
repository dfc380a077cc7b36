// CUDA kernels (cuda_kernels.cuh). Block layouts: quant/blocks.h; formulas: the dequantizers of
// quant/legacy_quants.cpp and quant/k_quants.cpp, read 32 elements (one "sub-block") at a time so
// that every type shares one matmul kernel shape: a warp per output row, lanes striding over
// the row's sub-blocks, a few activation columns per pass.
#include "cuda/cuda_kernels.cuh"

#include <cuda_fp16.h>

#include <cmath>
#include <cstring>

namespace edgellm::cuda {
namespace {

constexpr int kWarp = 32;
constexpr int kMatmulCols = 8;       // activation columns a warp reuses one dequantized sub-block for
constexpr int kMatmulWarps = 4;      // rows per thread block
constexpr int kRowThreads = 256;     // norms and softmax: a block per row
constexpr int kAttnWarps = 4;

// Little-endian loads by bytes: block fields sit at odd-looking offsets (Q5_0's qh at 2).
__host__ __device__ __forceinline__ uint32_t load_u16(const uint8_t* p) { return p[0] | (uint32_t(p[1]) << 8); }
__host__ __device__ __forceinline__ uint32_t load_u32(const uint8_t* p) {
  return p[0] | (uint32_t(p[1]) << 8) | (uint32_t(p[2]) << 16) | (uint32_t(p[3]) << 24);
}
__host__ __device__ __forceinline__ float half_at(const uint8_t* p) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(load_u16(p))));
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = kWarp / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = kWarp / 2; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum (or max) over the thread block; every thread gets the result. `red` holds 32 floats.
__device__ float block_sum(float v, float* red) {
  const int lane = threadIdx.x % kWarp, w = threadIdx.x / kWarp, nw = (blockDim.x + kWarp - 1) / kWarp;
  v = warp_sum(v);
  __syncthreads();  // `red` may still be read from a previous reduction
  if (lane == 0) red[w] = v;
  __syncthreads();
  float s = 0.0f;
  for (int i = 0; i < nw; ++i) s += red[i];
  return s;
}
__device__ float block_max(float v, float* red) {
  const int lane = threadIdx.x % kWarp, w = threadIdx.x / kWarp, nw = (blockDim.x + kWarp - 1) / kWarp;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) red[w] = v;
  __syncthreads();
  float s = -INFINITY;
  for (int i = 0; i < nw; ++i) s = fmaxf(s, red[i]);
  return s;
}

// K-quant 6-bit scale and min of sub-block j (0..7) from the 12 packed bytes.
__host__ __device__ __forceinline__ void scale_min_k4(int j, const uint8_t* q, int* sc, int* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// Elements [32 s, 32 s + 32) of a row of type T, dequantized into w.
template <DType T>
__host__ __device__ __forceinline__ void dequant32(const uint8_t* row, int64_t s, float* w) {
  if constexpr (T == DType::F32) {
    const float* p = reinterpret_cast<const float*>(row) + s * 32;
#pragma unroll
    for (int i = 0; i < 32; ++i) w[i] = p[i];
  } else if constexpr (T == DType::F16) {
    const __half* p = reinterpret_cast<const __half*>(row) + s * 32;
#pragma unroll
    for (int i = 0; i < 32; ++i) w[i] = __half2float(p[i]);
  } else if constexpr (T == DType::BF16) {
    const uint16_t* p = reinterpret_cast<const uint16_t*>(row) + s * 32;
#pragma unroll
    for (int i = 0; i < 32; ++i) {
      const uint32_t bits = uint32_t(p[i]) << 16;
      memcpy(&w[i], &bits, 4);  // a bit cast that host and device code both accept
    }
  } else if constexpr (T == DType::Q4_0) {
    const uint8_t* b = row + s * 18;
    const float d = half_at(b);
    const uint8_t* qs = b + 2;
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      w[j] = (int(qs[j] & 0xF) - 8) * d;
      w[j + 16] = (int(qs[j] >> 4) - 8) * d;
    }
  } else if constexpr (T == DType::Q4_1) {
    const uint8_t* b = row + s * 20;
    const float d = half_at(b), m = half_at(b + 2);
    const uint8_t* qs = b + 4;
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      w[j] = (qs[j] & 0xF) * d + m;
      w[j + 16] = (qs[j] >> 4) * d + m;
    }
  } else if constexpr (T == DType::Q5_0) {
    const uint8_t* b = row + s * 22;
    const float d = half_at(b);
    const uint32_t qh = load_u32(b + 2);
    const uint8_t* qs = b + 6;
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      const int lo = (qs[j] & 0xF) | (((qh >> j) & 1) << 4);
      const int hi = (qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
      w[j] = (lo - 16) * d;
      w[j + 16] = (hi - 16) * d;
    }
  } else if constexpr (T == DType::Q5_1) {
    const uint8_t* b = row + s * 24;
    const float d = half_at(b), m = half_at(b + 2);
    const uint32_t qh = load_u32(b + 4);
    const uint8_t* qs = b + 8;
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      const int lo = (qs[j] & 0xF) | (((qh >> j) & 1) << 4);
      const int hi = (qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
      w[j] = lo * d + m;
      w[j + 16] = hi * d + m;
    }
  } else if constexpr (T == DType::Q8_0) {
    const uint8_t* b = row + s * 34;
    const float d = half_at(b);
    const int8_t* qs = reinterpret_cast<const int8_t*>(b + 2);
#pragma unroll
    for (int j = 0; j < 32; ++j) w[j] = qs[j] * d;
  } else if constexpr (T == DType::Q4_K) {
    // 144 bytes: d, dmin, scales[12], qs[128]. Sub-block j reads qs[32 (j/2) ..] low (even j)
    // or high (odd j) nibbles.
    const uint8_t* b = row + (s / 8) * 144;
    const int j = static_cast<int>(s % 8);
    const float d = half_at(b), dmin = half_at(b + 2);
    int sc, m;
    scale_min_k4(j, b + 4, &sc, &m);
    const float dl = d * sc, ml = dmin * m;
    const uint8_t* q = b + 16 + 32 * (j / 2);
    const int shift = (j & 1) * 4;
#pragma unroll
    for (int l = 0; l < 32; ++l) w[l] = dl * ((q[l] >> shift) & 0xF) - ml;
  } else if constexpr (T == DType::Q5_K) {
    // 176 bytes: d, dmin, scales[12], qh[32], qs[128]; the fifth bit of sub-block j is qh bit j.
    const uint8_t* b = row + (s / 8) * 176;
    const int j = static_cast<int>(s % 8);
    const float d = half_at(b), dmin = half_at(b + 2);
    int sc, m;
    scale_min_k4(j, b + 4, &sc, &m);
    const float dl = d * sc, ml = dmin * m;
    const uint8_t* qh = b + 16;
    const uint8_t* q = b + 48 + 32 * (j / 2);
    const int shift = (j & 1) * 4;
#pragma unroll
    for (int l = 0; l < 32; ++l) w[l] = dl * (((q[l] >> shift) & 0xF) + (((qh[l] >> j) & 1) << 4)) - ml;
  } else if constexpr (T == DType::Q6_K) {
    // 210 bytes: ql[128], qh[64], scales[16] (int8), d. Each 128-element half has four 32-element
    // parts: part p takes ql[l + 32 (p & 1)]'s low (p < 2) or high nibble and qh bits 2p..2p+1,
    // scale sc[l / 16 + 2p].
    const uint8_t* b = row + (s / 8) * 210;
    const int j = static_cast<int>(s % 8);
    const int half = j / 4, part = j % 4;
    const float d = half_at(b + 208);
    const uint8_t* ql = b + 64 * half + 32 * (part & 1);
    const uint8_t* qh = b + 128 + 32 * half;
    const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192) + 8 * half + 2 * part;
    const int nib = (part >> 1) * 4, hs = 2 * part;
#pragma unroll
    for (int l = 0; l < 32; ++l) {
      const int q = (((ql[l] >> nib) & 0xF) | (((qh[l] >> hs) & 3) << 4)) - 32;
      w[l] = d * sc[l / 16] * q;
    }
  }
}

template <DType T>
__global__ void matmul_kernel(const uint8_t* W, size_t row_bytes, int64_t K, int64_t rows, const float* X,
                              int64_t ldx, int64_t ncols, float* Y, int64_t ldy) {
  const int lane = threadIdx.x % kWarp;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kMatmulWarps + threadIdx.x / kWarp;
  if (r >= rows) return;  // whole warps leave together: the shuffles below see full warps
  const int64_t c0 = static_cast<int64_t>(blockIdx.y) * kMatmulCols;
  const int64_t left = ncols - c0;
  const int nc = left < kMatmulCols ? static_cast<int>(left) : kMatmulCols;
  const uint8_t* row = W + r * row_bytes;
  float acc[kMatmulCols];
#pragma unroll
  for (int c = 0; c < kMatmulCols; ++c) acc[c] = 0.0f;
  const int64_t nsub = K / 32;
  for (int64_t s = lane; s < nsub; s += kWarp) {
    float w[32];
    dequant32<T>(row, s, w);
#pragma unroll
    for (int c = 0; c < kMatmulCols; ++c) {
      if (c < nc) {
        const float* x = X + (c0 + c) * ldx + s * 32;
        float a = 0.0f;
#pragma unroll
        for (int i = 0; i < 32; ++i) a += w[i] * x[i];
        acc[c] += a;
      }
    }
  }
#pragma unroll
  for (int c = 0; c < kMatmulCols; ++c) {
    const float v = warp_sum(acc[c]);
    if (lane == 0 && c < nc) Y[(c0 + c) * ldy + r] = v;
  }
}

__global__ void rmsnorm_kernel(const float* x, const float* w, float* y, int64_t n, float eps) {
  __shared__ float red[32];
  const float* xr = x + blockIdx.x * n;
  float* yr = y + blockIdx.x * n;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) ss += xr[i] * xr[i];
  ss = block_sum(ss, red);
  const float scale = 1.0f / sqrtf(ss / n + eps);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) yr[i] = xr[i] * scale * (w ? w[i] : 1.0f);
}

__global__ void softmax_kernel(float* x, int64_t n) {
  __shared__ float red[32];
  float* xr = x + blockIdx.x * n;
  float m = -INFINITY;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) m = fmaxf(m, xr[i]);
  m = block_max(m, red);
  float s = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const float e = expf(xr[i] - m);
    xr[i] = e;
    s += e;
  }
  s = block_sum(s, red);
  const float inv = 1.0f / s;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) xr[i] *= inv;
}

__global__ void add_kernel(const float* x, float* y, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] += x[i];
}

__global__ void add_bias_kernel(const float* b, float* y, int64_t rows, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < rows * n) y[i] += b[i % n];
}

__global__ void gated_kernel(bool gelu, const float* g, const float* u, float* o, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float x = g[i];
  float a;
  if (gelu) {
    constexpr float kSqrt2OverPi = 0.79788456080286535588f;
    a = 0.5f * x * (1.0f + tanhf(kSqrt2OverPi * x * (1.0f + 0.044715f * x * x)));
  } else {
    a = x / (1.0f + expf(-x));
  }
  o[i] = a * u[i];
}

// grid (n_tokens, n_heads); each thread rotates pairs i = threadIdx.x, + blockDim.x, ...
__global__ void rope_kernel(bool neox, const float* table, int n_rot, float* x, int n_heads, int head_dim,
                            float scale) {
  float* xh = x + (static_cast<int64_t>(blockIdx.x) * n_heads + blockIdx.y) * head_dim;
  const float* cs = table + static_cast<int64_t>(blockIdx.x) * n_rot;
  const int half = n_rot / 2;
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    const float c = cs[2 * i], s = cs[2 * i + 1];
    const int a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
    const float x0 = xh[a], x1 = xh[b];
    xh[a] = x0 * c - x1 * s;
    xh[b] = x0 * s + x1 * c;
  }
  if (scale != 1.0f) {
    __syncthreads();
    for (int i = threadIdx.x; i < head_dim; i += blockDim.x) xh[i] *= scale;
  }
}

// One element of a cached K/V row.
__device__ __forceinline__ float kv_elem(DType t, const uint8_t* row, int i) {
  if (t == DType::F32) return reinterpret_cast<const float*>(row)[i];
  if (t == DType::F16) return __half2float(reinterpret_cast<const __half*>(row)[i]);
  const uint8_t* b = row + (i / 32) * 34;  // Q8_0
  return half_at(b) * static_cast<float>(reinterpret_cast<const int8_t*>(b + 2)[i % 32]);
}

// Writes one row of n floats as `t`. Q8_0 (quant/legacy_quants.cpp): per 32-block,
// d = amax / 127, q = round(x / d), d stored as half. Called by all threads of the block.
__device__ void store_row(DType t, const float* src, uint8_t* dst, int n) {
  if (t == DType::F32) {
    for (int i = threadIdx.x; i < n; i += blockDim.x) reinterpret_cast<float*>(dst)[i] = src[i];
  } else if (t == DType::F16) {
    for (int i = threadIdx.x; i < n; i += blockDim.x) reinterpret_cast<__half*>(dst)[i] = __float2half_rn(src[i]);
  } else {
    for (int blk = threadIdx.x; blk < n / 32; blk += blockDim.x) {
      const float* x = src + blk * 32;
      float amax = 0.0f;
      for (int j = 0; j < 32; ++j) amax = fmaxf(amax, fabsf(x[j]));
      const float d = amax / 127.0f;
      const float id = d != 0.0f ? 1.0f / d : 0.0f;
      uint8_t* b = dst + blk * 34;
      const unsigned short h = __half_as_ushort(__float2half_rn(d));
      b[0] = static_cast<uint8_t>(h & 0xFF);
      b[1] = static_cast<uint8_t>(h >> 8);
      for (int j = 0; j < 32; ++j) reinterpret_cast<int8_t*>(b + 2)[j] = static_cast<int8_t>(roundf(x[j] * id));
    }
  }
}

__device__ __forceinline__ uint8_t* k_row_at(const KvLayerView& kv, int32_t page, int head, int slot) {
  return kv.base + static_cast<size_t>(page) * kv.page_stride +
         (static_cast<size_t>(head) * kv.page_size + slot) * kv.k_row;
}
__device__ __forceinline__ uint8_t* v_row_at(const KvLayerView& kv, int32_t page, int head, int slot) {
  return kv.base + static_cast<size_t>(page) * kv.page_stride +
         static_cast<size_t>(kv.n_kv) * kv.page_size * kv.k_row +
         (static_cast<size_t>(head) * kv.page_size + slot) * kv.v_row;
}

// grid (n_tokens, n_kv)
__global__ void store_kv_kernel(KvLayerView kv, const float* k, const float* v, const int32_t* pos,
                                const int32_t* table_off, const int32_t* tables) {
  const int64_t t = blockIdx.x;
  const int h = blockIdx.y;
  const int32_t p = pos[t];
  const int32_t page = tables[table_off[t] + p / kv.page_size];
  const int slot = p % kv.page_size;
  store_row(kv.type, k + (t * kv.n_kv + h) * kv.head_dim_k, k_row_at(kv, page, h, slot), kv.head_dim_k);
  store_row(kv.type, v + (t * kv.n_kv + h) * kv.head_dim_v, v_row_at(kv, page, h, slot), kv.head_dim_v);
}

// grid (n_tokens, n_head), kAttnWarps warps. Each warp walks keys lo + w, lo + w + kAttnWarps, ...
// with an online softmax (running max m, sum l, weighted V sum acc; lane owns dims lane + 32 i),
// then the warps' partial results are merged.
__global__ void attention_kernel(KvLayerView kv, const float* q, int64_t q_stride, int n_head, const int32_t* pos,
                                 const int32_t* table_off, const int32_t* tables, int32_t window, float* out,
                                 int64_t out_stride) {
  constexpr int kPerLane = kMaxHeadDim / kWarp;
  __shared__ float qs[kMaxHeadDim];
  __shared__ float part_m[kAttnWarps], part_l[kAttnWarps];
  __shared__ float part_acc[kAttnWarps][kMaxHeadDim];

  const int64_t t = blockIdx.x;
  const int hq = blockIdx.y;
  const int hk = hq / (n_head / kv.n_kv);
  const int lane = threadIdx.x % kWarp, wi = threadIdx.x / kWarp;
  const float* qh = q + t * q_stride + static_cast<int64_t>(hq) * kv.head_dim_k;
  for (int i = threadIdx.x; i < kv.head_dim_k; i += blockDim.x) qs[i] = qh[i];
  __syncthreads();

  const int32_t p = pos[t];
  const int32_t lo = window > 0 && p - window + 1 > 0 ? p - window + 1 : 0;
  const int32_t* table = tables + table_off[t];
  float m = -INFINITY, l = 0.0f, acc[kPerLane];
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) acc[j] = 0.0f;

  for (int32_t key = lo + wi; key <= p; key += kAttnWarps) {
    const int32_t page = table[key / kv.page_size];
    const int slot = key % kv.page_size;
    const uint8_t* krow = k_row_at(kv, page, hk, slot);
    float s = 0.0f;
    for (int i = lane; i < kv.head_dim_k; i += kWarp) s += qs[i] * kv_elem(kv.type, krow, i);
    s = warp_sum(s);
    const float m_new = fmaxf(m, s);
    const float corr = expf(m - m_new);  // 0 on the first key (m = -inf)
    const float e = expf(s - m_new);
    l = l * corr + e;
    const uint8_t* vrow = v_row_at(kv, page, hk, slot);
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      const int i = lane + j * kWarp;
      if (i < kv.head_dim_v) acc[j] = acc[j] * corr + e * kv_elem(kv.type, vrow, i);
    }
    m = m_new;
  }
  if (lane == 0) {
    part_m[wi] = m;
    part_l[wi] = l;
  }
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    const int i = lane + j * kWarp;
    if (i < kv.head_dim_v) part_acc[wi][i] = acc[j];
  }
  __syncthreads();

  float mx = -INFINITY;
  for (int w = 0; w < kAttnWarps; ++w) mx = fmaxf(mx, part_m[w]);
  float denom = 0.0f;
  for (int w = 0; w < kAttnWarps; ++w)
    if (part_l[w] > 0.0f) denom += part_l[w] * expf(part_m[w] - mx);
  float* oh = out + t * out_stride + static_cast<int64_t>(hq) * kv.head_dim_v;
  for (int i = threadIdx.x; i < kv.head_dim_v; i += blockDim.x) {
    float num = 0.0f;
    for (int w = 0; w < kAttnWarps; ++w)
      if (part_l[w] > 0.0f) num += part_acc[w][i] * expf(part_m[w] - mx);
    oh[i] = num / denom;
  }
}

unsigned blocks_for(int64_t n, int threads) { return static_cast<unsigned>((n + threads - 1) / threads); }

template <DType T>
void launch_matmul(const uint8_t* W, size_t row_bytes, int64_t K, int64_t rows, const float* X, int64_t ldx,
                   int64_t ncols, float* Y, int64_t ldy, cudaStream_t stream) {
  const dim3 grid(blocks_for(rows, kMatmulWarps), blocks_for(ncols, kMatmulCols));
  matmul_kernel<T><<<grid, kMatmulWarps * kWarp, 0, stream>>>(W, row_bytes, K, rows, X, ldx, ncols, Y, ldy);
}

}  // namespace

void dequantize_on_host(DType wtype, const uint8_t* row, int64_t K, float* out) {
#define EDGELLM_CUDA_DEQUANT(T) \
  case DType::T: for (int64_t s = 0; s < K / 32; ++s) dequant32<DType::T>(row, s, out + 32 * s); return;
  switch (wtype) {
    EDGELLM_CUDA_DEQUANT(F32)
    EDGELLM_CUDA_DEQUANT(F16)
    EDGELLM_CUDA_DEQUANT(BF16)
    EDGELLM_CUDA_DEQUANT(Q4_0)
    EDGELLM_CUDA_DEQUANT(Q4_1)
    EDGELLM_CUDA_DEQUANT(Q5_0)
    EDGELLM_CUDA_DEQUANT(Q5_1)
    EDGELLM_CUDA_DEQUANT(Q8_0)
    EDGELLM_CUDA_DEQUANT(Q4_K)
    EDGELLM_CUDA_DEQUANT(Q5_K)
    EDGELLM_CUDA_DEQUANT(Q6_K)
    default: break;
  }
#undef EDGELLM_CUDA_DEQUANT
}

bool matmul_supports(DType t) {
  switch (t) {
    case DType::F32: case DType::F16: case DType::BF16: case DType::Q4_0: case DType::Q4_1: case DType::Q5_0:
    case DType::Q5_1: case DType::Q8_0: case DType::Q4_K: case DType::Q5_K: case DType::Q6_K:
      return true;
    default:
      return false;
  }
}

bool kv_type_supported(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::Q8_0; }

void matmul(DType wtype, const uint8_t* W, size_t row_bytes, int64_t K, int64_t rows, const float* X, int64_t ldx,
            int64_t ncols, float* Y, int64_t ldy, cudaStream_t stream) {
  if (rows <= 0 || ncols <= 0) return;
#define EDGELLM_CUDA_MATMUL(T) \
  case DType::T: return launch_matmul<DType::T>(W, row_bytes, K, rows, X, ldx, ncols, Y, ldy, stream);
  switch (wtype) {
    EDGELLM_CUDA_MATMUL(F32)
    EDGELLM_CUDA_MATMUL(F16)
    EDGELLM_CUDA_MATMUL(BF16)
    EDGELLM_CUDA_MATMUL(Q4_0)
    EDGELLM_CUDA_MATMUL(Q4_1)
    EDGELLM_CUDA_MATMUL(Q5_0)
    EDGELLM_CUDA_MATMUL(Q5_1)
    EDGELLM_CUDA_MATMUL(Q8_0)
    EDGELLM_CUDA_MATMUL(Q4_K)
    EDGELLM_CUDA_MATMUL(Q5_K)
    EDGELLM_CUDA_MATMUL(Q6_K)
    default: break;
  }
#undef EDGELLM_CUDA_MATMUL
}

void rmsnorm(const float* x, const float* w, float* y, int64_t rows, int64_t n, float eps, cudaStream_t stream) {
  if (rows > 0) rmsnorm_kernel<<<static_cast<unsigned>(rows), kRowThreads, 0, stream>>>(x, w, y, n, eps);
}

void softmax(float* x, int64_t rows, int64_t n, cudaStream_t stream) {
  if (rows > 0) softmax_kernel<<<static_cast<unsigned>(rows), kRowThreads, 0, stream>>>(x, n);
}

void add(const float* x, float* y, int64_t n, cudaStream_t stream) {
  if (n > 0) add_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(x, y, n);
}

void add_bias(const float* b, float* y, int64_t rows, int64_t n, cudaStream_t stream) {
  if (rows > 0 && n > 0) add_bias_kernel<<<blocks_for(rows * n, 256), 256, 0, stream>>>(b, y, rows, n);
}

void gated(bool gelu, const float* gate, const float* up, float* out, int64_t n, cudaStream_t stream) {
  if (n > 0) gated_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(gelu, gate, up, out, n);
}

void rope(bool neox, const float* table, int n_rot, float* x, int64_t n_tokens, int n_heads, int head_dim, float scale,
          cudaStream_t stream) {
  if (n_tokens <= 0 || n_heads <= 0) return;
  const dim3 grid(static_cast<unsigned>(n_tokens), static_cast<unsigned>(n_heads));
  rope_kernel<<<grid, 128, 0, stream>>>(neox, table, n_rot, x, n_heads, head_dim, scale);
}

void store_kv(const KvLayerView& kv, const float* k, const float* v, const int32_t* pos, const int32_t* table_off,
              const int32_t* tables, int64_t n_tokens, cudaStream_t stream) {
  if (n_tokens <= 0) return;
  const dim3 grid(static_cast<unsigned>(n_tokens), static_cast<unsigned>(kv.n_kv));
  store_kv_kernel<<<grid, 128, 0, stream>>>(kv, k, v, pos, table_off, tables);
}

void paged_attention(const KvLayerView& kv, const float* q, int64_t q_stride, int n_head, const int32_t* pos,
                     const int32_t* table_off, const int32_t* tables, int32_t window, int64_t n_tokens, float* out,
                     int64_t out_stride, cudaStream_t stream) {
  if (n_tokens <= 0) return;
  const dim3 grid(static_cast<unsigned>(n_tokens), static_cast<unsigned>(n_head));
  attention_kernel<<<grid, kAttnWarps * kWarp, 0, stream>>>(kv, q, q_stride, n_head, pos, table_off, tables, window,
                                                           out, out_stride);
}

}  // namespace edgellm::cuda
