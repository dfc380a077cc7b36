#include "model/architecture.h"

#include <cmath>
#include <string>

#include "common/errors.h"

namespace edgellm {

// One accessor per architecture file. Listed explicitly (not self-registered from static
// initializers): the core is a static library, and the linker drops object files nothing
// refers to.
const Architecture& llama_architecture();
const Architecture& gemma2_architecture();
const Architecture& gemma3_architecture();
const Architecture& phi3_architecture();
const Architecture& qwen2_architecture();
const Architecture& qwen2vl_architecture();
const Architecture& qwen3_architecture();
const Architecture& qwen3moe_architecture();
const Architecture& qwen2moe_architecture();
const Architecture& olmoe_architecture();
const Architecture& gpt_oss_architecture();

namespace {
std::string layer_tensor(int il, const char* name) { return "blk." + std::to_string(il) + "." + name; }
void bind_moe_ffn(WeightLoader& ld, const ModelConfig& c, const LayerSpec& spec, int il, LayerWeights& w);
}  // namespace

const std::vector<const Architecture*>& architectures() {
  static const std::vector<const Architecture*> list = {
      &gemma2_architecture(),
      &gemma3_architecture(),
      &gpt_oss_architecture(),
      &llama_architecture(),
      &olmoe_architecture(),
      &phi3_architecture(),
      &qwen2_architecture(),
      &qwen2vl_architecture(),
      &qwen2moe_architecture(),
      &qwen3_architecture(),
      &qwen3moe_architecture(),
  };
  return list;
}

const Architecture* find_architecture(const std::string& name) { return find_by_name(architectures(), name); }

std::string supported_architectures() { return names_of(architectures()); }

const Architecture& read_model_config(const GgufFile& file, ModelConfig& config) {
  config = read_common_config(file);
  const Architecture* arch = find_architecture(config.arch);
  if (!arch)
    throw ModelFormatError(file.path() + ": architecture \"" + config.arch + "\" (general.architecture) is not " +
                           "supported; supported: " + supported_architectures());
  arch->hparams(file, config);
  if (arch->layer.moe && !config.is_moe())
    throw ModelFormatError(file.path() + ": required key " + arch_key(config, "expert_count") +
                           " is missing or 0 (arch " + config.arch + " is a mixture of experts)");
  return *arch;
}

namespace {
// The MoE FFN of layer il: router, the three expert tensors, the shared expert.
void bind_moe_ffn(WeightLoader& ld, const ModelConfig& c, const LayerSpec& spec, int il, LayerWeights& w) {
  auto t = [&](const char* n) { return layer_tensor(il, n); };
  w.router = ld.matrix(t("ffn_gate_inp.weight"), c.n_embd, c.n_expert);
  w.gate_exps = ld.experts(t("ffn_gate_exps.weight"), c.n_embd, c.n_ff_exp, c.n_expert);
  w.up_exps = ld.experts(t("ffn_up_exps.weight"), c.n_embd, c.n_ff_exp, c.n_expert);
  w.down_exps = ld.experts(t("ffn_down_exps.weight"), c.n_ff_exp, c.n_embd, c.n_expert);
  if (spec.expert_biases) {
    w.b_router = ld.vector(t("ffn_gate_inp.bias"), c.n_expert);
    w.b_gate_exps = ld.table(t("ffn_gate_exps.bias"), c.n_ff_exp, c.n_expert);
    w.b_up_exps = ld.table(t("ffn_up_exps.bias"), c.n_ff_exp, c.n_expert);
    w.b_down_exps = ld.table(t("ffn_down_exps.bias"), c.n_embd, c.n_expert);
  }
  if (c.n_ff_shexp > 0) {
    w.gate_shexp = ld.matrix(t("ffn_gate_shexp.weight"), c.n_embd, c.n_ff_shexp);
    w.up_shexp = ld.matrix(t("ffn_up_shexp.weight"), c.n_embd, c.n_ff_shexp);
    w.down_shexp = ld.matrix(t("ffn_down_shexp.weight"), c.n_ff_shexp, c.n_embd);
    w.gate_inp_shexp = ld.vector(t("ffn_gate_inp_shexp.weight"), c.n_embd, /*optional=*/true);
  }
}
}  // namespace

void bind_layer(WeightLoader& ld, const ModelConfig& c, const LayerSpec& spec, int il, LayerWeights& w) {
  auto t = [&](const char* n) { return layer_tensor(il, n); };
  const bool optional_qkv_bias = !spec.qkv_bias;
  w.attn_norm = ld.vector(t("attn_norm.weight"), c.n_embd);
  if (spec.fused_qkv && !ld.has(t("attn_q.weight"))) {
    const Matrix qkv = ld.matrix(t("attn_qkv.weight"), c.n_embd, c.n_embd_q() + c.n_embd_k() + c.n_embd_v());
    w.wq = row_view(qkv, 0, c.n_embd_q());
    w.wk = row_view(qkv, c.n_embd_q(), c.n_embd_k());
    w.wv = row_view(qkv, c.n_embd_q() + c.n_embd_k(), c.n_embd_v());
  } else {
    w.wq = ld.matrix(t("attn_q.weight"), c.n_embd, c.n_embd_q());
    w.wk = ld.matrix(t("attn_k.weight"), c.n_embd, c.n_embd_k());
    w.wv = ld.matrix(t("attn_v.weight"), c.n_embd, c.n_embd_v());
  }
  w.wo = ld.matrix(t("attn_output.weight"), c.n_embd_attn(), c.n_embd);
  w.bq = ld.vector(t("attn_q.bias"), c.n_embd_q(), optional_qkv_bias);
  w.bk = ld.vector(t("attn_k.bias"), c.n_embd_k(), optional_qkv_bias);
  w.bv = ld.vector(t("attn_v.bias"), c.n_embd_v(), optional_qkv_bias);
  w.bo = ld.vector(t("attn_output.bias"), c.n_embd, !spec.attn_out_bias);
  if (spec.attn_sinks) {
    w.sinks = ld.vector(t("attn_sinks.weight"), c.n_head);
    for (int64_t i = 0; w.sinks && i < w.sinks.n; ++i)
      if (!std::isfinite(w.sinks.data[i]))
        throw ModelFormatError(ld.path() + ": tensor " + t("attn_sinks.weight") + " has a non-finite value at " +
                               std::to_string(i));
  }
  w.ffn_norm = ld.vector(t((std::string(spec.ffn_norm) + ".weight").c_str()), c.n_embd);
  if (c.is_moe()) {
    bind_moe_ffn(ld, c, spec, il, w);
  } else {
    if (spec.fused_gate_up) {
      const Matrix gate_up = ld.matrix(t("ffn_up.weight"), c.n_embd, 2 * static_cast<int64_t>(c.n_ff));
      w.gate = row_view(gate_up, 0, c.n_ff);
      w.up = row_view(gate_up, c.n_ff, c.n_ff);
    } else {
      w.gate = ld.matrix(t("ffn_gate.weight"), c.n_embd, c.n_ff);
      w.up = ld.matrix(t("ffn_up.weight"), c.n_embd, c.n_ff);
    }
    w.down = ld.matrix(t("ffn_down.weight"), c.n_ff, c.n_embd);
    w.b_gate = ld.vector(t("ffn_gate.bias"), c.n_ff, true);
    w.b_up = ld.vector(t("ffn_up.bias"), c.n_ff, true);
    w.b_down = ld.vector(t("ffn_down.bias"), c.n_embd, true);
  }
  if (spec.qk_norm && spec.qk_norm_whole) {
    w.q_norm = ld.vector(t("attn_q_norm.weight"), c.n_embd_q());
    w.k_norm = ld.vector(t("attn_k_norm.weight"), c.n_embd_k());
  } else if (spec.qk_norm) {
    w.q_norm = ld.vector(t("attn_q_norm.weight"), c.head_dim_k);
    w.k_norm = ld.vector(t("attn_k_norm.weight"), c.head_dim_k);
  }
  if (spec.post_norms) {
    w.post_attn_norm = ld.vector(t("post_attention_norm.weight"), c.n_embd);
    w.post_ffn_norm = ld.vector(t("post_ffw_norm.weight"), c.n_embd);
  }
}

RopeFactors bind_rope_factors(WeightLoader& ld, const ModelConfig& c) {
  RopeFactors f;
  f.freqs = ld.vector("rope_freqs.weight", c.n_rot / 2, /*optional=*/true);
  f.short_factors = ld.vector("rope_factors_short.weight", c.n_rot / 2, /*optional=*/true);
  f.long_factors = ld.vector("rope_factors_long.weight", c.n_rot / 2, /*optional=*/true);
  // Bound vectors have n set also in plan-only loads (where data stays null).
  if ((f.short_factors.n > 0) != (f.long_factors.n > 0))
    throw ModelFormatError(ld.path() + ": required tensor " +
                           (f.short_factors.n > 0 ? "rope_factors_long.weight" : "rope_factors_short.weight") +
                           " is missing (LongRoPE needs both rope_factors_short and rope_factors_long)");
  return f;
}

const float* select_rope_factors(const RopeFactors& f, const ModelConfig& c, int n_ctx) {
  if (f.freqs) return f.freqs.data;
  if (!f.long_factors) return nullptr;
  return n_ctx > c.n_ctx_orig ? f.long_factors.data : f.short_factors.data;
}

}  // namespace edgellm
