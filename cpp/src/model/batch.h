// The one batch layout the engine uses everywhere: a flat list of tokens, each with its
// position and sequence slot. Single-stream decode is a batch of one; prefill is many tokens of
// one sequence; serving mixes both. Positions of a sequence within a batch are consecutive and
// continue where that sequence's KV cache ends.
#pragma once
#include <cstdint>
#include <vector>

namespace edgellm {

struct LoraMix;

struct Batch {
  std::vector<int32_t> token;
  std::vector<int32_t> pos;
  std::vector<int32_t> seq;            // KV cache sequence slot
  std::vector<uint8_t> want_logits;    // 1: produce a logits row for this token
  std::vector<uint8_t> want_hidden;    // 1: produce its final-norm hidden state (embeddings); may be empty
  // 1: a speculative verification row, computed bit for bit as a decode step of its position
  // would (its attention block runs under kernels::PagedAttentionArgs::exact_rows).
  std::vector<uint8_t> exact_row;
  // The adapters each token runs with (model/lora.h); null or an empty mix: the base alone. May be
  // empty (no token of the batch uses an adapter). The mixes outlive the forward pass.
  std::vector<const LoraMix*> lora;
  // Image rows (vision input; both empty when the batch has none): embd[t] non-null gives token
  // t's input embedding (n_embd floats, used as is: no embedding scale) instead of its token's row;
  // block_last[t] >= 0 makes t attend bidirectionally inside its image block, to every position
  // of its sequence up to block_last[t] (the block's last position, in the same batch); -1: an
  // image row that attends causally, as text.
  std::vector<const float*> embd;
  std::vector<int32_t> block_last;
  // M-RoPE positions (t, h, w) per token (3 a token), or empty: every token's are (pos, pos, pos).
  std::vector<int32_t> rope_pos;

  int32_t size() const { return static_cast<int32_t>(token.size()); }
  bool empty() const { return token.empty(); }
  void clear() {
    token.clear();
    pos.clear();
    seq.clear();
    want_logits.clear();
    want_hidden.clear();
    exact_row.clear();
    lora.clear();
    embd.clear();
    block_last.clear();
    rope_pos.clear();
  }
  // Tokens [from, size()) run with `mix` (the scheduler, after adding a sequence's tokens).
  void set_lora(int32_t from, const LoraMix* mix) {
    if (!mix && lora.empty()) return;
    lora.resize(token.size(), nullptr);
    for (size_t t = static_cast<size_t>(from); t < token.size(); ++t) lora[t] = mix;
  }
  const LoraMix* lora_of(int32_t t) const { return static_cast<size_t>(t) < lora.size() ? lora[t] : nullptr; }
  void add(int32_t tok, int32_t position, int32_t seq_slot, bool logits, bool hidden = false, bool exact = false) {
    token.push_back(tok);
    pos.push_back(position);
    seq.push_back(seq_slot);
    want_logits.push_back(logits ? 1 : 0);
    want_hidden.push_back(hidden ? 1 : 0);
    exact_row.push_back(exact ? 1 : 0);
    if (!embd.empty()) {  // a batch with image rows: the others have none
      embd.push_back(nullptr);
      block_last.push_back(-1);
    }
    if (!rope_pos.empty()) rope_pos.insert(rope_pos.end(), {position, position, position});
  }
  // Gives the last token added its M-RoPE positions (see rope_pos).
  void set_rope_pos(const int32_t* p3) {
    if (rope_pos.empty())
      for (size_t t = 0; t < pos.size(); ++t) rope_pos.insert(rope_pos.end(), {pos[t], pos[t], pos[t]});
    std::copy(p3, p3 + 3, rope_pos.end() - 3);
  }
  // Makes the last token added an image row (see embd / block_last).
  void set_image_row(const float* row, int32_t last) {
    embd.resize(token.size(), nullptr);
    block_last.resize(token.size(), -1);
    embd.back() = row;
    block_last.back() = last;
  }
  const float* embedding_of(int32_t t) const { return static_cast<size_t>(t) < embd.size() ? embd[t] : nullptr; }
  int32_t block_last_of(int32_t t) const { return static_cast<size_t>(t) < block_last.size() ? block_last[t] : -1; }
  bool is_exact_row(int32_t t) const { return static_cast<size_t>(t) < exact_row.size() && exact_row[t]; }
  bool wants_hidden(int32_t t) const { return static_cast<size_t>(t) < want_hidden.size() && want_hidden[t]; }
  int32_t n_hidden_outputs() const {
    int32_t n = 0;
    for (uint8_t w : want_hidden) n += w;
    return n;
  }
  int32_t n_outputs() const {
    int32_t n = 0;
    for (uint8_t w : want_logits) n += w;
    return n;
  }
};

}  // namespace edgellm
