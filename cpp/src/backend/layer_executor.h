// The seam between the model's forward pass and an accelerator. A LayerExecutor takes over the
// last layers of the model: DecoderModel runs layers [0, first_layer()) on the CPU, hands the
// residual stream to run(), which computes layers [first_layer(), n_layer) in place, and then
// runs the output head on the CPU. An executor runs the same layer definition as the CPU
// (run_layer of model/architecture.h, driven by the architecture's LayerSpec) over its own
// building blocks. It keeps its layers' weights and their KV pages in its own memory (same
// page ids as the host KVCache, whose tables stay the one truth).
//
// make_gpu_executor() is compiled into every build: with CUDA off, or with no usable GPU, it
// prints a warning and returns nullptr, and the model runs wholly on the CPU.
#pragma once
#include <cstddef>
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

// Layers that n_gpu_layers asks for on a model of n_layer layers: -1 (or more than n_layer)
// means all. Throws InvalidRequestError for values below -1.
int resolve_gpu_layers(int n_gpu_layers, int n_layer);

// An executor for the last resolve_gpu_layers(...) layers, or nullptr when n_gpu_layers is 0 or
// no GPU can take them (built without CUDA, no device or driver, too little memory, a weight
// type without a GPU kernel); every nullptr for n_gpu_layers != 0 prints a one-line warning
// saying why, ending "running on the CPU".
std::unique_ptr<LayerExecutor> make_gpu_executor(const OffloadRequest& request);

struct GpuStatus {
  bool available = false;
  std::string reason;   // why not, when !available ("built without CUDA", "no CUDA device found", ...)
  std::string device;   // "NVIDIA H100 80GB HBM3 (sm_90)"
  size_t free_bytes = 0, total_bytes = 0;
};
GpuStatus gpu_status();

}  // namespace edgellm
