// The mixture-of-experts FFN sub-layer (docs/formats.md §4.8). For a batch of T tokens:
//
//   1. router logits h · Wrouter (+ its bias, gpt-oss) in one matmul, then per token its top-k
//      experts and gate weights (model/expert_router.h), the (token, expert) pairs grouped by expert;
//   2. each pair's input row gathered into its expert's group, in the gate and up matrices'
//      activation formats;
//   3. one parallel region over every selected expert's gate and up rows: expert e's matmul runs
//      once over all its tokens, so its weights are read once per step however many tokens
//      (of however many sequences) chose it; the tasks are (expert, row chunk) pairs, an
//      expert's rows spread over the threads as in run_matmul;
//   4. silu(gate) ⊙ up per row (gpt-oss: + each expert's gate / up bias, the clamped SwiGLU),
//      quantized once for the down matrices;
//   5. the same region shape for the down rows;
//   6. the shared expert, when the layer has one: an ordinary SwiGLU FFN over all T tokens
//      (run_matmul), its output × sigmoid(gate_inp_shexp · h) when that gate exists;
//   7. per token, out = Σ_j g_j · (row_j + the expert's down bias, if any) in slot order (+ the
//      shared expert's row), so a token's result does not depend on the batch it is in or on the
//      thread count.
//
// Decode (T = 1) so reads exactly the k selected experts' rows and nothing else of the layer's
// experts.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "common/thread_pool.h"
#include "kernels/kernels.h"
#include "model/forward_pass.h"
#include "model/weight_packing.h"
#include "quant/quant.h"

namespace edgellm {
namespace {

size_t aligned_bytes(size_t n) { return std::max<size_t>(64, (n + 63) / 64 * 64); }

// The shared expert's part of MoeScratch::bytes (allocate's sizes).
size_t shexp_bytes(const ModelConfig& c, int T, const MoeScratch::RowBytes& rb) {
  const size_t t = c.n_ff_shexp > 0 ? static_cast<size_t>(T) : 0;
  return 2 * aligned_bytes(t * c.n_ff_shexp * sizeof(float)) + aligned_bytes(t * rb.shexp_down) +
         aligned_bytes(t * c.n_embd * sizeof(float));
}

// Row `src` of `width` floats in activation format `type` at `dst`.
void to_format(DType type, const float* src, uint8_t* dst, int64_t width) {
  if (type == DType::F32) {
    std::memcpy(dst, src, static_cast<size_t>(width) * sizeof(float));
    return;
  }
  const kernels::QuantizeFn q = kernels::active().quantize[static_cast<int>(type)];
  if (!q) throw std::logic_error(std::string("no activation quantizer for ") + dtype_name(type));
  q(src, dst, width);
}

// Runs `plan` (chunks of one expert's matrices, parts indexing `mats`) for every active expert:
// part p of expert e multiplies rows [offset[e], offset[e + 1]) of x[p] into y[p].
void run_experts(ThreadPool& pool, const MatmulPlan& plan, const ExpertRouting& r,
                 const std::vector<Matrix>* const* mats, const uint8_t* const* x, const size_t* x_stride,
                 float* const* y, const int64_t* ldy) {
  const int64_t n_chunks = static_cast<int64_t>(plan.chunks.size());
  const int64_t n_tasks = n_chunks * static_cast<int64_t>(r.active.size());
  pool.run(n_tasks, [&](int64_t i, int) {
    const int e = r.active[i / n_chunks];
    const MatmulChunk& c = plan.chunks[i % n_chunks];
    const int p = c.part;
    const int64_t row0 = r.offset[e], n = r.offset[e + 1] - row0;
    matmul_rows((*mats[p])[e], c.r0, c.r1, x[p] + row0 * x_stride[p], x_stride[p], n, y[p] + row0 * ldy[p], ldy[p]);
  });
}

// The expert whose group holds grouped row `row` (offset is ascending).
int64_t expert_of_row(const ExpertRouting& r, int64_t row) {
  return std::upper_bound(r.offset.begin(), r.offset.end(), static_cast<int32_t>(row)) - r.offset.begin() - 1;
}

// gpt-oss's clamped SwiGLU, in place in g: g = min(g, limit), u = clamp(u, -limit, limit),
// g = (u + 1) · g · sigmoid(alpha · g) (llama.cpp's swiglu_oai).
void swiglu_clamped(float* g, const float* u, int64_t n, float alpha, float limit) {
  for (int64_t i = 0; i < n; ++i) {
    const float x = std::min(g[i], limit);
    const float y = std::min(std::max(u[i], -limit), limit);
    g[i] = x / (1.0f + std::exp(-alpha * x)) * (y + 1.0f);
  }
}

}  // namespace

MoeScratch::RowBytes MoeScratch::widest(const ModelConfig& c, const std::vector<LayerWeights>& layers,
                                        DType (*input_type)(const Matrix&)) {
  RowBytes rb;
  for (const LayerWeights& w : layers) {
    if (!w.router) continue;
    rb.gate = std::max(rb.gate, row_bytes(input_type(w.gate_exps[0]), c.n_embd));
    rb.up = std::max(rb.up, row_bytes(input_type(w.up_exps[0]), c.n_embd));
    rb.down = std::max(rb.down, row_bytes(input_type(w.down_exps[0]), c.n_ff_exp));
    if (w.down_shexp) rb.shexp_down = std::max(rb.shexp_down, row_bytes(input_type(w.down_shexp), c.n_ff_shexp));
  }
  return rb;
}

void MoeScratch::allocate(const ModelConfig& c, int T, const RowBytes& rb) {
  const size_t R = static_cast<size_t>(T) * c.n_expert_used;
  max_rows = static_cast<int>(R);
  logits.allocate(static_cast<size_t>(T) * c.n_expert);
  routing.reserve(T, c.n_expert, c.n_expert_used);
  x_gate.allocate(R * rb.gate);
  x_up.allocate(R * rb.up);
  gate.allocate(R * c.n_ff_exp);
  up.allocate(R * c.n_ff_exp);
  x_down.allocate(R * rb.down);
  down.allocate(R * c.n_embd);
  const size_t t_sh = c.n_ff_shexp > 0 ? static_cast<size_t>(T) : 0;
  sh_gate.allocate(t_sh * c.n_ff_shexp);
  sh_up.allocate(t_sh * c.n_ff_shexp);
  x_sh_down.allocate(t_sh * rb.shexp_down);
  sh_out.allocate(t_sh * c.n_embd);
}

size_t MoeScratch::bytes(const ModelConfig& c, int T, const RowBytes& rb) {
  if (!c.is_moe()) return 0;
  const size_t R = static_cast<size_t>(T) * c.n_expert_used;
  return aligned_bytes(static_cast<size_t>(T) * c.n_expert * sizeof(float)) +
         ExpertRouting::reserve_bytes(T, c.n_expert, c.n_expert_used) + aligned_bytes(R * rb.gate) +
         aligned_bytes(R * rb.up) + 2 * aligned_bytes(R * c.n_ff_exp * sizeof(float)) + aligned_bytes(R * rb.down) +
         aligned_bytes(R * c.n_embd * sizeof(float)) + shexp_bytes(c, T, rb);
}

void ForwardPass::moe_ffn(const LayerWeights& w, int il) {
  const LayerPlans& plans = (*s_.plans)[il];
  MoeScratch& m = sc_.moe;
  const int T = n_tokens_;
  const int k = c_.n_expert_used;
  const int64_t n_embd = c_.n_embd, n_ff = c_.n_ff_exp;
  if (static_cast<int64_t>(T) * k > m.max_rows) throw std::logic_error("moe_ffn: MoE scratch not allocated");

  // 1. route
  sc_.act.reset(h, T, n_embd, n_embd);
  MatmulOperand op;
  op.w = &w.router;
  op.x = sc_.act.get(pool_, matmul_input_type(w.router), &op.x_stride);
  op.y = m.logits.data();
  op.ldy = c_.n_expert;
  run_matmul(pool_, plans.router, &op, T);
  if (w.b_router) {  // gpt-oss: the router's bias, before the gating
    const auto add = kernels::active().add_f32;
    pool_.parallel_for(0, T,
                       [&](int64_t t, int) { add(w.b_router.data, m.logits.data() + t * c_.n_expert, c_.n_expert); });
  }
  ExpertRouting& r = m.routing;
  route_tokens(c_, m.logits.data(), T, pool_, r);
  const int64_t R = static_cast<int64_t>(T) * k;

  // 2. gather each (token, expert) row's input, grouped by expert
  const DType in_gate = matmul_input_type(w.gate_exps[0]), in_up = matmul_input_type(w.up_exps[0]),
              in_down = matmul_input_type(w.down_exps[0]);
  const bool shared_x = in_gate == in_up;
  const size_t sg = row_bytes(in_gate, n_embd), su = row_bytes(in_up, n_embd);
  uint8_t* xg = m.x_gate.data();
  uint8_t* xu = shared_x ? xg : m.x_up.data();
  pool_.parallel_for(0, R, [&](int64_t row, int) {
    const float* src = h + static_cast<int64_t>(r.token_of[row]) * n_embd;
    to_format(in_gate, src, xg + row * sg, n_embd);
    if (!shared_x) to_format(in_up, src, xu + row * su, n_embd);
  });

  // 3. gate and up of every selected expert
  {
    const std::vector<Matrix>* mats[2] = {&w.gate_exps, &w.up_exps};
    const uint8_t* x[2] = {xg, xu};
    const size_t xs[2] = {sg, su};
    float* y[2] = {m.gate.data(), m.up.data()};
    const int64_t ldy[2] = {n_ff, n_ff};
    run_experts(pool_, plans.expert_gate_up, r, mats, x, xs, y, ldy);
  }

  // 4. silu(gate) ⊙ up (+ the experts' gate / up biases and the clamped SwiGLU where the layer
  // has them), in the down matrices' input format
  const kernels::KernelTable& kt = kernels::active();
  const size_t sd = row_bytes(in_down, n_ff);
  uint8_t* xd = in_down == DType::F32 ? reinterpret_cast<uint8_t*>(m.gate.data()) : m.x_down.data();
  const bool clamped = c_.swiglu_limit > 0.0f;
  pool_.parallel_for(0, R, [&](int64_t row, int) {
    float* g = m.gate.data() + row * n_ff;
    float* u = m.up.data() + row * n_ff;
    if (w.b_gate_exps) {
      const int64_t e = expert_of_row(r, row);
      kt.add_f32(w.b_gate_exps.data + e * n_ff, g, n_ff);
      kt.add_f32(w.b_up_exps.data + e * n_ff, u, n_ff);
    }
    if (clamped) swiglu_clamped(g, u, n_ff, c_.swiglu_alpha, c_.swiglu_limit);
    else kt.silu_mul(g, u, g, n_ff);
    if (in_down != DType::F32) to_format(in_down, g, xd + row * sd, n_ff);
  });

  // 5. down of every selected expert
  {
    const std::vector<Matrix>* mats[1] = {&w.down_exps};
    const uint8_t* x[1] = {xd};
    const size_t xs[1] = {sd};
    float* y[1] = {m.down.data()};
    const int64_t ldy[1] = {n_embd};
    run_experts(pool_, plans.expert_down, r, mats, x, xs, y, ldy);
  }

  // 6. the shared expert (its gate and up read h, quantized by sc_.act above)
  const bool shared = static_cast<bool>(w.gate_shexp);
  if (shared) shared_expert(w, il);

  // 7. out = the gate-weighted sum of each token's expert rows (+ the shared expert's)
  pool_.parallel_for(0, T, [&](int64_t t, int) {
    float* o = out + t * n_embd;
    for (int j = 0; j < k; ++j) {
      const float g = r.weight[t * k + j];
      float* d = m.down.data() + static_cast<int64_t>(r.row[t * k + j]) * n_embd;
      if (w.b_down_exps) kt.add_f32(w.b_down_exps.data + static_cast<int64_t>(r.expert[t * k + j]) * n_embd, d, n_embd);
      if (j == 0) {
        for (int64_t i = 0; i < n_embd; ++i) o[i] = g * d[i];
      } else {
        for (int64_t i = 0; i < n_embd; ++i) o[i] += g * d[i];
      }
    }
    if (shared) {
      const float* s = m.sh_out.data() + t * n_embd;
      float g = 1.0f;
      if (w.gate_inp_shexp) {
        float dot = 0;
        const float* hr = h + t * n_embd;
        for (int64_t i = 0; i < n_embd; ++i) dot += w.gate_inp_shexp.data[i] * hr[i];
        g = 1.0f / (1.0f + std::exp(-dot));
      }
      for (int64_t i = 0; i < n_embd; ++i) o[i] += g * s[i];
    }
  });
}

void ForwardPass::shared_expert(const LayerWeights& w, int il) {
  const LayerPlans& plans = (*s_.plans)[il];
  MoeScratch& m = sc_.moe;
  const int T = n_tokens_;
  const int64_t n_sh = c_.n_ff_shexp;
  MatmulOperand ops[2];
  const Matrix* mats[2] = {&w.gate_shexp, &w.up_shexp};
  float* y[2] = {m.sh_gate.data(), m.sh_up.data()};
  for (int i = 0; i < 2; ++i) {
    ops[i].w = mats[i];
    ops[i].x = sc_.act.get(pool_, matmul_input_type(*mats[i]), &ops[i].x_stride);
    ops[i].y = y[i];
    ops[i].ldy = n_sh;
  }
  run_matmul(pool_, plans.shexp_gate_up, ops, T);
  const DType in_down = matmul_input_type(w.down_shexp);
  const size_t sd = row_bytes(in_down, n_sh);
  const auto silu_mul = kernels::active().silu_mul;
  uint8_t* xd = in_down == DType::F32 ? reinterpret_cast<uint8_t*>(m.sh_gate.data()) : m.x_sh_down.data();
  pool_.parallel_for(0, T, [&](int64_t t, int) {
    float* g = m.sh_gate.data() + t * n_sh;
    silu_mul(g, m.sh_up.data() + t * n_sh, g, n_sh);
    if (in_down != DType::F32) to_format(in_down, g, xd + t * sd, n_sh);
  });
  MatmulOperand op;
  op.w = &w.down_shexp;
  op.x = xd;
  op.x_stride = sd;
  op.y = m.sh_out.data();
  op.ldy = c_.n_embd;
  run_matmul(pool_, plans.shexp_down, &op, T);
}

}  // namespace edgellm
