// arch "olmoe" (OLMoE-1B-7B): pre-norm layers, NEOX RoPE, RMS norms on the whole Q and K
// projections (one weight of n_head * head_dim, not one per head) before RoPE, and a
// mixture-of-experts FFN: softmax router, top-k experts whose probabilities are used as they
// are (not renormalised), no shared expert. The experts' width is feed_forward_length unless
// expert_feed_forward_length says otherwise. docs/formats.md §4.8.
#include "model/architecture.h"

namespace edgellm {
namespace {

void olmoe_hparams(const GgufFile&, ModelConfig& c) { c.rope_type = RopeType::Neox; }

}  // namespace

const Architecture& olmoe_architecture() {
  LayerSpec layer;
  layer.qk_norm = true;
  layer.qk_norm_whole = true;
  layer.moe = true;
  static const Architecture arch{"olmoe", layer, olmoe_hparams};
  return arch;
}

}  // namespace edgellm
