// Gemma 3's vision input (projector type "gemma3"; transformers' SiglipVisionModel +
// Gemma3MultiModalProjector, llama.cpp's clip.cpp build_siglip):
// - patches: a conv of patch_size stride patch_size (v.patch_embd, bound as one matrix over each
//   patch's [channel][row][column] values) + bias + learned position embedding (v.position_embd);
// - n_layer pre-norm ViT blocks: LayerNorm (with bias) -> MHA with Q/K/V/out biases, every patch
//   attending to every patch -> residual; LayerNorm -> fc1 -> GELU (tanh) -> fc2 -> residual;
// - post LayerNorm (v.post_ln);
// - the projector: patches average-pooled scale x scale (row-major soft tokens), RMS norm with
//   mm.soft_emb_norm (the converter has added Gemma's +1), times mm.input_projection ({text width,
//   vision width} as stored: x · W, so it is transposed once at load).
// The tower's matrices run on the packed kernels where their type has one (repacked at load like
// the text model's), on the encoder's thread pool; attention is two matmuls per (head, block of
// queries) through the float kernels.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "common/errors.h"
#include "common/thread_pool.h"
#include "kernels/kernels.h"
#include "model/parallel_matmul.h"
#include "model/vision/vision_encoder.h"
#include "model/weight_packing.h"
#include "model/weights.h"
#include "quant/quant.h"

namespace edgellm {
namespace {

struct TowerLayer {
  Vector ln1_w, ln1_b, ln2_w, ln2_b;
  Matrix wq, wk, wv, wo, up, down;
  Vector bq, bk, bv, bo, b_up, b_down;
  MatmulPlan qkv, out, fc1, fc2;
};

constexpr int kQueryBlock = 32;

void layer_norm(const float* x, const Vector& w, const Vector& b, float* y, int64_t n, float eps) {
  double mean = 0.0;
  for (int64_t i = 0; i < n; ++i) mean += x[i];
  mean /= static_cast<double>(n);
  double var = 0.0;
  for (int64_t i = 0; i < n; ++i) var += (x[i] - mean) * (x[i] - mean);
  var /= static_cast<double>(n);
  const float inv = static_cast<float>(1.0 / std::sqrt(var + eps));
  const float m = static_cast<float>(mean);
  for (int64_t i = 0; i < n; ++i) y[i] = (x[i] - m) * inv * w.data[i] + b.data[i];
}

// `n_out` rows of `n_in` elements of `type` at `data` (row_bytes apart) as a matrix the kernels take.
Matrix matrix_at(const TensorInfo* info, DType type, const void* data, int64_t n_in, int64_t n_out) {
  Matrix m;
  m.info = info;
  m.type = type;
  m.data = static_cast<const uint8_t*>(data);
  m.n_in = n_in;
  m.n_out = n_out;
  m.row_bytes = row_bytes(type, n_in);
  return m;
}

float gelu_tanh(float x) {
  const float k = 0.7978845608028654f;  // sqrt(2 / pi)
  return 0.5f * x * (1.0f + std::tanh(k * (x + 0.044715f * x * x * x)));
}

class Gemma3Vision final : public VisionEncoder {
 public:
  Gemma3Vision(std::shared_ptr<GgufFile> file, VisionConfig config, int n_threads) {
    file_ = std::move(file);
    config_ = std::move(config);
    pool_ = std::make_shared<ThreadPool>(n_threads);
    const VisionConfig& c = config_;
    const int64_t D = c.n_embd, F = c.n_ff, P = c.patch_size;
    WeightLoader ld(*file_);
    patch_ = patch_matrix(3 * P * P, D);
    patch_b_ = ld.vector("v.patch_embd.bias", D);
    pos_ = ld.table("v.position_embd.weight", D, c.n_patches());
    layers_.resize(static_cast<size_t>(c.n_layer));
    const int nt = pool_->size();
    for (int il = 0; il < c.n_layer; ++il) {
      TowerLayer& l = layers_[static_cast<size_t>(il)];
      const std::string p = "v.blk." + std::to_string(il) + ".";
      l.ln1_w = ld.vector(p + "ln1.weight", D);
      l.ln1_b = ld.vector(p + "ln1.bias", D);
      l.ln2_w = ld.vector(p + "ln2.weight", D);
      l.ln2_b = ld.vector(p + "ln2.bias", D);
      l.wq = ld.matrix(p + "attn_q.weight", D, D);
      l.wk = ld.matrix(p + "attn_k.weight", D, D);
      l.wv = ld.matrix(p + "attn_v.weight", D, D);
      l.wo = ld.matrix(p + "attn_out.weight", D, D);
      l.bq = ld.vector(p + "attn_q.bias", D);
      l.bk = ld.vector(p + "attn_k.bias", D);
      l.bv = ld.vector(p + "attn_v.bias", D);
      l.bo = ld.vector(p + "attn_out.bias", D);
      l.up = ld.matrix(p + "ffn_up.weight", D, F);
      l.b_up = ld.vector(p + "ffn_up.bias", F);
      l.down = ld.matrix(p + "ffn_down.weight", F, D);
      l.b_down = ld.vector(p + "ffn_down.bias", D);
    }
    post_w_ = ld.vector("v.post_ln.weight", D);
    post_b_ = ld.vector("v.post_ln.bias", D);
    soft_norm_ = ld.vector("mm.soft_emb_norm.weight", D);
    bind_projection();
    owned_ = std::move(ld.owned());

    std::vector<Matrix*> mats;
    for (TowerLayer& l : layers_)
      for (Matrix* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.up, &l.down}) mats.push_back(m);
    packed_ = pack_weights(mats, *pool_);
    for (TowerLayer& l : layers_) {
      l.qkv = plan_matmul({&l.wq, &l.wk, &l.wv}, nt);
      l.out = plan_matmul({&l.wo}, nt);
      l.fc1 = plan_matmul({&l.up}, nt);
      l.fc2 = plan_matmul({&l.down}, nt);
    }
    patch_plan_ = plan_matmul({&patch_}, nt);
    proj_plan_ = plan_matmul({&proj_}, nt);
    act_.reserve(c.n_patches(), std::max<int64_t>({D, F, 3 * P * P}));
  }

  void encode(const float* pixels, float* out) override {
    const VisionConfig& c = config_;
    const int64_t T = c.n_patches(), D = c.n_embd, F = c.n_ff, P = c.patch_size, S = c.image_size;
    const int side = c.patches_side();
    std::vector<float> patches(static_cast<size_t>(T * 3 * P * P));
    pool_->parallel_for(0, T, [&](int64_t t, int) {
      const int64_t py = t / side, px = t % side;
      float* row = patches.data() + t * 3 * P * P;
      for (int64_t ch = 0; ch < 3; ++ch)
        for (int64_t ky = 0; ky < P; ++ky)
          std::memcpy(row + (ch * P + ky) * P, pixels + (ch * S + py * P + ky) * S + px * P, sizeof(float) * P);
    });
    std::vector<float> x(static_cast<size_t>(T * D)), h(x.size()), q(x.size()), k(x.size()), v(x.size()), attn(x.size());
    std::vector<float> ff(static_cast<size_t>(T * F));
    linear(patch_, patch_plan_, patches.data(), T, x.data(), patch_b_);
    pool_->parallel_for(0, T, [&](int64_t t, int) {
      kernels::active().add_f32(pos_.data + t * D, x.data() + t * D, D);
    });
    for (const TowerLayer& l : layers_) {
      norm_rows(x.data(), l.ln1_w, l.ln1_b, h.data(), T);
      act_.reset(h.data(), T, D, D);
      MatmulOperand ops[3];
      const Matrix* m[3] = {&l.wq, &l.wk, &l.wv};
      float* y[3] = {q.data(), k.data(), v.data()};
      for (int i = 0; i < 3; ++i) {
        ops[i].w = m[i];
        ops[i].x = act_.get(*pool_, matmul_input_type(*m[i]), &ops[i].x_stride);
        ops[i].y = y[i];
        ops[i].ldy = D;
      }
      run_matmul(*pool_, l.qkv, ops, T);
      add_bias(q.data(), l.bq, T);
      add_bias(k.data(), l.bk, T);
      add_bias(v.data(), l.bv, T);
      attention(q.data(), k.data(), v.data(), attn.data());
      linear(l.wo, l.out, attn.data(), T, h.data(), l.bo);
      add_rows(h.data(), x.data(), T * D);
      norm_rows(x.data(), l.ln2_w, l.ln2_b, h.data(), T);
      linear(l.up, l.fc1, h.data(), T, ff.data(), l.b_up);
      pool_->parallel_for(0, T, [&](int64_t t, int) {
        float* r = ff.data() + t * F;
        for (int64_t i = 0; i < F; ++i) r[i] = gelu_tanh(r[i]);
      });
      linear(l.down, l.fc2, ff.data(), T, h.data(), l.b_down);
      add_rows(h.data(), x.data(), T * D);
    }
    norm_rows(x.data(), post_w_, post_b_, h.data(), T);

    // Average pooling scale x scale, then the soft-embedding RMS norm.
    const int k_pool = c.scale_factor, tside = side / k_pool;
    const int64_t n_tok = static_cast<int64_t>(tside) * tside;
    std::vector<float> pooled(static_cast<size_t>(n_tok * D));
    const float inv = 1.0f / static_cast<float>(k_pool * k_pool);
    pool_->parallel_for(0, n_tok, [&](int64_t t, int) {
      float* dst = pooled.data() + t * D;
      const int64_t ty = t / tside, tx = t % tside;
      std::fill(dst, dst + D, 0.0f);
      for (int dy = 0; dy < k_pool; ++dy)
        for (int dx = 0; dx < k_pool; ++dx) {
          const float* src = h.data() + ((ty * k_pool + dy) * side + tx * k_pool + dx) * D;
          for (int64_t i = 0; i < D; ++i) dst[i] += src[i];
        }
      for (int64_t i = 0; i < D; ++i) dst[i] *= inv;
      kernels::active().rmsnorm(dst, soft_norm_.data, dst, D, c.eps);
    });
    linear(proj_, proj_plan_, pooled.data(), n_tok, out, Vector{});
  }

 private:
  // v.patch_embd.weight {P, P, 3, D}: D rows of 3 P P values, [channel][row][column].
  Matrix patch_matrix(int64_t n_in, int64_t n_out) {
    const TensorInfo* t = file_->find_tensor("v.patch_embd.weight");
    const int64_t P = config_.patch_size;
    if (!t) throw ModelFormatError(file_->path() + ": projector file has no tensor v.patch_embd.weight");
    if (t->ne[0] != P || t->ne[1] != P || t->ne[2] != 3 || t->ne[3] != n_out)
      throw ModelFormatError(file_->path() + ": tensor v.patch_embd.weight is not {" + std::to_string(P) + ", " +
                             std::to_string(P) + ", 3, " + std::to_string(n_out) + "}");
    if ((t->type != DType::F32 && t->type != DType::F16) || !kernels::active().matmul[static_cast<int>(t->type)])
      throw ModelFormatError(file_->path() + ": tensor v.patch_embd.weight must be F32 or F16");
    return matrix_at(t, t->type, t->data, n_in, n_out);
  }

  // mm.input_projection.weight {n_embd_text, n_embd} as stored (HF's [vision, text]): y = x · W,
  // so row j of the matrix the kernels multiply by is column j of the stored one (an F32 copy).
  void bind_projection() {
    const TensorInfo* t = file_->find_tensor("mm.input_projection.weight");
    const int64_t D = config_.n_embd, E = config_.n_embd_text;
    if (!t) throw ModelFormatError(file_->path() + ": projector file has no tensor mm.input_projection.weight");
    if (t->n_dims != 2 || t->ne[0] != E || t->ne[1] != D)
      throw ModelFormatError(file_->path() + ": tensor mm.input_projection.weight is not {" + std::to_string(E) + ", " +
                             std::to_string(D) + "} (projection_dim, vision width)");
    std::vector<float> stored(static_cast<size_t>(D * E));
    for (int64_t r = 0; r < D; ++r)
      quant::dequantize_row(t->type, t->data + static_cast<size_t>(r) * row_bytes(t->type, E), stored.data() + r * E, E);
    proj_data_.resize(stored.size());
    for (int64_t r = 0; r < D; ++r)
      for (int64_t j = 0; j < E; ++j) proj_data_[static_cast<size_t>(j * D + r)] = stored[static_cast<size_t>(r * E + j)];
    proj_ = matrix_at(t, DType::F32, proj_data_.data(), D, E);
  }

  void linear(const Matrix& w, const MatmulPlan& plan, const float* x, int64_t rows, float* y, const Vector& b) {
    edgellm::linear(*pool_, act_, w, plan, x, rows, y, b);
  }

  void add_bias(float* y, const Vector& b, int64_t rows) {
    if (!b) return;
    pool_->parallel_for(0, rows, [&](int64_t t, int) { kernels::active().add_f32(b.data, y + t * b.n, b.n); });
  }

  void add_rows(const float* src, float* dst, int64_t n) {
    constexpr int64_t kPart = 1 << 14;
    pool_->parallel_for(0, (n + kPart - 1) / kPart, [&](int64_t i, int) {
      const int64_t a = i * kPart, e = std::min(n, a + kPart);
      kernels::active().add_f32(src + a, dst + a, e - a);
    });
  }

  void norm_rows(const float* x, const Vector& w, const Vector& b, float* y, int64_t rows) {
    const int64_t D = config_.n_embd;
    const float eps = config_.eps;
    pool_->parallel_for(0, rows, [&](int64_t t, int) { layer_norm(x + t * D, w, b, y + t * D, D, eps); });
  }

  // Every patch attends to every patch: per head, K laid out [patch][dim] and V [dim][patch] so
  // both products are float matmuls; tasks are (head, block of queries).
  void attention(const float* q, const float* k, const float* v, float* out) {
    const VisionConfig& c = config_;
    const int64_t T = c.n_patches(), D = c.n_embd, H = c.n_head, hd = D / H;
    kh_.resize(static_cast<size_t>(T * D));
    vt_.resize(static_cast<size_t>(T * D));
    pool_->parallel_for(0, H, [&](int64_t h, int) {
      for (int64_t t = 0; t < T; ++t) {
        std::memcpy(kh_.data() + (h * T + t) * hd, k + t * D + h * hd, sizeof(float) * hd);
        for (int64_t d = 0; d < hd; ++d) vt_[static_cast<size_t>((h * hd + d) * T + t)] = v[t * D + h * hd + d];
      }
    });
    const int nt = pool_->size();
    scores_.resize(static_cast<size_t>(nt) * kQueryBlock * T);
    const int64_t n_blocks = (T + kQueryBlock - 1) / kQueryBlock;
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    const auto softmax = kernels::active().softmax;
    pool_->run(H * n_blocks, [&](int64_t task, int thread) {
      const int64_t h = task / n_blocks, q0 = (task % n_blocks) * kQueryBlock;
      const int64_t nq = std::min<int64_t>(kQueryBlock, T - q0);
      float* s = scores_.data() + static_cast<size_t>(thread) * kQueryBlock * T;
      const Matrix km = matrix_at(nullptr, DType::F32, kh_.data() + h * T * hd, hd, T);
      matmul_rows(km, 0, T, q + q0 * D + h * hd, sizeof(float) * D, nq, s, T);
      for (int64_t i = 0; i < nq; ++i) {
        float* r = s + i * T;
        for (int64_t j = 0; j < T; ++j) r[j] *= scale;
        softmax(r, T);
      }
      const Matrix vm = matrix_at(nullptr, DType::F32, vt_.data() + h * hd * T, T, hd);
      matmul_rows(vm, 0, hd, s, sizeof(float) * T, nq, out + q0 * D + h * hd, D);
    });
  }

  std::shared_ptr<ThreadPool> pool_;
  Matrix patch_, proj_;
  Vector patch_b_, pos_, post_w_, post_b_, soft_norm_;
  std::vector<TowerLayer> layers_;
  std::vector<std::unique_ptr<float[]>> owned_;
  std::vector<float> proj_data_;
  PackedWeights packed_;
  MatmulPlan patch_plan_, proj_plan_;
  ActivationQuantizer act_;
  std::vector<float> kh_, vt_, scores_;
};

}  // namespace

std::unique_ptr<VisionEncoder> make_gemma3_vision(std::shared_ptr<GgufFile> file, VisionConfig config, int n_threads) {
  return std::make_unique<Gemma3Vision>(std::move(file), std::move(config), n_threads);
}

}  // namespace edgellm
