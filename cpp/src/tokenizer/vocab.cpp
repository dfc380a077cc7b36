#include "tokenizer/vocab.h"

#include <algorithm>
#include <cctype>
#include <cstdio>

#include "common/errors.h"
#include "gguf/gguf_file.h"
#include "tokenizer/unicode.h"

namespace edgellm {
namespace {

// llama.cpp recognises these texts as end-of-turn/generation markers whatever the metadata says.
const char* const kEotTexts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>",
    "<EOT>", "_<EOT>", "<｜end▁of▁sentence｜>", "<end_of_utterance>",
};
const char* const kEogTexts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
    "<end_of_turn>", "<|endoftext|>", "<|eom_id|>", "<EOT>", "_<EOT>", "<|end_of_text|>",
    "<end_of_utterance>", "</s>", "<｜end▁of▁sentence｜>",
};

uint32_t attr_from_type(int32_t t) {
  switch (TokenType(t)) {
    case TokenType::Unknown: return kAttrUnknown;
    case TokenType::Normal: return kAttrNormal;
    case TokenType::Control: return kAttrControl;
    case TokenType::UserDefined: return kAttrUserDefined;
    case TokenType::Unused: return kAttrUnused;
    case TokenType::Byte: return kAttrByte;
    default: return kAttrUndefined;
  }
}

std::string merge_key(std::string_view l, std::string_view r) {
  std::string k;
  k.reserve(l.size() + r.size() + 1);
  k.append(l);
  k += '\xff';  // never occurs in UTF-8 text, so the key is unambiguous
  k.append(r);
  return k;
}

// Pre-tokenizer names llama.cpp groups together (src/llama-vocab.cpp, tokenizer_pre).
std::string resolve_pre(const std::string& pre, bool& ignore_merges, bool& add_bos_default) {
  static const char* const kLlama3[] = {"llama3", "llama-v3", "llama-bpe", "falcon3", "pixtral", "lfm2"};
  static const char* const kSmollm[] = {"smollm", "starcoder", "refact", "command-r", "codeshell",
                                        "exaone", "minerva-7b", "minerva", "mellum2"};
  static const char* const kGpt2[] = {"gpt-2", "gpt2", "olmo", "mpt", "phi-2", "jina-es", "jina-de"};
  for (auto* n : kLlama3)
    if (pre == n) { ignore_merges = true; add_bos_default = true; return "llama3"; }
  for (auto* n : kSmollm)
    if (pre == n) return "smollm";
  for (auto* n : kGpt2)
    if (pre == n) return "gpt2";
  if (pre == "qwen2" || pre == "deepseek-r1-qwen" || pre == "qwen35") return "qwen2";
  if (pre == "gpt-4o" || pre == "llama4" || pre == "kanana2" || pre == "talkie") return "gpt4o";
  if (pre == "default") return "default";
  std::fprintf(stderr, "edgellm: unknown BPE pre-tokenizer '%s', using 'default'\n", pre.c_str());
  return "default";
}

}  // namespace

int32_t Vocab::find_merge(std::string_view left, std::string_view right) const {
  auto it = merge_rank.find(merge_key(left, right));
  return it == merge_rank.end() ? -1 : it->second;
}

void finalize_vocab(Vocab& v) {
  const size_t n = v.tokens.size();
  if (n == 0) throw ModelFormatError("tokenizer.ggml.tokens is empty");
  if (!v.scores.empty() && v.scores.size() < n)
    throw ModelFormatError("tokenizer.ggml.scores has " + std::to_string(v.scores.size()) +
                           " entries for " + std::to_string(n) + " tokens");
  if (!v.types.empty() && v.types.size() < n)
    throw ModelFormatError("tokenizer.ggml.token_type has " + std::to_string(v.types.size()) +
                           " entries for " + std::to_string(n) + " tokens");
  if (v.scores.empty()) v.scores.assign(n, 0.0f);
  if (v.types.empty()) v.types.assign(n, int32_t(TokenType::Normal));
  v.scores.resize(n);
  v.types.resize(n);

  v.attrs.resize(n);
  v.token_to_id.clear();
  v.token_to_id.reserve(n * 2);
  for (size_t i = 0; i < n; ++i) {
    if (v.tokens[i].empty()) v.tokens[i] = "[EMPTY_" + std::to_string(i) + "]";
    v.attrs[i] = attr_from_type(v.types[i]);
    v.token_to_id[v.tokens[i]] = int32_t(i);  // later duplicates win, as in llama.cpp
  }

  v.merge_rank.clear();
  v.merge_rank.reserve(v.merges.size() * 2);
  for (size_t r = 0; r < v.merges.size(); ++r) {
    const std::string& m = v.merges[r];
    size_t sp = m.find(' ', 1);
    if (sp == std::string::npos)
      throw ModelFormatError("tokenizer.ggml.merges[" + std::to_string(r) + "] = '" + m +
                             "' has no separating space");
    v.merge_rank.emplace(merge_key(std::string_view(m).substr(0, sp), std::string_view(m).substr(sp + 1)),
                         int32_t(r));
  }

  auto check_id = [&](int32_t& id, const char* what) {
    if (id != kNoToken && (id < 0 || size_t(id) >= n)) {
      std::fprintf(stderr, "edgellm: %s id %d is outside the vocabulary (%zu tokens); ignored\n", what, id, n);
      id = kNoToken;
    }
  };
  check_id(v.bos, "bos"); check_id(v.eos, "eos"); check_id(v.unk, "unknown"); check_id(v.pad, "padding");
  check_id(v.sep, "separator"); check_id(v.cls, "cls"); check_id(v.mask, "mask");
  check_id(v.eot, "eot"); check_id(v.eom, "eom");

  // Text-based fix-ups: EOT/EOM detection and the EOG set; such tokens become CONTROL.
  if (v.eot == kNoToken) {
    int32_t best = kNoToken;
    for (const char* t : kEotTexts) {
      int32_t id = v.find(t);
      if (id != kNoToken && (best == kNoToken || id < best)) best = id;
    }
    if (best != kNoToken) {
      v.eot = best;
      if (!(v.attrs[best] & kAttrControl)) v.attrs[best] = kAttrControl;
    }
  }
  if (v.eom == kNoToken) {
    int32_t id = v.find("<|eom_id|>");
    if (id != kNoToken) {
      v.eom = id;
      if (!(v.attrs[id] & kAttrControl)) v.attrs[id] = kAttrControl;
    }
  }
  // Fill-in-the-middle markers, when the file does not name them.
  struct FimRole {
    int32_t* id;
    std::initializer_list<const char*> texts;
  };
  const FimRole fim_roles[] = {
      {&v.fim_pre, {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>", "▁<PRE>", "<|code_prefix|>"}},
      {&v.fim_suf, {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>", "▁<SUF>", "<|code_suffix|>"}},
      {&v.fim_mid, {"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>", "▁<MID>", "<|code_middle|>"}},
      {&v.fim_pad, {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>"}},
      {&v.fim_rep, {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"}},
      {&v.fim_sep, {"<|file_sep|>", "<file_sep>"}},
  };
  for (const FimRole& role : fim_roles) {
    check_id(*role.id, "fim");
    if (*role.id != kNoToken) continue;
    for (const char* t : role.texts) {
      int32_t id = v.find(t);
      if (id != kNoToken && (*role.id == kNoToken || id < *role.id)) *role.id = id;
    }
    if (*role.id != kNoToken && !(v.attrs[*role.id] & kAttrControl)) v.attrs[*role.id] = kAttrControl;
  }

  v.is_eog.assign(n, 0);
  for (const char* t : kEogTexts) {
    int32_t id = v.find(t);
    if (id == kNoToken) continue;
    v.is_eog[id] = 1;
    if (!(v.attrs[id] & kAttrControl)) v.attrs[id] = kAttrControl;
  }
  for (int32_t id : {v.eos, v.eot, v.eom})
    if (id != kNoToken) v.is_eog[id] = 1;
  // The harmony format (gpt-oss) writes its message headers with special tokens that must
  // reach the output text, and ends a turn that goes on (analysis → final) with <|end|>: the
  // headers are USER_DEFINED (rendered, always parsed), and where <|return|> and <|call|> end
  // generation <|end|> does not — as llama.cpp treats these vocabularies.
  for (const char* t : {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"})
    if (int32_t id = v.find(t); id != kNoToken) v.attrs[id] = kAttrUserDefined | kAttrMarkup;
  // (Solar Open: <|calls|> and <|flush|> likewise.)
  auto eog_text = [&](const char* t) {
    int32_t id = v.find(t);
    return id != kNoToken && v.is_eog[id];
  };
  if ((eog_text("<|return|>") && (eog_text("<|call|>") || eog_text("<|calls|>"))) ||
      (eog_text("<|flush|>") && (eog_text("<|call|>") || eog_text("<|calls|>")))) {
    if (int32_t id = v.find("<|end|>"); id != kNoToken && v.is_eog[id]) {
      v.is_eog[id] = 0;
      v.attrs[id] = kAttrUserDefined | kAttrMarkup;
    }
  }
  v.eog_ids.clear();
  for (size_t i = 0; i < n; ++i)
    if (v.is_eog[i]) v.eog_ids.push_back(int32_t(i));

  // Phi-3 GGUFs need their special tokens to swallow the whitespace after them (llama.cpp
  // sets RSTRIP by model name since the files do not carry the attribute).
  {
    std::string lname = v.name;
    for (char& c : lname) c = char(std::tolower(uint8_t(c)));
    if (lname.find("phi-3") != std::string::npos || lname.find("phi3") != std::string::npos) {
      for (size_t i = 0; i < n; ++i)
        if (v.attrs[i] & (kAttrControl | kAttrUserDefined | kAttrUnknown)) v.attrs[i] |= kAttrRstrip;
      if (int32_t id = v.find("</s>"); id != kNoToken) v.attrs[id] |= kAttrRstrip;
      for (const char* t : {"<unk>", "<s>", "<|endoftext|>"})
        if (int32_t id = v.find(t); id != kNoToken) v.attrs[id] &= ~uint32_t(kAttrRstrip);
    }
  }

  // XLM-R's <mask> swallows the whitespace before it (lstrip in its tokenizer.json; the GGUF does
  // not carry the attribute, llama.cpp sets it by architecture for nomic-bert-moe / jina-bert-v3).
  if (v.type == VocabType::Ugm)
    if (int32_t id = v.find("<mask>"); id != kNoToken && (v.attrs[id] & kAttrControl)) v.attrs[id] |= kAttrLstrip;

  v.special_candidates.clear();
  for (size_t i = 0; i < n; ++i)
    if (v.attrs[i] & (kAttrControl | kAttrUserDefined | kAttrUnknown)) v.special_candidates.push_back(int32_t(i));
  std::stable_sort(v.special_candidates.begin(), v.special_candidates.end(), [&](int32_t a, int32_t b) {
    return v.tokens[a].size() > v.tokens[b].size();
  });

  // Byte fallback tokens.
  static const char kHex[] = "0123456789ABCDEF";
  for (int b = 0; b < 256; ++b) {
    int32_t id = kNoToken;
    if (v.type == VocabType::Spm) {
      const char buf[7] = {'<', '0', 'x', kHex[b >> 4], kHex[b & 15], '>', 0};
      id = v.find(buf);
      if (id == kNoToken) id = v.find(std::string(1, char(b)));
      if (id == kNoToken) id = v.unk;
    } else {
      id = v.find(unicode::byte_to_unicode(uint8_t(b)));
    }
    v.byte_token[b] = id;
  }

  if (v.type == VocabType::Bpe) {
    bool add_bos_default = false;
    v.pre_resolved = resolve_pre(v.pre, v.ignore_merges, add_bos_default);
  } else {
    v.pre_resolved.clear();
  }
}

static std::vector<float> number_array(const GgufFile& f, const char* key) {
  std::vector<float> out;
  const GgufValue* val = f.find(key);
  if (!val) return out;
  if (!val->is_array())
    throw ModelFormatError(f.path() + ": " + key + " is not an array");
  if (val->elem_type == GgufType::STRING || val->elem_type == GgufType::ARRAY)
    throw ModelFormatError(f.path() + ": " + key + " must be a numeric array");
  out.resize(val->array_len);
  for (uint64_t i = 0; i < val->array_len; ++i) out[i] = float(val->array_number(i));
  return out;
}

Vocab load_vocab(const GgufFile& f) {
  Vocab v;
  auto model = f.find_string("tokenizer.ggml.model");
  if (!model) throw ModelFormatError(f.path() + ": missing key tokenizer.ggml.model");
  v.model = *model;
  if (v.model == "llama") {
    v.type = VocabType::Spm;
    v.bos = 1; v.eos = 2; v.unk = 0;
    v.add_bos = true; v.add_eos = false; v.add_space_prefix = true;
  } else if (v.model == "gpt2") {
    v.type = VocabType::Bpe;
    v.bos = 11; v.eos = 11;
    v.add_bos = false; v.add_eos = false; v.add_space_prefix = false;
  } else if (v.model == "bert") {
    // llama.cpp's WPM defaults: [CLS] text [SEP], [UNK] 100
    v.type = VocabType::Wpm;
    v.bos = 101; v.eos = 102; v.unk = 100;
    v.add_bos = true; v.add_eos = true; v.add_space_prefix = true;
  } else if (v.model == "t5") {
    // llama.cpp's UGM defaults (T5: no BOS, </s> 1, <unk> 2, <pad> 0); XLM-R files name theirs
    v.type = VocabType::Ugm;
    v.bos = kNoToken; v.eos = 1; v.unk = 2; v.pad = 0;
    v.add_bos = false; v.add_eos = true; v.add_space_prefix = true;
  } else {
    throw ModelFormatError(f.path() + ": tokenizer.ggml.model '" + v.model +
                           "' is not supported (supported: llama, gpt2, bert, t5)");
  }
  if (auto a = f.find_string("general.architecture")) v.arch = *a;
  if (auto nm = f.find_string("general.name")) v.name = *nm;

  const auto* toks = f.find_string_array("tokenizer.ggml.tokens");
  if (!toks) throw ModelFormatError(f.path() + ": missing key tokenizer.ggml.tokens");
  v.tokens = *toks;
  v.scores = number_array(f, "tokenizer.ggml.scores");
  {
    auto t = number_array(f, "tokenizer.ggml.token_type");
    v.types.resize(t.size());
    for (size_t i = 0; i < t.size(); ++i) {
      // Converting a float outside int32's range (or NaN) is undefined behaviour: refuse it.
      if (!(t[i] >= -2147483648.0f && t[i] < 2147483648.0f))
        throw ModelFormatError(f.path() + ": tokenizer.ggml.token_type[" + std::to_string(i) + "] = " +
                               std::to_string(t[i]) + " is not a token type");
      v.types[i] = int32_t(t[i]);
    }
  }
  if (v.type == VocabType::Bpe) {
    const auto* merges = f.find_string_array("tokenizer.ggml.merges");
    if (!merges) throw ModelFormatError(f.path() + ": missing key tokenizer.ggml.merges (required by gpt2 tokenizers)");
    v.merges = *merges;
    if (auto pre = f.find_string("tokenizer.ggml.pre")) {
      v.pre = *pre;
    } else {
      std::fprintf(stderr, "edgellm: %s has no tokenizer.ggml.pre; using 'default'\n", f.path().c_str());
      v.pre = "default";
    }
    bool ignore = false, add_bos_default = false;
    resolve_pre(v.pre, ignore, add_bos_default);
    v.add_bos = add_bos_default;
  }

  auto id_key = [&](const char* key, int32_t& dst) {
    if (auto x = f.find_u32(key)) dst = int32_t(*x);
  };
  id_key("tokenizer.ggml.bos_token_id", v.bos);
  id_key("tokenizer.ggml.eos_token_id", v.eos);
  id_key("tokenizer.ggml.unknown_token_id", v.unk);
  id_key("tokenizer.ggml.padding_token_id", v.pad);
  id_key("tokenizer.ggml.seperator_token_id", v.sep);
  id_key("tokenizer.ggml.cls_token_id", v.cls);
  id_key("tokenizer.ggml.mask_token_id", v.mask);
  id_key("tokenizer.ggml.eot_token_id", v.eot);
  id_key("tokenizer.ggml.eom_token_id", v.eom);
  id_key("tokenizer.ggml.fim_pre_token_id", v.fim_pre);
  id_key("tokenizer.ggml.fim_suf_token_id", v.fim_suf);
  id_key("tokenizer.ggml.fim_mid_token_id", v.fim_mid);
  id_key("tokenizer.ggml.fim_pad_token_id", v.fim_pad);
  id_key("tokenizer.ggml.fim_rep_token_id", v.fim_rep);
  id_key("tokenizer.ggml.fim_sep_token_id", v.fim_sep);
  if (auto b = f.find_bool("tokenizer.ggml.add_bos_token")) v.add_bos = *b;
  if (auto b = f.find_bool("tokenizer.ggml.add_eos_token")) v.add_eos = *b;
  if (auto b = f.find_bool("tokenizer.ggml.add_space_prefix")) v.add_space_prefix = *b;
  if (v.type == VocabType::Wpm) {
    // [CLS] and [SEP] frame every input (llama.cpp's files name them cls / seperator)
    if (v.cls != kNoToken) v.bos = v.cls;
    if (v.sep != kNoToken) v.eos = v.sep;
    v.add_space_prefix = true;  // decode: the first word-initial piece's space is dropped
    if (auto b = f.find_bool("tokenizer.wordpiece.lowercase")) v.wpm_lowercase = *b;
    v.wpm_strip_accents = f.find_bool("tokenizer.wordpiece.strip_accents").value_or(v.wpm_lowercase);
  }
  if (v.type == VocabType::Ugm) {
    // llama.cpp's converter leaves XLM-R's <mask> slot a "[PADn]" placeholder (its
    // sentencepiece.bpe.model has no <mask>) while mask_token_id names it: give it its text back.
    if (v.mask >= 0 && v.mask < v.n_tokens() && v.tokens[v.mask].rfind("[PAD", 0) == 0) {
      v.tokens[v.mask] = "<mask>";
      if (size_t(v.mask) < v.types.size()) v.types[v.mask] = int32_t(TokenType::Control);
    }
    if (const GgufValue* cm = f.find("tokenizer.ggml.precompiled_charsmap")) {
      if (!cm->is_array() || (cm->elem_type != GgufType::UINT8 && cm->elem_type != GgufType::INT8))
        throw ModelFormatError(f.path() + ": tokenizer.ggml.precompiled_charsmap must be an array of bytes");
      v.precompiled_charsmap.assign(reinterpret_cast<const char*>(cm->array_data), cm->array_len);
    }
  }
  v.chat_template = f.find_string("tokenizer.chat_template");

  try {
    finalize_vocab(v);
  } catch (const ModelFormatError& e) {
    throw ModelFormatError(f.path() + ": " + e.what());
  }
  return v;
}

}  // namespace edgellm
