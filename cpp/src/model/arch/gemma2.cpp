// arch "gemma2" (Gemma 2 2B/9B/27B). docs/formats.md §4.7: the gemma3 layer without Q/K norms,
// plus soft-capping:
// - embeddings scaled by sqrt(n_embd); norm weights already carry Gemma's +1 (the converter adds
//   it), so every norm is a plain rmsnorm(x) * w;
// - NEOX RoPE; Q scaled by query_pre_attn_scalar^-0.5, which GGUF does not store: 1/sqrt(head_dim),
//   and for the 27B (46 layers) 1/sqrt(n_embd / n_head);
// - attention scores soft-capped, c * tanh(s / c) with c = attn_logit_softcapping (default 50),
//   before the softmax; the logits likewise with final_logit_softcapping (default 30);
// - post-attention and post-FFN norms on each sub-layer's output before its residual add;
//   GeGLU FFN with tanh-approximated GELU;
// - sliding window (attention.sliding_window, default 4096) on every other layer, starting with
//   layer 0 (attention.sliding_window_pattern, default period 2); local and global layers share
//   rope.freq_base unless rope.freq_base_swa is given.
#include <cmath>

#include "common/errors.h"
#include "model/architecture.h"

namespace edgellm {
namespace {

void gemma2_hparams(const GgufFile& file, ModelConfig& c) {
  c.rope_type = RopeType::Neox;
  const std::string swa_key = arch_key(c, "attention.sliding_window");
  const uint32_t n_swa = file.find_u32(swa_key).value_or(4096);
  if (n_swa > (1u << 30))
    throw ModelFormatError(file.path() + ": key " + swa_key + " = " + std::to_string(n_swa) + " is out of range");
  c.n_swa = static_cast<int>(n_swa);
  if (c.n_swa > 0) {
    const std::vector<bool> swa = read_sliding_layers(file, c, 2);
    for (int il = 0; il < c.n_layer; ++il) c.layer_window[il] = swa[il] ? c.n_swa : 0;
  }
  if (auto base = file.find_f32(arch_key(c, "rope.freq_base_swa"))) {
    if (!(*base > 0.0f))
      throw ModelFormatError(file.path() + ": key " + arch_key(c, "rope.freq_base_swa") + " must be positive");
    c.rope_local.freq_base = *base;
  }
  c.attn_scale = c.n_layer == 46 ? 1.0f / std::sqrt(static_cast<float>(c.n_embd / c.n_head))
                                 : 1.0f / std::sqrt(static_cast<float>(c.head_dim_k));
  c.embed_scale = std::sqrt(static_cast<float>(c.n_embd));
  c.attn_softcap = read_softcap(file, arch_key(c, "attn_logit_softcapping"), 50.0f);
  c.logit_softcap = read_softcap(file, arch_key(c, "final_logit_softcapping"), 30.0f);
}

}  // namespace

const Architecture& gemma2_architecture() {
  LayerSpec layer;
  layer.ffn_activation = FfnActivation::GeluTanh;
  layer.post_norms = true;
  static const Architecture arch{"gemma2", layer, gemma2_hparams};
  return arch;
}

}  // namespace edgellm
