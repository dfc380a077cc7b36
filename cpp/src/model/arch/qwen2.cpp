// arch "qwen2" (Qwen2, Qwen2.5, Qwen2.5-Coder): the llama layer with Q/K/V biases, NEOX RoPE,
// and an output head that may be tied to the embeddings.
#include "model/architecture.h"
#include "model/forward_pass.h"

namespace edgellm {
namespace {

void qwen2_hparams(const GgufFile&, ModelConfig& c) { c.rope_type = RopeType::Neox; }

void qwen2_tensors(WeightLoader& ld, const ModelConfig& c, int il, LayerWeights& w) {
  bind_llama_style_layer(ld, c, il, w);
  // The Q/K/V biases are part of the architecture, not an option.
  w.bq = ld.vector(layer_tensor(il, "attn_q.bias"), c.n_embd_q());
  w.bk = ld.vector(layer_tensor(il, "attn_k.bias"), c.n_embd_k());
  w.bv = ld.vector(layer_tensor(il, "attn_v.bias"), c.n_embd_v());
}

void qwen2_layer(ForwardPass& f, const LayerWeights& w, int il) {
  f.rmsnorm(f.x, w.attn_norm, f.h);
  f.self_attention(w, il);  // + Q/K/V biases before RoPE
  f.add_residual(f.out);

  f.rmsnorm(f.x, w.ffn_norm, f.h);
  f.gated_ffn(w, il, FfnActivation::SiLU);
  f.add_residual(f.out);
}

}  // namespace

const Architecture& qwen2_architecture() {
  static const Architecture arch{"qwen2", qwen2_hparams, qwen2_tensors, qwen2_layer};
  return arch;
}

}  // namespace edgellm
