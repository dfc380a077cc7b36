// arch "qwen3" (dense Qwen3): the llama layer without biases, with per-head RMS norms on Q and
// K before NEOX RoPE, and an explicit key_length (head dim need not be n_embd / n_head).
#include "model/architecture.h"

namespace edgellm {
namespace {

void qwen3_hparams(const GgufFile&, ModelConfig& c) { c.rope_type = RopeType::Neox; }

}  // namespace

const Architecture& qwen3_architecture() {
  LayerSpec layer;
  layer.qk_norm = true;
  static const Architecture arch{"qwen3", layer, qwen3_hparams};
  return arch;
}

}  // namespace edgellm
