// arch "qwen2vl" (the text model of Qwen2-VL / Qwen2.5-VL): qwen2's layer with M-RoPE — each
// rotated pair turns by one of the token's (t, h, w) positions, by the sections of
// qwen2vl.rope.dimension_sections (image tokens: their grid row / column; text: all three equal,
// which is plain NEOX RoPE).
#include <string>

#include "common/errors.h"
#include "model/architecture.h"

namespace edgellm {
namespace {

void qwen2vl_hparams(const GgufFile& file, ModelConfig& c) {
  c.rope_type = RopeType::Neox;
  const std::string key = arch_key(c, "rope.dimension_sections");
  const GgufValue* v = file.find(key);
  if (!v || !v->is_array() || v->array_len < 3 || v->array_len > 4 || !v->array_data)
    throw ModelFormatError(file.path() + ": key " + key + " must be an array of 3 or 4 section sizes");
  int sum = 0;
  for (uint64_t i = 0; i < v->array_len; ++i) {
    const double s = v->array_number(i);
    if (!(s >= 0 && s <= 4096)) throw ModelFormatError(file.path() + ": key " + key + " has a section out of range");
    c.rope_sections[i] = static_cast<int>(s);
    sum += c.rope_sections[i];
  }
  if (sum <= 0 || (c.n_rot > 0 && sum > c.n_rot / 2))
    throw ModelFormatError(file.path() + ": key " + key + " sections sum to " + std::to_string(sum) +
                           ", not within the " + std::to_string(c.n_rot / 2) + " rotated pairs");
}

}  // namespace

const Architecture& qwen2vl_architecture() {
  LayerSpec layer;
  layer.qkv_bias = true;
  static const Architecture arch{"qwen2vl", layer, qwen2vl_hparams};
  return arch;
}

}  // namespace edgellm
