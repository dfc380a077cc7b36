// The architecture registry. Each supported `general.architecture` has one file under model/
// arch/ (llama.cpp, gemma3.cpp, qwen2.cpp, qwen3.cpp) that says three things about it: which
// hyper-parameters it reads beyond the common ones, which tensors it binds, and what one
// layer computes, written with the building blocks of forward_pass.h.
#pragma once
#include <string>

#include "gguf/gguf_file.h"
#include "model/model_config.h"
#include "model/weights.h"

namespace edgellm {

class ForwardPass;

// Every tensor a layer of a supported architecture may have; absent ones stay empty.
struct LayerWeights {
  Vector attn_norm;
  Matrix wq, wk, wv, wo;
  Vector bq, bk, bv, bo;         // qwen2: Q/K/V biases; llama: optional output bias
  Vector q_norm, k_norm;         // per-head RMS norms before RoPE (gemma3, qwen3)
  Vector post_attn_norm;         // gemma3: on the attention output, before the residual add
  Vector ffn_norm;
  Matrix gate, up, down;
  Vector b_gate, b_up, b_down;   // llama: optional FFN biases
  Vector post_ffn_norm;          // gemma3: on the FFN output, before the residual add
};

struct Architecture {
  const char* name;
  // Completes the config after read_common_config (RoPE flavour, windows, scales); may throw
  // ModelFormatError naming a key.
  void (*hparams)(const GgufFile& file, ModelConfig& config);
  // Binds layer `il`'s tensors ("blk.<il>.*"), shapes checked against the config.
  void (*tensors)(WeightLoader& loader, const ModelConfig& config, int il, LayerWeights& w);
  // One transformer layer: reads and updates the residual stream of `f`.
  void (*layer)(ForwardPass& f, const LayerWeights& w, int il);
};

// nullptr when `name` is not supported.
const Architecture* find_architecture(const std::string& name);
// "gemma3, llama, qwen2, qwen3"
std::string supported_architectures();

// The llama-style attention and FFN tensor set of layer il (attn_norm, attn_q/k/v/output with
// optional biases, ffn_norm, ffn_gate/up/down with optional biases); archs add their extras.
void bind_llama_style_layer(WeightLoader& loader, const ModelConfig& c, int il, LayerWeights& w);
std::string layer_tensor(int il, const char* name);  // "blk.<il>.<name>"

}  // namespace edgellm
