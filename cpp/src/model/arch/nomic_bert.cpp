// arch "nomic-bert" (nomic-embed-text v1 / v1.5), as llama.cpp's converter writes it: token and
// token-type embeddings (no position table), rotary positions on Q and K (NEOX halves,
// nomic-bert.rope.freq_base), one fused attn_qkv without biases, an output projection without
// bias, post-LayerNorm layers, a SwiGLU FFN without biases (down(silu(gate x) * up x): nomic's fc12
// is the gate, fc11 the up projection), non-causal attention (model/encoder.h).
#include "model/encoder.h"

namespace edgellm {

const EncoderArchitecture& nomic_bert_architecture() {
  static const EncoderArchitecture arch{"nomic-bert", EncoderActivation::SwiGlu, /*rotary=*/true, encoder_hparams};
  return arch;
}

}  // namespace edgellm
