// arch "gpt-oss" (OpenAI gpt-oss-20b / 120b; llama.cpp's LLM_ARCH_OPENAI_MOE). docs/formats.md
// §4.9:
// - attention with Q/K/V and output biases, NEOX RoPE over the whole head with YaRN scaling
//   (rope.scaling.*: factor 32 from 4096 positions in the released files), Q scaled by
//   1/sqrt(n_rot) (= 1/sqrt(head_dim) there), and attention sinks (attn_sinks.weight, one logit per query head in the
//   softmax's denominator);
// - sliding window (attention.sliding_window, required; 128 in the released files) on every
//   other layer, starting with layer 0 (period 2 unless attention.sliding_window_pattern says
//   otherwise), rope.freq_base_swa optional as for gemma2;
// - the FFN's pre-norm is blk.N.post_attention_norm (no ffn_norm), a mixture of experts with a
//   biased router (ffn_gate_inp.bias), biased experts (ffn_{gate,up,down}_exps.bias, one row per
//   expert), gate weights = softmax over the k selected raw logits (llama.cpp hard-codes this
//   for the arch; a file's expert_gating_func may only say the same), and the clamped SwiGLU
//   (alpha 1.702, limit 7): (clamp(u, -7, 7) + 1) · g · sigmoid(1.702 g) with g = min(g, 7).
#include <cmath>

#include "common/errors.h"
#include "model/architecture.h"

namespace edgellm {
namespace {

void gpt_oss_hparams(const GgufFile& file, ModelConfig& c) {
  c.rope_type = RopeType::Neox;
  c.attn_scale = 1.0f / std::sqrt(static_cast<float>(c.n_rot));  // llama.cpp's kq_scale (n_rot = head_dim released)
  const std::string swa_key = arch_key(c, "attention.sliding_window");
  const auto n_swa = file.find_u32(swa_key);
  if (!n_swa) throw ModelFormatError(file.path() + ": required key " + swa_key + " is missing");
  if (*n_swa > (1u << 30))
    throw ModelFormatError(file.path() + ": key " + swa_key + " = " + std::to_string(*n_swa) + " is out of range");
  c.n_swa = static_cast<int>(*n_swa);
  if (c.n_swa > 0) {
    const std::vector<bool> swa = read_sliding_layers(file, c, 2);
    for (int il = 0; il < c.n_layer; ++il) c.layer_window[il] = swa[il] ? c.n_swa : 0;
  }
  if (!file.find_bool(arch_key(c, "rope.scaling.yarn_truncate"))) {
    // gpt-oss was trained with YaRN's correction dims unrounded (its reference implementation;
    // transformers' config says truncate: false), llama.cpp rounds them: the model's own rule
    c.rope_global.yarn_truncate = c.rope_local.yarn_truncate = false;
  }
  if (auto base = file.find_f32(arch_key(c, "rope.freq_base_swa"))) {
    if (!(*base > 0.0f))
      throw ModelFormatError(file.path() + ": key " + arch_key(c, "rope.freq_base_swa") + " must be positive");
    c.rope_local.freq_base = *base;
  }
  read_expert_config(file, c, /*weights_norm_default=*/false);
  if (!c.is_moe()) return;  // read_model_config names the missing expert_count
  const std::string gating_key = arch_key(c, "expert_gating_func");
  if (file.find_u32(gating_key) && c.expert_gating != ExpertGating::SoftmaxWeight)
    throw ModelFormatError(file.path() + ": key " + gating_key + " = " + expert_gating_name(c.expert_gating) +
                           " contradicts the arch (gpt-oss gates by a softmax over the top-k logits: 3)");
  c.expert_gating = ExpertGating::SoftmaxWeight;
  c.expert_weights_norm = false;  // llama.cpp passes norm_w = false (a no-op after that softmax anyway)
  c.swiglu_alpha = 1.702f;
  c.swiglu_limit = 7.0f;
}

}  // namespace

const Architecture& gpt_oss_architecture() {
  LayerSpec layer;
  layer.qkv_bias = true;
  layer.attn_out_bias = true;
  layer.attn_sinks = true;
  layer.moe = true;
  layer.expert_biases = true;
  layer.ffn_norm = "post_attention_norm";
  static const Architecture arch{"gpt-oss", layer, gpt_oss_hparams};
  return arch;
}

}  // namespace edgellm
