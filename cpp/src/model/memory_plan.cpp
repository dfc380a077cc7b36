#include "model/memory_plan.h"

#include <algorithm>
#include <cstdlib>
#include <set>
#if defined(__GLIBC__)
#include <malloc.h>  // malloc_trim
#endif

#include "common/cpu_features.h"
#include "common/errors.h"
#include "kv/kv_cache.h"
#include "model/architecture.h"
#include "model/encoder.h"
#include "model/forward_pass.h"
#include "model/model.h"
#include "model/weight_packing.h"
#include "model/weights.h"
#include "quant/quant.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/vocab.h"

namespace edgellm {
namespace {

// The plan's runtime part is computed from the file's contents with fixed per-item costs, never
// measured with the allocator's counters: those count whatever else the process allocates at the
// time (a server planning one model while others serve), and a plan must be a function of the
// file and the options. The costs are libstdc++'s on a 64-bit target and glibc malloc's chunk
// rounding, checked against mallinfo2 deltas in a fresh process on SmolLM2, Gemma 3 and Qwen2.5
// (within 2 %; tests/test_memory_plan.py compares the whole plan with the peak RSS of a load).

// A std::string: the object (32 bytes, 15 characters inline) plus, for a longer text, its heap
// chunk (n + 1 bytes, an 8-byte malloc header, rounded up to 16).
int64_t string_bytes(size_t n) { return 32 + (n > 15 ? static_cast<int64_t>((n + 1 + 8 + 15) / 16 * 16) : 0); }
// A node of a std::unordered_map<std::string, integer>: next pointer, key, value, cached hash
// (56 bytes, a 64-byte chunk), its key's heap text, and 1-2 buckets of 8 bytes (the table
// doubles when full: 12 on average).
int64_t index_entry_bytes(size_t key) { return 64 + (string_bytes(key) - 32) + 12; }

// The parsed metadata GgufFile keeps: each key/value (the strings of string arrays included;
// numeric arrays stay in the mapping) and tensor record, and the two name indexes.
int64_t metadata_heap_bytes(const GgufFile& f) {
  int64_t b = 0;
  for (const GgufKV& kv : f.metadata()) {
    b += static_cast<int64_t>(sizeof(GgufKV)) + string_bytes(kv.key.size()) - 32 + string_bytes(kv.value.str.size()) - 32;
    for (const std::string& s : kv.value.strings) b += string_bytes(s.size());
    b += index_entry_bytes(kv.key.size());
  }
  for (const TensorInfo& t : f.tensors())
    b += static_cast<int64_t>(sizeof(TensorInfo)) + string_bytes(t.name.size()) - 32 + index_entry_bytes(t.name.size());
  return b;
}

// Per-item costs of the tokenizer (tokenizer/vocab.h) beyond its strings. A token: its
// token_to_id entry beyond the key text (index_entry_bytes - 32 = 44), the per-token arrays
// (score, type, attributes: 4 bytes each; the end-of-generation flag: 1) and 9 bytes of the
// special-token candidates, the trie over them and the pre-tokenizer's tables spread over the
// vocabulary (fitted: they grow with it). A merge: its merge_rank entry beyond the key text, and
// 4 bytes of slack (fitted).
constexpr int64_t kTokenCost = 44 + 13 + 9;
constexpr int64_t kMergeCost = 44 + 4;

// The tokenizer's heap: every token's and merge's text twice (the list and the lookup key; a
// merge's key "left\xffright" is as long as its text "left right") and the costs above.
int64_t tokenizer_heap_bytes(const GgufFile& f) {
  int64_t b = 0;
  if (const std::vector<std::string>* tokens = f.find_string_array("tokenizer.ggml.tokens"))
    for (const std::string& t : *tokens) b += 2 * string_bytes(t.size()) + kTokenCost;
  if (const std::vector<std::string>* merges = f.find_string_array("tokenizer.ggml.merges"))
    for (const std::string& m : *merges) b += 2 * string_bytes(m.size()) + kMergeCost;
  return b;
}

}  // namespace

// Gives the heap planning freed back to the system, so that the load that follows does not
// start with it resident (glibc keeps freed chunks otherwise).
static void trim_heap() {
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
}

MemoryPlanner::MemoryPlanner(const std::string& path) : path_(path) {
  read(path);
  trim_heap();
}

void MemoryPlanner::read(const std::string& path) {
  std::shared_ptr<GgufFile> file = GgufFile::open(path);
  metadata_heap_ = metadata_heap_bytes(*file);
  file_bytes_ = static_cast<int64_t>(file->total_size());  // every shard of a split model
  header_bytes_ = static_cast<int64_t>(file->total_header_bytes());

  // The loader's own steps, binding only: config, architecture, every tensor checked by name,
  // shape and type (a corrupt or unsupported file fails here as it would in Model::load).
  // Encoders (model/encoder.h) bind their own tensors; their embeddings are read row by row.
  const EncoderArchitecture* enc = find_encoder_architecture(file->get_string("general.architecture"));
  const Architecture* arch = nullptr;
  if (enc) {
    config_ = read_common_config(*file);
    enc->hparams(*file, config_);
  } else {
    arch = &read_model_config(*file, config_);
  }
  const ModelConfig& c = config_;
  WeightLoader ld(*file, /*plan_only=*/true);
  EncoderWeights enc_weights;
  Matrix token_embd, output;
  std::vector<LayerWeights> layers;
  if (enc) {
    bind_encoder(*file, ld, *enc, c, enc_weights);
    token_embd = enc_weights.token_embd;
  } else {
    token_embd = ld.matrix("token_embd.weight", c.n_embd, c.n_vocab);
    ld.vector("output_norm.weight", c.n_embd);
    output = ld.matrix("output.weight", c.n_embd, c.n_vocab, /*optional=*/true);
  }
  const bool tied = !enc && !output;
  if (tied) output = token_embd;
  if (!enc) {
    bind_rope_factors(ld, c);
    layers.resize(c.n_layer);
    for (int il = 0; il < c.n_layer; ++il) bind_layer(ld, c, arch->layer, il, layers[il]);
  }
  converted_ = static_cast<int64_t>(ld.converted_bytes());

  // Matrices: packed (an anonymous copy; the mapped source released) or read in place.
  std::vector<const Matrix*> mats{&output};
  for (const LayerWeights& w : layers)
    for (const Matrix* m : w.matrices()) mats.push_back(m);
  for (Matrix* m : enc_weights.matrices()) mats.push_back(m);
  // A tied head is token_embd again; a fused tensor's row views (Phi-3's attn_qkv) are each a
  // matrix of their own, packed or mapped on their own.
  std::set<std::pair<const TensorInfo*, const uint8_t*>> seen;
  auto count = [&](const Matrix& m, int64_t mapped_bytes) {
    const int64_t p = static_cast<int64_t>(packed_matrix_bytes(m));
    if (p > 0) {
      packed_ += p;
      ++n_packed_;
    } else {
      mapped_ += mapped_bytes;
      ++n_mapped_;
    }
  };
  for (const Matrix* m : mats) {
    if (!*m || !seen.insert({m->info, m->data}).second) continue;
    count(*m, static_cast<int64_t>(m->row_bytes) * m->n_out);
  }
  // Expert views share their 3-D tensor: each is packed (or mapped) on its own.
  for (const LayerWeights& w : layers)
    for (const Matrix* m : w.moe_matrices())
      if (*m) count(*m, static_cast<int64_t>(m->row_bytes) * m->n_out);
  if (c.is_moe()) {
    const MoeScratch::RowBytes rb = MoeScratch::widest(c, layers, [](const Matrix& m) {
      return packed_matrix_bytes(m) > 0 ? DType::Q8_R : quant::vec_dot_type(m.type);
    });
    moe_row_bytes_[0] = rb.gate;
    moe_row_bytes_[1] = rb.up;
    moe_row_bytes_[2] = rb.down;
    moe_row_bytes_[3] = rb.shexp_down;
  }

  // Parameters, and what one token uses: of each expert tensor only n_expert_used / n_expert.
  for (const TensorInfo& t : file->tensors()) {
    const int64_t n = static_cast<int64_t>(t.n_elements());
    params_total_ += n;
    const bool expert = c.is_moe() && t.n_dims == 3 && t.name.find("_exps.") != std::string::npos;
    params_active_ += expert ? n / c.n_expert * c.n_expert_used : n;
    if (t.name == "token_embd.weight" && !tied) continue;
    active_weight_bytes_ += expert ? static_cast<int64_t>(t.nbytes) / c.n_expert * c.n_expert_used
                                   : static_cast<int64_t>(t.nbytes);
  }
  // The token embedding is read a row per token from the mapping: unless the output head reads
  // all of it in place (tied and not packed), only the rows of tokens used are paged in.
  if (enc || !(tied && packed_matrix_bytes(output) == 0)) embedding_ = static_cast<int64_t>(token_embd.info->nbytes);
  // 1-D tensors bound as vectors (norms, biases) are f32 copies (counted in converted_ by the
  // loader); their source pages are touched once at load: one OS page each at most.
  // gpt-oss's per-expert bias tables (2-D, bound by WeightLoader::table) likewise.
  auto bias_table = [](const TensorInfo& t) {
    return t.n_dims == 2 && t.name.size() > 10 && t.name.compare(t.name.size() - 10, 10, "_exps.bias") == 0;
  };
  for (const TensorInfo& t : file->tensors())
    if (t.n_dims == 1 || bias_table(t)) mapped_ += std::min<int64_t>(static_cast<int64_t>(t.nbytes), 4096);
  mapped_ += header_bytes_;

  // The tokenizer, built once as the loader builds it: a file it refuses fails here too. Its heap
  // is computed from the token and merge lists (tokenizer_heap_bytes), not measured.
  Tokenizer::create(load_vocab(*file));
  tokenizer_heap_ = tokenizer_heap_bytes(*file);
  // While it is built, a second parse of the metadata (and a second mapping of the header) is
  // alive; the parse is freed when it returns, but malloc keeps those pages (they are counted
  // in the steady state), the mapping is gone.
  tokenizer_transient_ = metadata_heap_;
}

MemoryPlan MemoryPlanner::plan(const MemoryPlanOptions& o) const {
  if (o.page_size < 16 || o.page_size > 64)
    throw InvalidRequestError("page_size must be between 16 and 64, got " + std::to_string(o.page_size));
  if (o.max_batch_tokens < 1)
    throw InvalidRequestError("max_batch_tokens must be >= 1, got " + std::to_string(o.max_batch_tokens));
  if (o.n_ctx < 0) throw InvalidRequestError("n_ctx must be >= 0, got " + std::to_string(o.n_ctx));
  if (o.kv_memory < 0) throw InvalidRequestError("kv_memory must be >= 0");
  if (o.kv_type != DType::F16 && o.kv_type != DType::F32 && o.kv_type != DType::Q8_0)
    throw InvalidRequestError("kv_type must be f16, f32 or q8_0");
  const ModelConfig& c = config_;
  MemoryPlan p;
  p.path = path_;
  p.arch = c.arch;
  p.n_ctx_train = c.n_ctx_train;
  p.n_layer = c.n_layer;
  p.n_ctx = o.n_ctx > 0 ? o.n_ctx : default_context_length(c.n_ctx_train);
  p.n_threads = o.n_threads > 0 ? o.n_threads : std::max(1, cpu_features().physical_cores);
  p.page_size = o.page_size;
  p.max_seqs = o.max_seqs;
  p.max_batch_tokens = o.max_batch_tokens;
  p.kv_type = o.kv_type;
  p.file_bytes = file_bytes_;
  p.weights_packed = packed_;
  p.weights_mapped = mapped_;
  p.weights_converted = converted_;
  p.embedding_mapped = embedding_;
  p.matrices_packed = n_packed_;
  p.matrices_mapped = n_mapped_;

  // The KV budget, by engine.cpp's rule (Engine::Engine; test_memory_plan checks they agree).
  KVCacheConfig kc = kv_config_for(c);
  kc.page_size = o.page_size;
  kc.dtype = o.kv_type;
  kc.max_seqs = o.max_seqs + 1;
  for (int32_t w : kc.layer_window) {
    p.window = std::max(p.window, w);
    ++(w > 0 ? p.kv_layers_window : p.kv_layers_full);
  }
  p.kv_page_bytes_full = static_cast<int64_t>(KVCache::page_bytes(kc, KvGroup::Full));
  p.kv_page_bytes_window = p.window > 0 ? static_cast<int64_t>(KVCache::page_bytes(kc, KvGroup::Window)) : 0;
  p.kv_bytes_per_token_full = p.kv_page_bytes_full / o.page_size;
  p.kv_bytes_per_token_window = p.kv_page_bytes_window / o.page_size;
  // the engine's default (engine.cpp sizes its pools with the same function)
  const int64_t need = o.kv_memory > 0 ? o.kv_memory : KVCache::default_budget(kc, p.n_ctx, o.max_batch_tokens, o.max_seqs);
  // KVCache: the budget, at most what whole pages of the pools hold
  int64_t capacity = 0;
  if (p.kv_layers_full > 0 && p.kv_page_bytes_full > 0) capacity += need / p.kv_page_bytes_full * p.kv_page_bytes_full;
  if (p.kv_layers_window > 0 && p.kv_page_bytes_window > 0)
    capacity += need / p.kv_page_bytes_window * p.kv_page_bytes_window;
  p.kv_budget = std::min(need, capacity);

  p.scratch_forward = static_cast<int64_t>(ForwardScratch::forward_bytes(c, o.max_batch_tokens));
  if (c.is_moe()) {
    MoeScratch::RowBytes rb;
    rb.gate = moe_row_bytes_[0];
    rb.up = moe_row_bytes_[1];
    rb.down = moe_row_bytes_[2];
    rb.shexp_down = moe_row_bytes_[3];
    p.scratch_forward += static_cast<int64_t>(MoeScratch::bytes(c, o.max_batch_tokens, rb));
  }
  p.params_total = params_total_;
  p.params_active = params_active_;
  p.active_weight_bytes = active_weight_bytes_;
  p.n_expert = c.n_expert;
  p.n_expert_used = c.n_expert_used;
  p.scratch_attention =
      static_cast<int64_t>(ForwardScratch::attention_bytes(c, p.n_threads, std::max(o.page_size, kAttentionScratchPageHint)));
  p.metadata_heap = metadata_heap_;
  p.tokenizer_heap = tokenizer_heap_;
  p.tokenizer_load_transient = tokenizer_transient_;
  // engine.cpp: one logits row of n_vocab floats per row that wants logits, and the sampler's
  // working copy of a row (a decode step of one sequence: one row each)
  p.engine_buffers = 2 * static_cast<int64_t>(c.n_vocab) * static_cast<int64_t>(sizeof(float));
  p.runtime = metadata_heap_ + tokenizer_heap_ + tokenizer_transient_ + p.engine_buffers;
  const int64_t steady = p.weights() + p.scratch() + p.runtime;
  p.load_peak = steady + header_bytes_;  // + the tokenizer's own mapping of the header
  p.total = std::max(p.load_peak, steady + p.kv_budget);
  return p;
}

}  // namespace edgellm
