#include "model/decoder.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "common/errors.h"
#include "common/thread_pool.h"
#include "kernels/attention.h"
#include "kernels/kernels.h"
#include "model/lora.h"
#include "model/weight_packing.h"
#include "quant/quant.h"

namespace edgellm {
DecoderModel::DecoderModel(std::shared_ptr<GgufFile> file, const Architecture& arch, ModelConfig config,
                           const LoadOptions& opts)
    : arch_(arch) {
  if (opts.max_batch_tokens <= 0)
    throw InvalidRequestError("LoadOptions.max_batch_tokens must be positive, got " +
                              std::to_string(opts.max_batch_tokens));
  max_batch_tokens_ = opts.max_batch_tokens;
  file_ = std::move(file);
  config_ = std::move(config);
  const ModelConfig& c = config_;
  threads_ = opts.threads ? opts.threads : std::make_shared<ThreadPool>(opts.n_threads);

  WeightLoader ld(*file_);
  token_embd_ = ld.matrix("token_embd.weight", c.n_embd, c.n_vocab);
  output_norm_ = ld.vector("output_norm.weight", c.n_embd);
  output_ = ld.matrix("output.weight", c.n_embd, c.n_vocab, /*optional=*/true);
  if (!output_) output_ = token_embd_;  // tied output head
  if (const TensorInfo* t = file_->find_tensor("cls.output.weight"); t && t->n_dims == 2 && t->ne[1] > 0 && t->ne[1] <= 16)
    cls_out_ = ld.matrix("cls.output.weight", c.n_embd, t->ne[1]);
  rope_factors_ = bind_rope_factors(ld, c);
  layers_.resize(c.n_layer);
  for (int il = 0; il < c.n_layer; ++il) bind_layer(ld, c, arch_.layer, il, layers_[il]);
  owned_ = std::move(ld.owned());
  opts.progress.report(kLoadBindEnd, "bind");

  const int nt = threads_->size();
  plans_.resize(c.n_layer);
  for (int il = 0; il < c.n_layer; ++il) {
    const LayerWeights& w = layers_[il];
    plans_[il].qkv = plan_matmul({&w.wq, &w.wk, &w.wv}, nt);
    plans_[il].wo = plan_matmul({&w.wo}, nt);
    plans_[il].gate_up = plan_matmul({&w.gate, &w.up}, nt);
    plans_[il].down = plan_matmul({&w.down}, nt);
    if (w.router) {
      plans_[il].router = plan_matmul({&w.router}, nt);
      plans_[il].expert_gate_up = plan_matmul({&w.gate_exps[0], &w.up_exps[0]}, nt);
      plans_[il].expert_down = plan_matmul({&w.down_exps[0]}, nt);
      if (w.gate_shexp) {
        plans_[il].shexp_gate_up = plan_matmul({&w.gate_shexp, &w.up_shexp}, nt);
        plans_[il].shexp_down = plan_matmul({&w.down_shexp}, nt);
      }
    }
  }
  output_plan_ = plan_matmul({&output_}, nt);

  if (opts.n_ctx < 0) throw InvalidRequestError("LoadOptions.n_ctx must be >= 0, got " + std::to_string(opts.n_ctx));
  const int n_ctx = opts.n_ctx > 0 ? opts.n_ctx : default_context_length(c.n_ctx_train);
  const float* factors = select_rope_factors(rope_factors_, c, n_ctx);
  rope_[0] = Rope(c.rope_type, c.n_rot, c.rope_global, factors);
  rope_[1] = Rope(c.rope_type, c.n_rot, c.rope_local, factors);

  scratch_page_size_ = kAttentionScratchPageHint;  // larger pages regrow once
  scratch_.allocate(c, max_batch_tokens_, nt, scratch_page_size_);

  if (opts.n_gpu_layers != 0) {
    OffloadRequest r;
    r.config = &config_;
    r.layers = &layers_;
    r.rope_freq_factors = factors;
    r.layer = &arch_.layer;
    r.n_gpu_layers = opts.n_gpu_layers;
    r.max_batch_tokens = max_batch_tokens_;
    if (!opts.make_executor)
      throw InvalidRequestError("n_gpu_layers = " + std::to_string(opts.n_gpu_layers) +
                                " needs an executor for the offloaded layers (LoadOptions::make_executor)");
    gpu_ = opts.make_executor(r);  // nullptr (with a warning) when no GPU can take them
    if (gpu_) {
      gpu_layers_ = c.n_layer - gpu_->first_layer();
      gpu_description_ = gpu_->describe();
    }
  }

  // Repack what the CPU multiplies (layers on the GPU read the GGUF blocks as they are).
  std::vector<Matrix*> mats{&output_};
  const int cpu_layers = c.n_layer - gpu_layers_;
  for (int il = 0; il < cpu_layers; ++il)
    for (Matrix* m : layers_[il].matrices()) mats.push_back(m);
  for (int il = 0; il < cpu_layers; ++il)
    for (Matrix* m : layers_[il].moe_matrices()) mats.push_back(m);
  packed_ = pack_weights(mats, *threads_, opts.progress.range(kLoadBindEnd, 1.0));
  opts.progress.report(1.0, "repack");
  if (c.is_moe()) {
    // The experts' activation formats are known once they are packed (or not).
    scratch_.moe.allocate(c, max_batch_tokens_, MoeScratch::widest(c, layers_, matmul_input_type));
  }
}

DecoderModel::~DecoderModel() = default;

void DecoderModel::validate(const Batch& b, KVCache& kv, const float* logits, const float* hidden) const {
  const ModelConfig& c = config_;
  const int T = b.size();
  if (b.pos.size() != b.token.size() || b.seq.size() != b.token.size() || b.want_logits.size() != b.token.size())
    throw InvalidRequestError("batch: token, pos, seq and want_logits must have the same length");
  if (!b.want_hidden.empty() && b.want_hidden.size() != b.token.size())
    throw InvalidRequestError("batch: want_hidden must be empty or as long as token");
  if (!hidden && b.n_hidden_outputs() > 0)
    throw InvalidRequestError("forward: hidden buffer is null but tokens want hidden states");
  if (T > max_batch_tokens_)
    throw InvalidRequestError("batch of " + std::to_string(T) + " tokens exceeds max_batch_tokens = " +
                              std::to_string(max_batch_tokens_) + " (split it)");
  if ((!b.embd.empty() && b.embd.size() != b.token.size()) || (!b.block_last.empty() && b.block_last.size() != b.token.size()))
    throw InvalidRequestError("batch: embd and block_last must be empty or as long as token");
  for (int t = 0; t < T; ++t) {
    const int32_t last = b.block_last_of(t);
    if (last < 0) continue;
    // The block's keys must be written by this forward: its last position is a later row of the batch.
    bool found = false;
    for (int u = t; u < T && !found; ++u) found = b.seq[u] == b.seq[t] && b.pos[u] == last;
    if (!found)
      throw InvalidRequestError("batch token " + std::to_string(t) + ": its image block ends at position " +
                                std::to_string(last) + ", which is not in the batch (an image block is one chunk)");
  }
  if (gpu_ && !b.block_last.empty())
    throw InvalidRequestError("image input with GPU-offloaded layers is not supported yet (n_gpu_layers = 0)");
  if (!logits && b.n_outputs() > 0) throw InvalidRequestError("forward: logits buffer is null but tokens want logits");

  const KVCacheConfig& kc = kv.config();
  if (kc.n_layers != c.n_layer || kc.n_kv_heads != c.n_head_kv || kc.head_dim_k != c.head_dim_k ||
      kc.head_dim_v != c.head_dim_v || kc.layer_window != c.layer_window)
    throw InvalidRequestError("KV cache geometry (layers " + std::to_string(kc.n_layers) + ", kv heads " +
                              std::to_string(kc.n_kv_heads) + ", head dims " + std::to_string(kc.head_dim_k) + "/" +
                              std::to_string(kc.head_dim_v) + ") does not match the model; build it from kv_config()");

  // One layer of each group stands for its group's page tables.
  int group_layer[2] = {-1, -1};
  for (int il = 0; il < c.n_layer; ++il)
    if (group_layer[kv_group_index(kv.group_of(il))] < 0) group_layer[kv_group_index(kv.group_of(il))] = il;
  const int P = kv.page_size();
  for (KvGroup g : kKvGroups) {
    const int l = group_layer[kv_group_index(g)];
    if (l < 0 || kv.pages_total(g) < 2) continue;
    // attention.h addresses page i of a head as base + i * stride: check the cache agrees.
    const size_t stride = static_cast<size_t>(kc.n_kv_heads) * P * (kv.k_row_bytes() + kv.v_row_bytes());
    if (static_cast<size_t>(kv.k_page(l, 1) - kv.k_page(l, 0)) != stride)
      throw std::logic_error("KV cache page layout differs from what paged attention assumes");
  }

  if (b.lora.size() > b.token.size()) throw InvalidRequestError("batch: lora longer than token");
  for (const LoraMix* m : b.lora)
    if (m)
      for (const LoraUse& u : m->uses)
        if (!u.adapter || u.adapter->base() != &layers_)
          throw InvalidRequestError("batch: a LoRA adapter loaded for another model");
  for (int t = 0; t < T; ++t) {
    const int32_t tok = b.token[t], pos = b.pos[t], seq = b.seq[t];
    if (tok < 0 || tok >= c.n_vocab)
      throw InvalidRequestError("batch token " + std::to_string(t) + ": id " + std::to_string(tok) +
                                " is outside the vocabulary [0, " + std::to_string(c.n_vocab) + ")");
    if (seq < 0 || seq >= kc.max_seqs)
      throw InvalidRequestError("batch token " + std::to_string(t) + ": sequence slot " + std::to_string(seq) +
                                " is outside [0, " + std::to_string(kc.max_seqs) + ")");
    if (pos < 0) throw InvalidRequestError("batch token " + std::to_string(t) + ": negative position");
    for (int g = 0; g < 2; ++g) {
      const int l = group_layer[g];
      if (l < 0) continue;
      const std::vector<int32_t>& table = kv.page_table(l, seq);
      const int32_t w = kc.layer_window[l];
      const int32_t first = (w > 0 && pos - w + 1 > 0 ? pos - w + 1 : 0) / P;
      const int32_t last = pos / P;
      if (static_cast<int32_t>(table.size()) <= last)
        throw InvalidRequestError("KV pages not reserved: sequence " + std::to_string(seq) + " position " +
                                  std::to_string(pos) + " (call KVCache::reserve first)");
      for (int32_t i = first; i <= last; ++i)
        if (table[i] < 0)
          throw InvalidRequestError("KV page " + std::to_string(i) + " of sequence " + std::to_string(seq) +
                                    " was released but position " + std::to_string(pos) + " still attends to it");
    }
  }
}

void DecoderModel::embed(const Batch& b, float* x) {
  const ModelConfig& c = config_;
  const int64_t n = c.n_embd;
  threads_->parallel_for(0, b.size(), [&](int64_t t, int) {
    float* row = x + t * n;
    if (const float* e = b.embedding_of(static_cast<int32_t>(t))) {  // an image row: its embedding as given
      std::memcpy(row, e, sizeof(float) * n);
      return;
    }
    quant::dequantize_row(token_embd_.type, token_embd_.row(b.token[t]), row, n);
    if (c.embed_scale != 1.0f)
      for (int64_t i = 0; i < n; ++i) row[i] *= c.embed_scale;
  });
}

void DecoderModel::output_hidden(const Batch& b, const float* x, float* hidden) {
  // The final norm of the rows that want hidden states, straight into the caller's buffer.
  const ModelConfig& c = config_;
  std::vector<int32_t>& rows = scratch_.out_rows;  // capacity reserved at load
  rows.clear();
  for (int t = 0; t < b.size(); ++t)
    if (b.wants_hidden(t)) rows.push_back(t);
  const int64_t n = c.n_embd;
  const auto norm = kernels::active().rmsnorm;
  threads_->parallel_for(0, static_cast<int64_t>(rows.size()), [&](int64_t i, int) {
    norm(x + static_cast<int64_t>(rows[i]) * n, output_norm_.data, hidden + i * n, n, c.rms_eps);
  });
}

void DecoderModel::output_head(const Batch& b, const float* x, float* logits) {
  const ModelConfig& c = config_;
  std::vector<int32_t>& rows = scratch_.out_rows;  // capacity reserved at load
  rows.clear();
  for (int t = 0; t < b.size(); ++t)
    if (b.want_logits[t]) rows.push_back(t);
  const int64_t n_out = static_cast<int64_t>(rows.size());
  if (n_out == 0) return;
  // Only rows that want logits go through the final norm and the (large) output matmul.
  float* h = scratch_.h.data();
  const int64_t n = c.n_embd;
  const auto norm = kernels::active().rmsnorm;
  threads_->parallel_for(0, n_out, [&](int64_t i, int) {
    norm(x + static_cast<int64_t>(rows[i]) * n, output_norm_.data, h + i * n, n, c.rms_eps);
  });
  scratch_.act.reset(h, n_out, n, n);
  MatmulOperand op;
  op.w = &output_;
  op.x = scratch_.act.get(*threads_, matmul_input_type(output_), &op.x_stride);
  op.y = logits;
  op.ldy = c.n_vocab;
  run_matmul(*threads_, output_plan_, &op, n_out);
  if (c.logit_softcap > 0.0f) {
    const float cap = c.logit_softcap;
    threads_->parallel_for(0, n_out, [&](int64_t i, int) {
      float* l = logits + i * c.n_vocab;
      for (int64_t j = 0; j < c.n_vocab; ++j) l[j] = cap * std::tanh(l[j] / cap);
    });
  }
}

void DecoderModel::rank(const float* last_hidden, float* scores) {
  if (!cls_out_) throw InvalidRequestError("this model has no classification head: it does not rank");
  const int64_t n = config_.n_embd, k = cls_out_.n_out;
  std::vector<float> row(n);
  double mx = -INFINITY;
  std::vector<double> z(k);
  for (int64_t j = 0; j < k; ++j) {
    quant::dequantize_row(cls_out_.type, cls_out_.row(j), row.data(), n);
    double d = 0;
    for (int64_t i = 0; i < n; ++i) d += static_cast<double>(row[i]) * last_hidden[i];
    z[j] = d;
    mx = std::max(mx, d);
  }
  double sum = 0;
  for (int64_t j = 0; j < k; ++j) sum += (z[j] = std::exp(z[j] - mx));
  for (int64_t j = 0; j < k; ++j) scores[j] = static_cast<float>(z[j] / sum);
}

void DecoderModel::run_tasks(int64_t n_tasks, const std::function<void(int64_t, int)>& fn) {
  std::lock_guard<std::mutex> lock(forward_mutex_);
  threads_->run(n_tasks, fn);
}

std::shared_ptr<const LoraAdapter> DecoderModel::load_lora(const std::string& path) {
  if (gpu_)
    throw InvalidRequestError(path + ": LoRA adapters need every layer on the CPU (this model runs " +
                              std::to_string(gpu_layers_) + " on the GPU)");
  std::shared_ptr<LoraAdapter> a = LoraAdapter::load(path, arch_.name, config_, layers_);
  std::lock_guard<std::mutex> lock(forward_mutex_);  // the scratch is the running forward pass's
  scratch_.lora.ensure(max_batch_tokens_, a->max_rank());
  return a;
}

void DecoderModel::forward(const Batch& batch, KVCache& kv, float* logits, float* hidden) {
  std::lock_guard<std::mutex> lock(forward_mutex_);
  validate(batch, kv, logits, hidden);
  if (batch.empty()) return;
  if (kv.page_size() > scratch_page_size_) {
    // Rare: a cache with larger pages than the hint; regrow the attention scratch once.
    const ModelConfig& c = config_;
    scratch_page_size_ = kv.page_size();
    scratch_.attn_thread_floats = (kernels::paged_attention_scratch_floats(c.n_head / c.n_head_kv, c.head_dim_k,
                                                                           c.head_dim_v, scratch_page_size_) + 15) / 16 * 16;
    scratch_.attn_thread.allocate(scratch_.attn_thread_floats * threads_->size());
  }

  DecoderState state;
  state.config = &config_;
  state.layers = &layers_;
  state.plans = &plans_;
  state.rope[0] = &rope_[0];
  state.rope[1] = &rope_[1];
  state.pool = threads_.get();
  state.scratch = &scratch_;
  ForwardPass f(state, batch, kv);

  embed(batch, f.x);
  f.prepare_rope();
  f.plan_query_blocks();
  f.prepare_lora();
  const int n_cpu_layers = gpu_ ? gpu_->first_layer() : config_.n_layer;
  for (int il = 0; il < n_cpu_layers; ++il) run_layer(arch_.layer, f, layers_[il], il);
  if (gpu_) gpu_->run(batch, kv, f.x);  // the rest, with their KV pages in device memory
  if (hidden) output_hidden(batch, f.x, hidden);
  output_head(batch, f.x, logits);

  // The cache now holds these positions.
  for (int t = 0; t < batch.size(); ++t)
    if (batch.pos[t] + 1 > kv.n_positions(batch.seq[t])) kv.set_n_positions(batch.seq[t], batch.pos[t] + 1);
}

}  // namespace edgellm
