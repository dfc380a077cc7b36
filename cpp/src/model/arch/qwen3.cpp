// arch "qwen3" (dense Qwen3): the llama layer without biases, with per-head RMS norms on Q and
// K before NEOX RoPE, and an explicit key_length (head dim need not be n_embd / n_head).
#include "model/architecture.h"
#include "model/forward_pass.h"

namespace edgellm {
namespace {

void qwen3_hparams(const GgufFile&, ModelConfig& c) { c.rope_type = RopeType::Neox; }

void qwen3_tensors(WeightLoader& ld, const ModelConfig& c, int il, LayerWeights& w) {
  bind_llama_style_layer(ld, c, il, w);
  w.q_norm = ld.vector(layer_tensor(il, "attn_q_norm.weight"), c.head_dim_k);
  w.k_norm = ld.vector(layer_tensor(il, "attn_k_norm.weight"), c.head_dim_k);
}

void qwen3_layer(ForwardPass& f, const LayerWeights& w, int il) {
  f.rmsnorm(f.x, w.attn_norm, f.h);
  f.self_attention(w, il);  // Q/K head norms, then RoPE
  f.add_residual(f.out);

  f.rmsnorm(f.x, w.ffn_norm, f.h);
  f.gated_ffn(w, il, FfnActivation::SiLU);
  f.add_residual(f.out);
}

}  // namespace

const Architecture& qwen3_architecture() {
  static const Architecture arch{"qwen3", qwen3_hparams, qwen3_tensors, qwen3_layer};
  return arch;
}

}  // namespace edgellm
