// SmolVLM / Idefics3's vision input (projector type "idefics3"; transformers' Idefics3VisionTransformer
// + Idefics3Connector, llama.cpp's clip.cpp build_siglip with build_patch_merge_permute): the SigLIP
// tower (siglip.h) over one tile, then the pixel shuffle — token (ty, tx) of the (side / s)^2 is the
// concatenation, sub-row i then sub-column j, of patches (ty s + i, tx s + j) — and the connector's
// bias-free linear mm.model.fc ({s^2 n_embd, text width}: one row a text dimension).
#include <cstring>
#include <vector>

#include "model/vision/siglip.h"

namespace edgellm {
namespace {

class Idefics3Vision final : public SiglipEncoder {
 public:
  Idefics3Vision(std::shared_ptr<GgufFile> file, VisionConfig config, int n_threads)
      : SiglipEncoder(std::move(file), std::move(config), n_threads) {
    const int64_t s = config_.scale_factor;
    fc_ = loader_.matrix("mm.model.fc.weight", s * s * config_.n_embd, config_.n_embd_text);
    finish_loading({&fc_});
    fc_plan_ = plan(fc_);
  }

 private:
  void project(float* h, float* out) override {
    const VisionConfig& c = config_;
    const int64_t D = c.n_embd, s = c.scale_factor, side = c.patches_side(), tside = side / s;
    const int64_t n_tok = tside * tside;
    shuffled_.resize(static_cast<size_t>(n_tok * s * s * D));
    pool_->parallel_for(0, n_tok, [&](int64_t t, int) {
      const int64_t ty = t / tside, tx = t % tside;
      float* dst = shuffled_.data() + t * s * s * D;
      for (int64_t i = 0; i < s; ++i)
        for (int64_t j = 0; j < s; ++j)
          std::memcpy(dst + (i * s + j) * D, h + ((ty * s + i) * side + tx * s + j) * D, sizeof(float) * D);
    });
    linear(fc_, fc_plan_, shuffled_.data(), n_tok, out, Vector{});
  }

  Matrix fc_;
  MatmulPlan fc_plan_;
  std::vector<float> shuffled_;
};

}  // namespace

std::unique_ptr<VisionEncoder> make_idefics3_vision(std::shared_ptr<GgufFile> file, VisionConfig config,
                                                    int n_threads) {
  return std::make_unique<Idefics3Vision>(std::move(file), std::move(config), n_threads);
}

}  // namespace edgellm
