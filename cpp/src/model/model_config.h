// What a model is, read from GGUF metadata (docs/formats.md §1.5, §4): sizes,
// norms, RoPE, attention spans and scales. The common keys are read in model_config.cpp; each
// architecture's file then fills in what is particular to it (RoPE flavour, sliding windows,
// scales, soft-capping).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace edgellm {

class GgufFile;

enum class RopeType {
  Norm,  // rotate adjacent pairs (x[2i], x[2i+1]) — llama-arch GGUFs (Q/K rows pre-permuted)
  Neox,  // rotate halves (x[i], x[i + n_rot/2]) — gemma2, gemma3, phi3, qwen2, qwen3
};
const char* rope_type_name(RopeType t);

// How a mixture-of-experts layer turns router logits into expert gate weights
// (<arch>.expert_gating_func, llama.cpp's numbering: 1 softmax over all experts, 2 sigmoid,
// 3 the top-k chosen on the raw logits and a softmax over those k alone, gpt-oss).
enum class ExpertGating { Softmax, Sigmoid, SoftmaxWeight };
const char* expert_gating_name(ExpertGating g);

// One RoPE variant: theta_i = pos * freq_base^(-2i/n_rot) / freq_factor_i * freq_scale; the
// rotated pair is (x0 cos - x1 sin, x0 sin + x1 cos) * attn_factor.
//
// YaRN (rope.scaling.type "yarn", docs/formats.md §3.6): pair i mixes the interpolated and the
// original angle, theta_i = pos * inv_i * (freq_scale * (1 - r_i) + r_i), with the ramp
// r_i = 1 - clamp((i - lo) / max(0.001, hi - lo), 0, 1) between the correction dims lo / hi that
// beta_fast / beta_slow give at yarn_n_ctx_orig; attn_factor then carries YaRN's magnitude
// scale 1 + 0.1 ln(1 / freq_scale) (read_common_config folds it in).
struct RopeParams {
  float freq_base = 10000.0f;
  float freq_scale = 1.0f;   // 1 / rope.scaling.factor for linear and YaRN scaling
  float attn_factor = 1.0f;  // rope.scaling.attn_factor (LongRoPE: sqrt(1 + ln(s) / ln(n_ctx_orig))), × YaRN's
  bool yarn = false;
  float yarn_beta_fast = 32.0f;  // rope.scaling.yarn_beta_fast
  float yarn_beta_slow = 1.0f;   // rope.scaling.yarn_beta_slow
  int yarn_n_ctx_orig = 0;       // rope.scaling.original_context_length
  // rope.scaling.yarn_truncate (edgellm's key; the converter writes Hugging Face's `truncate`):
  // true rounds lo down and hi up as llama.cpp does; false keeps them as computed, as gpt-oss's
  // own reference and transformers' truncate=false do (the gpt-oss default when the key is absent)
  bool yarn_truncate = true;
};

struct ModelConfig {
  std::string arch;  // general.architecture
  std::string name;  // general.name (informational)

  int n_vocab = 0;
  int n_ctx_train = 0;
  int n_embd = 0;
  int n_layer = 0;
  int n_head = 0;
  int n_head_kv = 0;
  int head_dim_k = 0;  // attention.key_length, default n_embd / n_head
  int head_dim_v = 0;  // attention.value_length, default n_embd / n_head
  int n_ff = 0;
  float rms_eps = 1e-5f;

  RopeType rope_type = RopeType::Norm;
  int n_rot = 0;            // rotated dims per head (rope.dimension_count); the rest pass through
  RopeParams rope_global;   // full-attention layers
  RopeParams rope_local;    // sliding-window layers (gemma3: rope.freq_base_swa, scale 1)
  // rope.scaling.original_context_length (default n_ctx_train): with LongRoPE factors
  // (rope_factors_long/short) a context beyond it runs the long ones (model/rope.h).
  int n_ctx_orig = 0;

  int n_swa = 0;                     // sliding window in tokens; 0 = none
  std::vector<int32_t> layer_window; // per layer: 0 = full attention, else n_swa

  float attn_scale = 1.0f;    // multiplies Q before attention (kq_scale is then 1)
  float embed_scale = 1.0f;   // multiplies token embeddings (gemma3: sqrt(n_embd))
  float logit_softcap = 0.0f; // logits = c * tanh(logits / c) when > 0
  float attn_softcap = 0.0f;  // attention scores = c * tanh(scores / c) before softmax when > 0 (gemma2)
  // M-RoPE (qwen2vl: <arch>.rope.dimension_sections): rotated pair i turns by the token's
  // section-k position, k the section holding i (t, h, w, unused); all-zero: plain RoPE.
  int rope_sections[4] = {0, 0, 0, 0};
  bool mrope() const { return rope_sections[0] + rope_sections[1] + rope_sections[2] + rope_sections[3] > 0; }
  // Vision input: an image block's tokens attend to each other both ways (gemma3, as transformers'
  // token_type_ids mask does); otherwise causally, as text (SmolVLM's Llama, Qwen2-VL).
  bool image_blocks_bidirectional = false;
  int pooling_type = -1;      // <arch>.pooling_type (0 none, 1 mean, 2 cls, 3 last, 4 rank); -1 absent

  // Mixture of experts (docs/formats.md §4.8); n_expert = 0: a dense model.
  int n_expert = 0;            // <arch>.expert_count
  int n_expert_used = 0;       // <arch>.expert_used_count: experts each token runs (top-k)
  int n_ff_exp = 0;            // <arch>.expert_feed_forward_length (default: the arch's)
  int n_ff_shexp = 0;          // <arch>.expert_shared_feed_forward_length; > 0: a shared expert
  ExpertGating expert_gating = ExpertGating::Softmax;
  bool expert_weights_norm = false;  // the top-k probabilities are renormalised to sum 1
  float expert_weights_scale = 0.0f; // > 0: the gate weights are multiplied by it
  // Clamped SwiGLU of the experts (gpt-oss; 0 = plain SiLU): with gate g and up u,
  // g = min(g, limit), u = clamp(u, -limit, limit), act = (u + 1) * g * sigmoid(alpha * g).
  float swiglu_alpha = 0.0f;
  float swiglu_limit = 0.0f;


  bool is_moe() const { return n_expert > 0; }
  bool is_swa(int layer) const { return layer_window[layer] > 0; }
  const RopeParams& rope_for(int layer) const { return is_swa(layer) ? rope_local : rope_global; }
  int n_embd_q() const { return n_head * head_dim_k; }
  int n_embd_k() const { return n_head_kv * head_dim_k; }
  int n_embd_v() const { return n_head_kv * head_dim_v; }
  int n_embd_attn() const { return n_head * head_dim_v; }
};

// Reads the keys every supported architecture shares (prefix "<arch>."), with llama.cpp's
// types and defaults. Missing required keys and values that make no sense throw
// ModelFormatError naming the key.
ModelConfig read_common_config(const GgufFile& file);

// Reads the expert keys (expert_count, expert_used_count, expert_feed_forward_length,
// expert_shared_feed_forward_length, expert_gating_func, expert_weights_norm,
// expert_weights_scale) into `c`; read_common_config calls it. `weights_norm_default` is the
// architecture's rule where the file has no expert_weights_norm key; the arch hparams call it
// again to set it. Throws ModelFormatError naming the key for counts that make no sense.
void read_expert_config(const GgufFile& file, ModelConfig& c, bool weights_norm_default);

// "<arch>.<suffix>", the name of an architecture-scoped key.
std::string arch_key(const ModelConfig& c, const char* suffix);

// Which layers use the sliding window (gemma2, gemma3, gpt-oss): <arch>.attention.sliding_window_pattern is
// an integer N (layer il is local when il % N < N - 1; N = 0: all local; absent: default_period)
// or one bool per layer. Throws ModelFormatError for a malformed key.
std::vector<bool> read_sliding_layers(const GgufFile& file, const ModelConfig& c, uint32_t default_period);

// A soft-capping value read from `key` (absent: `fallback`): finite and >= 0 (0 = off), else
// ModelFormatError naming the key.
float read_softcap(const GgufFile& file, const std::string& key, float fallback);

// The context a model runs when its caller names none: the engine's default n_ctx,
// min(n_ctx_train, 4096).
int32_t default_context_length(int32_t n_ctx_train);

}  // namespace edgellm
