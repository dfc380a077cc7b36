// arch "llama" (Llama 1-3, SmolLM/SmolLM2, TinyLlama): pre-norm layers, SwiGLU FFN, NORM RoPE on
// the converter's pre-permuted Q/K rows, attention scale 1/sqrt(head_dim), optional biases and
// Llama-3 rope_freqs factors. docs/formats.md §4.2. With expert_count > 0 (Mixtral) the FFN is a
// mixture of experts: softmax router, the top-k probabilities renormalised to sum 1 (a softmax
// over the selected experts' logits), docs/formats.md §4.8.
#include "common/errors.h"
#include "model/architecture.h"

namespace edgellm {
namespace {

void llama_hparams(const GgufFile& file, ModelConfig& c) {
  c.rope_type = RopeType::Norm;
  // The converter permutes Q/K rows for adjacent-pair RoPE over the whole head.
  if (c.n_rot != c.head_dim_k)
    throw ModelFormatError(file.path() + ": key " + arch_key(c, "rope.dimension_count") + " = " +
                           std::to_string(c.n_rot) + " must equal the head dim " + std::to_string(c.head_dim_k) +
                           " for arch llama");
  read_expert_config(file, c, /*weights_norm_default=*/true);
}

}  // namespace

const Architecture& llama_architecture() {
  LayerSpec layer;  // the plain pre-norm layer: SwiGLU, no Q/K norms, biases optional
  static const Architecture arch{"llama", layer, llama_hparams};
  return arch;
}

}  // namespace edgellm
