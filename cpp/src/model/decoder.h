// The decoder-only transformer every supported architecture is: token embeddings, n_layer
// layers (run_layer with the architecture's LayerSpec), final norm, output head. Owns the bound weights,
// the load-time matmul plans, the RoPE variants and the forward scratch.
#pragma once
#include <memory>
#include <mutex>
#include <vector>

#include "model/architecture.h"
#include "model/forward_pass.h"
#include "model/layer_executor.h"
#include "model/model.h"
#include "model/rope.h"
#include "model/weight_packing.h"

namespace edgellm {

class DecoderModel final : public Model {
 public:
  DecoderModel(std::shared_ptr<GgufFile> file, const Architecture& arch, ModelConfig config,
               const LoadOptions& opts);
  ~DecoderModel() override;

  void forward(const Batch& batch, KVCache& kv, float* logits, float* hidden = nullptr) override;
  void run_tasks(int64_t n_tasks, const std::function<void(int64_t, int)>& fn) override;
  std::shared_ptr<const LoraAdapter> load_lora(const std::string& path) override;
  // A decoder reranker (Qwen3-Reranker as llama.cpp converts it): cls.output.weight holds the LM
  // head's rows of its answer tokens ("yes", "no"); the scores are their softmax over the last
  // token's final-norm state, as llama.cpp's rank pooling gives them (score 0 = P(yes)).
  int32_t rank_outputs() const override { return cls_out_ ? static_cast<int32_t>(cls_out_.n_out) : 0; }
  void rank(const float* last_hidden, float* scores) override;

 private:
  void validate(const Batch& batch, KVCache& kv, const float* logits, const float* hidden) const;
  void embed(const Batch& batch, float* x);
  void output_hidden(const Batch& batch, const float* x, float* hidden);
  void output_head(const Batch& batch, const float* x, float* logits);

  const Architecture& arch_;
  Matrix token_embd_, output_, cls_out_;
  Vector output_norm_;
  RopeFactors rope_factors_;
  std::vector<LayerWeights> layers_;
  std::vector<LayerPlans> plans_;
  MatmulPlan output_plan_;
  Rope rope_[2];  // global, local
  std::vector<std::unique_ptr<float[]>> owned_;  // converted copies of non-F32 vectors
  PackedWeights packed_;  // row-interleaved copies of the CPU layers' matrices
  ForwardScratch scratch_;
  int scratch_page_size_ = 0;
  std::unique_ptr<LayerExecutor> gpu_;  // the last layers, when offloaded
  std::mutex forward_mutex_;  // one forward pass at a time: they share the scratch
};

}  // namespace edgellm
