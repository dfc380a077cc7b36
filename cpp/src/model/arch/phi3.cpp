// arch "phi3" (Phi-3 / Phi-3.5 mini, Phi-4-mini). docs/formats.md §4.6:
// - the llama layer (pre-norm, SwiGLU, attention scale 1/sqrt(head_dim)) with NEOX RoPE over
//   rope.dimension_count dims (Phi-4-mini rotates 3/4 of each head);
// - Q, K and V fused in one attn_qkv.weight (rows Q, K, V; separate attn_q/k/v are taken when a
//   file has them), gate and up fused in ffn_up.weight (2 n_ff rows, gate first);
// - LongRoPE (128k models): rope_factors_short / rope_factors_long.weight frequency divisors, the
//   long ones for a context beyond rope.scaling.original_context_length, and
//   rope.scaling.attn_factor = sqrt(1 + ln(n_ctx_train / n_ctx_orig) / ln(n_ctx_orig)) on cos and
//   sin (read for every architecture in model_config.cpp; the choice in select_rope_factors);
// - attention.sliding_window on every layer when it is shorter than the trained context
//   (Phi-3-mini-4k: 2047, as Hugging Face runs it; llama.cpp turns Phi's window off). Phi-3.5
//   stores 262144, Phi-4 0: no window.
#include "common/errors.h"
#include "model/architecture.h"

namespace edgellm {
namespace {

void phi3_hparams(const GgufFile& file, ModelConfig& c) {
  c.rope_type = RopeType::Neox;
  const std::string key = arch_key(c, "attention.sliding_window");
  const uint32_t n_swa = file.find_u32(key).value_or(0);
  if (n_swa > 0 && n_swa < static_cast<uint32_t>(c.n_ctx_train)) {
    c.n_swa = static_cast<int>(n_swa);
    for (int il = 0; il < c.n_layer; ++il) c.layer_window[il] = c.n_swa;
  }
}

}  // namespace

const Architecture& phi3_architecture() {
  LayerSpec layer;
  layer.fused_qkv = true;
  layer.fused_gate_up = true;
  static const Architecture arch{"phi3", layer, phi3_hparams};
  return arch;
}

}  // namespace edgellm
