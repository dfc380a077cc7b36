// A model for engine tests whose logits are a hash of the token ids it reads back from the KV
// cache: any mistake in paging (a wrong, missing or shared-but-overwritten page, a bad prefix
// match, a window page dropped too early) changes the logits, so outputs differ from
// `reference_greedy`, which computes the same function straight from the token list.
#pragma once
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/engine_model.h"

namespace fake {

constexpr int32_t kVocab = 48;
constexpr int32_t kEog = 1;

inline uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Logits after the history h (hash of all tokens so far).
inline void logits_for(uint64_t h, float* out) {
  for (int32_t v = 0; v < kVocab; ++v) out[v] = static_cast<float>(mix(h * 131 + v) % 10007) / 1000.0f;
  out[kEog] -= 4.0f;  // rare end-of-generation, so sequences run long enough to test paging
}

// Hidden state (what embeddings pool) after the history h.
constexpr int32_t kHidden = 8;
inline void hidden_for(uint64_t h, float* out) {
  for (int32_t d = 0; d < kHidden; ++d) out[d] = static_cast<float>(mix(h * 977 + d) % 2001) / 1000.0f - 1.0f;
}

inline uint64_t extend(uint64_t h, int32_t token) { return mix(h ^ (static_cast<uint64_t>(token) + 7)); }

inline int32_t argmax(const float* l) {
  int32_t b = 0;
  for (int32_t v = 1; v < kVocab; ++v)
    if (l[v] > l[b]) b = v;
  return b;
}

// A prompt of n pseudo-random non-special tokens (salt picks the sequence).
inline std::vector<int32_t> make_prompt(int32_t n, int32_t salt) {
  std::vector<int32_t> p;
  for (int32_t i = 0; i < n; ++i) p.push_back(2 + static_cast<int32_t>(mix(i * 31 + salt) % (kVocab - 2)));
  return p;
}

// Greedy continuation computed from the token list alone (stops at max_tokens or EOG).
inline std::vector<int32_t> reference_greedy(const std::vector<int32_t>& prompt, int32_t max_tokens) {
  uint64_t h = 0;
  for (int32_t t : prompt) h = extend(h, t);
  std::vector<int32_t> out;
  float l[kVocab];
  while (static_cast<int32_t>(out.size()) < max_tokens) {
    logits_for(h, l);
    const int32_t t = argmax(l);
    out.push_back(t);
    if (t == kEog) break;
    h = extend(h, t);
  }
  return out;
}

class FakeModel : public edgellm::EngineModel {
 public:
  // window > 0: layer 0 attends fully, layers 1..window_layers over the last `window` tokens
  // (window_layers > 1 gives a Gemma-like geometry: a window page costs more than a full one).
  explicit FakeModel(int32_t window = 0, int32_t context = 1024, int32_t window_layers = 1)
      : window_(window), context_(context), window_layers_(window_layers) {}
  int32_t n_vocab() const override { return kVocab; }
  int32_t context_length() const override { return context_; }
  edgellm::KVCacheConfig kv_geometry() const override {
    edgellm::KVCacheConfig c;
    c.n_layers = window_ > 0 ? 1 + window_layers_ : 1;
    c.n_kv_heads = 1;
    c.head_dim_k = 32;
    c.head_dim_v = 32;
    c.layer_window.assign(c.n_layers, 0);
    for (int l = 1; l < c.n_layers; ++l) c.layer_window[l] = window_;
    return c;
  }

  int32_t n_embd() const override { return kHidden; }
  int32_t pooling_type() const override { return pooling_type_; }
  void set_pooling_type(int32_t p) { pooling_type_ = p; }

  void forward(const edgellm::Batch& b, edgellm::KVCache& kv, float* logits, float* hidden) override {
    ++calls;
    tokens_computed += b.size();
    if (b.size() > max_batch_seen) max_batch_seen = b.size();
    if (kv.dtype() != edgellm::DType::F32) throw std::runtime_error("fake model needs an F32 KV cache");
    for (int32_t i = 0; i < b.size(); ++i)
      for (int l = 0; l < kv.config().n_layers; ++l) {
        float* dst = slot(kv, l, b.seq[i], b.pos[i]);
        if (!dst) throw std::runtime_error("writing into a dropped page");
        *dst = static_cast<float>(b.token[i]);
      }
    int32_t hrow = 0;
    for (int32_t i = 0; i < b.size(); ++i) {
      if (!b.wants_hidden(i)) continue;
      if (!hidden) throw std::runtime_error("hidden rows wanted but no buffer");
      uint64_t h = 0;
      for (int32_t p = 0; p <= b.pos[i]; ++p) h = extend(h, static_cast<int32_t>(*slot(kv, 0, b.seq[i], p)));
      hidden_for(h, hidden + static_cast<size_t>(hrow) * kHidden);
      ++hrow;
      ++hidden_rows;
    }
    int32_t row = 0;
    for (int32_t i = 0; i < b.size(); ++i) {
      if (!b.want_logits[i]) continue;
      uint64_t h = 0;
      for (int32_t p = 0; p <= b.pos[i]; ++p) h = extend(h, static_cast<int32_t>(*slot(kv, 0, b.seq[i], p)));
      if (window_ > 0)  // the window layer must still hold the last `window` keys, equal to layer 0's
        for (int32_t p = b.pos[i] - window_ + 1; p <= b.pos[i]; ++p) {
          if (p < 0) continue;
          const float* w = slot(kv, 1, b.seq[i], p);
          if (!w || *w != *slot(kv, 0, b.seq[i], p))
            throw std::runtime_error("window page missing or wrong at position " + std::to_string(p));
        }
      logits_for(h, logits + static_cast<size_t>(row) * kVocab);
      ++row;
    }
  }

  int64_t calls = 0, tokens_computed = 0, hidden_rows = 0;
  int32_t max_batch_seen = 0;

 private:
  static float* slot(edgellm::KVCache& kv, int layer, int32_t seq, int32_t pos) {
    const auto& t = kv.page_table(layer, seq);
    const int32_t idx = pos / kv.page_size();
    if (idx >= static_cast<int32_t>(t.size())) throw std::runtime_error("position " + std::to_string(pos) + " not reserved");
    if (t[idx] < 0) return nullptr;
    return reinterpret_cast<float*>(kv.k_head(layer, t[idx], 0) + (pos % kv.page_size()) * kv.k_row_bytes());
  }
  int32_t window_, context_, window_layers_;
  int32_t pooling_type_ = -1;
};

// Token t reads as a lowercase letter; 2..5 read as multi-letter words so stop strings can span tokens.
class FakeVocab : public edgellm::EngineVocab {
 public:
  std::vector<int32_t> eog_tokens() const override { return {kEog}; }
  std::string piece(int32_t t) const override {
    static const char* words[] = {"", "", "ab", "cd", "ef", "gh"};
    if (t >= 2 && t <= 5) return words[t];
    return std::string(1, static_cast<char>('a' + t % 26));
  }
};

}  // namespace fake
