// arch "llama" (Llama 1-3, SmolLM/SmolLM2, TinyLlama): pre-norm layers, SwiGLU FFN, NORM RoPE on
// the converter's pre-permuted Q/K rows, attention scale 1/sqrt(head_dim), optional biases and
// Llama-3 rope_freqs factors. docs/formats.md §4.2.
#include "common/errors.h"
#include "model/architecture.h"
#include "model/forward_pass.h"

namespace edgellm {
namespace {

void llama_hparams(const GgufFile& file, ModelConfig& c) {
  c.rope_type = RopeType::Norm;
  // The converter permutes Q/K rows for adjacent-pair RoPE over the whole head.
  if (c.n_rot != c.head_dim_k)
    throw ModelFormatError(file.path() + ": key " + arch_key(c, "rope.dimension_count") + " = " +
                           std::to_string(c.n_rot) + " must equal the head dim " + std::to_string(c.head_dim_k) +
                           " for arch llama");
}

void llama_tensors(WeightLoader& ld, const ModelConfig& c, int il, LayerWeights& w) {
  bind_llama_style_layer(ld, c, il, w);
}

void llama_layer(ForwardPass& f, const LayerWeights& w, int il) {
  f.rmsnorm(f.x, w.attn_norm, f.h);
  f.self_attention(w, il);
  f.add_residual(f.out);

  f.rmsnorm(f.x, w.ffn_norm, f.h);
  f.gated_ffn(w, il, FfnActivation::SiLU);
  f.add_residual(f.out);
}

}  // namespace

const Architecture& llama_architecture() {
  static const Architecture arch{"llama", llama_hparams, llama_tensors, llama_layer};
  return arch;
}

}  // namespace edgellm
