// Qwen2.5-VL's vision input (projector type "qwen2.5vl_merger"; transformers'
// Qwen2_5_VisionTransformerPretrainedModel, llama.cpp's clip.cpp build_qwen2vl), for an image of any
// size that is a multiple of patch x merge (vision.qwen2vl_frame's dynamic resolution):
// - patches in merge order (each merge x merge block of patches consecutive, blocks row-major);
//   the temporal conv of two identical frames is one matrix, v.patch_embd.weight +
//   v.patch_embd.weight.1 (an F32 sum made at load), no bias;
// - n_layer pre-norm blocks: RMSNorm -> Q/K/V with biases, 2-D rotary (the first half of the
//   rotated pairs turns by the patch's row, the second by its column; NeoX pairs (i, i + hd/2),
//   theta 10000) -> attention over every patch in the blocks where (il + 1) % n_wa_pattern == 0,
//   else only within its window (window_size px squares of merged tokens from the top left) ->
//   out with bias -> residual; RMSNorm -> SwiGLU (gate, up, down, with biases) -> residual;
// - the merger: RMSNorm (v.post_ln), each merge x merge block's rows concatenated, mm.0 + bias,
//   GELU (erf, as transformers), mm.2 + bias: one token a block, in row-major block order.
// The windows are a mask over the natural order (transformers permutes rows into windows and
// back; attention is the same either way).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "common/errors.h"
#include "kernels/kernels.h"
#include "model/vision/siglip.h"
#include "quant/quant.h"

namespace edgellm {
namespace {

constexpr int64_t kMaxPatches = 1 << 16;

class Qwen25VLVision final : public VisionEncoder {
 public:
  Qwen25VLVision(std::shared_ptr<GgufFile> file, VisionConfig config, int n_threads)
      : pool_(std::make_shared<ThreadPool>(n_threads)) {
    file_ = std::move(file);
    config_ = std::move(config);
    const VisionConfig& c = config_;
    const int64_t D = c.n_embd, F = c.n_ff, P = c.patch_size, M = c.scale_factor, E = c.n_embd_text;
    WeightLoader ld(*file_);
    bind_patch_embedding(3 * P * P, D);
    layers_.resize(static_cast<size_t>(c.n_layer));
    for (int il = 0; il < c.n_layer; ++il) {
      Layer& l = layers_[static_cast<size_t>(il)];
      const std::string p = "v.blk." + std::to_string(il) + ".";
      l.ln1 = ld.vector(p + "ln1.weight", D);
      l.ln2 = ld.vector(p + "ln2.weight", D);
      l.bind(ld, p, D);
      l.gate = ld.matrix(p + "ffn_gate.weight", D, F);
      l.up = ld.matrix(p + "ffn_up.weight", D, F);
      l.down = ld.matrix(p + "ffn_down.weight", F, D);
      l.b_gate = ld.vector(p + "ffn_gate.bias", F);
      l.b_up = ld.vector(p + "ffn_up.bias", F);
      l.b_down = ld.vector(p + "ffn_down.bias", D);
    }
    post_ = ld.vector("v.post_ln.weight", D);
    mm0_ = ld.matrix("mm.0.weight", M * M * D, M * M * D);
    mm0_b_ = ld.vector("mm.0.bias", M * M * D);
    mm2_ = ld.matrix("mm.2.weight", M * M * D, E);
    mm2_b_ = ld.vector("mm.2.bias", E);
    owned_ = std::move(ld.owned());
    std::vector<Matrix*> mats{&mm0_, &mm2_};
    for (Layer& l : layers_)
      for (Matrix* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.gate, &l.up, &l.down}) mats.push_back(m);
    packed_ = pack_weights(mats, *pool_);
    const int nt = pool_->size();
    for (Layer& l : layers_) {
      l.qkv = plan_matmul({&l.wq, &l.wk, &l.wv}, nt, ColumnOrder::Any);
      l.out = plan_matmul({&l.wo}, nt, ColumnOrder::Any);
      l.gate_up = plan_matmul({&l.gate, &l.up}, nt, ColumnOrder::Any);
      l.fc2 = plan_matmul({&l.down}, nt, ColumnOrder::Any);
    }
    patch_plan_ = plan_matmul({&patch_}, nt, ColumnOrder::Any);
    mm0_plan_ = plan_matmul({&mm0_}, nt, ColumnOrder::Any);
    mm2_plan_ = plan_matmul({&mm2_}, nt, ColumnOrder::Any);
    const int64_t hd = D / c.n_head;
    for (int64_t j = 0; j < hd / 4; ++j)
      inv_freq_.push_back(static_cast<float>(std::pow(10000.0, -4.0 * static_cast<double>(j) / static_cast<double>(hd))));
  }

  int64_t n_tokens_for(int height, int width) const override {
    const int f = config_.patch_size * config_.scale_factor;
    if (height <= 0 || width <= 0 || height % f != 0 || width % f != 0 ||
        static_cast<int64_t>(height / config_.patch_size) * (width / config_.patch_size) > kMaxPatches)
      throw InvalidRequestError("pixels must be [3, height, width] with height and width multiples of " + std::to_string(f) +
                                " and at most " + std::to_string(kMaxPatches) + " patches, not [3, " +
                                std::to_string(height) + ", " + std::to_string(width) + "]");
    return static_cast<int64_t>(height / f) * (width / f);
  }

  void encode(const float* pixels, int height, int width, float* out) override {
    const VisionConfig& c = config_;
    const int64_t n_out = n_tokens_for(height, width);
    const int64_t P = c.patch_size, M = c.scale_factor, D = c.n_embd, F = c.n_ff, H = c.n_head, hd = D / H;
    const int64_t gw = width / P, bw = gw / M, T = n_out * M * M;
    const int64_t widest = std::max<int64_t>({D, F, 3 * P * P, M * M * D});
    if (T > act_rows_) {
      act_.reserve(T, widest);
      act_rows_ = T;
    }
    // Patches in merge order, each patch's rotary angles, and each patch's window.
    std::vector<float> patches(static_cast<size_t>(T * 3 * P * P)), angles(static_cast<size_t>(T * hd / 2));
    std::vector<int32_t> window(static_cast<size_t>(T));
    const int64_t wm = std::max<int64_t>(1, c.window_size / P / M), wcols = (bw + wm - 1) / wm;
    pool_->parallel_for(0, T, [&](int64_t t, int) {
      const int64_t b = t / (M * M), by = b / bw, bx = b % bw, py = by * M + (t % (M * M)) / M, px = bx * M + t % M;
      float* row = patches.data() + t * 3 * P * P;
      for (int64_t ch = 0; ch < 3; ++ch)
        for (int64_t ky = 0; ky < P; ++ky)
          std::memcpy(row + (ch * P + ky) * P, pixels + (ch * height + py * P + ky) * width + px * P, sizeof(float) * P);
      float* a = angles.data() + t * hd / 2;
      for (int64_t j = 0; j < hd / 4; ++j) {
        a[j] = static_cast<float>(py) * inv_freq_[static_cast<size_t>(j)];
        a[hd / 4 + j] = static_cast<float>(px) * inv_freq_[static_cast<size_t>(j)];
      }
      window[static_cast<size_t>(t)] = static_cast<int32_t>((by / wm) * wcols + bx / wm);
    });
    std::vector<float> x(static_cast<size_t>(T * D)), h(x.size()), q(x.size()), k(x.size()), v(x.size()), attn(x.size());
    std::vector<float> g(static_cast<size_t>(T * F)), u(g.size());
    linear(patch_, patch_plan_, patches.data(), T, x.data(), Vector{});
    for (int il = 0; il < c.n_layer; ++il) {
      const Layer& l = layers_[static_cast<size_t>(il)];
      const bool full = c.n_wa_pattern <= 0 || (il + 1) % c.n_wa_pattern == 0;
      rms_rows(x.data(), l.ln1, h.data(), T);
      run_pair({&l.wq, &l.wk, &l.wv}, {q.data(), k.data(), v.data()}, l.qkv, h.data(), T, D);
      add_bias(*pool_, q.data(), l.bq, T);
      add_bias(*pool_, k.data(), l.bk, T);
      add_bias(*pool_, v.data(), l.bv, T);
      pool_->parallel_for(0, T, [&](int64_t t, int) {
        rotate(q.data() + t * D, angles.data() + t * hd / 2);
        rotate(k.data() + t * D, angles.data() + t * hd / 2);
      });
      vision_attention(*pool_, q.data(), k.data(), v.data(), attn.data(), T, D, H, full ? nullptr : window.data(),
                       scratch_);
      linear(l.wo, l.out, attn.data(), T, h.data(), l.bo);
      add_rows(*pool_, h.data(), x.data(), T * D);
      rms_rows(x.data(), l.ln2, h.data(), T);
      run_pair({&l.gate, &l.up}, {g.data(), u.data()}, l.gate_up, h.data(), T, F);
      add_bias(*pool_, g.data(), l.b_gate, T);
      add_bias(*pool_, u.data(), l.b_up, T);
      pool_->parallel_for(0, T, [&](int64_t t, int) {
        float* a = g.data() + t * F;
        const float* b = u.data() + t * F;
        for (int64_t i = 0; i < F; ++i) a[i] = a[i] / (1.0f + std::exp(-a[i])) * b[i];
      });
      linear(l.down, l.fc2, g.data(), T, h.data(), l.b_down);
      add_rows(*pool_, h.data(), x.data(), T * D);
    }
    // The merger: M x M consecutive rows are one row of M M D.
    rms_rows(x.data(), post_, h.data(), T);
    std::vector<float> m(static_cast<size_t>(n_out * M * M * D));
    linear(mm0_, mm0_plan_, h.data(), n_out, m.data(), mm0_b_);
    pool_->parallel_for(0, n_out, [&](int64_t t, int) {
      float* r = m.data() + t * M * M * D;
      for (int64_t i = 0; i < M * M * D; ++i) r[i] = 0.5f * r[i] * (1.0f + std::erf(r[i] * 0.70710678118654752f));
    });
    linear(mm2_, mm2_plan_, m.data(), n_out, out, mm2_b_);
  }

 private:
  struct Layer : VisionAttentionWeights {
    Vector ln1, ln2, b_gate, b_up, b_down;
    Matrix gate, up, down;
    MatmulPlan qkv, out, gate_up, fc2;
  };

  // The two temporal slices {P, P, 3, D} summed into one F32 matrix of D rows of 3 P P.
  void bind_patch_embedding(int64_t n_in, int64_t n_out) {
    const int64_t P = config_.patch_size;
    patch_data_.assign(static_cast<size_t>(n_in * n_out), 0.0f);
    std::vector<float> row(static_cast<size_t>(n_in));
    const TensorInfo* first = nullptr;
    for (const char* name : {"v.patch_embd.weight", "v.patch_embd.weight.1"}) {
      const TensorInfo* t = file_->find_tensor(name);
      if (!t) throw ModelFormatError(file_->path() + ": projector file has no tensor " + name);
      if (t->ne[0] != P || t->ne[1] != P || t->ne[2] != 3 || t->ne[3] != n_out)
        throw ModelFormatError(file_->path() + ": tensor " + name + " is not {" + std::to_string(P) + ", " +
                               std::to_string(P) + ", 3, " + std::to_string(n_out) + "}");
      if (t->type != DType::F32 && t->type != DType::F16)
        throw ModelFormatError(file_->path() + ": tensor " + std::string(name) + " must be F32 or F16");
      for (int64_t r = 0; r < n_out; ++r) {
        quant::dequantize_row(t->type, t->data + static_cast<size_t>(r) * row_bytes(t->type, n_in), row.data(), n_in);
        for (int64_t i = 0; i < n_in; ++i) patch_data_[static_cast<size_t>(r * n_in + i)] += row[static_cast<size_t>(i)];
      }
      if (!first) first = t;
    }
    patch_ = matrix_at(first, DType::F32, patch_data_.data(), n_in, n_out);
  }

  void linear(const Matrix& w, const MatmulPlan& plan, const float* x, int64_t rows, float* y, const Vector& b) {
    linear_blocked(*pool_, act_, w, plan, x, rows, y, b);
  }

  // Several matrices over one input (quantized once), in one planned run.
  void run_pair(std::initializer_list<const Matrix*> ms, std::initializer_list<float*> ys, const MatmulPlan& plan,
                const float* x, int64_t rows, int64_t ldy) {
    act_.reset(x, rows, config_.n_embd, config_.n_embd);
    MatmulOperand ops[3];
    size_t i = 0;
    auto y = ys.begin();
    for (const Matrix* m : ms) {
      ops[i].w = m;
      ops[i].x = act_.get(*pool_, matmul_input_type(*m), &ops[i].x_stride);
      ops[i].y = *y++;
      ops[i].ldy = ldy;
      ++i;
    }
    run_matmul_blocked(*pool_, plan, ops, static_cast<int>(i), rows);
  }

  void rms_rows(const float* x, const Vector& w, float* y, int64_t rows) {
    const int64_t D = config_.n_embd;
    const float eps = config_.eps;
    pool_->parallel_for(0, rows, [&](int64_t t, int) { kernels::active().rmsnorm(x + t * D, w.data, y + t * D, D, eps); });
  }

  // NeoX pairs (i, i + hd/2) of every head turned by angle[i].
  void rotate(float* r, const float* angle) const {
    const int64_t D = config_.n_embd, hd = D / config_.n_head, half = hd / 2;
    for (int64_t h0 = 0; h0 < D; h0 += hd)
      for (int64_t i = 0; i < half; ++i) {
        const float cs = std::cos(angle[i]), sn = std::sin(angle[i]);
        const float a = r[h0 + i], b = r[h0 + i + half];
        r[h0 + i] = a * cs - b * sn;
        r[h0 + i + half] = b * cs + a * sn;
      }
  }

  std::shared_ptr<ThreadPool> pool_;
  Matrix patch_, mm0_, mm2_;
  Vector post_, mm0_b_, mm2_b_;
  std::vector<Layer> layers_;
  std::vector<std::unique_ptr<float[]>> owned_;
  std::vector<float> patch_data_, inv_freq_;
  PackedWeights packed_;
  MatmulPlan patch_plan_, mm0_plan_, mm2_plan_;
  ActivationQuantizer act_;
  int64_t act_rows_ = 0;
  AttentionScratch scratch_;
};

}  // namespace

std::unique_ptr<VisionEncoder> make_qwen25vl_vision(std::shared_ptr<GgufFile> file, VisionConfig config,
                                                    int n_threads) {
  return std::make_unique<Qwen25VLVision>(std::move(file), std::move(config), n_threads);
}

}  // namespace edgellm
