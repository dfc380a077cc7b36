// Byte-level BPE (tokenizer.ggml.model = "gpt2"): pre-tokenize, map bytes to GPT-2's printable
// codepoints, then merge adjacent symbols by merge rank (lowest first, ties leftmost).
#include "tokenizer/merge_symbols.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace edgellm {
namespace {

class BpeTokenizer final : public Tokenizer {
 public:
  explicit BpeTokenizer(Vocab v) : Tokenizer(std::move(v)) {}

 protected:
  void encode_fragment(std::string_view text, bool, std::vector<int32_t>& out) const override {
    for (const std::string& word : pretokenize(text, vocab_.pre_resolved)) {
      std::string encoded;
      encoded.reserve(word.size() * 2);
      for (unsigned char b : word) encoded += unicode::byte_to_unicode(b);
      encode_word(encoded, out);
    }
  }

 private:
  struct Bigram {
    int32_t rank;
    int32_t left, right;
    size_t n_left, n_right;
    bool operator<(const Bigram& o) const {  // priority_queue top = lowest rank, then leftmost
      return rank > o.rank || (rank == o.rank && left > o.left);
    }
    bool current(const MergeSymbol& l, const MergeSymbol& r) const { return l.n == n_left && r.n == n_right; }
  };

  void encode_word(const std::string& w, std::vector<int32_t>& out) const {
    if (vocab_.ignore_merges) {
      int32_t id = vocab_.find(w);
      if (id != kNoToken) { out.push_back(id); return; }
    }
    std::vector<MergeSymbol> sym = utf8_symbols(w);
    std::priority_queue<Bigram> queue;
    merge_pairs(sym, queue, [&](int32_t l, int32_t r) {
      std::string_view sv(w);
      int32_t rank = vocab_.find_merge(sv.substr(sym[l].start, sym[l].n), sv.substr(sym[r].start, sym[r].n));
      if (rank >= 0) queue.push({rank, l, r, sym[l].n, sym[r].n});
    });
    for (int32_t i = sym.empty() ? -1 : 0; i != -1; i = sym[i].next) {
      std::string_view piece = std::string_view(w).substr(sym[i].start, sym[i].n);
      int32_t id = vocab_.find(piece);
      if (id != kNoToken) { out.push_back(id); continue; }
      // Not in the vocabulary: one token per byte of the (byte-encoded) text, where one exists.
      for (char c : piece) {
        int32_t bid = vocab_.find(std::string_view(&c, 1));
        if (bid != kNoToken) out.push_back(bid);
      }
    }
  }
};

}  // namespace

std::unique_ptr<Tokenizer> make_bpe_tokenizer(Vocab vocab) {
  return std::unique_ptr<Tokenizer>(new BpeTokenizer(std::move(vocab)));
}

}  // namespace edgellm
