// The building blocks the CPU runs an architecture's layer with (run_layer in
// model/architecture.h), and the scratch they run in. A ForwardPass lives for one
// Model::forward call; it holds the residual stream of the batch's tokens and runs every op on
// the model's thread pool through the kernel table. For a llama layer run_layer calls
//
//   f.rmsnorm(f.x, w.attn_norm, f.h);    // h = rmsnorm(x) * attn_norm
//   f.self_attention(w, il);             // out = Wo · attention(RoPE(Wq h), RoPE(Wk h), Wv h)
//   f.add_residual(f.out);               // x += out
//   f.rmsnorm(f.x, w.ffn_norm, f.h);
//   f.gated_ffn(w, il, FfnActivation::SiLU); // out = Wdown · (act(Wgate h) ⊙ Wup h)
//   f.add_residual(f.out);
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "kv/kv_cache.h"
#include "model/architecture.h"
#include "model/batch.h"
#include "model/expert_router.h"
#include "model/lora.h"
#include "model/model_config.h"
#include "model/parallel_matmul.h"
#include "model/rope.h"

namespace edgellm {

class ThreadPool;

// 64-byte aligned array, allocated once.
template <class T>
class AlignedArray {
 public:
  void allocate(size_t n);
  T* data() { return data_.get(); }
  const T* data() const { return data_.get(); }
  size_t size() const { return n_; }

 private:
  struct Free {
    void operator()(T* p) const;
  };
  std::unique_ptr<T, Free> data_;
  size_t n_ = 0;
};

// Matmul chunk lists of one layer, made at load.
struct LayerPlans {
  MatmulPlan qkv, wo, gate_up, down;
  // MoE layers: the router, and the chunks of one expert's gate+up and of its down matrix
  // (every expert has the same shape; a step runs them for each selected expert).
  MatmulPlan router, expert_gate_up, expert_down, shexp_gate_up, shexp_down;
};

// What the MoE FFN (moe_block.cpp) writes, for R = max_tokens * n_expert_used (token, expert)
// rows grouped by expert. The gathered inputs are sized for the widest activation format any
// layer's experts take (the formats differ per layer in mixed quantizations).
struct MoeScratch {
  // Bytes of one row in the experts' input formats: gate and up (n_embd wide), down (n_ff_exp).
  struct RowBytes {
    size_t gate = 0, up = 0, down = 0, shexp_down = 0;  // shexp_down: n_ff_shexp wide
  };
  // The widest over `layers`, each matrix's format given by `input_type` (matmul_input_type
  // after packing; the memory plan passes the format packing would give).
  static RowBytes widest(const ModelConfig& c, const std::vector<LayerWeights>& layers,
                         DType (*input_type)(const Matrix&));

  int max_rows = 0;
  AlignedArray<float> logits;          // [T][n_expert] router logits, then probabilities
  ExpertRouting routing;
  AlignedArray<uint8_t> x_gate, x_up;  // [R] gathered inputs in the gate / up input formats
  AlignedArray<float> gate, up;        // [R][n_ff_exp]
  AlignedArray<uint8_t> x_down;        // [R] activations in the down input format
  AlignedArray<float> down;            // [R][n_embd] each row's expert output
  AlignedArray<float> sh_gate, sh_up;  // [T][n_ff_shexp] the shared expert
  AlignedArray<uint8_t> x_sh_down;     // [T] its down input
  AlignedArray<float> sh_out;          // [T][n_embd] its output

  void allocate(const ModelConfig& c, int max_tokens, const RowBytes& rows);
  static size_t bytes(const ModelConfig& c, int max_tokens, const RowBytes& rows);
};

// What the LoRA additions (model/lora_block.cpp) work in. A forward pass groups the batch's
// entries — (token, adapter use) pairs: a token has one per adapter in its mix — by adapter
// once (prepare_lora). A group holds the entries of one adapter at one position of the mixes
// (most sequences use one adapter), so a token appears in a group at most once and each group
// reads its adapter's A and Bᵀ once per op for all its tokens (Punica / S-LoRA).
//
// Each op runs as its base matmul's epilogue (MatmulEpilogue, one pool region): pre tasks
// (group, part, up to kTokenChunk entries) compute low = scale · A·x; after each base chunk
// (part, output rows), the thread that computed it adds Bᵀ's rows for every group to them.
struct LoraScratch : MatmulEpilogue {
  static constexpr int kTokenChunk = 16;
  struct Group {
    const LoraAdapter* adapter;
    int32_t first, n;  // its entries in tokens / scales (consecutive), n of them
  };
  struct Task {
    int32_t group, part, lo, hi;  // the group's entries [lo, hi)
  };
  struct Entry {
    const LoraAdapter* adapter;
    int32_t use, token;
  };
  std::vector<Group> groups;
  std::vector<int32_t> tokens;  // batch index of each entry
  std::vector<float> scales;    // the use's scale of each entry
  std::vector<Task> tasks;      // the current op's pre tasks
  std::vector<Entry> order;     // prepare_lora's sort
  std::vector<float> low;       // [part][entry][rank_cap]: scale · A·x
  // The next op's adapter bytes, one run per group: prefetched while this op's base chunks
  // stream (ahead()), so its A and Bᵀ come from cache instead of as short cold streams.
  std::vector<std::pair<const uint8_t*, const uint8_t*>> next;
  int max_tokens = 0, rank_cap = 0;

  // The current op (ForwardPass::lora).
  int layer = 0, n_parts = 0;
  const LoraTarget* targets = nullptr;
  const float* src = nullptr;
  int64_t width = 0;
  float* const* y = nullptr;
  const int64_t* ldy = nullptr;

  // Room for rank `rank` and max_tokens tokens of one adapter each (no-op when there is).
  void ensure(int max_tokens, int64_t rank);
  float* low_of(int part, int32_t entry) {
    return low.data() + (static_cast<size_t>(part) * tokens.size() + static_cast<size_t>(entry)) * rank_cap;
  }
  int64_t n_pre() const override { return static_cast<int64_t>(tasks.size()); }
  void pre(int64_t task, int thread) override;
  void post(const MatmulChunk& chunk, int thread) override;
  int64_t ahead_rows(int64_t ncols) const override;
  void ahead(int64_t k0, int64_t k1, int64_t n) override;
};

// A run of batch tokens of one sequence at consecutive positions, attended in one kernel call.
struct QueryBlock {
  int32_t first;     // batch index of the first token
  int32_t n_tokens;
  bool exact_rows = false;  // verification rows: each token computes what it would alone (attention.h)
  // An image row (Batch::block_last, one token): it attends to the keys up to this position (the
  // end of its image block) under the window its own position gives; -1: causal.
  int32_t attend_last = -1;
};

// Everything a forward pass writes, sized at load for max_batch_tokens (T).
struct ForwardScratch {
  int max_tokens = 0;
  AlignedArray<float> x, h, out;       // [T][n_embd]
  AlignedArray<float> q, attn;         // [T][n_head * head_dim]
  AlignedArray<float> k, v;            // [T][n_kv * head_dim]
  AlignedArray<float> gate, up;        // [T][n_ff]
  AlignedArray<float> rope_table[2];   // [T][n_rot]: global, local variant
  AlignedArray<float> attn_thread;     // per thread: paged_attention scratch
  size_t attn_thread_floats = 0;
  ActivationQuantizer act;
  MoeScratch moe;                      // MoE models only (DecoderModel allocates it after packing)
  LoraScratch lora;                    // once an adapter is loaded (DecoderModel::load_lora)
  std::vector<int32_t> out_rows;       // tokens that want logits (capacity T)
  std::vector<QueryBlock> query_blocks;  // the batch cut into attention blocks (capacity T)
  std::vector<int64_t> attn_keys;        // a decode step's attention: keys read before each block (T + 1)
  std::vector<int64_t> attn_cut;         // and each thread's first block (threads + 1)

  void allocate(const ModelConfig& c, int max_tokens, int n_threads, int page_size_hint);
  // What allocate() takes, split into the per-token arrays + activation slots and the
  // per-thread attention scratch (model/memory_plan.h sizes the plan with it).
  static size_t forward_bytes(const ModelConfig& c, int max_tokens);
  static size_t attention_bytes(const ModelConfig& c, int n_threads, int page_size_hint);
};

// Pages the attention scratch is sized for at load (larger ones regrow it once).
constexpr int kAttentionScratchPageHint = 64;

// The model state a forward pass reads (owned by DecoderModel).
struct DecoderState {
  const ModelConfig* config = nullptr;
  const std::vector<LayerWeights>* layers = nullptr;
  const std::vector<LayerPlans>* plans = nullptr;
  const Rope* rope[2] = {nullptr, nullptr};  // global, local
  ThreadPool* pool = nullptr;
  ForwardScratch* scratch = nullptr;
};

class ForwardPass {
 public:
  ForwardPass(const DecoderState& s, const Batch& batch, KVCache& kv);

  // [n_tokens][n_embd] activations: residual stream, sub-layer input, sub-layer output.
  float* x;
  float* h;
  float* out;
  int n_tokens() const { return n_tokens_; }
  const ModelConfig& config() const { return c_; }

  // dst = rmsnorm(src) * w per token (eps from the config); dst may be src.
  void rmsnorm(const float* src, const Vector& w, float* dst);
  // x += src
  void add_residual(const float* src);
  // out = attention sub-layer of layer il on h: Q/K/V projections (+ biases), per-head Q/K
  // norms when the layer has them, RoPE, Q scaling, K/V written to the cache, paged attention
  // over each token's own sequence (within the layer's window; with the layer's attention sinks),
  // output projection (+ bias).
  void self_attention(const LayerWeights& w, int il);
  // out = Wdown · (act(Wgate h + b) ⊙ (Wup h + b)) (+ b)
  void gated_ffn(const LayerWeights& w, int il, FfnActivation act);
  // out = Σ_j g_j · Wdown_e_j · (silu(Wgate_e_j h) ⊙ Wup_e_j h) over each token's top-k experts
  // e_j with gate weights g_j (model/expert_router.h); each selected expert's weights are read
  // once for all the batch's tokens routed to it (moe_block.cpp); + the shared expert's
  // SwiGLU FFN, × sigmoid(gate_inp_shexp · h) when the layer has that gate.
  void moe_ffn(const LayerWeights& w, int il);
  // The LoRA additions y_j += scale · B_j·(A_j·src) for each token with adapters, part j of
  // this op (target targets[j] of layer il; output y[j], row stride ldy[j]) over src rows of
  // `width`, as the epilogue of the op's base matmul (LoraScratch; model/lora_block.cpp).
  // nullptr when no token of the batch has an adapter for them.
  MatmulEpilogue* lora(int il, const LoraTarget* targets, int n, const float* src, int64_t width, float* const* y,
                       const int64_t* ldy);

  // Per-batch preparation, once per forward: the RoPE tables for the batch's positions and the
  // query blocks for attention.
  void prepare_rope();
  void plan_query_blocks();
  // Groups the batch's tokens by adapter (LoraScratch); once per forward, before the layers.
  void prepare_lora();

 private:
  void project_qkv(const LayerWeights& w, int il);
  void shared_expert(const LayerWeights& w, int il);  // MoeScratch::sh_out = the shared expert on h
  void prepare_qk_and_store_kv(const LayerWeights& w, int il);
  void attend(const LayerWeights& w, int il);
  void project(const Matrix& wmat, const MatmulPlan& plan, const float* src, int64_t src_width, float* dst,
               const Vector& bias, MatmulEpilogue* epilogue = nullptr);

  const DecoderState& s_;
  const ModelConfig& c_;
  const Batch& batch_;
  KVCache& kv_;
  ThreadPool& pool_;
  ForwardScratch& sc_;
  int n_tokens_;
};

}  // namespace edgellm
