// Gemma 3's vision input (projector type "gemma3"; transformers' SiglipVisionModel +
// Gemma3MultiModalProjector, llama.cpp's clip.cpp build_siglip): the SigLIP tower (siglip.h), then
// the patches average-pooled scale x scale (row-major soft tokens), RMS norm with
// mm.soft_emb_norm (the converter has added Gemma's +1), times mm.input_projection ({text width,
// vision width} as stored: x · W, so it is transposed once at load).
#include <algorithm>
#include <vector>

#include "common/errors.h"
#include "kernels/kernels.h"
#include "model/vision/siglip.h"
#include "quant/quant.h"

namespace edgellm {
namespace {

class Gemma3Vision final : public SiglipEncoder {
 public:
  Gemma3Vision(std::shared_ptr<GgufFile> file, VisionConfig config, int n_threads)
      : SiglipEncoder(std::move(file), std::move(config), n_threads) {
    soft_norm_ = loader_.vector("mm.soft_emb_norm.weight", config_.n_embd);
    bind_projection();
    finish_loading({});
    proj_plan_ = plan(proj_);
  }

 private:
  void project(float* h, float* out) override {
    const VisionConfig& c = config_;
    const int64_t D = c.n_embd;
    const int side = c.patches_side();
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
          const float* src = h + ((ty * k_pool + dy) * side + tx * k_pool + dx) * D;
          for (int64_t i = 0; i < D; ++i) dst[i] += src[i];
        }
      for (int64_t i = 0; i < D; ++i) dst[i] *= inv;
      kernels::active().rmsnorm(dst, soft_norm_.data, dst, D, c.eps);
    });
    linear(proj_, proj_plan_, pooled.data(), n_tok, out, Vector{});
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

  Vector soft_norm_;
  Matrix proj_;
  MatmulPlan proj_plan_;
  std::vector<float> proj_data_;
};

}  // namespace

std::unique_ptr<VisionEncoder> make_gemma3_vision(std::shared_ptr<GgufFile> file, VisionConfig config, int n_threads) {
  return std::make_unique<Gemma3Vision>(std::move(file), std::move(config), n_threads);
}

}  // namespace edgellm
