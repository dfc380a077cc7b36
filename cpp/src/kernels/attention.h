// Attention over the paged KV cache, as a kernel-table op (KernelTable::paged_attention) so SIMD
// units can override the scalar reference in kernels/generic/attention_ref.cpp.
//
// One call handles one KV head and a block of n_tokens query tokens of one sequence at
// consecutive positions q_pos0, q_pos0 + 1, ...; for each token, the n_q query heads that share
// this KV head under grouped-query attention. A block lets an implementation read (and
// convert) each cached key/value row once for all its queries during prefill; decode passes
// blocks of one token. The caller has already scaled the queries (kq_scale = 1). With a
// soft-cap c > 0 (Gemma 2's attn_logit_softcapping) each score s becomes c·tanh(s / c) before
// the softmax. With attention sinks (gpt-oss's attn_sinks: one learned logit per query head)
// the sink's exp joins the softmax denominator and contributes no value: out = Σ_p exp(s_p)·v_p /
// (Σ_p exp(s_p) + exp(sink)); every implementation applies it once at the end, with
// attention_output_scale below.
//
// Token j (position p = q_pos0 + j) attends to the keys at positions [lo, p], where lo = 0 for
// full attention and lo = max(0, p - window + 1) on a sliding-window layer (key k is masked
// when p - k >= window).
//
// Cache layout (kv/kv_cache.h): a token at position p lives in page pages[p / page_size], slot
// p % page_size; this head's K row is at k_base + page * page_stride + slot * k_row_bytes, and
// likewise for V. Rows are F32, F16 or Q8_0 (blocks along the head dim).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "common/dtype.h"

namespace edgellm::kernels {

// The oldest key a query at position `pos` sees: 0 for full attention, max(0, pos - window + 1)
// on a sliding-window layer (window > 0).
inline int32_t attention_first_key(int32_t window, int32_t pos) {
  return window > 0 && pos - window + 1 > 0 ? pos - window + 1 : 0;
}

struct PagedAttentionArgs {
  int n_tokens;           // query tokens in the block (>= 1)
  int32_t q_pos0;         // position of the first
  int32_t window;         // 0: full causal attention; w > 0: sliding window of w keys
  float softcap;          // 0: none; c > 0: scores become c * tanh(score / c)
  // nullptr: none; else n_q finite logits, sinks[i] the sink of query head i of this group
  // (compared with the scores as they reach the softmax: after Q's scaling and the soft-cap).
  const float* sinks = nullptr;

  const float* q;         // token j, head i at q + j * q_token_stride + i * q_head_stride
  int64_t q_token_stride, q_head_stride;  // in floats
  int n_q;                // query heads per KV head

  DType kv_type;          // F32, F16 or Q8_0
  int head_dim_k, head_dim_v;
  const int32_t* pages;   // the sequence's page table for this layer's group
  int page_size;
  const uint8_t* k_base;  // this head's K rows in page 0
  const uint8_t* v_base;  // this head's V rows in page 0
  size_t page_stride;     // bytes from a head's rows in page i to page i + 1
  size_t k_row_bytes, v_row_bytes;

  float* out;             // token j, head i at out + j * out_token_stride + i * out_head_stride
  int64_t out_token_stride, out_head_stride;  // in floats
  float* scratch;         // paged_attention_scratch_floats(...) floats, private to the calling thread

  // Each token's output must be bitwise what a block of that token alone computes (speculative
  // verification rows, which must reproduce decode exactly). Without it an implementation may
  // pick its code path by the block's query count, which changes the rounding. The reference
  // is invariant by construction (every query's own online softmax over the same keys, masked
  // keys skipped); the x86 tiles are too, per lane, so they honour it by choosing the path a
  // one-token block would take while still converting each key row once for the whole block.
  bool exact_rows = false;
};

// The factor a query's accumulated Σ_p exp(s_p - m)·v_p is multiplied by at the end, given its
// running max m and sum l = Σ_p exp(s_p - m): 1 / l, or with a sink logit z (sinks[h] for query
// head h) exp(m - M) / (l·exp(m - M) + exp(z - M)) with M = max(m, z), so neither exp overflows.
// 0 for a query that saw no key and has no sink. The one definition every table uses; static, so
// each ISA unit keeps its own copy (compiled with its own flags) rather than the linker picking one.
static inline float attention_output_scale(float m, float l, const float* sinks, int h) {
  if (!sinks) return l > 0.0f ? 1.0f / l : 0.0f;
  const float z = sinks[h];
  const float mx = std::max(m, z);  // m = -inf before any key: mx = z
  if (!(mx > -INFINITY)) return 0.0f;
  const float c = std::exp(m - mx);
  return c / (l * c + std::exp(z - mx));
}

// Query tokens per call the caller may pass (prefill); the scratch bound below allows for it.
constexpr int kAttentionMaxBlockTokens = 16;

// Scratch a call needs, in floats: an upper bound every implementation must live within
// (room for converted K/V rows of one page, and per query of a full block: its scores against one
// page, a transposed copy of the query (head_dim_k), and five floats of running softmax state and
// mask bounds).
inline size_t paged_attention_scratch_floats(int n_q, int head_dim_k, int head_dim_v, int page_size) {
  const size_t queries = static_cast<size_t>(n_q) * kAttentionMaxBlockTokens;
  return static_cast<size_t>(page_size) * (head_dim_k + head_dim_v) + queries * (page_size + head_dim_k + 5) + 64;
}

}  // namespace edgellm::kernels
