// arch "bert" (all-MiniLM, bge, BERT cross-encoders; XLM-RoBERTa as llama.cpp writes it):
// absolute position and token-type embeddings, post-LayerNorm layers with Q/K/V/output biases,
// an erf-GELU FFN, non-causal attention (model/encoder.h). Pooling from bert.pooling_type
// (llama.cpp's numbering: 1 mean, 2 cls, 3 last, 4 rank; read_common_config), mean when absent.
#include "model/encoder.h"

namespace edgellm {

const EncoderArchitecture& bert_architecture() {
  static const EncoderArchitecture arch{"bert", EncoderActivation::GeluErf, /*rotary=*/false, encoder_hparams};
  return arch;
}

}  // namespace edgellm
