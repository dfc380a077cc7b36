// Text <-> token ids for a GGUF vocabulary. `Tokenizer::create` picks the model's algorithm
// (SPM score merging, byte-level BPE, WordPiece or Unigram); both share llama.cpp's special-token partition, BOS/EOS
// handling and detokenization rules, so ids match llama.cpp's exactly.
// Tokenizers are immutable after construction: encode/decode are safe from many threads.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenizer/vocab.h"

namespace edgellm {

class Tokenizer {
 public:
  static std::unique_ptr<Tokenizer> create(Vocab vocab);
  static std::unique_ptr<Tokenizer> from_gguf(const std::string& path);
  virtual ~Tokenizer() = default;

  // add_special: BOS/EOS per the vocabulary's add_bos/add_eos flags.
  // parse_special: CONTROL/UNKNOWN token texts in `text` become their ids (USER_DEFINED always do).
  std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special) const;

  // Byte ranges [begin, end) of `text` that are plain text: a CONTROL/UNKNOWN (or markup) token whose text
  // overlaps one of them is not parsed there (it is tokenized as ordinary text, contiguous with
  // what surrounds it), as if parse_special were false for those bytes only. Chat prompts pass
  // the ranges that came from message content, so content cannot forge the template's markup.
  using PlainRanges = std::vector<std::pair<size_t, size_t>>;
  std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special,
                              const PlainRanges& plain) const;

  // Where CONTROL/UNKNOWN (and markup, vocab.h) token texts occur in `text`: non-overlapping [begin, end) byte ranges,
  // left to right, the longest match at each position.
  PlainRanges find_control_tokens(std::string_view text) const;

  // Concatenated pieces; special (CONTROL/UNKNOWN) tokens are rendered as their text unless
  // skip_special. The leading space SPM adds is removed. Bytes may be invalid UTF-8.
  std::string decode(const std::vector<int32_t>& ids, bool skip_special = false) const;

  // The raw bytes a token stands for. Throws InvalidRequestError for ids out of range.
  std::string token_to_piece(int32_t id, bool render_special = true) const;
  const std::string& token_text(int32_t id) const;

  bool is_eog(int32_t id) const { return id >= 0 && id < n_vocab() && vocab_.is_eog[id]; }
  int32_t n_vocab() const { return vocab_.n_tokens(); }
  int32_t bos_id() const { return vocab_.bos; }
  int32_t eos_id() const { return vocab_.eos; }
  const std::vector<int32_t>& eog_ids() const { return vocab_.eog_ids; }
  const Vocab& vocab() const { return vocab_; }

  void check_id(int32_t id) const;

 protected:
  explicit Tokenizer(Vocab vocab);
  // Tokenizes one raw-text fragment (no special tokens inside). `after_special` is true for the
  // first fragment and for fragments that follow a special token.
  virtual void encode_fragment(std::string_view text, bool after_special, std::vector<int32_t>& out) const = 0;

  Vocab vocab_;

 private:
  struct TrieNode;
  void build_special_trie();
  std::vector<int32_t> present_specials(std::string_view text, bool parse_special) const;
  // Walks the special-token trie along text[i..], calling on_match(end, rank) for every
  // candidate that text[i..end) spells (rank: its index in special_candidates).
  template <class F>
  void match_specials_at(std::string_view text, size_t i, F&& on_match) const;

  // A byte trie over the special-token candidates, used to find which of them occur in a text
  // before running llama.cpp's longest-first partition on those few only.
  struct Trie {
    std::vector<std::vector<std::pair<uint8_t, int32_t>>> next;  // sorted children per node
    std::vector<int32_t> rank;  // candidate index ending here, or -1
  } trie_;
};

std::unique_ptr<Tokenizer> make_spm_tokenizer(Vocab vocab);
std::unique_ptr<Tokenizer> make_bpe_tokenizer(Vocab vocab);
std::unique_ptr<Tokenizer> make_wordpiece_tokenizer(Vocab vocab);
std::unique_ptr<Tokenizer> make_unigram_tokenizer(Vocab vocab);

// Turns a stream of token ids into text that only ever contains whole UTF-8 characters:
// bytes of a character split across tokens are held back until it completes.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tok, bool skip_special = false)
      : tok_(tok), skip_special_(skip_special) {}
  std::string push(int32_t id);
  // Whatever is still held back (an unfinished character becomes U+FFFD).
  std::string flush();

 private:
  const Tokenizer& tok_;
  bool skip_special_;
  bool first_ = true;
  std::string pending_;
};

// Replaces invalid UTF-8 sequences with U+FFFD.
std::string sanitize_utf8(std::string_view s);

}  // namespace edgellm
