// arch "gemma3" (Gemma 3 text models). docs/formats.md §4.3:
// - embeddings scaled by sqrt(n_embd); norm weights already carry Gemma's +1 (added by the
//   converter), so every norm is a plain rmsnorm(x) * w;
// - per-head RMS norms on Q and K before NEOX RoPE; Q scaled by 1/sqrt(head_dim) (27B, with
//   62 layers: 1/sqrt(n_embd / n_head)) before attention;
// - post-attention and post-FFN norms on each sub-layer's output before its residual add;
// - GeGLU FFN with tanh-approximated GELU;
// - local (sliding-window) layers, 5 of every 6 by default, with their own RoPE base
//   (rope.freq_base_swa, default 10000) and no RoPE scaling; global layers use rope.freq_base
//   and the linear scaling factor.
#include <cmath>

#include "common/errors.h"
#include "model/architecture.h"

namespace edgellm {
namespace {

void gemma3_hparams(const GgufFile& file, ModelConfig& c) {
  c.rope_type = RopeType::Neox;
  const uint32_t n_swa = file.find_u32(arch_key(c, "attention.sliding_window")).value_or(0);
  if (n_swa > (1u << 30))
    throw ModelFormatError(file.path() + ": key " + arch_key(c, "attention.sliding_window") + " = " +
                           std::to_string(n_swa) + " is out of range");
  c.n_swa = static_cast<int>(n_swa);
  if (c.n_swa > 0) {
    const std::vector<bool> swa = read_sliding_layers(file, c, 6);
    for (int il = 0; il < c.n_layer; ++il) c.layer_window[il] = swa[il] ? c.n_swa : 0;
  }
  c.rope_local.freq_base = file.find_f32(arch_key(c, "rope.freq_base_swa")).value_or(10000.0f);
  c.rope_local.freq_scale = 1.0f;
  if (!(c.rope_local.freq_base > 0.0f))
    throw ModelFormatError(file.path() + ": key " + arch_key(c, "rope.freq_base_swa") + " must be positive");
  // query_pre_attn_scalar is not in GGUF; llama.cpp derives it from the model size.
  c.attn_scale = c.n_layer == 62 ? 1.0f / std::sqrt(static_cast<float>(c.n_embd / c.n_head))
                                 : 1.0f / std::sqrt(static_cast<float>(c.head_dim_k));
  c.embed_scale = std::sqrt(static_cast<float>(c.n_embd));
  c.logit_softcap = file.find_f32(arch_key(c, "final_logit_softcapping")).value_or(0.0f);
  c.image_blocks_bidirectional = true;
}

}  // namespace

const Architecture& gemma3_architecture() {
  LayerSpec layer;
  layer.ffn_activation = FfnActivation::GeluTanh;
  layer.qk_norm = true;
  layer.post_norms = true;
  static const Architecture arch{"gemma3", layer, gemma3_hparams};
  return arch;
}

}  // namespace edgellm
