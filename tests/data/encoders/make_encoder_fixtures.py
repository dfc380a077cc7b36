"""Records the references of tests/test_encoders.py (issue 41), with the shared reference venv
(torch, transformers, tokenizers, sentence-transformers; none of them edgellm requirements).
Run from the repository root after `edgellm models fetch all-minilm-l6-v2`:

    /work/venv-ref/bin/python tests/data/encoders/make_encoder_fixtures.py [MINILM_DIR]

MINILM_DIR: the unpacked sentence-transformers folder (default: the edgellm model cache's
all-MiniLM-L6-v2/). Writes, beside this script:
  minilm_tokens.json      200 varied strings and `tokenizers`' ids for them (no truncation)
  minilm_embeddings.npz   sentence-transformers' embeddings (float32) of TEXTS, the last one
                          longer than max_seq_length (cut to it)
  tiny-reranker/          a random-weight BertForSequenceClassification (safetensors) with a
                          small WordPiece vocabulary, made with transformers
  tiny_reranker.json      its scores (logits[:, 0], no sigmoid) of RERANK_DOCS against RERANK_QUERY,
                          with the pairs' input_ids / token_type_ids as transformers encodes them
Recorded with torch 2.x CPU, transformers 5.25.0, tokenizers 0.23.3, sentence-transformers 6.3.0."""
import json
import os
import random
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_DIR = os.path.join(os.path.expanduser(os.environ.get("EDGELLM_MODELS", "~/.cache/edgellm/models")),
                           "all-MiniLM-L6-v2")

SAMPLES = [
    "Hello, world!", "The quick brown fox jumps over the lazy dog.", "naïve café résumé façade",
    "Crème brûlée à la française", "ÀÉÎÕÜ àéîõü ÇÑ çñ", "Straße groß Fuß", "İstanbul ıi İI",
    "Ελληνικά: άλφα, βήτα, γάμμα!", "Привет, как дела? Ёжик.", "東京は日本の首都です。", "北京欢迎你！",
    "한국어 텍스트입니다", "안녕하세요 세계", "こんにちは、世界！カタカナ", "עִבְרִית עם ניקוד", "العربية: مرحبا بالعالم",
    "हिन्दी में पाठ", "ภาษาไทย สวัสดี", "Tiếng Việt có dấu: Hà Nội", "emoji 😀👍🏽 and ❤️ hearts",
    "e\u0301 combining acute, a\u0308 umlaut, n\u0303", "zero\u200bwidth\u200djoiner\u200c",
    "tabs\tand\nnewlines\r\nhere", "  leading and trailing spaces  ", "non\u00a0breaking\u3000ideographic space",
    "control\x01chars\x7fhere\x0b", "fullwidth ＡＢＣ １２３ ！", "ligature ﬁ ﬂ œ æ", "Roman Ⅻ ⅷ, superscript x² H₂O",
    "math ∑ ∫ √ ∞ ≠ ≤ ±", "currency $5 €10 £3 ¥100 ₹50", "quotes “double” ‘single’ «guillemets» „low“",
    "dashes – — ‐ and ellipsis…", "URL https://example.com/path?q=1&r=two#frag", "email someone@example.org",
    "C++ code: int main() { return 0; }", "snake_case camelCase kebab-case PascalCase", "1,234,567.89 3.14159 1e-10",
    "unaffable unbelievable antidisestablishmentarianism", "supercalifragilisticexpialidocious",
    "a" * 101, "b" * 100, "x" * 150 + " short", "pneumonoultramicroscopicsilicovolcanoconiosis" * 3,
    "!!!???...,,,;;;:::", "(((nested [brackets] {braces})))", "#hashtag @mention $cashtag %percent ^caret",
    "'apostrophe's' \"quotes\"", "mixed日本語and English", "数字123と文字abc", "ǅ ǈ ǋ titlecase digraphs",
    "Ǆemal ǅemal ǆemal", "ﬀ ﬃ ﬄ ﬅ ﬆ", "Ⓐ ⓑ ① ⑩", "ᾈ ᾨ ῼ Greek with iota", "Å Ω K (compatibility)",
    "Đ đ Ł ł Ø ø Ħ ħ", "ŉ ǰ ΐ special lowercase", "Ａ全角ｶﾀｶﾅ半角", "\u0300leading combining mark",
    "Hangul jamo ᄀᄁᄂ ᅡᅢ ᆨᆩ", "Devanagari with marks: कि की कु", "Tamil: தமிழ் மொழி",
    "Georgian: ქართული", "Armenian: Հայերեն", "Ethiopic: ግዕዝ", "Mongolian: ᠮᠣᠩᠭᠣᠯ",
    "𝐁𝐨𝐥𝐝 𝑰𝒕𝒂𝒍𝒊𝒄 math letters", "𠀀 𪜀 extension CJK", "⺀⻳ radicals", "〇〡〢 Hangzhou numerals",
    "the the the the", "", " ", "a", ".", "Z",
]
WORDS = ("the of and to in is was that for it with as his on be at by had are but from or have an they which one "
         "you were her all she there would their we him been has when who will more no if out so said what up its "
         "about into than them can only other new some could time these two may then do first any my now such like "
         "our over man me even most made after also did many before must through back years where much your way well "
         "down should because each just those people mr how too little state good very make world still own see men "
         "work long get here between both life being under never day same another know while last might us great old "
         "year off come since against go came right used take three").split()


def strings(n=200, seed=41):
    rng = random.Random(seed)
    out = list(SAMPLES)
    pieces = [s for s in SAMPLES if s and len(s) < 60]
    while len(out) < n:
        k = rng.randint(1, 12)
        parts = [rng.choice(WORDS) if rng.random() < 0.6 else rng.choice(pieces) for _ in range(k)]
        sep = rng.choice([" ", "  ", ", ", "\n", "-", ""])
        s = sep.join(parts)
        if rng.random() < 0.3:
            s = s.upper()
        out.append(s)
    return out[:n]


TEXTS = [
    "A man is eating food.", "A man is eating a piece of bread.", "The girl is carrying a baby.",
    "A man is riding a horse.", "A woman is playing violin.", "Two men pushed carts through the woods.",
    "A man is riding a white horse on an enclosed ground.", "A monkey is playing drums.",
    "Crème brûlée à la française, naïve café", "東京は日本の首都です。", "안녕하세요 세계",
    "Hello!", "x",
    " ".join(["This long text repeats until it is longer than the model's max_seq_length."] * 30),
]

RERANK_QUERY = "what is a panda"
RERANK_DOCS = ["hi", "it is a bear", "The giant panda is a bear species endemic to China.",
               "a panda is a kind of bear", "the weather is nice today", "pandas eat bamboo"]
TINY_WORDS = ("what is a the panda bear it hi kind of species china weather nice today eat bamboo giant to "
              "endemic are and in on for with").split()


def tokens_fixture(folder):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
    tok.no_truncation()
    tok.no_padding()
    ss = strings()
    ids = [tok.encode(s).ids for s in ss]
    with open(os.path.join(HERE, "minilm_tokens.json"), "w", encoding="utf-8") as f:
        json.dump({"strings": ss, "ids": ids}, f, ensure_ascii=False)


def embeddings_fixture(folder):
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(folder, device="cpu")
    emb = model.encode(TEXTS, convert_to_numpy=True, normalize_embeddings=False).astype(np.float32)
    n_tok = [len(model.tokenize([t])["input_ids"][0]) for t in TEXTS]
    np.savez(os.path.join(HERE, "minilm_embeddings.npz"), texts=np.array(TEXTS), embeddings=emb,
             n_tokens=np.array(n_tok), max_seq_length=np.array(model.max_seq_length))


def tiny_reranker():
    import torch
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
    from transformers import BertConfig, BertForSequenceClassification, PreTrainedTokenizerFast

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)] + list("0123456789.,!?'-")
    vocab = specials + letters + ["##" + c for c in letters] + TINY_WORDS + ["##s", "##ing", "##ed"]
    vocab = list(dict.fromkeys(vocab))
    tk = Tokenizer(models.WordPiece({t: i for i, t in enumerate(vocab)}, unk_token="[UNK]"))
    tk.normalizer = normalizers.BertNormalizer(lowercase=True)
    tk.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    cls, sep = vocab.index("[CLS]"), vocab.index("[SEP]")
    tk.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
                                                      special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="[UNK]", sep_token="[SEP]", pad_token="[PAD]",
                                   cls_token="[CLS]", mask_token="[MASK]",
                                   model_input_names=["input_ids", "token_type_ids", "attention_mask"])
    torch.manual_seed(41)
    cfg = BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=64, max_position_embeddings=64, type_vocab_size=2, num_labels=1,
                     initializer_range=0.3)
    model = BertForSequenceClassification(cfg).eval()
    with torch.no_grad():  # biases and norms away from their 0 / 1 init, so every one is tested
        for name, p in model.named_parameters():
            if name.endswith("bias") or "LayerNorm" in name:
                p.add_(torch.randn_like(p) * 0.2)
    out = os.path.join(HERE, "tiny-reranker")
    model.save_pretrained(out, safe_serialization=True)
    fast.save_pretrained(out)
    enc = fast([RERANK_QUERY] * len(RERANK_DOCS), RERANK_DOCS, padding=True, return_tensors="pt")
    with torch.no_grad():
        scores = model(**enc).logits[:, 0].tolist()
    pairs = [fast(RERANK_QUERY, d) for d in RERANK_DOCS]
    with open(os.path.join(HERE, "tiny_reranker.json"), "w") as f:
        json.dump({"query": RERANK_QUERY, "documents": RERANK_DOCS, "scores": scores,
                   "input_ids": [p["input_ids"] for p in pairs],
                   "token_type_ids": [p["token_type_ids"] for p in pairs]}, f, indent=1)


if __name__ == "__main__":
    folder = sys.argv[1] if len(sys.argv) > 1 else DEFAULT_DIR
    tokens_fixture(folder)
    embeddings_fixture(folder)
    tiny_reranker()
