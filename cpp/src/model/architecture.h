// The architecture registry. Each supported `general.architecture` has one file under model/
// arch/ (llama.cpp, gemma2.cpp, gemma3.cpp, phi3.cpp, qwen2.cpp, qwen3.cpp, the MoE ones,
// gpt_oss.cpp) that says two things
// about it: which hyper-parameters it reads beyond the common ones (into ModelConfig: RoPE
// flavour and bases, sliding windows per layer, scales, soft-capping), and what its layers are
// made of (a LayerSpec: which tensors they bind, where the norms sit, which FFN activation). A
// layer is then one definition, run_layer below, that every backend runs: the CPU forward pass
// (model/forward_pass.h) and the CUDA executor (cuda/cuda_layer_executor.cu) each supply the
// same few building blocks. Adding an architecture is its file plus its line in
// architecture.cpp's registry; a layer feature no LayerSpec field describes is a new field,
// read by run_layer or by both backends' building blocks.
#pragma once
#include <array>
#include <string>
#include <vector>

#include "gguf/gguf_file.h"
#include "model/model_config.h"
#include "model/weights.h"

namespace edgellm {

enum class FfnActivation { SiLU, GeluTanh };

// What one transformer layer of an architecture is, as data (docs/formats.md §4). Every layer is
// pre-norm: h = rmsnorm(x) * norm; out = sub-layer(h); x += out, for attention then a gated FFN.
// Per-layer variation (sliding window or not, the RoPE variant that goes with it) is in
// ModelConfig::layer_window / rope_for, filled by the architecture's hparams.
struct LayerSpec {
  // FFN: out = Wdown · (act(Wgate h) ⊙ Wup h); SwiGLU (SiLU) or GeGLU with tanh-GELU.
  FfnActivation ffn_activation = FfnActivation::SiLU;
  // attn_q/k/v.bias are required (else optional, as attn_output.bias and the ffn_* biases are);
  // biases are added after their projection, before Q/K norms and RoPE.
  bool qkv_bias = false;
  // attn_q_norm / attn_k_norm: per-head RMS norms on Q and K before RoPE.
  bool qk_norm = false;
  // post_attention_norm / post_ffw_norm: each sub-layer's output is RMS-normed before its
  // residual add.
  bool post_norms = false;
  // attn_qkv.weight, one matrix of n_embd_q + 2 n_embd_k rows (Q rows, then K, then V), may stand
  // in for attn_q/k/v (which are used when present); bound as three row views of it.
  bool fused_qkv = false;
  // ffn_up.weight holds 2 n_ff rows, gate rows first, then up, and there is no ffn_gate;
  // bound as two row views of it.
  bool fused_gate_up = false;
  // With qk_norm: attn_q_norm / attn_k_norm span the whole Q and K projections (olmoe), not
  // one head.
  bool qk_norm_whole = false;
  // The FFN is always a mixture of experts (<arch>.expert_count required). Any architecture's
  // layers are MoE layers when the file has expert_count > 0 (llama: Mixtral); see bind_layer.
  bool moe = false;
  // attn_sinks.weight {n_head}: one learned logit per query head in each softmax's denominator
  // (gpt-oss; kernels/attention.h).
  bool attn_sinks = false;
  // attn_output.bias is required (else optional).
  bool attn_out_bias = false;
  // The FFN's pre-norm tensor: "ffn_norm" (gpt-oss: "post_attention_norm", llama.cpp's name for
  // that model's pre-FFN norm).
  const char* ffn_norm = "ffn_norm";
  // MoE layers: ffn_gate_inp.bias {n_expert} and ffn_{gate,up,down}_exps.bias {n_out, n_expert}
  // are required (gpt-oss).
  bool expert_biases = false;
};

struct Architecture {
  const char* name;
  LayerSpec layer;
  // Completes the config after read_common_config (RoPE flavour, windows, scales); may throw
  // ModelFormatError naming a key.
  void (*hparams)(const GgufFile& file, ModelConfig& config);
};

// A registry's entry named `name` (nullptr when none), and its names "a, b, c": the decoder
// registry below and the encoders' (model/encoder.h) both look up this way.
template <class A>
const A* find_by_name(const std::vector<const A*>& list, const std::string& name) {
  for (const A* a : list)
    if (name == a->name) return a;
  return nullptr;
}
template <class A>
std::string names_of(const std::vector<const A*>& list) {
  std::string s;
  for (const A* a : list) s += (s.empty() ? "" : ", ") + std::string(a->name);
  return s;
}

// The registry: every supported architecture, by name.
const std::vector<const Architecture*>& architectures();
// nullptr when `name` is not supported.
const Architecture* find_architecture(const std::string& name);
// "gemma2, gemma3, gpt-oss, llama, olmoe, phi3, qwen2, qwen2moe, qwen3, qwen3moe"
std::string supported_architectures();

// The whole config of `file` (read_common_config, then its architecture's hparams) and the
// architecture. Throws ModelFormatError for an unsupported general.architecture, naming the
// supported ones.
const Architecture& read_model_config(const GgufFile& file, ModelConfig& config);

// Every tensor a layer of a supported architecture may have; absent ones stay empty.
struct LayerWeights {
  Vector attn_norm;
  Matrix wq, wk, wv, wo;
  Vector bq, bk, bv, bo;         // LayerSpec::qkv_bias: Q/K/V biases; optional output bias
  Vector q_norm, k_norm;         // LayerSpec::qk_norm: per-head RMS norms before RoPE
  Vector post_attn_norm;         // LayerSpec::post_norms: on the attention output
  Vector ffn_norm;
  Matrix gate, up, down;
  Vector b_gate, b_up, b_down;   // optional FFN biases
  Vector post_ffn_norm;          // LayerSpec::post_norms: on the FFN output
  // Mixture of experts (ModelConfig::is_moe; model/moe_block.cpp), in place of gate/up/down:
  Matrix router;                 // ffn_gate_inp: n_embd -> n_expert logits
  std::vector<Matrix> gate_exps, up_exps, down_exps;  // one view per expert into the 3-D tensors
  Matrix gate_shexp, up_shexp, down_shexp;  // the shared expert every token runs (n_ff_shexp > 0)
  Vector gate_inp_shexp;                    // optional: its output × sigmoid(gate_inp_shexp · h)
  Vector sinks;                             // LayerSpec::attn_sinks: n_head logits
  // LayerSpec::expert_biases: the router's (n_expert), and per expert e a bias row at
  // e * n_out of b_{gate,up}_exps (n_ff_exp wide) and b_down_exps (n_embd wide).
  Vector b_router, b_gate_exps, b_up_exps, b_down_exps;

  // Every matrix and every vector member, for code that walks them all (packing, sizing,
  // device uploads); absent ones are empty.
  std::array<Matrix*, 7> matrices() { return {&wq, &wk, &wv, &wo, &gate, &up, &down}; }
  std::array<const Matrix*, 7> matrices() const { return {&wq, &wk, &wv, &wo, &gate, &up, &down}; }
  // The MoE matrices (router, every expert view); absent ones empty.
  std::vector<Matrix*> moe_matrices() {
    std::vector<Matrix*> v{&router, &gate_shexp, &up_shexp, &down_shexp};
    for (auto* e : {&gate_exps, &up_exps, &down_exps})
      for (Matrix& m : *e) v.push_back(&m);
    return v;
  }
  std::vector<const Matrix*> moe_matrices() const {
    std::vector<const Matrix*> v;
    for (Matrix* m : const_cast<LayerWeights*>(this)->moe_matrices()) v.push_back(m);
    return v;
  }
  std::array<const Vector*, 18> vectors() const {
    return {&attn_norm, &bq,     &bk,       &bv,        &bo,        &q_norm,        &k_norm,
            &post_attn_norm, &ffn_norm, &b_gate, &b_up, &b_down, &post_ffn_norm, &sinks,
            &b_router, &b_gate_exps, &b_up_exps, &b_down_exps};
  }
};

// Binds layer il's tensors ("blk.<il>.*") as `spec` says, shapes checked against the config: the
// llama set (attn_norm, attn_q/k/v/output with optional biases, ffn_norm, ffn_gate/up/down with
// optional biases), then what the spec adds. When the config has experts (ModelConfig::is_moe)
// the FFN is ffn_gate_inp + ffn_{gate,up,down}_exps (ggml ne {n_in, n_out, n_expert}, bound as
// one Matrix view per expert), and with n_ff_shexp > 0 the shared expert ffn_{gate,up,down}_shexp
// (+ the optional 1-D ffn_gate_inp_shexp), instead of ffn_gate/up/down.
void bind_layer(WeightLoader& loader, const ModelConfig& c, const LayerSpec& spec, int il, LayerWeights& w);

// The model's RoPE frequency factors (model/rope.h), n_rot/2 each: Llama-3's rope_freqs.weight,
// and LongRoPE's rope_factors_short / rope_factors_long.weight (both or neither; Phi-3).
struct RopeFactors {
  Vector freqs, short_factors, long_factors;
};
RopeFactors bind_rope_factors(WeightLoader& loader, const ModelConfig& c);
// The factors a run of n_ctx tokens per sequence uses: rope_freqs; else the long LongRoPE
// factors when n_ctx > c.n_ctx_orig, the short ones otherwise; nullptr when there are none.
const float* select_rope_factors(const RopeFactors& f, const ModelConfig& c, int n_ctx);

// One transformer layer, the one definition every backend runs. `f` is the backend's pass:
// residual stream f.x, sub-layer input f.h and output f.out, and the building blocks
//   f.rmsnorm(src, norm, dst)          dst = rmsnorm(src) * norm, per token; dst may be src
//   f.self_attention(w, il)            out = attention sub-layer of layer il on h
//   f.gated_ffn(w, il, activation)     out = FFN sub-layer on h
//   f.moe_ffn(w, il)                   out = mixture-of-experts FFN on h (layers with a router;
//                                      a backend without it must refuse MoE models up front:
//                                      backend/gpu_offload.cpp does for the CUDA executor)
//   f.add_residual(src)                x += src
// `w` is that backend's copy of the layer's weights (members named as in LayerWeights).
namespace detail {
// The MoE FFN where the backend has one and the layer has a router; false otherwise.
template <class Pass, class Weights>
auto run_moe_ffn(Pass& f, const Weights& w, int il, int) -> decltype(f.moe_ffn(w, il), bool()) {
  if (!w.router) return false;
  f.moe_ffn(w, il);
  return true;
}
template <class Pass, class Weights>
bool run_moe_ffn(Pass&, const Weights&, int, long) {
  return false;
}
}  // namespace detail

template <class Pass, class Weights>
void run_layer(const LayerSpec& spec, Pass& f, const Weights& w, int il) {
  f.rmsnorm(f.x, w.attn_norm, f.h);
  f.self_attention(w, il);  // + Q/K/V biases, Q/K head norms, RoPE (local or global), Q scaled
  if (spec.post_norms) f.rmsnorm(f.out, w.post_attn_norm, f.out);
  f.add_residual(f.out);

  f.rmsnorm(f.x, w.ffn_norm, f.h);
  if (!detail::run_moe_ffn(f, w, il, 0)) f.gated_ffn(w, il, spec.ffn_activation);
  if (spec.post_norms) f.rmsnorm(f.out, w.post_ffn_norm, f.out);
  f.add_residual(f.out);
}

}  // namespace edgellm
