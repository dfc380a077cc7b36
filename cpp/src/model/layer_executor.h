// The seam between the model's forward pass and an accelerator. A LayerExecutor takes over the
// last layers of the model: DecoderModel runs layers [0, first_layer()) on the CPU, hands the
// residual stream to run(), which computes layers [first_layer(), n_layer) in place, and then
// runs the output head on the CPU. An executor runs the same layer definition as the CPU
// (run_layer of model/architecture.h, driven by the architecture's LayerSpec) over its own
// building blocks. It keeps its layers' weights and their KV pages in its own memory (same
// page ids as the host KVCache, whose tables stay the one truth).
//
// The model does not know the accelerators: whoever loads it injects a factory
// (LoadOptions::make_executor; backend/gpu_offload.h's make_gpu_executor for the GPU), called
// once the layers are bound when n_gpu_layers != 0.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kv/kv_cache.h"
#include "model/architecture.h"
#include "model/batch.h"
#include "model/model_config.h"

namespace edgellm {

class LayerExecutor {
 public:
  virtual ~LayerExecutor() = default;
  // Layers [first_layer(), n_layer) run here.
  virtual int first_layer() const = 0;
  // "CUDA NVIDIA H100 (sm_90): layers 12..29"
  virtual std::string describe() const = 0;
  // x: the batch's residual stream [batch.size()][n_embd] on the host, after layer
  // first_layer() - 1; replaced by the stream after the last layer. Same contract as
  // Model::forward for the KV cache (pages reserved by the caller).
  virtual void run(const Batch& batch, KVCache& kv, float* x) = 0;
};

struct OffloadRequest {
  const ModelConfig* config = nullptr;
  const LayerSpec* layer = nullptr;          // the architecture's layer, run by run_layer
  const std::vector<LayerWeights>* layers = nullptr;
  const float* rope_freq_factors = nullptr;  // select_rope_factors (model/architecture.h), or nullptr
  int n_gpu_layers = 0;                      // -1: all
  int max_batch_tokens = 512;
};

// An executor for the request's last layers, or nullptr when none can take them (the model
// then runs wholly on the CPU).
using ExecutorFactory = std::function<std::unique_ptr<LayerExecutor>(const OffloadRequest&)>;

}  // namespace edgellm
