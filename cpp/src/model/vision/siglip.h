// The SigLIP vision tower (transformers' SiglipVisionModel / Idefics3VisionTransformer, llama.cpp's
// clip.cpp build_siglip), shared by the projector types that put their own projection after it
// (gemma3.cpp, idefics3.cpp):
// - patches: a conv of patch_size stride patch_size (v.patch_embd, bound as one matrix over each
//   patch's [channel][row][column] values) + bias + learned position embedding (v.position_embd;
//   position id = patch index, row-major);
// - n_layer pre-norm ViT blocks: LayerNorm (with bias) -> MHA with Q/K/V/out biases, every patch
//   attending to every patch -> residual; LayerNorm -> fc1 -> GELU (tanh) -> fc2 -> residual;
// - post LayerNorm (v.post_ln).
// The tower's matrices (and the projector's, handed to finish_loading) run on the packed kernels
// where their type has one (repacked at load like the text model's), on the encoder's thread pool;
// attention is model/noncausal_attention.h's (vision_attention below).
#pragma once
#include <memory>
#include <vector>

#include "common/thread_pool.h"
#include "model/noncausal_attention.h"
#include "model/parallel_matmul.h"
#include "model/vision/vision_encoder.h"
#include "model/weight_packing.h"
#include "model/weights.h"

namespace edgellm {

// `n_out` rows of `n_in` elements of `type` at `data` (row_bytes apart) as a matrix the kernels take.
Matrix matrix_at(const TensorInfo* info, DType type, const void* data, int64_t n_in, int64_t n_out);

// A tower block's attention projections (v.blk.N.attn_{q,k,v,out}, D x D, with biases).
struct VisionAttentionWeights {
  Matrix wq, wk, wv, wo;
  Vector bq, bk, bv, bo;
  void bind(WeightLoader& ld, const std::string& prefix, int64_t D);
};

// The vision towers' multi-head attention over T rows (q, k, v, out: T x D, H heads of D / H, no
// rotation here): every query attends to every key, or, with `group`, only to the keys of its own
// group (group[t]: Qwen2.5-VL's windows); model/noncausal_attention.h with the image one span.
void vision_attention(ThreadPool& pool, const float* q, const float* k, const float* v, float* out, int64_t T,
                      int64_t D, int64_t H, const int32_t* group, AttentionScratch& scratch);
// run_matmul over `rows` input rows in blocks of tokens whose inputs fit in L2 (the kernels walk
// every input row for each group of weight rows, so a tower's 4096 patch rows at once would
// stream from L3 / DRAM once per weight-row group); each block is one parallel region.
void run_matmul_blocked(ThreadPool& pool, const MatmulPlan& plan, const MatmulOperand* ops, int n_ops, int64_t rows);
// linear() (parallel_matmul.h) through run_matmul_blocked: y = x · wᵀ (+ b on every row).
void linear_blocked(ThreadPool& pool, ActivationQuantizer& act, const Matrix& w, const MatmulPlan& plan,
                    const float* x, int64_t rows, float* y, const Vector& b);
// dst[i] += src[i] for n floats, in parallel parts; y's `rows` rows of b.n += b (nothing when b is empty).
void add_rows(ThreadPool& pool, const float* src, float* dst, int64_t n);
void add_bias(ThreadPool& pool, float* y, const Vector& b, int64_t rows);

class SiglipEncoder : public VisionEncoder {
 public:
  // pixels (an image_size square) -> the tower's hidden states (n_patches x n_embd) -> project().
  void encode(const float* pixels, int height, int width, float* out) final;

 protected:
  // Binds the tower's tensors through loader_; the subclass binds its projector's, then calls
  // finish_loading with the projector's matrices (packed with the tower's).
  SiglipEncoder(std::shared_ptr<GgufFile> file, VisionConfig config, int n_threads);
  void finish_loading(const std::vector<Matrix*>& projector);
  // hidden: n_patches rows of n_embd (after the post LayerNorm), free to overwrite; out: n_tokens
  // rows of n_embd_text.
  virtual void project(float* hidden, float* out) = 0;

  void linear(const Matrix& w, const MatmulPlan& plan, const float* x, int64_t rows, float* y, const Vector& b);
  MatmulPlan plan(const Matrix& w) const { return plan_matmul({&w}, pool_->size(), ColumnOrder::Any); }

  std::shared_ptr<ThreadPool> pool_;
  WeightLoader loader_;

 private:
  struct Layer : VisionAttentionWeights {
    Vector ln1_w, ln1_b, ln2_w, ln2_b;
    Matrix up, down;
    Vector b_up, b_down;
    MatmulPlan qkv, out, fc1, fc2;
  };
  Matrix patch_matrix(int64_t n_in, int64_t n_out);
  void norm_rows(const float* x, const Vector& w, const Vector& b, float* y, int64_t rows);

  Matrix patch_;
  Vector patch_b_, pos_, post_w_, post_b_;
  std::vector<Layer> layers_;
  std::vector<std::unique_ptr<float[]>> owned_;
  PackedWeights packed_;
  MatmulPlan patch_plan_;
  ActivationQuantizer act_;
  AttentionScratch scratch_;
  std::vector<float> ones_;  // n_ff ones: GELU through the kernels' gelu_mul
};

}  // namespace edgellm
