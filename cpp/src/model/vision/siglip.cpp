#include "model/vision/siglip.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/errors.h"
#include "kernels/kernels.h"
#include "quant/quant.h"

namespace edgellm {
namespace {


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

}  // namespace

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

void VisionAttentionWeights::bind(WeightLoader& ld, const std::string& p, int64_t D) {
  wq = ld.matrix(p + "attn_q.weight", D, D);
  wk = ld.matrix(p + "attn_k.weight", D, D);
  wv = ld.matrix(p + "attn_v.weight", D, D);
  wo = ld.matrix(p + "attn_out.weight", D, D);
  bq = ld.vector(p + "attn_q.bias", D);
  bk = ld.vector(p + "attn_k.bias", D);
  bv = ld.vector(p + "attn_v.bias", D);
  bo = ld.vector(p + "attn_out.bias", D);
}

SiglipEncoder::SiglipEncoder(std::shared_ptr<GgufFile> file, VisionConfig config, int n_threads)
    : pool_(std::make_shared<ThreadPool>(n_threads)), loader_(*file) {
  file_ = std::move(file);
  config_ = std::move(config);
  const VisionConfig& c = config_;
  const int64_t D = c.n_embd, F = c.n_ff, P = c.patch_size;
  WeightLoader& ld = loader_;
  patch_ = patch_matrix(3 * P * P, D);
  patch_b_ = ld.vector("v.patch_embd.bias", D);
  pos_ = ld.table("v.position_embd.weight", D, c.n_patches());
  layers_.resize(static_cast<size_t>(c.n_layer));
  for (int il = 0; il < c.n_layer; ++il) {
    Layer& l = layers_[static_cast<size_t>(il)];
    const std::string p = "v.blk." + std::to_string(il) + ".";
    l.ln1_w = ld.vector(p + "ln1.weight", D);
    l.ln1_b = ld.vector(p + "ln1.bias", D);
    l.ln2_w = ld.vector(p + "ln2.weight", D);
    l.ln2_b = ld.vector(p + "ln2.bias", D);
    l.bind(ld, p, D);
    l.up = ld.matrix(p + "ffn_up.weight", D, F);
    l.b_up = ld.vector(p + "ffn_up.bias", F);
    l.down = ld.matrix(p + "ffn_down.weight", F, D);
    l.b_down = ld.vector(p + "ffn_down.bias", D);
  }
  post_w_ = ld.vector("v.post_ln.weight", D);
  post_b_ = ld.vector("v.post_ln.bias", D);
}

void SiglipEncoder::finish_loading(const std::vector<Matrix*>& projector) {
  const VisionConfig& c = config_;
  owned_ = std::move(loader_.owned());
  std::vector<Matrix*> mats;
  for (Layer& l : layers_)
    for (Matrix* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.up, &l.down}) mats.push_back(m);
  mats.insert(mats.end(), projector.begin(), projector.end());
  packed_ = pack_weights(mats, *pool_);
  const int nt = pool_->size();
  for (Layer& l : layers_) {
    l.qkv = plan_matmul({&l.wq, &l.wk, &l.wv}, nt, ColumnOrder::Any);
    l.out = plan_matmul({&l.wo}, nt, ColumnOrder::Any);
    l.fc1 = plan_matmul({&l.up}, nt, ColumnOrder::Any);
    l.fc2 = plan_matmul({&l.down}, nt, ColumnOrder::Any);
  }
  patch_plan_ = plan_matmul({&patch_}, nt, ColumnOrder::Any);
  int64_t widest = std::max<int64_t>({c.n_embd, c.n_ff, 3LL * c.patch_size * c.patch_size});
  for (const Matrix* m : projector) widest = std::max(widest, m->n_in);
  act_.reserve(c.n_patches(), widest);
  ones_.assign(static_cast<size_t>(c.n_ff), 1.0f);
}

void SiglipEncoder::encode(const float* pixels, int height, int width, float* out) {
  n_tokens_for(height, width);  // the size checked
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
  pool_->parallel_for(0, T, [&](int64_t t, int) { kernels::active().add_f32(pos_.data + t * D, x.data() + t * D, D); });
  for (const Layer& l : layers_) {
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
    run_matmul_blocked(*pool_, l.qkv, ops, 3, T);
    add_bias(*pool_, q.data(), l.bq, T);
    add_bias(*pool_, k.data(), l.bk, T);
    add_bias(*pool_, v.data(), l.bv, T);
    vision_attention(*pool_, q.data(), k.data(), v.data(), attn.data(), T, D, c.n_head, nullptr, scratch_);
    linear(l.wo, l.out, attn.data(), T, h.data(), l.bo);
    add_rows(*pool_, h.data(), x.data(), T * D);
    norm_rows(x.data(), l.ln2_w, l.ln2_b, h.data(), T);
    linear(l.up, l.fc1, h.data(), T, ff.data(), l.b_up);
    pool_->parallel_for(0, T, [&](int64_t t, int) {
      float* r = ff.data() + t * F;
      kernels::active().gelu_mul(r, ones_.data(), r, F);  // GELU (tanh) × 1
    });
    linear(l.down, l.fc2, ff.data(), T, h.data(), l.b_down);
    add_rows(*pool_, h.data(), x.data(), T * D);
  }
  norm_rows(x.data(), post_w_, post_b_, h.data(), T);
  project(h.data(), out);
}

// v.patch_embd.weight {P, P, 3, D}: D rows of 3 P P values, [channel][row][column].
Matrix SiglipEncoder::patch_matrix(int64_t n_in, int64_t n_out) {
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

void SiglipEncoder::linear(const Matrix& w, const MatmulPlan& plan, const float* x, int64_t rows, float* y,
                           const Vector& b) {
  linear_blocked(*pool_, act_, w, plan, x, rows, y, b);
}

void run_matmul_blocked(ThreadPool& pool, const MatmulPlan& plan, const MatmulOperand* ops, int n_ops, int64_t rows) {
  // 512 KiB of inputs a block (half a Zen 4 L2): the 2-layer 896 px tower at 1 thread took 5.4-6.4
  // CPU s with 64 KiB .. 1 MiB blocks alike, 10.7 s unblocked (load 6-7, bench/README.md)
  constexpr int64_t budget = 512 * 1024;
  size_t row_bytes_max = 1;
  for (int i = 0; i < n_ops; ++i) row_bytes_max = std::max(row_bytes_max, ops[i].x_stride);
  const int64_t block = std::max<int64_t>(16, static_cast<int64_t>(budget / static_cast<int64_t>(row_bytes_max)) / 16 * 16);
  const int64_t n_blocks = (rows + block - 1) / block, n_chunks = static_cast<int64_t>(plan.chunks.size());
  // one pool region: tasks (block, chunk), block-major, so the threads share a block's inputs
  pool.run(n_blocks * n_chunks, [&](int64_t task, int) {
    const int64_t r0 = (task / n_chunks) * block, n = std::min(block, rows - r0);
    const MatmulChunk& c = plan.chunks[static_cast<size_t>(task % n_chunks)];
    const MatmulOperand& op = ops[c.part];
    matmul_rows(*op.w, c.r0, c.r1, static_cast<const uint8_t*>(op.x) + static_cast<size_t>(r0) * op.x_stride,
                op.x_stride, n, op.y + r0 * op.ldy, op.ldy, plan.order);
  });
}

void linear_blocked(ThreadPool& pool, ActivationQuantizer& act, const Matrix& w, const MatmulPlan& plan,
                    const float* x, int64_t rows, float* y, const Vector& b) {
  act.reset(x, rows, w.n_in, w.n_in);
  MatmulOperand op;
  op.w = &w;
  op.x = act.get(pool, matmul_input_type(w), &op.x_stride);
  op.y = y;
  op.ldy = w.n_out;
  run_matmul_blocked(pool, plan, &op, 1, rows);
  add_bias(pool, y, b, rows);
}

void SiglipEncoder::norm_rows(const float* x, const Vector& w, const Vector& b, float* y, int64_t rows) {
  const int64_t D = config_.n_embd;
  const float eps = config_.eps;
  pool_->parallel_for(0, rows, [&](int64_t t, int) { layer_norm(x + t * D, w, b, y + t * D, D, eps); });
}

void add_bias(ThreadPool& pool, float* y, const Vector& b, int64_t rows) {
  if (!b) return;
  pool.parallel_for(0, rows, [&](int64_t t, int) { kernels::active().add_f32(b.data, y + t * b.n, b.n); });
}

void add_rows(ThreadPool& pool, const float* src, float* dst, int64_t n) {
  constexpr int64_t kPart = 1 << 14;
  pool.parallel_for(0, (n + kPart - 1) / kPart, [&](int64_t i, int) {
    const int64_t a = i * kPart, e = std::min(n, a + kPart);
    kernels::active().add_f32(src + a, dst + a, e - a);
  });
}

void vision_attention(ThreadPool& pool, const float* q, const float* k, const float* v, float* out, int64_t T,
                      int64_t D, int64_t H, const int32_t* group, AttentionScratch& sc) {
  const int hd = static_cast<int>(D / H);
  NoncausalAttention a{q, D, k, D, v, D, out, D, static_cast<int>(H), static_cast<int>(H), hd, hd,
                       1.0f / std::sqrt(static_cast<float>(hd)), group};
  noncausal_attention(pool, a, {AttentionSpan{0, T}}, sc);
}

}  // namespace edgellm
