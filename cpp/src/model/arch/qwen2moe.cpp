// arch "qwen2moe" (Qwen1.5-MoE-A2.7B, Qwen2-57B-A14B): the qwen2 attention (Q/K/V biases, NEOX
// RoPE) with a mixture-of-experts FFN: softmax router, top-k experts whose probabilities are
// used as they are (not renormalised), plus a shared expert every token runs
// (ffn_{gate,up,down}_shexp, expert_shared_feed_forward_length wide, default
// feed_forward_length) whose output is scaled by sigmoid(ffn_gate_inp_shexp · h).
// expert_feed_forward_length defaults to feed_forward_length / expert_used_count.
// docs/formats.md §4.8.
#include "model/architecture.h"

namespace edgellm {
namespace {

void qwen2moe_hparams(const GgufFile& file, ModelConfig& c) {
  c.rope_type = RopeType::Neox;
  if (!c.is_moe()) return;  // read_model_config names the missing key
  if (!file.find_u32(arch_key(c, "expert_feed_forward_length")))
    c.n_ff_exp = c.n_ff / c.n_expert_used > 0 ? c.n_ff / c.n_expert_used : c.n_ff;
  if (c.n_ff_shexp == 0) c.n_ff_shexp = c.n_ff;
}

}  // namespace

const Architecture& qwen2moe_architecture() {
  LayerSpec layer;  // Q/K/V biases bound when present (the converter writes them)
  layer.moe = true;
  static const Architecture arch{"qwen2moe", layer, qwen2moe_hparams};
  return arch;
}

}  // namespace edgellm
