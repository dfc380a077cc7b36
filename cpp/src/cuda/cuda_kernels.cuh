// CUDA kernels of the GPU layer executor, as host-callable launchers on device pointers. Each
// mirrors a CPU reference (quant/ dequantizers, kernels/generic/, model/rope.cpp, the paged
// attention reference) and is written to be obviously equal to it rather than fast: weights are
// dequantized in registers 32 elements at a time and dotted against f32 activations.
//
// Every launcher is asynchronous on `stream`; errors surface at the next checked CUDA call.
#pragma once
#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

#include "common/dtype.h"

namespace edgellm::cuda {

// Weight types the matmul kernel reads (others stay on the CPU).
bool matmul_supports(DType wtype);
// Types the KV cache may hold on the device.
bool kv_type_supported(DType t);

// The matmul kernel's own dequantizer run on the CPU (a GPU-free check of the block formulas):
// out[0..K) = row of `wtype`.
void dequantize_on_host(DType wtype, const uint8_t* row, int64_t K, float* out);

// Y[c * ldy + r] = dot(W row r, X row c) for r < rows, c < ncols. W rows: K elements of `wtype`,
// row_bytes apart; X rows: K floats, ldx apart. K is a multiple of the type's block size.
void matmul(DType wtype, const uint8_t* W, size_t row_bytes, int64_t K, int64_t rows, const float* X, int64_t ldx,
            int64_t ncols, float* Y, int64_t ldy, cudaStream_t stream);

// y = x / rms(x) * w per row of n (w may be null); y may alias x.
void rmsnorm(const float* x, const float* w, float* y, int64_t rows, int64_t n, float eps, cudaStream_t stream);
// Row-wise in-place softmax.
void softmax(float* x, int64_t rows, int64_t n, cudaStream_t stream);
// y += x (n floats); y[r * n + i] += b[i] for rows r (bias broadcast).
void add(const float* x, float* y, int64_t n, cudaStream_t stream);
void add_bias(const float* b, float* y, int64_t rows, int64_t n, cudaStream_t stream);
// out = act(gate) * up, act = SiLU or tanh-GELU; out may alias gate or up.
void gated(bool gelu, const float* gate, const float* up, float* out, int64_t n, cudaStream_t stream);

// In place, per token t and head h of x ([n_tokens][n_heads * head_dim]): RoPE with the (cos,
// sin) row table[t * n_rot ..] (model/rope.h fill()), NORM (adjacent pairs) or NEOX (halves)
// pairing over the first n_rot dims, then multiply every dim by `scale`.
void rope(bool neox, const float* table, int n_rot, float* x, int64_t n_tokens, int n_heads, int head_dim, float scale,
          cudaStream_t stream);

// The paged KV layout of one layer on the device, identical to kv/kv_cache.h's host layout:
// page p at base + p * page_stride; K of head h at + h * page_size * k_row, V of head h at
// + n_kv * page_size * k_row + h * page_size * v_row.
struct KvLayerView {
  uint8_t* base;
  size_t page_stride, k_row, v_row;
  int page_size, n_kv, head_dim_k, head_dim_v;
  DType type;  // F32, F16 or Q8_0
};

// Writes each token's K and V rows (k: [T][n_kv * head_dim_k], v likewise) to its slot:
// page tables[table_off[t] + pos[t] / page_size], slot pos[t] % page_size.
void store_kv(const KvLayerView& kv, const float* k, const float* v, const int32_t* pos, const int32_t* table_off,
              const int32_t* tables, int64_t n_tokens, cudaStream_t stream);

// out[t][h] = softmax(q[t][h] · K[lo..p]) · V[lo..p] for every token t (position p = pos[t];
// lo = 0, or p - window + 1 on a sliding-window layer) and query head h, which reads KV head
// h / (n_head / n_kv). Queries are already scaled. head_dim_k, head_dim_v <= kMaxHeadDim.
constexpr int kMaxHeadDim = 256;
void paged_attention(const KvLayerView& kv, const float* q, int64_t q_stride, int n_head, const int32_t* pos,
                     const int32_t* table_off, const int32_t* tables, int32_t window, int64_t n_tokens, float* out,
                     int64_t out_stride, cudaStream_t stream);

}  // namespace edgellm::cuda
