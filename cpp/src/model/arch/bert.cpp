// arch "bert" (all-MiniLM, bge, BERT cross-encoders): absolute position and token-type
// embeddings, post-LayerNorm layers with Q/K/V/output biases, an erf-GELU FFN, non-causal
// attention (model/encoder.h). Pooling from bert.pooling_type (llama.cpp's numbering: 1 mean,
// 2 cls, 3 last, 4 rank; read_common_config), mean when absent.
#include "common/errors.h"
#include "model/encoder.h"

namespace edgellm {
namespace {

void bert_hparams(const GgufFile& file, ModelConfig& c) {
  if (auto causal = file.find_bool(arch_key(c, "attention.causal")); causal && *causal)
    throw ModelFormatError(file.path() + ": key " + arch_key(c, "attention.causal") +
                           " = true: a causal bert is not supported");
}

}  // namespace

const EncoderArchitecture& bert_architecture() {
  static const EncoderArchitecture arch{"bert", EncoderActivation::GeluErf, bert_hparams};
  return arch;
}

}  // namespace edgellm
