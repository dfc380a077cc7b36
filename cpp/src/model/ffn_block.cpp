// The gated feed-forward sub-layer: SwiGLU (llama, qwen) or GeGLU with tanh-GELU (gemma3).
// Gate and up read the same input, so it is quantized once and both run in one region.
#include "common/thread_pool.h"
#include "kernels/kernels.h"
#include "model/weight_packing.h"
#include "model/forward_pass.h"
#include "quant/quant.h"

namespace edgellm {

void ForwardPass::gated_ffn(const LayerWeights& w, int il, FfnActivation act) {
  const LayerPlans& plans = (*s_.plans)[il];
  sc_.act.reset(h, n_tokens_, c_.n_embd, c_.n_embd);
  MatmulOperand ops[2];
  const Matrix* m[2] = {&w.gate, &w.up};
  float* y[2] = {sc_.gate.data(), sc_.up.data()};
  for (int i = 0; i < 2; ++i) {
    ops[i].w = m[i];
    ops[i].x = sc_.act.get(pool_, matmul_input_type(*m[i]), &ops[i].x_stride);
    ops[i].y = y[i];
    ops[i].ldy = c_.n_ff;
  }
  const LoraTarget gate_up[2] = {kLoraGate, kLoraUp};
  const int64_t ld[2] = {c_.n_ff, c_.n_ff};
  run_matmul(pool_, plans.gate_up, ops, n_tokens_, lora(il, gate_up, 2, h, c_.n_embd, y, ld));

  const kernels::KernelTable& k = kernels::active();
  const auto gating = act == FfnActivation::SiLU ? k.silu_mul : k.gelu_mul;
  const int64_t n_ff = c_.n_ff;
  pool_.parallel_for(0, n_tokens_, [&](int64_t t, int) {
    float* g = sc_.gate.data() + t * n_ff;
    float* u = sc_.up.data() + t * n_ff;
    if (w.b_gate) k.add_f32(w.b_gate.data, g, n_ff);
    if (w.b_up) k.add_f32(w.b_up.data, u, n_ff);
    gating(g, u, g, n_ff);
  });
  const LoraTarget down = kLoraDown;
  const int64_t ld_out = c_.n_embd;
  project(w.down, plans.down, sc_.gate.data(), n_ff, out, w.b_down,
          lora(il, &down, 1, sc_.gate.data(), n_ff, &out, &ld_out));
}

}  // namespace edgellm
