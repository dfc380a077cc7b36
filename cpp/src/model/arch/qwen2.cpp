// arch "qwen2" (Qwen2, Qwen2.5, Qwen2.5-Coder): the llama layer with Q/K/V biases, NEOX RoPE,
// and an output head that may be tied to the embeddings.
#include "model/architecture.h"

namespace edgellm {
namespace {

void qwen2_hparams(const GgufFile&, ModelConfig& c) { c.rope_type = RopeType::Neox; }

}  // namespace

const Architecture& qwen2_architecture() {
  LayerSpec layer;
  layer.qkv_bias = true;  // part of the architecture, not an option
  static const Architecture arch{"qwen2", layer, qwen2_hparams};
  return arch;
}

}  // namespace edgellm
