#include "model/model_config.h"

#include <cmath>
#include <algorithm>
#include <optional>
#include <string>

#include "common/errors.h"
#include "gguf/gguf_file.h"

namespace edgellm {
namespace {

[[noreturn]] void bad(const GgufFile& f, const std::string& key, const std::string& why) {
  throw ModelFormatError(f.path() + ": key " + key + " " + why);
}

// A count that llama.cpp allows as a scalar or as a per-layer array. We run one shape for all
// layers, so an array must hold one value throughout.
std::optional<uint32_t> find_layer_uniform_u32(const GgufFile& f, const std::string& key, int n_layer) {
  const GgufValue* v = f.find(key);
  if (!v) return std::nullopt;
  if (!v->is_array()) return f.find_u32(key);
  if (v->elem_type != GgufType::UINT32 && v->elem_type != GgufType::INT32)
    bad(f, key, std::string("is an array of ") + gguf_type_name(v->elem_type) + ", expected UINT32");
  if (v->array_len != static_cast<uint64_t>(n_layer))
    bad(f, key, "has " + std::to_string(v->array_len) + " entries, expected one per layer (" +
                    std::to_string(n_layer) + ")");
  const double first = v->array_number(0);
  for (uint64_t i = 1; i < v->array_len; ++i)
    if (v->array_number(i) != first)
      bad(f, key, "varies per layer (layer 0: " + std::to_string(static_cast<int64_t>(first)) + ", layer " +
                      std::to_string(i) + ": " + std::to_string(static_cast<int64_t>(v->array_number(i))) +
                      "); per-layer shapes are not supported");
  if (first < 0) bad(f, key, "is negative");
  return static_cast<uint32_t>(first);
}

int positive(const GgufFile& f, const std::string& key, uint32_t v) {
  if (v == 0 || v > (1u << 30)) bad(f, key, "= " + std::to_string(v) + " is out of range");
  return static_cast<int>(v);
}

}  // namespace

const char* expert_gating_name(ExpertGating g) {
  switch (g) {
    case ExpertGating::Softmax: return "softmax";
    case ExpertGating::Sigmoid: return "sigmoid";
    case ExpertGating::SoftmaxWeight: return "softmax_weight";
  }
  return "?";
}

void read_expert_config(const GgufFile& f, ModelConfig& c, bool weights_norm_default) {
  auto key = [&](const char* s) { return arch_key(c, s); };
  const uint32_t n_expert = f.find_u32(key("expert_count")).value_or(0);
  if (n_expert == 0) {
    c.n_expert = c.n_expert_used = c.n_ff_exp = c.n_ff_shexp = 0;
    return;
  }
  if (n_expert > 4096) bad(f, key("expert_count"), "= " + std::to_string(n_expert) + " is out of range");
  c.n_expert = static_cast<int>(n_expert);
  const auto used = f.find_u32(key("expert_used_count"));
  if (!used) throw ModelFormatError(f.path() + ": required key " + key("expert_used_count") + " is missing (" +
                                    key("expert_count") + " = " + std::to_string(n_expert) + ")");
  if (*used == 0 || *used > n_expert)
    bad(f, key("expert_used_count"), "= " + std::to_string(*used) + " must be between 1 and " + key("expert_count") +
                                         " = " + std::to_string(n_expert));
  c.n_expert_used = static_cast<int>(*used);
  c.n_ff_exp = positive(f, key("expert_feed_forward_length"),
                        f.find_u32(key("expert_feed_forward_length")).value_or(static_cast<uint32_t>(c.n_ff)));
  if (c.n_ff_exp > (1 << 24)) bad(f, key("expert_feed_forward_length"), "is out of range");
  const uint32_t n_shexp = f.find_u32(key("expert_shared_feed_forward_length")).value_or(0);
  if (n_shexp > (1u << 24)) bad(f, key("expert_shared_feed_forward_length"), "is out of range");
  c.n_ff_shexp = static_cast<int>(n_shexp);
  const uint32_t gating = f.find_u32(key("expert_gating_func")).value_or(1);
  if (gating < 1 || gating > 3)
    bad(f, key("expert_gating_func"),
        "= " + std::to_string(gating) + " is not supported (1 softmax, 2 sigmoid, 3 softmax over the top-k logits)");
  c.expert_gating = gating == 1   ? ExpertGating::Softmax
                    : gating == 2 ? ExpertGating::Sigmoid
                                  : ExpertGating::SoftmaxWeight;
  c.expert_weights_norm = f.find_bool(key("expert_weights_norm")).value_or(weights_norm_default);
  c.expert_weights_scale = f.find_f32(key("expert_weights_scale")).value_or(0.0f);
  if (!(c.expert_weights_scale >= 0.0f) || !std::isfinite(c.expert_weights_scale))
    bad(f, key("expert_weights_scale"), "is not a finite non-negative number");
}

const char* rope_type_name(RopeType t) { return t == RopeType::Norm ? "norm" : "neox"; }

std::string arch_key(const ModelConfig& c, const char* suffix) { return c.arch + "." + suffix; }

ModelConfig read_common_config(const GgufFile& f) {
  ModelConfig c;
  c.arch = f.get_string("general.architecture");
  c.name = f.find_string("general.name").value_or("");
  auto key = [&](const char* s) { return arch_key(c, s); };

  c.n_layer = positive(f, key("block_count"), f.get_u32(key("block_count")));
  c.n_ctx_train = positive(f, key("context_length"), f.get_u32(key("context_length")));
  c.n_embd = positive(f, key("embedding_length"), f.get_u32(key("embedding_length")));

  auto n_ff = find_layer_uniform_u32(f, key("feed_forward_length"), c.n_layer);
  if (!n_ff) throw ModelFormatError(f.path() + ": required key " + key("feed_forward_length") + " is missing");
  c.n_ff = positive(f, key("feed_forward_length"), *n_ff);

  auto n_head = find_layer_uniform_u32(f, key("attention.head_count"), c.n_layer);
  if (!n_head) throw ModelFormatError(f.path() + ": required key " + key("attention.head_count") + " is missing");
  c.n_head = positive(f, key("attention.head_count"), *n_head);
  c.n_head_kv = positive(f, key("attention.head_count_kv"),
                         find_layer_uniform_u32(f, key("attention.head_count_kv"), c.n_layer).value_or(c.n_head));
  if (c.n_head % c.n_head_kv != 0)
    bad(f, key("attention.head_count_kv"), "= " + std::to_string(c.n_head_kv) + " does not divide " +
                                               key("attention.head_count") + " = " + std::to_string(c.n_head));

  const uint32_t default_hd = static_cast<uint32_t>(c.n_embd / c.n_head);
  c.head_dim_k = positive(f, key("attention.key_length"), f.find_u32(key("attention.key_length")).value_or(default_hd));
  c.head_dim_v = positive(f, key("attention.value_length"), f.find_u32(key("attention.value_length")).value_or(default_hd));

  // Shapes beyond these are not models this engine can run; keeping products of them within
  // int range keeps every size computation below exact.
  constexpr int64_t kMaxWidth = 1 << 24;
  auto width_ok = [&](int64_t w, const std::string& what) {
    if (w > kMaxWidth) bad(f, what, "gives a width of " + std::to_string(w) + " (more than " + std::to_string(kMaxWidth) + ")");
  };
  width_ok(c.n_embd, key("embedding_length"));
  width_ok(c.n_ff, key("feed_forward_length"));
  width_ok(static_cast<int64_t>(c.n_head) * c.head_dim_k, key("attention.key_length"));
  width_ok(static_cast<int64_t>(c.n_head) * c.head_dim_v, key("attention.value_length"));
  if (c.n_layer > 4096) bad(f, key("block_count"), "= " + std::to_string(c.n_layer) + " is out of range");

  // The norm's epsilon: RMSNorm's key, else LayerNorm's (encoders: model/encoder.h).
  if (!f.find(key("attention.layer_norm_rms_epsilon")) && f.find(key("attention.layer_norm_epsilon")))
    c.rms_eps = f.get_f32(key("attention.layer_norm_epsilon"));
  else
    c.rms_eps = f.get_f32(key("attention.layer_norm_rms_epsilon"));
  if (!(c.rms_eps >= 0.0f) || !std::isfinite(c.rms_eps))
    bad(f, key("attention.layer_norm_rms_epsilon"), "is not a finite non-negative number");

  // Vocabulary: the explicit key, else the tokenizer's token list (token_embd is checked
  // against it when the weights are bound).
  if (auto nv = f.find_u32(key("vocab_size"))) {
    c.n_vocab = positive(f, key("vocab_size"), *nv);
  } else if (const auto* toks = f.find_string_array("tokenizer.ggml.tokens")) {
    if (toks->empty()) bad(f, "tokenizer.ggml.tokens", "is empty");
    c.n_vocab = static_cast<int>(std::min<size_t>(toks->size(), 1u << 30));
  } else if (const TensorInfo* emb = f.find_tensor("token_embd.weight")) {
    if (emb->ne[1] <= 0 || emb->ne[1] > (1 << 24))
      throw ModelFormatError(f.path() + ": tensor token_embd.weight has an implausible vocabulary size");
    c.n_vocab = static_cast<int>(emb->ne[1]);
  } else {
    throw ModelFormatError(f.path() + ": cannot tell the vocabulary size: no key " + key("vocab_size") +
                           ", no tokenizer.ggml.tokens and no tensor token_embd.weight");
  }

  // RoPE (the arch file picks the flavour; the llama arch insists n_rot == head_dim).
  c.n_rot = static_cast<int>(f.find_u32(key("rope.dimension_count")).value_or(c.head_dim_k));
  if (c.n_rot <= 0 || c.n_rot > c.head_dim_k || c.n_rot % 2 != 0)
    bad(f, key("rope.dimension_count"), "= " + std::to_string(c.n_rot) + " must be even and at most the head dim " +
                                            std::to_string(c.head_dim_k));
  c.rope_global.freq_base = f.find_f32(key("rope.freq_base")).value_or(10000.0f);
  if (!(c.rope_global.freq_base > 0.0f)) bad(f, key("rope.freq_base"), "must be positive");
  const std::string scaling = f.find_string(key("rope.scaling.type")).value_or("linear");
  if (scaling != "linear" && scaling != "none" && scaling != "yarn")
    bad(f, key("rope.scaling.type"), "= \"" + scaling + "\" is not supported (supported: none, linear, yarn)");
  std::optional<float> factor = f.find_f32(key("rope.scaling.factor"));
  if (!factor) factor = f.find_f32(key("rope.scale_linear"));
  if (scaling != "none" && factor && *factor != 0.0f) {
    if (!(*factor > 0.0f) || !std::isfinite(*factor)) bad(f, key("rope.scaling.factor"), "must be positive");
    c.rope_global.freq_scale = 1.0f / *factor;
  }
  // LongRoPE (§4.6): 0 in either key means absent, as the converters write no other defaults.
  if (auto af = f.find_f32(key("rope.scaling.attn_factor")); af && *af != 0.0f) {
    if (!(*af > 0.0f) || !std::isfinite(*af)) bad(f, key("rope.scaling.attn_factor"), "must be positive");
    c.rope_global.attn_factor = *af;
  }
  const uint32_t n_ctx_orig = f.find_u32(key("rope.scaling.original_context_length")).value_or(0);
  c.n_ctx_orig = n_ctx_orig ? positive(f, key("rope.scaling.original_context_length"), n_ctx_orig) : c.n_ctx_train;
  if (scaling == "yarn") {
    // llama.cpp's YaRN (§3.6): extrapolation factor 1, betas 32 / 1 unless the file gives them,
    // and cos / sin × get_mscale(s, 1) / get_mscale(s, yarn_log_multiplier) × attn_factor, with
    // get_mscale(s, m) = 1 + 0.1 m ln s for s > 1, else 1.
    RopeParams& r = c.rope_global;
    r.yarn = true;
    r.yarn_n_ctx_orig = c.n_ctx_orig;
    auto beta = [&](const char* k, float fallback) {
      const float v = f.find_f32(key(k)).value_or(fallback);
      if (!(v > 0.0f) || !std::isfinite(v)) bad(f, key(k), "= " + std::to_string(v) + " must be positive");
      return v;
    };
    r.yarn_beta_fast = beta("rope.scaling.yarn_beta_fast", 32.0f);
    r.yarn_beta_slow = beta("rope.scaling.yarn_beta_slow", 1.0f);
    if (auto t = f.find_bool(key("rope.scaling.yarn_truncate"))) r.yarn_truncate = *t;
    if (!(r.yarn_beta_fast > r.yarn_beta_slow))
      bad(f, key("rope.scaling.yarn_beta_fast"), "must be greater than " + key("rope.scaling.yarn_beta_slow"));
    const float log_mul = f.find_f32(key("rope.scaling.yarn_log_multiplier")).value_or(0.0f);
    if (!std::isfinite(log_mul) || log_mul < 0.0f)
      bad(f, key("rope.scaling.yarn_log_multiplier"), "is not a finite non-negative number");
    const float s = 1.0f / r.freq_scale;
    auto mscale = [&](float m) { return s <= 1.0f ? 1.0f : 0.1f * m * std::log(s) + 1.0f; };
    r.attn_factor *= log_mul != 0.0f ? mscale(1.0f) / mscale(log_mul) : mscale(1.0f);
  }
  c.rope_local = c.rope_global;

  // Embedding pooling (llama.cpp's enum); absent in most decoder GGUFs: the engine then means.
  if (auto pt = f.find_u32(key("pooling_type"))) {
    if (*pt > 4) bad(f, key("pooling_type"), "= " + std::to_string(*pt) + " is not a pooling type (0..4)");
    c.pooling_type = static_cast<int>(*pt);
  }

  read_expert_config(f, c, /*weights_norm_default=*/false);

  c.layer_window.assign(c.n_layer, 0);
  c.attn_scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim_k));
  return c;
}

std::vector<bool> read_sliding_layers(const GgufFile& file, const ModelConfig& c, uint32_t default_period) {
  const std::string key = arch_key(c, "attention.sliding_window_pattern");
  std::vector<bool> swa(c.n_layer, false);
  const GgufValue* v = file.find(key);
  if (v && v->is_array()) {
    if (v->elem_type != GgufType::BOOL)
      bad(file, key,
          std::string("is an array of ") + gguf_type_name(v->elem_type) + ", expected BOOL (or a UINT32 period)");
    if (v->array_len != static_cast<uint64_t>(c.n_layer))
      bad(file, key, "has " + std::to_string(v->array_len) + " entries, expected one per layer (" +
                         std::to_string(c.n_layer) + ")");
    for (int il = 0; il < c.n_layer; ++il) swa[il] = v->array_number(il) != 0;
    return swa;
  }
  const uint32_t n = file.find_u32(key).value_or(default_period);
  for (int il = 0; il < c.n_layer; ++il) swa[il] = n == 0 || static_cast<uint32_t>(il) % n < n - 1;
  return swa;
}

float read_softcap(const GgufFile& file, const std::string& key, float fallback) {
  const float v = file.find_f32(key).value_or(fallback);
  if (!(v >= 0.0f) || !std::isfinite(v)) bad(file, key, "= " + std::to_string(v) + " must be finite and >= 0");
  return v;
}

int32_t default_context_length(int32_t n_ctx_train) {
  constexpr int32_t kDefaultMaxContext = 4096;
  return std::min(n_ctx_train > 0 ? n_ctx_train : kDefaultMaxContext, kDefaultMaxContext);
}

}  // namespace edgellm
