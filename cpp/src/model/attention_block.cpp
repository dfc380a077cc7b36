// The attention sub-layer (docs/formats.md §4): projections, Q/K head norms,
// RoPE, Q scaling, the KV cache write and paged attention (with the layer's attention sinks),
// output projection.
#include <algorithm>
#include <cstring>
#include <vector>

#include "common/fp16.h"
#include "common/thread_pool.h"
#include "kernels/attention.h"
#include "kernels/kernels.h"
#include "model/weight_packing.h"
#include "model/forward_pass.h"
#include "quant/quant.h"

namespace edgellm {
namespace {

void add_bias(float* y, const Vector& b) {
  if (!b) return;
  for (int64_t i = 0; i < b.n; ++i) y[i] += b.data[i];
}

// Converts one head's K or V row into the cache's element type.
void store_row(DType type, const float* src, uint8_t* dst, int n) {
  switch (type) {
    case DType::F32: std::memcpy(dst, src, sizeof(float) * n); return;
    case DType::F16: {
      uint16_t* h = reinterpret_cast<uint16_t*>(dst);
      for (int i = 0; i < n; ++i) h[i] = fp32_to_fp16(src[i]);
      return;
    }
    default: kernels::active().quantize[static_cast<int>(type)](src, dst, n); return;
  }
}

}  // namespace

void ForwardPass::self_attention(const LayerWeights& w, int il) {
  project_qkv(w, il);
  prepare_qk_and_store_kv(w, il);
  attend(w, il);
  const LoraTarget o = kLoraO;
  const int64_t ld = c_.n_embd;
  project(w.wo, (*s_.plans)[il].wo, sc_.attn.data(), c_.n_embd_attn(), out, w.bo,
          lora(il, &o, 1, sc_.attn.data(), c_.n_embd_attn(), &out, &ld));
}

void ForwardPass::project_qkv(const LayerWeights& w, int il) {
  sc_.act.reset(h, n_tokens_, c_.n_embd, c_.n_embd);
  MatmulOperand ops[3];
  const Matrix* m[3] = {&w.wq, &w.wk, &w.wv};
  float* y[3] = {sc_.q.data(), sc_.k.data(), sc_.v.data()};
  const int64_t ld[3] = {c_.n_embd_q(), c_.n_embd_k(), c_.n_embd_v()};
  for (int i = 0; i < 3; ++i) {
    ops[i].w = m[i];
    ops[i].x = sc_.act.get(pool_, matmul_input_type(*m[i]), &ops[i].x_stride);
    ops[i].y = y[i];
    ops[i].ldy = ld[i];
  }
  const LoraTarget targets[3] = {kLoraQ, kLoraK, kLoraV};
  run_matmul(pool_, (*s_.plans)[il].qkv, ops, n_tokens_, lora(il, targets, 3, h, c_.n_embd, y, ld));
}

void ForwardPass::prepare_qk_and_store_kv(const LayerWeights& w, int il) {
  const int hd_k = c_.head_dim_k, hd_v = c_.head_dim_v;
  const int variant = c_.is_swa(il) ? 1 : 0;
  const Rope& rope = *s_.rope[variant];
  const float* table = sc_.rope_table[variant].data();
  const auto norm = kernels::active().rmsnorm;
  const DType kv_type = kv_.dtype();
  const int P = kv_.page_size();
  const size_t k_row = kv_.k_row_bytes(), v_row = kv_.v_row_bytes();
  // Q/K norms over the whole projection (LayerSpec::qk_norm_whole: olmoe) rather than per head.
  const bool q_whole = w.q_norm && w.q_norm.n != hd_k, k_whole = w.k_norm && w.k_norm.n != hd_k;
  pool_.parallel_for(0, n_tokens_, [&](int64_t t, int) {
    float* q = sc_.q.data() + t * c_.n_embd_q();
    float* k = sc_.k.data() + t * c_.n_embd_k();
    float* v = sc_.v.data() + t * c_.n_embd_v();
    add_bias(q, w.bq);
    add_bias(k, w.bk);
    add_bias(v, w.bv);
    if (q_whole) norm(q, w.q_norm.data, q, c_.n_embd_q(), c_.rms_eps);
    if (k_whole) norm(k, w.k_norm.data, k, c_.n_embd_k(), c_.rms_eps);
    const float* cs = table + t * rope.table_stride();
    for (int hq = 0; hq < c_.n_head; ++hq) {
      float* qh = q + hq * hd_k;
      if (w.q_norm && !q_whole) norm(qh, w.q_norm.data, qh, hd_k, c_.rms_eps);
      rope.apply(cs, qh);
      if (c_.attn_scale != 1.0f)
        for (int i = 0; i < hd_k; ++i) qh[i] *= c_.attn_scale;
    }
    const int32_t pos = batch_.pos[t];
    const int32_t page = kv_.page_table(il, batch_.seq[t])[pos / P];
    const size_t slot = static_cast<size_t>(pos % P);
    for (int hk = 0; hk < c_.n_head_kv; ++hk) {
      float* kh = k + hk * hd_k;
      if (w.k_norm && !k_whole) norm(kh, w.k_norm.data, kh, hd_k, c_.rms_eps);
      rope.apply(cs, kh);
      store_row(kv_type, kh, kv_.k_head(il, page, hk) + slot * k_row, hd_k);
      store_row(kv_type, v + hk * hd_v, kv_.v_head(il, page, hk) + slot * v_row, hd_v);
    }
  });
}

void ForwardPass::attend(const LayerWeights& w, int il) {
  const int n_kv = c_.n_head_kv;
  const int group = c_.n_head / c_.n_head_kv;
  const auto attention = kernels::active().paged_attention;
  kernels::PagedAttentionArgs base{};
  base.window = c_.layer_window[il];
  base.softcap = c_.attn_softcap;
  base.q_token_stride = c_.n_embd_q();
  base.q_head_stride = c_.head_dim_k;
  base.n_q = group;
  base.kv_type = kv_.dtype();
  base.head_dim_k = c_.head_dim_k;
  base.head_dim_v = c_.head_dim_v;
  base.page_size = kv_.page_size();
  base.page_stride = static_cast<size_t>(kv_.config().n_kv_heads) * kv_.page_size() *
                     (kv_.k_row_bytes() + kv_.v_row_bytes());
  base.k_row_bytes = kv_.k_row_bytes();
  base.v_row_bytes = kv_.v_row_bytes();
  base.out_token_stride = c_.n_embd_attn();
  base.out_head_stride = c_.head_dim_v;
  const std::vector<QueryBlock>& blocks = sc_.query_blocks;
  auto attend_block = [&](const QueryBlock& b, int hk, int thread) {
    kernels::PagedAttentionArgs a = base;
    a.n_tokens = b.n_tokens;
    a.exact_rows = b.exact_rows;
    a.q_pos0 = batch_.pos[b.first];
    if (b.attend_last >= 0) {
      // Image row: keys up to the end of its block; the window still counts from its own position.
      if (a.window > 0) a.window += b.attend_last - a.q_pos0;
      a.q_pos0 = b.attend_last;
    }
    a.q = sc_.q.data() + b.first * c_.n_embd_q() + static_cast<int64_t>(hk) * group * c_.head_dim_k;
    if (w.sinks) a.sinks = w.sinks.data + static_cast<int64_t>(hk) * group;  // this group's query heads
    a.pages = kv_.page_table(il, batch_.seq[b.first]).data();
    a.k_base = kv_.k_head(il, 0, hk);
    a.v_base = kv_.v_head(il, 0, hk);
    a.out = sc_.attn.data() + b.first * c_.n_embd_attn() + static_cast<int64_t>(hk) * group * c_.head_dim_v;
    a.scratch = sc_.attn_thread.data() + static_cast<size_t>(thread) * sc_.attn_thread_floats;
    attention(a);
  };
  const int parts = pool_.active();
  const int64_t nb = static_cast<int64_t>(blocks.size());
  const bool decode = nb >= 2 * parts && std::all_of(blocks.begin(), blocks.end(), [](const QueryBlock& b) { return b.n_tokens == 1; });
  if (!decode) {
    pool_.run(nb * n_kv, [&](int64_t task, int thread) { attend_block(blocks[task / n_kv], static_cast<int>(task % n_kv), thread); });
    return;
  }
  // A decode step: each sequence's keys are read once, from DRAM (the step's weights have pushed
  // them out of the caches), in page runs a few KB long that the hardware prefetcher does not
  // follow. Each thread takes a contiguous range of sequences, balanced by keys, all heads of one
  // sequence at a time, and requests the next sequence's K/V lines of this layer into L2 (up to
  // kNextBytes) before computing the current one, so they arrive while it computes. Against one
  // task per (sequence, head) handed out dynamically, Qwen2.5-Coder-0.5B / SmolLM2 16 streams:
  // the layer's attention 150-187 -> 120-134 / 170-184 -> 128-143 us (bench/README.md).
  constexpr size_t kNextBytes = 256 * 1024;
  const int P = kv_.page_size();
  auto prefetch_block = [&](const QueryBlock& b) {
    const int32_t last = batch_.pos[b.first];
    const std::vector<int32_t>& table = kv_.page_table(il, batch_.seq[b.first]);
    const size_t kb = static_cast<size_t>(n_kv) * P * kv_.k_row_bytes(), vb = static_cast<size_t>(n_kv) * P * kv_.v_row_bytes();
    size_t bytes = 0;
    for (int32_t pg = kernels::attention_first_key(base.window, last) / P; pg <= last / P && bytes < kNextBytes; ++pg, bytes += kb + vb) {
      const uint8_t* k = kv_.k_page(il, table[pg]);  // all heads' K rows, then V rows
      const uint8_t* v = kv_.v_page(il, table[pg]);
      for (size_t o = 0; o < kb; o += 64) __builtin_prefetch(k + o, 0, 2);
      for (size_t o = 0; o < vb; o += 64) __builtin_prefetch(v + o, 0, 2);
    }
  };
  // Range boundaries: equal shares of the keys read (a block reads its window or its whole prefix).
  std::vector<int64_t>& keys = sc_.attn_keys;
  std::vector<int64_t>& cut = sc_.attn_cut;
  keys.resize(static_cast<size_t>(nb) + 1);
  cut.resize(static_cast<size_t>(parts) + 1);
  keys[0] = 0;
  for (int64_t i = 0; i < nb; ++i) {
    const int32_t last = batch_.pos[blocks[i].first];
    keys[i + 1] = keys[i] + (last - kernels::attention_first_key(base.window, last) + 1);
  }
  cut[0] = 0;
  cut[parts] = nb;
  for (int p = 1, i = 0; p < parts; ++p) {
    while (i < nb && keys[i] * parts < keys[nb] * p) ++i;
    cut[p] = std::max<int64_t>(i, cut[p - 1]);
  }
  pool_.run(parts, [&](int64_t part, int thread) {
    for (int64_t i = cut[part]; i < cut[part + 1]; ++i) {
      if (i + 1 < cut[part + 1]) prefetch_block(blocks[i + 1]);
      for (int hk = 0; hk < n_kv; ++hk) attend_block(blocks[i], hk, thread);
    }
  });
}

void ForwardPass::project(const Matrix& wmat, const MatmulPlan& plan, const float* src, int64_t src_width, float* dst,
                          const Vector& bias, MatmulEpilogue* epilogue) {
  sc_.act.reset(src, n_tokens_, src_width, src_width);
  MatmulOperand op;
  op.w = &wmat;
  op.x = sc_.act.get(pool_, matmul_input_type(wmat), &op.x_stride);
  op.y = dst;
  op.ldy = wmat.n_out;
  run_matmul(pool_, plan, &op, n_tokens_, epilogue);
  if (bias) {
    const auto add = kernels::active().add_f32;
    pool_.parallel_for(0, n_tokens_, [&](int64_t t, int) { add(bias.data, dst + t * wmat.n_out, bias.n); });
  }
}

}  // namespace edgellm
