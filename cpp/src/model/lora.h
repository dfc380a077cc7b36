// LoRA adapters (docs/formats.md §1.8): low-rank additions to a base model's projection matrices,
// chosen per sequence. An adapter file is a GGUF as llama.cpp's convert_lora_to_gguf.py writes
// it: general.type = "adapter", adapter.type = "lora", adapter.lora.alpha, and for each adapted
// base matrix W (ggml ne {n_in, n_out}) the pair
//
//   <W's tensor name>.lora_a   ne {n_in, r}    (r rows of n_in: A)
//   <W's tensor name>.lora_b   ne {r, n_out}   (n_out rows of r: B)
//
// so that W' = W + scale · B·A, scale = user scale · alpha / r (alpha 0: user scale alone,
// llama.cpp's rule). A fused base tensor (attn_qkv, Phi-3's ffn_up) has one pair; its parts take
// row views of B and share A. The forward pass (model/lora_block.cpp) never merges: the base
// matmul runs once for the whole batch and each sequence's rows add x·Aᵀ·Bᵀ·scale for its own
// adapters, grouped by adapter (Punica / S-LoRA).
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gguf/gguf_file.h"
#include "common/dtype.h"
#include "model/weights.h"

namespace edgellm {

struct LayerWeights;
struct ModelConfig;

// The projections an adapter may touch, in LayerWeights::matrices() order.
enum LoraTarget : int { kLoraQ, kLoraK, kLoraV, kLoraO, kLoraGate, kLoraUp, kLoraDown, kLoraTargets };

// One adapted matrix, in the layout the LoRA kernels read (kernels/lora_kernels.h), packed once
// at load: A as rank rows of n_in elements (a fused tensor's parts share it), B transposed in
// blocks of 16 output rows (this matrix's rows only). F16 when the file's A and B are F16
// (convert_lora_to_gguf.py's default), else F32 (F32 exactly, BF16 and quantized types widened).
struct LoraPair {
  DType type = DType::F32;
  const void* a = nullptr;
  const void* bt = nullptr;
  int64_t n_rank = 0, n_in = 0, n_out = 0;
  float scale = 1.0f;  // alpha / rank (1 without alpha)
  // Its packed bytes (A, when it is the tensor's first part, then Bᵀ): what a forward pass
  // prefetches while the op before it streams the base weights (model/lora_block.cpp).
  const uint8_t* span_begin = nullptr;
  const uint8_t* span_end = nullptr;
  explicit operator bool() const { return a != nullptr; }
  int64_t rank() const { return n_rank; }
};

class LoraAdapter {
 public:
  // Opens `path` and binds its pairs to the base layers `layers` of a model whose
  // general.architecture is `arch` (config `c`). Throws ModelFormatError naming the file and
  // what is wrong: not a LoRA adapter, another architecture, a tensor with no base matrix, a
  // missing half of a pair, a rank or shape mismatch, a type without a matmul kernel, a corrupt
  // file.
  static std::shared_ptr<LoraAdapter> load(const std::string& path, const std::string& arch, const ModelConfig& c,
                                           const std::vector<LayerWeights>& layers);

  const LoraPair& pair(int layer, int target) const { return layers_[static_cast<size_t>(layer)][target]; }
  int n_layers() const { return static_cast<int>(layers_.size()); }
  float alpha() const { return alpha_; }
  int64_t max_rank() const { return max_rank_; }
  int n_pairs() const { return n_pairs_; }
  // The base tensors adapted (their names, in file order).
  const std::vector<std::string>& targets() const { return targets_; }
  // Bytes of its packed pairs (the memory it adds; the file's own pages are only read once).
  size_t bytes() const { return packed_.size(); }
  // A hash of the file's tensor bytes and metadata: prefix-cache pages of sequences with this
  // adapter are keyed by it (also across processes, by the persistent cache).
  uint64_t content_key() const { return key_; }
  const std::string& path() const { return file_->path(); }
  const GgufFile& file() const { return *file_; }
  // The base layers it was bound to: a forward pass runs it only with those.
  const void* base() const { return base_; }

 private:
  std::shared_ptr<GgufFile> file_;
  std::vector<std::array<LoraPair, kLoraTargets>> layers_;
  std::vector<std::string> targets_;
  float alpha_ = 0.0f;
  int64_t max_rank_ = 0;
  int n_pairs_ = 0;
  std::vector<uint8_t> packed_;  // every adapted tensor's A and Bᵀ (LoraPair points into it)
  uint64_t key_ = 0;
  const void* base_ = nullptr;
};

// The adapters one sequence runs with, each at its scale; empty = the base alone.
struct LoraUse {
  std::shared_ptr<const LoraAdapter> adapter;
  float scale = 1.0f;
};

struct LoraMix {
  std::vector<LoraUse> uses;
  // Root of the sequence's prefix-cache hash chain: 0 for the base, else a hash of every
  // (adapter content key, scale), so pages are shared only between equal mixes.
  uint64_t cache_key() const;
  bool empty() const { return uses.empty(); }
};

}  // namespace edgellm
