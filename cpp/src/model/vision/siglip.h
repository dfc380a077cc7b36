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
// attention is two matmuls per (head, block of queries) through the float kernels.
#pragma once
#include <memory>
#include <vector>

#include "common/thread_pool.h"
#include "model/parallel_matmul.h"
#include "model/vision/vision_encoder.h"
#include "model/weight_packing.h"
#include "model/weights.h"

namespace edgellm {

// `n_out` rows of `n_in` elements of `type` at `data` (row_bytes apart) as a matrix the kernels take.
Matrix matrix_at(const TensorInfo* info, DType type, const void* data, int64_t n_in, int64_t n_out);

class SiglipEncoder : public VisionEncoder {
 public:
  // pixels -> the tower's hidden states (n_patches x n_embd) -> project().
  void encode(const float* pixels, float* out) final;

 protected:
  // Binds the tower's tensors through loader_; the subclass binds its projector's, then calls
  // finish_loading with the projector's matrices (packed with the tower's).
  SiglipEncoder(std::shared_ptr<GgufFile> file, VisionConfig config, int n_threads);
  void finish_loading(const std::vector<Matrix*>& projector);
  // hidden: n_patches rows of n_embd (after the post LayerNorm), free to overwrite; out: n_tokens
  // rows of n_embd_text.
  virtual void project(float* hidden, float* out) = 0;

  void linear(const Matrix& w, const MatmulPlan& plan, const float* x, int64_t rows, float* y, const Vector& b);
  MatmulPlan plan(const Matrix& w) const { return plan_matmul({&w}, pool_->size()); }

  std::shared_ptr<ThreadPool> pool_;
  WeightLoader loader_;

 private:
  struct Layer {
    Vector ln1_w, ln1_b, ln2_w, ln2_b;
    Matrix wq, wk, wv, wo, up, down;
    Vector bq, bk, bv, bo, b_up, b_down;
    MatmulPlan qkv, out, fc1, fc2;
  };
  Matrix patch_matrix(int64_t n_in, int64_t n_out);
  void add_bias(float* y, const Vector& b, int64_t rows);
  void add_rows(const float* src, float* dst, int64_t n);
  void norm_rows(const float* x, const Vector& w, const Vector& b, float* y, int64_t rows);
  void attention(const float* q, const float* k, const float* v, float* out);

  Matrix patch_;
  Vector patch_b_, pos_, post_w_, post_b_;
  std::vector<Layer> layers_;
  std::vector<std::unique_ptr<float[]>> owned_;
  PackedWeights packed_;
  MatmulPlan patch_plan_;
  ActivationQuantizer act_;
  std::vector<float> kh_, vt_, scores_;
};

}  // namespace edgellm
