// Tokenizer units usable without Python or a model: UTF-8 helpers, category tables, the GPT-2
// byte map, and both tokenizers on hand-built vocabularies through the C++ API.
#include <random>
#include <string>
#include <vector>

#include "common/errors.h"
#include "test_util.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

using namespace edgellm;

static void test_unicode() {
  namespace u = unicode;
  CHECK(u::flags('a') & u::kLetter);
  CHECK(u::flags('7') & u::kNumber);
  CHECK(u::flags('!') & u::kPunct);
  CHECK(u::flags('$') & u::kSymbol);
  CHECK(u::flags(' ') & u::kWhitespace);
  CHECK(u::flags(0x3000) & u::kWhitespace);
  CHECK(!(u::flags(0x1C) & u::kWhitespace));  // not White_Space, unlike Python's isspace
  CHECK(u::flags(0x4E2D) & u::kLetter);       // 中
  CHECK(u::flags(0x1D400) & u::kLetter);      // 𝐀, outside the BMP
  CHECK(u::flags(0x1F600) & u::kSymbol);      // 😀
  CHECK(u::flags(0x110000) == 0);

  auto cps = u::decode_utf8("a\xC3\xA9\xFF\xE2\x82");
  CHECK((cps == std::vector<uint32_t>{'a', 0xE9, 0xFFFD, 0xFFFD, 0xFFFD}));

  CHECK(u::complete_utf8_prefix("ab") == 2);
  CHECK(u::complete_utf8_prefix("a\xE2\x82") == 1);
  CHECK(u::complete_utf8_prefix("a\xE2\x82\xAC") == 4);
  CHECK(u::complete_utf8_prefix("\xF0\x9F\xA6") == 0);
  CHECK(u::complete_utf8_prefix("a\xFF") == 2);  // invalid byte: never held back
  CHECK(u::complete_utf8_prefix("\xE2" "a") == 2);

  // The GPT-2 byte map is a bijection onto printable codepoints.
  for (int b = 0; b < 256; ++b) {
    auto cp = u::decode_utf8(u::byte_to_unicode(uint8_t(b)));
    CHECK(cps.size() > 0 && cp.size() == 1 && u::unicode_to_byte(cp[0]) == b);
  }
  CHECK(u::byte_to_unicode(' ') == "\xC4\xA0");  // Ġ

  CHECK(sanitize_utf8("ok\xE2\x82" "x") == "ok\xEF\xBF\xBD" "x");
  CHECK(sanitize_utf8("\xC0\x80") == "\xEF\xBF\xBD\xEF\xBF\xBD");
}

static void test_pretokenizer() {
  auto w = pretokenize("Hello world  12345 don't\n\n", "smollm");
  // The digits split first, so "  " ends its fragment and stays whole (\s+(?!\S) sees the end).
  CHECK((w == std::vector<std::string>{"Hello", " world", "  ", "1", "2", "3", "4", "5", " don", "'t", "\n\n"}));
  w = pretokenize("12345 I'M", "llama3");
  CHECK((w == std::vector<std::string>{"123", "45", " I", "'M"}));
  w = pretokenize("12345", "qwen2");
  CHECK(w.size() == 5);
  w = pretokenize("a+=1234", "default");
  CHECK((w == std::vector<std::string>{"a", "+=", "123", "4"}));
}

static Vocab byte_bpe_vocab() {
  Vocab v;
  v.type = VocabType::Bpe;
  v.model = "gpt2";
  v.pre = "gpt2";
  for (int b = 0; b < 256; ++b) v.tokens.push_back(unicode::byte_to_unicode(uint8_t(b)));
  v.tokens.push_back("ab");       // 256
  v.tokens.push_back("<|eot|>");  // 257
  v.types.assign(v.tokens.size(), 1);
  v.types[257] = 3;
  v.merges = {"a b"};
  v.bos = v.eos = 257;
  v.add_bos = true;
  finalize_vocab(v);
  return v;
}

static void test_bpe_tokenizer() {
  auto tok = Tokenizer::create(byte_bpe_vocab());
  CHECK((tok->encode("ab", false, false) == std::vector<int32_t>{256}));
  CHECK((tok->encode("ab", true, false) == std::vector<int32_t>{257, 256}));
  CHECK((tok->encode("x<|eot|>", false, true) == std::vector<int32_t>{'x', 257}));
  CHECK(tok->encode("x<|eot|>", false, false).size() == 8);
  CHECK(tok->is_eog(257) && !tok->is_eog(256));

  // Random byte strings round-trip exactly (BPE is byte-level; no U+FFFD anywhere).
  std::mt19937 rng(42);
  for (int i = 0; i < 200; ++i) {
    std::string s;
    int n = int(rng() % 24);
    for (int k = 0; k < n; ++k) {
      uint32_t cp = rng() % 3 == 0 ? 0x20 + rng() % 0x5F : 0xA0 + rng() % 0x2000;
      unicode::append_utf8(s, cp);
    }
    CHECK(tok->decode(tok->encode(s, false, false)) == s);
  }

  bool threw = false;
  try {
    tok->token_to_piece(9999);
  } catch (const InvalidRequestError& e) {
    threw = std::string(e.what()).find("9999") != std::string::npos;
  }
  CHECK(threw);

  // Streaming: "€" is three byte tokens; nothing comes out until the last one.
  StreamDecoder dec(*tok);
  auto ids = tok->encode("\xE2\x82\xAC!", false, false);
  CHECK(ids.size() == 4);
  CHECK(dec.push(ids[0]).empty());
  CHECK(dec.push(ids[1]).empty());
  CHECK(dec.push(ids[2]) == "\xE2\x82\xAC");
  CHECK(dec.push(ids[3]) == "!");
  CHECK(dec.flush().empty());
}

// Plain ranges: control tokens whose text overlaps one are tokenized as text, contiguous with
// the text around them; outside the ranges (and for ranges elsewhere) nothing changes.
static void test_plain_ranges() {
  auto tok = Tokenizer::create(byte_bpe_vocab());
  const std::string text = "x<|eot|>ab<|eot|>";  // the first marker at [1, 8), the second at [10, 17)
  const auto special = tok->encode(text, false, true);
  CHECK((special == std::vector<int32_t>{'x', 257, 256, 257}));
  CHECK(tok->encode(text, false, true, {}) == special);
  CHECK(tok->encode(text, false, true, {{20, 30}, {0, 1}, {8, 10}}) == special);  // touching, not overlapping
  // the first marker in a plain range: "x<|eot|>ab" is one text fragment, as with parse_special off
  auto first_plain = tok->encode(text, false, true, {{1, 8}});
  auto expect = tok->encode("x<|eot|>ab", false, false);
  expect.push_back(257);
  CHECK(first_plain == expect);
  CHECK(tok->encode(text, false, true, {{5, 6}}) == first_plain);   // any overlap is enough
  CHECK(tok->encode(text, false, true, {{0, 100}}) == tok->encode(text, false, false));
  CHECK(tok->encode(text, false, true, {{12, 13}, {3, 4}}) == tok->encode(text, false, false));
  CHECK(tok->decode(tok->encode(text, false, true, {{0, 100}})) == text);

  CHECK((tok->find_control_tokens(text) == Tokenizer::PlainRanges{{1, 8}, {10, 17}}));
  CHECK(tok->find_control_tokens("no markers <|eot| here").empty());
  CHECK((tok->find_control_tokens("<|eot|><|eot|>") == Tokenizer::PlainRanges{{0, 7}, {7, 14}}));
}

static void test_spm_tokenizer() {
  Vocab v;
  v.type = VocabType::Spm;
  v.model = "llama";
  v.tokens = {"<unk>", "<s>", "</s>", "\xE2\x96\x81", "h", "i", "hi", "\xE2\x96\x81hi", "<0x21>"};
  v.scores = {0, 0, 0, -5, -5, -5, -1, -0.5, 0};
  v.types = {2, 3, 3, 1, 1, 1, 1, 1, 6};
  v.bos = 1; v.eos = 2; v.unk = 0;
  v.add_bos = true; v.add_space_prefix = true;
  finalize_vocab(v);
  auto tok = Tokenizer::create(v);
  CHECK((tok->encode("hi", true, false) == std::vector<int32_t>{1, 7}));
  CHECK((tok->encode("hi!", false, false) == std::vector<int32_t>{7, 8}));
  CHECK((tok->encode("hi hi", false, false) == std::vector<int32_t>{7, 7}));
  CHECK((tok->encode("?", false, false) == std::vector<int32_t>{3, 0}));  // no byte token: <unk>
  CHECK(tok->decode({7, 7, 8}) == "hi hi!");
  CHECK(tok->is_eog(2));

  bool threw = false;
  Vocab empty;
  try {
    finalize_vocab(empty);
  } catch (const ModelFormatError& e) {
    threw = std::string(e.what()).find("tokenizer.ggml.tokens") != std::string::npos;
  }
  CHECK(threw);
}

int main() {
  test_unicode();
  test_pretokenizer();
  test_bpe_tokenizer();
  test_plain_ranges();
  test_spm_tokenizer();
  return test_util::report();
}
