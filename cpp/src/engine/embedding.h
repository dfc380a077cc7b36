// Embedding requests: a prompt is prefilled like any other, but instead of sampling, the
// final-norm hidden states of its tokens (the LM head's input) are pooled into one vector
// (or kept per token) and normalised. Pooling types and normalisation follow llama.cpp's
// numbering (llama_pooling_type, embd_normalize) so GGUF metadata and server fields map 1:1.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace edgellm {

enum class Pooling : int32_t {
  Unspecified = -1,  // the model's <arch>.pooling_type, else Mean
  None = 0,          // one vector per token
  Mean = 1,
  Cls = 2,           // the first token's
  Last = 3,          // the last token's
  Rank = 4,          // a reranker's classification head on the first token's state (cross-encoders)
                     // or the last token's (decoder rerankers: Qwen3-Reranker's yes/no head)
};

const char* pooling_name(Pooling p);

struct EmbeddingParams {
  int32_t pooling = -1;    // Pooling; -1 = the model's
  int32_t normalize = 2;   // -1 none, 0 max-abs to the int16 range, 1 taxicab, 2 euclidean, >2 p-norm
};

// Normalises v[0..n) in place the way llama.cpp's embd_normalize does (a zero vector stays zero).
void normalize_embedding(float* v, int64_t n, int32_t norm);

// Whether pooling `p` needs the hidden state of prompt position `pos` (of n_prompt).
inline bool pooling_uses_position(Pooling p, int32_t pos, int32_t n_prompt) {
  switch (p) {
    case Pooling::Cls:
    case Pooling::Rank: return pos == 0;
    case Pooling::Last: return pos == n_prompt - 1;
    default: return pos < n_prompt;
  }
}

// One embedding sequence's pooled state: fed rows in position order, possibly over several
// steps (chunked prefill); reset when the sequence is preempted and recomputed.
class EmbeddingPool {
 public:
  EmbeddingPool() = default;
  // rank_last: Pooling::Rank reads the last position (a causal model's), not the first.
  EmbeddingPool(Pooling p, int32_t normalize, int32_t n_embd, bool rank_last = false)
      : pooling_(p), normalize_(normalize), n_embd_(n_embd), rank_last_(rank_last) {}
  Pooling pooling() const { return pooling_; }
  // Whether the hidden state of prompt position `pos` (of n_prompt) is pooled.
  bool uses_position(int32_t pos, int32_t n_prompt) const {
    return pooling_ == Pooling::Rank && rank_last_ ? pos == n_prompt - 1 : pooling_uses_position(pooling_, pos, n_prompt);
  }
  void reset();
  // `rows` hidden states of consecutive used positions.
  void add(const float* rows, int32_t n_rows);
  // The result: [1][n_embd] pooled, or [n_rows][n_embd] for Pooling::None; each row normalised.
  std::vector<float> finish(int32_t* n_rows);

 private:
  Pooling pooling_ = Pooling::Mean;
  int32_t normalize_ = 2;
  int32_t n_embd_ = 0;
  bool rank_last_ = false;
  int32_t count_ = 0;
  std::vector<double> sum_;   // Mean
  std::vector<float> rows_;   // None (all rows), Cls / Last (the one row)
};

}  // namespace edgellm
