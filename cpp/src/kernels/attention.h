// Attention over the paged KV cache, as a kernel-table op (KernelTable::paged_attention) so SIMD
// units can override the scalar reference in kernels/generic/attention_ref.cpp.
//
// One call handles one token and one KV head: the n_q query heads that share that KV head under
// grouped-query attention read each cached key/value row once. The caller has already scaled
// the queries (kq_scale = 1) and chosen the key range, so causality and sliding windows are just
// [pos_begin, pos_end).
//
// Cache layout (kv/kv_cache.h): a token at position p lives in page pages[p / page_size], slot
// p % page_size; this head's K row is at k_base + page * page_stride + slot * k_row_bytes, and
// likewise for V. Rows are F32, F16 or Q8_0 (blocks along the head dim).
#pragma once
#include <cstddef>
#include <cstdint>

#include "common/dtype.h"

namespace edgellm::kernels {

struct PagedAttentionArgs {
  const float* q;      // n_q rows of head_dim_k floats, row stride q_stride floats
  int64_t q_stride;
  int n_q;

  DType kv_type;       // F32, F16 or Q8_0
  int head_dim_k, head_dim_v;
  const int32_t* pages;  // the sequence's page table for this layer's group
  int page_size;
  const uint8_t* k_base;  // this head's K rows in page 0
  const uint8_t* v_base;  // this head's V rows in page 0
  size_t page_stride;     // bytes from a head's rows in page i to page i + 1
  size_t k_row_bytes, v_row_bytes;
  int32_t pos_begin, pos_end;  // key positions attended: [pos_begin, pos_end), non-empty

  float* out;          // n_q rows of head_dim_v floats, row stride out_stride floats
  int64_t out_stride;
  float* scratch;      // paged_attention_scratch_floats(...) floats, private to the calling thread
};

// Scratch a call needs, in floats (an upper bound every implementation must live within).
inline size_t paged_attention_scratch_floats(int n_q, int head_dim_k, int head_dim_v, int page_size) {
  return static_cast<size_t>(head_dim_k) + head_dim_v + 2 * static_cast<size_t>(n_q) +
         static_cast<size_t>(n_q) * page_size + 64;
}

}  // namespace edgellm::kernels
