// The memory plan: what loading a model and serving it with a given engine configuration will
// take, computed from the GGUF header and tensor table alone (no weight is read), before any of
// it is allocated. python/edgellm/memory_plan.py compares it with what the machine can give
// (MemAvailable, the cgroup limit) and refuses, or picks the largest context that fits.
//
// The parts, as the loader and the engine build them:
//   weights_packed     the row-interleaved copies pack_weights makes (packed_matrix_bytes, the
//                      loader's own sizing); their mapped source pages are released
//   weights_mapped     what stays read from the mapping in place and is touched at load or in
//                      every forward pass: matrices left in the GGUF layout, 1-D tensors (norms,
//                      biases), the header (metadata, tensor table)
//   weights_converted  f32 copies of non-F32 vectors
//   embedding_mapped   the token embedding when it is read row by row from the mapping (only
//                      the rows of tokens used are paged in; file-backed, the kernel may drop
//                      them): reported, not in the total
//   kv_budget          the engine's KV byte budget (engine.cpp's rule: kv_memory, else two
//                      sequence units), committed as pages are written and never beyond it
//   scratch_forward    ForwardScratch's per-token arrays for max_batch_tokens + activation slots
//                      (+ MoeScratch for mixture-of-experts models)
//   scratch_attention  the per-thread paged-attention scratch
//   runtime            heap the model file's parsed metadata and the tokenizer keep, computed
//                      from the file's contents (key/value and tensor records, token and merge
//                      texts and counts) with fixed per-item costs (memory_plan.cpp), never from
//                      the allocator's counters, so a plan is a function of the file and the
//                      options; the tokenizer's second parse of the metadata (freed after its
//                      build, but malloc keeps the pages), and the engine's logits row and
//                      sampling copy (2 x n_vocab floats)
//   load_peak          everything allocated by the end of loading (all but the KV; scratch
//                      counted whole though only written rows become resident) plus the
//                      tokenizer's transient second mapping of the header
//   total              max(load_peak, steady state with the whole KV budget written)
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "gguf/gguf_file.h"
#include "model/model_config.h"

namespace edgellm {

struct MemoryPlanOptions {
  int32_t n_ctx = 0;            // 0 = min(trained context, 4096), as EngineConfig
  int64_t kv_memory = 0;        // 0 = two sequence units, as EngineConfig
  DType kv_type = DType::F16;
  int32_t max_seqs = 16;
  int32_t max_batch_tokens = 512;
  int32_t page_size = 32;
  int n_threads = 0;            // 0 = physical cores
};

struct MemoryPlan {
  std::string path, arch;
  int32_t n_ctx = 0, n_ctx_train = 0, n_layer = 0, n_threads = 0, page_size = 0, max_seqs = 0,
          max_batch_tokens = 0;
  DType kv_type = DType::F16;
  int64_t file_bytes = 0;
  int64_t weights_packed = 0, weights_mapped = 0, weights_converted = 0, embedding_mapped = 0;
  int32_t matrices_packed = 0, matrices_mapped = 0;
  // KV bytes per token of one sequence in each layer group (all the group's layers, K and V),
  // the layers in each, the sliding window (0: none), one page of each group.
  int64_t kv_bytes_per_token_full = 0, kv_bytes_per_token_window = 0;
  int32_t kv_layers_full = 0, kv_layers_window = 0, window = 0;
  int64_t kv_page_bytes_full = 0, kv_page_bytes_window = 0;
  int64_t kv_budget = 0;
  int64_t scratch_forward = 0, scratch_attention = 0;
  int64_t runtime = 0;          // metadata + tokenizer heap + tokenizer transient + engine buffers
  int64_t metadata_heap = 0, tokenizer_heap = 0, tokenizer_load_transient = 0, engine_buffers = 0;
  int64_t load_peak = 0, total = 0;
  // Parameters (elements of every tensor) and those one token's forward pass uses: all but the
  // experts a token does not select (n_expert - n_expert_used of each MoE layer's); equal for a
  // dense model. active_weight_bytes: the file bytes of the tensors a decode step reads, the
  // token embedding row aside (a tied output head reads the whole embedding), in the same sense.
  int64_t params_total = 0, params_active = 0, active_weight_bytes = 0;
  int32_t n_expert = 0, n_expert_used = 0;

  int64_t weights() const { return weights_packed + weights_mapped + weights_converted; }
  int64_t scratch() const { return scratch_forward + scratch_attention; }
};

// Reads the header of one model once; plan() is then cheap for any configuration.
class MemoryPlanner {
 public:
  // Throws ModelFormatError for a missing, corrupt or unsupported file (as Model::load).
  explicit MemoryPlanner(const std::string& path);
  MemoryPlan plan(const MemoryPlanOptions& o) const;
  const ModelConfig& config() const { return config_; }

 private:
  void read(const std::string& path);
  std::string path_;
  ModelConfig config_;
  int64_t file_bytes_ = 0, header_bytes_ = 0;
  int64_t packed_ = 0, mapped_ = 0, converted_ = 0, embedding_ = 0;
  int32_t n_packed_ = 0, n_mapped_ = 0;
  int64_t metadata_heap_ = 0, tokenizer_heap_ = 0, tokenizer_transient_ = 0;
  int64_t params_total_ = 0, params_active_ = 0, active_weight_bytes_ = 0;
  size_t moe_row_bytes_[4] = {0, 0, 0, 0};  // MoeScratch::RowBytes: gate, up, down, shexp_down
};

}  // namespace edgellm
