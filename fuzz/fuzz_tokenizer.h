// The body of the two tokenizer harnesses (fuzz_tokenizer_bpe.cpp, fuzz_tokenizer_spm.cpp):
// real vocabularies (vocabulary-only GGUFs extracted from the real models), arbitrary input.
//
// Input: byte 0 = flags, byte 1 = which vocabulary, then the payload.
//   flags & 1: decode mode -- the payload is a sequence of little-endian u32 ids (some out of
//              range on purpose); decode with and without skip_special, token_to_piece, and the
//              streaming decoder, which must agree with sanitize_utf8(decode(ids)).
//   otherwise: encode the payload as text (add_special = flags & 2, parse_special = flags & 4);
//              every id must be in range; decoding plain-text ids must give the text back when
//              it is valid UTF-8 and the vocabulary round-trips (byte-level BPE, SPM with byte
//              fallback); re-encoding the decoded text must be stable.
#pragma once
#include "fuzz_util.h"

namespace fuzz {

struct TokenizerSet {
  std::vector<std::unique_ptr<edgellm::Tokenizer>> toks;
  std::vector<bool> exact_roundtrip;  // decode(encode(valid utf-8)) == text
  // Per tokenizer, the bytes that have a token of their own. SmolLM2's byte-level vocabulary
  // lacks byte 0x04 ('\u0104'); like llama.cpp, encoding drops such a byte, so texts holding
  // one are left out of the round-trip check.
  std::vector<std::vector<bool>> byte_ok;

  void add(std::unique_ptr<edgellm::Tokenizer> t, bool roundtrip) {
    std::vector<bool> ok(256);
    for (int b = 0; b < 256; ++b) {
      const std::string one(1, char(b));
      const auto ids = t->encode(one, false, false);
      ok[b] = ids.size() == 1 && t->decode(ids) == one;
    }
    toks.push_back(std::move(t));
    exact_roundtrip.push_back(roundtrip);
    byte_ok.push_back(std::move(ok));
  }
};

inline void run_tokenizer(const TokenizerSet& set, const uint8_t* data, size_t size) {
  using namespace edgellm;
  Reader in(data, size);
  const uint8_t flags = in.byte();
  const size_t which = in.byte() % set.toks.size();
  const Tokenizer& tok = *set.toks[which];
  const int32_t n = tok.n_vocab();

  if (flags & 1) {
    std::vector<int32_t> ids;
    bool in_range = true;
    while (in.remaining() >= 4 && ids.size() < 4096) {
      const uint32_t raw = in.u32();
      // Mostly valid ids, sometimes anything (negative, >= n_vocab, >= 2^31).
      int32_t id = (raw >> 28) == 0xF ? int32_t(raw ^ 0x0F000000u) : int32_t(raw % uint32_t(n));
      if (id < 0 || id >= n) in_range = false;
      ids.push_back(id);
    }
    std::string text, text_skip;
    try {
      text = tok.decode(ids, false);
      text_skip = tok.decode(ids, true);
      FUZZ_CHECK(in_range);
    } catch (const InvalidRequestError&) {
      FUZZ_CHECK(!in_range);
      return;
    }
    FUZZ_CHECK(text_skip.size() <= text.size());
    std::string streamed;
    StreamDecoder sd(tok, false);
    for (int32_t id : ids) streamed += sd.push(id);
    streamed += sd.flush();
    FUZZ_CHECK(valid_utf8(streamed));
    FUZZ_CHECK(streamed == sanitize_utf8(text));
    for (int32_t id : ids) (void)tok.token_to_piece(id, false);
    return;
  }

  const std::string_view text = in.rest();
  const bool add_special = flags & 2, parse_special = flags & 4;
  std::vector<int32_t> ids;
  try {
    ids = tok.encode(text, add_special, parse_special);
  } catch (const InvalidRequestError&) {
    return;  // e.g. input the vocabulary has no token for (no byte fallback)
  }
  for (int32_t id : ids) FUZZ_CHECK(id >= 0 && id < n);
  const std::string back = tok.decode(ids, false);
  const std::string clean = sanitize_utf8(back);
  FUZZ_CHECK(valid_utf8(clean));
  // SPM writes spaces as U+2581 and reads U+2581 back as a space (as llama.cpp does), so a text
  // holding U+2581 itself cannot round-trip there.
  const bool spm_space = tok.vocab().type == VocabType::Spm && text.find("\xe2\x96\x81") != std::string_view::npos;
  bool bytes_ok = true;
  if (tok.vocab().type == VocabType::Bpe)
    for (unsigned char c : text) bytes_ok = bytes_ok && set.byte_ok[which][c];
  FUZZ_CHECK(text.empty() || !ids.empty() || !bytes_ok);
  if (!add_special && !parse_special && set.exact_roundtrip[which] && valid_utf8(text) && !spm_space && bytes_ok) {
    if (back != text) {
      std::fprintf(stderr, "round trip: %zu bytes in, %zu bytes back\n", text.size(), back.size());
      std::abort();
    }
    // Encoding is deterministic and the decoded text encodes to the same ids.
    FUZZ_CHECK(tok.encode(back, false, false) == ids);
  }
}

}  // namespace fuzz
