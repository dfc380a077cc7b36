// arch "qwen3moe" (Qwen3-30B-A3B, Qwen3-235B-A22B): the qwen3 attention (per-head RMS norms on Q
// and K before NEOX RoPE, explicit key_length) with a mixture-of-experts FFN: softmax router,
// top-k experts (expert_used_count), their probabilities renormalised to sum 1 (norm_topk_prob),
// no shared expert. expert_feed_forward_length defaults to feed_forward_length /
// expert_used_count. docs/formats.md §4.8.
#include "model/architecture.h"

namespace edgellm {
namespace {

void qwen3moe_hparams(const GgufFile& file, ModelConfig& c) {
  c.rope_type = RopeType::Neox;
  read_expert_config(file, c, /*weights_norm_default=*/true);
  if (c.is_moe() && !file.find_u32(arch_key(c, "expert_feed_forward_length")))
    c.n_ff_exp = c.n_ff / c.n_expert_used > 0 ? c.n_ff / c.n_expert_used : c.n_ff;
}

}  // namespace

const Architecture& qwen3moe_architecture() {
  LayerSpec layer;
  layer.qk_norm = true;
  layer.moe = true;
  static const Architecture arch{"qwen3moe", layer, qwen3moe_hparams};
  return arch;
}

}  // namespace edgellm
