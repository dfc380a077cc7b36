#include "model/encoder.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "common/errors.h"
#include "common/thread_pool.h"
#include "kernels/kernels.h"
#include "model/architecture.h"
#include "quant/quant.h"

namespace edgellm {

// One accessor per encoder architecture file (as architecture.cpp lists the decoders').
const EncoderArchitecture& bert_architecture();
const EncoderArchitecture& nomic_bert_architecture();

namespace {
const std::vector<const EncoderArchitecture*>& encoder_architectures() {
  static const std::vector<const EncoderArchitecture*> list = {&bert_architecture(), &nomic_bert_architecture()};
  return list;
}
std::string layer_tensor(int il, const char* name) { return "blk." + std::to_string(il) + "." + name; }
}  // namespace

void encoder_hparams(const GgufFile& file, ModelConfig& c) {
  if (auto causal = file.find_bool(arch_key(c, "attention.causal")); causal && *causal)
    throw ModelFormatError(file.path() + ": key " + arch_key(c, "attention.causal") + " = true: a causal " + c.arch +
                           " is not supported");
}

const EncoderArchitecture* find_encoder_architecture(const std::string& name) {
  return find_by_name(encoder_architectures(), name);
}

std::string supported_encoder_architectures() { return names_of(encoder_architectures()); }

std::vector<Matrix*> EncoderWeights::matrices() {
  std::vector<Matrix*> v{&pooler, &classifier};
  for (EncoderLayerWeights& l : layers)
    for (Matrix* m : l.matrices()) v.push_back(m);
  return v;
}

void bind_encoder(const GgufFile& f, WeightLoader& ld, const EncoderArchitecture& arch, const ModelConfig& c,
                  EncoderWeights& w) {
  const bool rot = arch.rotary;  // biases optional
  w.token_embd = ld.matrix("token_embd.weight", c.n_embd, c.n_vocab);
  if (!rot) w.pos_embd = ld.matrix("position_embd.weight", c.n_embd, c.n_ctx_train);
  // Row counts read from the tensors: the token types (tokenizer.ggml.token_type_count) and
  // the classifier's outputs.
  auto rows = [&](const char* name) -> int64_t {
    const TensorInfo* t = f.find_tensor(name);
    return t && t->n_dims == 2 && t->ne[1] > 0 && t->ne[1] <= 1024 ? t->ne[1] : 1;
  };
  if (ld.has("token_types.weight")) w.type_embd = ld.matrix("token_types.weight", c.n_embd, rows("token_types.weight"));
  w.embd_norm_w = ld.vector("token_embd_norm.weight", c.n_embd);
  w.embd_norm_b = ld.vector("token_embd_norm.bias", c.n_embd);
  w.layers.resize(c.n_layer);
  for (int il = 0; il < c.n_layer; ++il) {
    auto t = [&](const char* n) { return layer_tensor(il, n); };
    EncoderLayerWeights& l = w.layers[il];
    if (ld.has(t("attn_qkv.weight"))) {  // nomic-bert's Wqkv
      const Matrix qkv = ld.matrix(t("attn_qkv.weight"), c.n_embd, c.n_embd_q() + c.n_embd_k() + c.n_embd_v());
      l.wq = row_view(qkv, 0, c.n_embd_q());
      l.wk = row_view(qkv, c.n_embd_q(), c.n_embd_k());
      l.wv = row_view(qkv, c.n_embd_q() + c.n_embd_k(), c.n_embd_v());
    } else {
      l.wq = ld.matrix(t("attn_q.weight"), c.n_embd, c.n_embd_q());
      l.wk = ld.matrix(t("attn_k.weight"), c.n_embd, c.n_embd_k());
      l.wv = ld.matrix(t("attn_v.weight"), c.n_embd, c.n_embd_v());
      l.bq = ld.vector(t("attn_q.bias"), c.n_embd_q(), rot);
      l.bk = ld.vector(t("attn_k.bias"), c.n_embd_k(), rot);
      l.bv = ld.vector(t("attn_v.bias"), c.n_embd_v(), rot);
    }
    l.wo = ld.matrix(t("attn_output.weight"), c.n_embd_attn(), c.n_embd);
    l.bo = ld.vector(t("attn_output.bias"), c.n_embd, rot);
    l.attn_norm_w = ld.vector(t("attn_output_norm.weight"), c.n_embd);
    l.attn_norm_b = ld.vector(t("attn_output_norm.bias"), c.n_embd);
    l.up = ld.matrix(t("ffn_up.weight"), c.n_embd, c.n_ff);
    l.b_up = ld.vector(t("ffn_up.bias"), c.n_ff, rot);
    if (arch.activation == EncoderActivation::SwiGlu) l.gate = ld.matrix(t("ffn_gate.weight"), c.n_embd, c.n_ff);
    l.down = ld.matrix(t("ffn_down.weight"), c.n_ff, c.n_embd);
    l.b_down = ld.vector(t("ffn_down.bias"), c.n_embd, rot);
    l.out_norm_w = ld.vector(t("layer_output_norm.weight"), c.n_embd);
    l.out_norm_b = ld.vector(t("layer_output_norm.bias"), c.n_embd);
  }
  if (ld.has("cls.output.weight")) {
    w.classifier = ld.matrix("cls.output.weight", c.n_embd, rows("cls.output.weight"));
    w.n_cls_out = static_cast<int32_t>(w.classifier.n_out);
    w.b_classifier = ld.vector("cls.output.bias", w.n_cls_out, /*optional=*/true);
    w.pooler = ld.matrix("cls.weight", c.n_embd, c.n_embd, /*optional=*/true);
    if (w.pooler) w.b_pooler = ld.vector("cls.bias", c.n_embd, /*optional=*/true);
  }
}

EncoderModel::EncoderModel(std::shared_ptr<GgufFile> file, const EncoderArchitecture& arch, ModelConfig config,
                           const LoadOptions& opts)
    : arch_(arch) {
  if (opts.max_batch_tokens <= 0)
    throw InvalidRequestError("LoadOptions.max_batch_tokens must be positive, got " +
                              std::to_string(opts.max_batch_tokens));
  if (opts.n_gpu_layers != 0)
    throw InvalidRequestError("n_gpu_layers: encoder models (" + config.arch + ") run on the CPU only");
  max_batch_tokens_ = opts.max_batch_tokens;
  file_ = std::move(file);
  config_ = std::move(config);
  const ModelConfig& c = config_;
  threads_ = opts.threads ? opts.threads : std::make_shared<ThreadPool>(opts.n_threads);
  sep_id_ = static_cast<int32_t>(file_->find_u32("tokenizer.ggml.seperator_token_id").value_or(102));

  WeightLoader ld(*file_);
  bind_encoder(*file_, ld, arch_, c, w_);
  owned_ = std::move(ld.owned());
  // A classification head and no pooling key (llama.cpp's converted rerankers): it ranks.
  if (config_.pooling_type < 0 && w_.n_cls_out > 0) config_.pooling_type = 4;
  opts.progress.report(kLoadBindEnd, "bind");

  const int nt = threads_->size();
  plans_.resize(c.n_layer);
  for (int il = 0; il < c.n_layer; ++il) {
    const EncoderLayerWeights& l = w_.layers[il];
    // (an encoder reads whole inputs: the many-column float GEMM, ColumnOrder::Any)
    const auto plan = [&](std::vector<const Matrix*> m) { return plan_matmul(m, nt, ColumnOrder::Any); };
    plans_[il] = {plan({&l.wq, &l.wk, &l.wv}), plan({&l.wo}), plan({&l.up}), l.gate ? plan({&l.gate}) : MatmulPlan{},
                  plan({&l.down})};
  }
  if (w_.pooler) pooler_plan_ = plan_matmul({&w_.pooler}, nt, ColumnOrder::Any);
  if (w_.classifier) classifier_plan_ = plan_matmul({&w_.classifier}, nt, ColumnOrder::Any);

  std::vector<Matrix*> mats;
  for (Matrix* m : w_.matrices())
    if (*m) mats.push_back(m);
  packed_ = pack_weights(mats, *threads_, opts.progress.range(kLoadBindEnd, 1.0));
  opts.progress.report(1.0, "repack");

  const int64_t T = max_batch_tokens_;
  const int64_t wide = std::max<int64_t>({c.n_embd, c.n_ff, c.n_embd_q(), c.n_embd_attn()});
  act_.reserve(T, wide);
  x_.resize(T * c.n_embd);
  ones_.assign(c.n_embd, 1.0f);
  q_.resize(T * c.n_embd_q());
  k_.resize(T * c.n_embd_k());
  v_.resize(T * c.n_embd_v());
  a_.resize(T * c.n_embd_attn());
  o_.resize(T * c.n_embd);
  f_.resize(T * c.n_ff);
  if (arch_.activation == EncoderActivation::SwiGlu) g_.resize(T * c.n_ff);
  if (arch_.rotary) {
    rope_ = Rope(RopeType::Neox, c.n_rot, c.rope_global, nullptr);
    rope_table_.resize(T * rope_.table_stride());
  }
  // per thread: an embedding row; the attention's buffers for a sequence of T tokens
  thread_floats_ = c.n_embd;
  scores_.resize(static_cast<size_t>(nt) * thread_floats_);
  attn_scratch_.reserve(nt, attention_scratch_floats(
                                NoncausalAttention{nullptr, 0, nullptr, 0, nullptr, 0, nullptr, 0, c.n_head,
                                                   c.n_head_kv, c.head_dim_k, c.head_dim_v, 1.0f},
                                T));
}

EncoderModel::~EncoderModel() = default;

void EncoderModel::run_tasks(int64_t n_tasks, const std::function<void(int64_t, int)>& fn) {
  std::lock_guard<std::mutex> lock(forward_mutex_);
  threads_->run(n_tasks, fn);
}

std::vector<EncoderModel::Segment> EncoderModel::segments(const Batch& b) const {
  const ModelConfig& c = config_;
  if (b.pos.size() != b.token.size() || b.seq.size() != b.token.size() || b.want_logits.size() != b.token.size())
    throw InvalidRequestError("batch: token, pos, seq and want_logits must have the same length");
  if (b.size() > max_batch_tokens_)
    throw InvalidRequestError("batch of " + std::to_string(b.size()) + " tokens exceeds max_batch_tokens = " +
                              std::to_string(max_batch_tokens_) + " (split it)");
  std::vector<Segment> segs;
  for (int32_t t = 0; t < b.size(); ++t) {
    if (b.want_logits[t])
      throw InvalidRequestError("this is an encoder model (" + c.arch + "): it computes embeddings, not logits");
    if (b.token[t] < 0 || b.token[t] >= c.n_vocab)
      throw InvalidRequestError("batch token " + std::to_string(t) + ": id " + std::to_string(b.token[t]) +
                                " is outside the vocabulary [0, " + std::to_string(c.n_vocab) + ")");
    if (b.pos[t] == 0) {
      segs.push_back({t, 1});
    } else if (segs.empty() || b.seq[t] != b.seq[segs.back().begin] || b.pos[t] != segs.back().n) {
      throw InvalidRequestError("encoder batch token " + std::to_string(t) +
                                ": an encoder runs whole sequences (positions 0..n-1 in one batch)");
    } else {
      ++segs.back().n;
    }
    if (b.pos[t] >= c.n_ctx_train)
      throw ContextLengthError("input of more than " + std::to_string(c.n_ctx_train) + " tokens: the model has " +
                               std::to_string(c.n_ctx_train) + " positions (" + arch_key(c, "context_length") + ")");
  }
  return segs;
}

void EncoderModel::add_layernorm(float* x, const float* add, const Vector& w, const Vector& b, int64_t rows) {
  const int64_t n = config_.n_embd;
  const float eps = config_.rms_eps;
  const kernels::KernelTable& kt = kernels::active();
  // Per row on the kernel table's vector ops (residual add, Σx and Σ(x − mean)² as dots): the
  // sums were a scalar double loop, ~4 % of a batch of short texts.
  threads_->parallel_for(0, rows, [&](int64_t r, int) {
    float* v = x + r * n;
    if (add) kt.add_f32(add + r * n, v, n);
    const float mean = kt.dot_f32(v, ones_.data(), n) / static_cast<float>(n);
    for (int64_t i = 0; i < n; ++i) v[i] -= mean;
    const float var = kt.dot_f32(v, v, n) / static_cast<float>(n);
    const float inv = 1.0f / std::sqrt(var + eps);
    for (int64_t i = 0; i < n; ++i) v[i] = v[i] * inv * w.data[i] + b.data[i];
  });
}

void EncoderModel::matmul(const Matrix& w, const Vector& bias, const MatmulPlan& plan, const float* x, int64_t rows,
                          float* y) {
  linear(*threads_, act_, w, plan, x, rows, y, bias);
}

void EncoderModel::qkv(const EncoderLayerWeights& l, const MatmulPlan& plan, const float* x, int64_t rows) {
  const ModelConfig& c = config_;
  act_.reset(x, rows, c.n_embd, c.n_embd);
  const Matrix* w[3] = {&l.wq, &l.wk, &l.wv};
  const Vector* b[3] = {&l.bq, &l.bk, &l.bv};
  float* y[3] = {q_.data(), k_.data(), v_.data()};
  MatmulOperand ops[3];
  for (int i = 0; i < 3; ++i) {
    ops[i].w = w[i];
    ops[i].x = act_.get(*threads_, matmul_input_type(*w[i]), &ops[i].x_stride);
    ops[i].y = y[i];
    ops[i].ldy = w[i]->n_out;
  }
  run_matmul(*threads_, plan, ops, rows);
  if (!l.bq && !l.bk && !l.bv) return;
  const kernels::KernelTable& kt = kernels::active();
  threads_->parallel_for(0, rows, [&](int64_t r, int) {
    for (int i = 0; i < 3; ++i)
      if (*b[i]) kt.add_f32(b[i]->data, y[i] + r * w[i]->n_out, w[i]->n_out);
  });
}

void EncoderModel::forward(const Batch& batch, KVCache&, float* logits, float* hidden) {
  (void)logits;
  std::lock_guard<std::mutex> lock(forward_mutex_);
  const std::vector<Segment> segs = segments(batch);
  if (batch.empty()) return;
  if (!hidden && batch.n_hidden_outputs() > 0)
    throw InvalidRequestError("forward: hidden buffer is null but tokens want hidden states");
  const ModelConfig& c = config_;
  const int64_t T = batch.size(), n = c.n_embd;
  float* x = x_.data();

  // Embeddings: token + position + token type (1 after the first [SEP]: the second text of a pair).
  std::vector<uint8_t> type(T, 0);
  if (w_.type_embd && w_.type_embd.n_out > 1)
    for (const Segment& s : segs) {
      bool second = false;
      for (int32_t t = s.begin; t < s.begin + s.n; ++t) {
        type[t] = second ? 1 : 0;
        if (batch.token[t] == sep_id_) second = true;
      }
    }
  threads_->parallel_for(0, T, [&](int64_t t, int thread) {
    float* row = x + t * n;
    float* tmp = scores_.data() + static_cast<size_t>(thread) * thread_floats_;
    quant::dequantize_row(w_.token_embd.type, w_.token_embd.row(batch.token[t]), row, n);
    if (w_.pos_embd) {
      quant::dequantize_row(w_.pos_embd.type, w_.pos_embd.row(batch.pos[t]), tmp, n);
      for (int64_t i = 0; i < n; ++i) row[i] += tmp[i];
    }
    if (arch_.rotary) rope_.fill(batch.pos[t], rope_table_.data() + t * rope_.table_stride());
    if (w_.type_embd) {
      quant::dequantize_row(w_.type_embd.type, w_.type_embd.row(type[t]), tmp, n);
      for (int64_t i = 0; i < n; ++i) row[i] += tmp[i];
    }
  });
  add_layernorm(x, nullptr, w_.embd_norm_w, w_.embd_norm_b, T);

  const int n_head = c.n_head, hdk = c.head_dim_k, hdv = c.head_dim_v;
  const int64_t nq = c.n_embd_q(), nk = c.n_embd_k(), nv = c.n_embd_v(), na = c.n_embd_attn();
  std::vector<AttentionSpan> spans;
  for (const Segment& s : segs) spans.push_back({s.begin, s.n});
  const NoncausalAttention attn{q_.data(), nq, k_.data(), nk, v_.data(), nv, a_.data(), na, n_head, c.n_head_kv,
                                hdk, hdv, 1.0f / std::sqrt(static_cast<float>(hdk))};
  const kernels::KernelTable& kt_ops = kernels::active();
  const std::vector<float> ones(arch_.activation == EncoderActivation::SwiGlu ? 0 : c.n_ff, 1.0f);  // GELU's "up"
  for (int il = 0; il < c.n_layer; ++il) {
    const EncoderLayerWeights& l = w_.layers[il];
    const Plans& p = plans_[il];
    qkv(l, p.qkv, x, T);
    if (arch_.rotary)
      threads_->parallel_for(0, T, [&](int64_t t, int) {
        const float* row = rope_table_.data() + t * rope_.table_stride();
        for (int h = 0; h < n_head; ++h) rope_.apply(row, q_.data() + t * nq + h * hdk);
        for (int h = 0; h < c.n_head_kv; ++h) rope_.apply(row, k_.data() + t * nk + h * hdk);
      });
    // Attention: every token of a sequence over all of its tokens (model/noncausal_attention.h).
    noncausal_attention(*threads_, attn, spans, attn_scratch_);
    matmul(l.wo, l.bo, p.o, a_.data(), T, o_.data());
    add_layernorm(x, o_.data(), l.attn_norm_w, l.attn_norm_b, T);

    matmul(l.up, l.b_up, p.up, x, T, f_.data());
    if (arch_.activation == EncoderActivation::SwiGlu) {
      matmul(l.gate, Vector{}, p.gate, x, T, g_.data());
      const kernels::KernelTable& ops = kernels::active();
      threads_->parallel_for(0, T, [&](int64_t t, int) {
        ops.silu_mul(g_.data() + t * c.n_ff, f_.data() + t * c.n_ff, f_.data() + t * c.n_ff, c.n_ff);
      });
    } else {
      // GELU in its tanh form on the kernel table's vector op (gelu_tanh(x) * 1), as llama.cpp
      // evaluates BERT's: 1.06x on a batch of long texts over a scalar std::erf loop (it was ~7%
      // of a profile), cosine to the erf form >= 0.999998 on all-MiniLM (bench/README.md)
      threads_->parallel_for(0, T, [&](int64_t t, int) {
        float* r = f_.data() + t * c.n_ff;
        kt_ops.gelu_mul(r, ones.data(), r, c.n_ff);
      });
    }
    matmul(l.down, l.b_down, p.down, f_.data(), T, o_.data());
    add_layernorm(x, o_.data(), l.out_norm_w, l.out_norm_b, T);
  }

  if (hidden) {
    int64_t k = 0;
    for (int32_t t = 0; t < T; ++t)
      if (batch.wants_hidden(t)) std::copy(x + t * n, x + (t + 1) * n, hidden + (k++) * n);
  }
}

void EncoderModel::rank(const float* cls_hidden, float* scores) {
  if (!w_.classifier) throw InvalidRequestError("this model has no classification head: it does not rank");
  std::lock_guard<std::mutex> lock(forward_mutex_);
  const int64_t n = config_.n_embd;
  std::vector<float> h(cls_hidden, cls_hidden + n), pooled(n);
  if (w_.pooler) {
    matmul(w_.pooler, w_.b_pooler, pooler_plan_, h.data(), 1, pooled.data());
    for (int64_t i = 0; i < n; ++i) h[i] = std::tanh(pooled[i]);
  }
  matmul(w_.classifier, w_.b_classifier, classifier_plan_, h.data(), 1, scores);
}

}  // namespace edgellm
