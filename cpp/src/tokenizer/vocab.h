// The tokenizer vocabulary of a GGUF model: token texts, scores and types, BPE merges, special
// ids and flags, plus the lookup tables built once at load (text -> id, merge pair -> rank,
// special-token candidates, end-of-generation set). Key names and defaults follow llama.cpp
// (docs/formats.md §1.6, §7).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace edgellm {

class GgufFile;

// tokenizer.ggml.token_type values.
enum class TokenType : int32_t {
  Undefined = 0, Normal = 1, Unknown = 2, Control = 3, UserDefined = 4, Unused = 5, Byte = 6,
};

// Attribute bits derived from the type (and from llama.cpp's text-based fix-ups).
enum TokenAttr : uint32_t {
  kAttrUndefined = 0, kAttrUnknown = 1 << 0, kAttrUnused = 1 << 1, kAttrNormal = 1 << 2,
  kAttrControl = 1 << 3, kAttrUserDefined = 1 << 4, kAttrByte = 1 << 5,
  kAttrNormalized = 1 << 6, kAttrLstrip = 1 << 7, kAttrRstrip = 1 << 8, kAttrSingleWord = 1 << 9,
  // Ours, not llama.cpp's: a CONTROL token made USER_DEFINED so that it reaches the output text
  // (harmony's message headers). It is still markup: inside a caller's text (plain ranges) it is
  // held as text like a CONTROL token.
  kAttrMarkup = 1u << 16,
};

enum class VocabType { Spm, Bpe, Wpm, Ugm };  // Wpm: WordPiece ("bert"); Ugm: Unigram ("t5", XLM-R)

constexpr int32_t kNoToken = -1;

struct Vocab {
  // ---- as stored in the file ----
  VocabType type = VocabType::Spm;
  std::string model;                   // tokenizer.ggml.model
  std::string pre = "default";         // tokenizer.ggml.pre (BPE pre-tokenizer name)
  std::string arch;                    // general.architecture (chat-template choice)
  std::string name;                    // general.name (llama.cpp keys a few fix-ups on it)
  std::vector<std::string> tokens;
  std::vector<float> scores;           // empty = all 0
  std::vector<int32_t> types;          // empty = all Normal
  std::vector<std::string> merges;     // "left right"; rank = index
  std::optional<std::string> chat_template;

  int32_t bos = kNoToken, eos = kNoToken, unk = kNoToken, pad = kNoToken, sep = kNoToken;
  int32_t cls = kNoToken, mask = kNoToken, eot = kNoToken, eom = kNoToken;
  int32_t fim_pre = kNoToken, fim_suf = kNoToken, fim_mid = kNoToken;
  int32_t fim_pad = kNoToken, fim_rep = kNoToken, fim_sep = kNoToken;
  bool add_bos = false, add_eos = false, add_space_prefix = false;
  // WordPiece (BertNormalizer): lowercase and strip accents (tokenizer.wordpiece.lowercase /
  // .strip_accents, edgellm's keys; llama.cpp's files have neither: uncased, as its WPM assumes)
  bool wpm_lowercase = true, wpm_strip_accents = true;
  // Unigram: SentencePiece's precompiled normalization map (tokenizer.ggml.precompiled_charsmap)
  std::string precompiled_charsmap;

  // ---- derived by finalize_vocab() ----
  std::vector<uint32_t> attrs;
  bool ignore_merges = false;          // llama3-style: a pre-token that is a vocab token is kept whole
  std::string pre_resolved;            // the pre-tokenizer actually used ("default" for unknown names)
  std::unordered_map<std::string, int32_t> token_to_id;
  std::unordered_map<std::string, int32_t> merge_rank;  // key: left + '\xff' + right
  std::vector<int32_t> special_candidates;              // CONTROL/USER_DEFINED/UNKNOWN, longest first
  std::vector<int32_t> eog_ids;                          // sorted
  std::vector<uint8_t> is_eog;                           // per token
  int32_t byte_token[256];                               // byte -> token (byte fallback)

  int32_t n_tokens() const { return int32_t(tokens.size()); }
  int32_t find(std::string_view text) const {
    auto it = token_to_id.find(std::string(text));
    return it == token_to_id.end() ? kNoToken : it->second;
  }
  int32_t find_merge(std::string_view left, std::string_view right) const;
};

// Builds the derived tables and applies llama.cpp's defaults and fix-ups (EOT/EOG detection,
// tokens forced to CONTROL). Throws ModelFormatError for inconsistent vocabularies.
void finalize_vocab(Vocab& v);

// Reads tokenizer.* from a GGUF file and finalizes. Missing required keys throw
// ModelFormatError naming the key and file.
Vocab load_vocab(const GgufFile& file);

}  // namespace edgellm
