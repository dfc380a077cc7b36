// SentencePiece-style tokenizer (tokenizer.ggml.model = "llama"): spaces become U+2581, then
// adjacent symbols merge by the merged token's score (highest first, ties leftmost); final
// symbols that are not tokens are split back along their merges, down to <0xXX> byte tokens.
#include <unordered_map>

#include "tokenizer/merge_symbols.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace edgellm {
namespace {

class SpmTokenizer final : public Tokenizer {
 public:
  explicit SpmTokenizer(Vocab v) : Tokenizer(std::move(v)) {}

 protected:
  void encode_fragment(std::string_view raw, bool after_special, std::vector<int32_t>& out) const override {
    std::string text;
    text.reserve(raw.size() + 8);
    if (vocab_.add_space_prefix && after_special) text += "\xE2\x96\x81";
    for (char c : raw) {
      if (c == ' ') text += "\xE2\x96\x81";
      else text += c;
    }
    Session s{*this, text, {}, {}, {}};
    s.run(out);
  }

 private:
  struct Bigram {
    float score;
    int32_t left, right;
    size_t size;
    bool operator<(const Bigram& o) const {  // top = highest score, then leftmost
      return score < o.score || (score == o.score && left > o.left);
    }
    bool current(const MergeSymbol& l, const MergeSymbol& r) const { return l.n + r.n == size; }
  };
  struct Session {
    const SpmTokenizer& tk;
    const std::string& text;
    std::vector<MergeSymbol> sym;
    std::unordered_map<std::string, std::pair<int32_t, int32_t>> rev_merge;
    std::priority_queue<Bigram> queue;

    std::string_view str(const MergeSymbol& s) const { return std::string_view(text).substr(s.start, s.n); }

    void try_add(int32_t l, int32_t r) {
      std::string joined = std::string(text, sym[l].start, sym[l].n + sym[r].n);
      int32_t id = tk.vocab_.find(joined);
      if (id == kNoToken) return;
      queue.push({tk.vocab_.scores[id], l, r, joined.size()});
      rev_merge[joined] = {l, r};
    }

    void resegment(const MergeSymbol& s, std::vector<int32_t>& out) const {
      std::string_view piece = str(s);
      int32_t id = tk.vocab_.find(piece);
      if (id != kNoToken) { out.push_back(id); return; }
      auto it = rev_merge.find(std::string(piece));
      if (it == rev_merge.end()) {
        for (unsigned char b : piece)
          if (tk.vocab_.byte_token[b] != kNoToken) out.push_back(tk.vocab_.byte_token[b]);
        return;
      }
      resegment(sym[it->second.first], out);
      resegment(sym[it->second.second], out);
    }

    void run(std::vector<int32_t>& out) {
      sym = utf8_symbols(text);
      merge_pairs(sym, queue, [this](int32_t l, int32_t r) { try_add(l, r); });
      for (int32_t i = sym.empty() ? -1 : 0; i != -1; i = sym[i].next) resegment(sym[i], out);
    }
  };
};

}  // namespace

std::unique_ptr<Tokenizer> make_spm_tokenizer(Vocab vocab) {
  return std::unique_ptr<Tokenizer>(new SpmTokenizer(std::move(vocab)));
}

}  // namespace edgellm
