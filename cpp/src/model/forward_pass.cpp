// ForwardPass: scratch, norms, residual adds and the RoPE tables. The attention and FFN
// sub-layers are in attention_block.cpp and ffn_block.cpp.
#include "model/forward_pass.h"

#include <algorithm>
#include <cstdlib>
#include <new>

#include "common/thread_pool.h"
#include "kernels/attention.h"
#include "kernels/kernels.h"

namespace edgellm {

template <class T>
void AlignedArray<T>::Free::operator()(T* p) const {
  std::free(p);
}

template <class T>
void AlignedArray<T>::allocate(size_t n) {
  void* p = nullptr;
  const size_t bytes = std::max<size_t>(64, (n * sizeof(T) + 63) / 64 * 64);
  if (posix_memalign(&p, 64, bytes) != 0) throw std::bad_alloc();
  data_.reset(static_cast<T*>(p));
  n_ = n;
}

template class AlignedArray<float>;
template class AlignedArray<uint8_t>;

void ForwardScratch::allocate(const ModelConfig& c, int T, int n_threads, int page_size_hint) {
  max_tokens = T;
  const size_t t = static_cast<size_t>(T);
  x.allocate(t * c.n_embd);
  h.allocate(t * c.n_embd);
  out.allocate(t * c.n_embd);
  q.allocate(t * c.n_embd_q());
  attn.allocate(t * c.n_embd_attn());
  k.allocate(t * c.n_embd_k());
  v.allocate(t * c.n_embd_v());
  gate.allocate(t * c.n_ff);
  up.allocate(t * c.n_ff);
  for (auto& r : rope_table) r.allocate(t * c.n_rot);
  attn_thread_floats = kernels::paged_attention_scratch_floats(c.n_head / c.n_head_kv, c.head_dim_k, c.head_dim_v,
                                                               page_size_hint);
  attn_thread_floats = (attn_thread_floats + 15) / 16 * 16;  // keep each thread's slice on its own lines
  attn_thread.allocate(attn_thread_floats * n_threads);
  const int64_t widest = std::max({c.n_embd, c.n_ff, c.n_embd_attn()});
  act.reserve(T, widest);
  out_rows.reserve(T);
  query_blocks.reserve(T);
  attn_keys.reserve(T + 1);
  attn_cut.reserve(n_threads + 1);
}

namespace {
size_t aligned_floats(size_t n) { return std::max<size_t>(64, (n * sizeof(float) + 63) / 64 * 64); }
}  // namespace

size_t ForwardScratch::forward_bytes(const ModelConfig& c, int T) {
  const size_t t = static_cast<size_t>(T);
  size_t b = 3 * aligned_floats(t * c.n_embd) + aligned_floats(t * c.n_embd_q()) + aligned_floats(t * c.n_embd_attn()) +
             aligned_floats(t * c.n_embd_k()) + aligned_floats(t * c.n_embd_v()) + 2 * aligned_floats(t * c.n_ff) +
             2 * aligned_floats(t * c.n_rot);
  const int64_t widest = std::max({c.n_embd, c.n_ff, c.n_embd_attn()});
  b += ActivationQuantizer::reserve_bytes(T, widest);
  b += 2 * t * sizeof(int32_t) + t * sizeof(QueryBlock);  // out_rows, query_blocks
  return b;
}

size_t ForwardScratch::attention_bytes(const ModelConfig& c, int n_threads, int page_size_hint) {
  const size_t per = (kernels::paged_attention_scratch_floats(c.n_head / c.n_head_kv, c.head_dim_k, c.head_dim_v,
                                                              page_size_hint) + 15) / 16 * 16;
  return aligned_floats(per * static_cast<size_t>(n_threads));
}

ForwardPass::ForwardPass(const DecoderState& s, const Batch& batch, KVCache& kv)
    : x(s.scratch->x.data()),
      h(s.scratch->h.data()),
      out(s.scratch->out.data()),
      s_(s),
      c_(*s.config),
      batch_(batch),
      kv_(kv),
      pool_(*s.pool),
      sc_(*s.scratch),
      n_tokens_(batch.size()) {}

void ForwardPass::rmsnorm(const float* src, const Vector& w, float* dst) {
  const auto norm = kernels::active().rmsnorm;
  const int64_t n = c_.n_embd;
  const float eps = c_.rms_eps;
  pool_.parallel_for(0, n_tokens_, [&](int64_t t, int) { norm(src + t * n, w.data, dst + t * n, n, eps); });
}

void ForwardPass::add_residual(const float* src) {
  const auto add = kernels::active().add_f32;
  const int64_t n = c_.n_embd;
  pool_.parallel_for(0, n_tokens_, [&](int64_t t, int) { add(src + t * n, x + t * n, n); });
}

void ForwardPass::prepare_rope() {
  bool used[2] = {false, false};
  for (int il = 0; il < c_.n_layer; ++il) used[c_.is_swa(il) ? 1 : 0] = true;
  for (int v = 0; v < 2; ++v) {
    if (!used[v]) continue;
    const Rope& rope = *s_.rope[v];
    float* table = sc_.rope_table[v].data();
    const int stride = rope.table_stride();
    if (c_.mrope() && !batch_.rope_pos.empty())
      pool_.parallel_for(0, n_tokens_, [&](int64_t t, int) {
        rope.fill_sections(batch_.rope_pos.data() + 3 * t, c_.rope_sections, table + t * stride);
      });
    else
      pool_.parallel_for(0, n_tokens_, [&](int64_t t, int) { rope.fill(batch_.pos[t], table + t * stride); });
  }
}

// A block is a run of consecutive positions of one sequence (at most kAttentionMaxBlockTokens),
// so attention converts each cached row once for all of them. Speculative verification rows
// (Batch::exact_row) form blocks of their own under exact_rows: each row still gets exactly the
// result of a decode step at its position, and the sequence's pages are walked once per block
// instead of once per row. Those blocks are cut so that one sequence's verification alone still
// gives every thread a task (blocks × KV heads ≥ threads).
void ForwardPass::plan_query_blocks() {
  std::vector<QueryBlock>& blocks = sc_.query_blocks;  // capacity reserved at load
  blocks.clear();
  constexpr int kMax = kernels::kAttentionMaxBlockTokens;
  const int per_seq_blocks = std::max(1, (pool_.size() + c_.n_head_kv - 1) / c_.n_head_kv);
  for (int t = 0; t < n_tokens_;) {
    if (batch_.block_last_of(t) >= 0) {  // an image row: a block of its own (bidirectional keys)
      blocks.push_back({t, 1, false, batch_.block_last_of(t)});
      ++t;
      continue;
    }
    const bool exact = batch_.is_exact_row(t);
    int e = t + 1;
    while (e < n_tokens_ && batch_.seq[e] == batch_.seq[t] && batch_.pos[e] == batch_.pos[e - 1] + 1 &&
           batch_.is_exact_row(e) == exact && batch_.block_last_of(e) < 0)
      ++e;
    const int len = e - t;
    const int cap = exact ? std::min(kMax, (len + per_seq_blocks - 1) / per_seq_blocks) : kMax;
    for (int b = t; b < e; b += cap) blocks.push_back({b, std::min(cap, e - b), exact});
    t = e;
  }
}

}  // namespace edgellm
