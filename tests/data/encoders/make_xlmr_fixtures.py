"""Records the XLM-RoBERTa references of tests/test_encoders_xlmr.py (issue 41: multilingual-e5 and
bge-m3 shapes), with the shared reference venv (torch, transformers, tokenizers, sentencepiece,
sentence-transformers; none of them edgellm requirements):

    pip install --target /tmp/pb protobuf   # sentencepiece_model_pb2 (llama.cpp's converter needs it too)
    PYTHONPATH=/tmp/pb /work/venv-ref/bin/python tests/data/encoders/make_xlmr_fixtures.py

Writes, beside this script:
  tiny-xlmr/              a SentencePiece Unigram model trained here on multilingual text (nmt_nfkc
                          normalisation, so its precompiled charsmap is a real one) laid out as the hub's
                          XLM-R folders are: sentencepiece.bpe.model, tokenizer.json (Precompiled +
                          Replace(" {2,}", " ") + Metaspace, the fairseq id shift: <s> <pad> </s> <unk> ...
                          <mask>), and a random-weight XLMRobertaModel in a sentence-transformers folder
                          (mean pooling + Normalize, as multilingual-e5)
  xlmr_tokens.json        240 varied strings (make_encoder_fixtures.strings() + multilingual ones) and
                          `tokenizers`' ids for them
  xlmr_embeddings.npz     sentence-transformers' embeddings of TEXTS (the last one longer than
                          max_seq_length, cut to it)
  tiny-xlmr-reranker/     a random-weight XLMRobertaForSequenceClassification (bge-reranker-v2-m3's shape:
                          classifier.dense + tanh + classifier.out_proj), the same tokenizer
  tiny_xlmr_reranker.json its scores (logits[:, 0]) of RERANK_DOCS against RERANK_QUERY and the pairs'
                          input_ids (<s> q </s></s> d </s>)
  tiny-xlmr.llamacpp.gguf, tiny-xlmr-reranker.llamacpp.gguf
                          the two checkpoints converted by llama.cpp's convert_hf_to_gguf.py (--outtype f32),
                          kept (git add -f) so the tests need neither torch nor protobuf
Recorded with torch 2.x CPU, transformers 5.25.0, tokenizers 0.23.3, sentencepiece 0.2.3."""
import json
import os
import shutil
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from llama_cpp_convert import llama_cpp_convert  # noqa: E402
from make_encoder_fixtures import SAMPLES, TEXTS, WORDS, strings  # noqa: E402

MULTI = [
    "Der schnelle braune Fuchs springt über den faulen Hund.", "Le renard brun rapide saute par-dessus le chien.",
    "El rápido zorro marrón salta sobre el perro perezoso.", "Быстрая коричневая лиса прыгает через ленивую собаку.",
    "敏捷的棕色狐狸跳过了懒狗。", "素早い茶色の狐がのろまな犬を飛び越える。", "빠른 갈색 여우가 게으른 개를 뛰어넘는다.",
    "Η γρήγορη καφέ αλεπού πηδά πάνω από τον τεμπέλη σκύλο.", "الثعلب البني السريع يقفز فوق الكلب الكسول",
    "तेज़ भूरी लोमड़ी आलसी कुत्ते के ऊपर कूदती है।", "Con cáo nâu nhanh nhẹn nhảy qua con chó lười.",
    "Hızlı kahverengi tilki tembel köpeğin üzerinden atlar.", "Szybki brązowy lis przeskakuje nad leniwym psem.",
    "query: how much protein should a female eat", "passage: As a general guideline, the CDC's average",
    "Panda ist ein Bär. パンダはクマです。 Панда — это медведь.", "ＡＢＣ１２３ ｶﾀｶﾅ ① ﬁ ㍿ ℡",
    "  many   spaces\there\n\nand\r\nbreaks  ", "trailing space ", " leading space", "ends with two  ",
    "\u3000ideographic\u3000space", "a\u00a0b\u2009c\u200bd", "tab\tonly", "Ａ\u0301 e\u0301 ﬁ\u0308 n\u0303",
    "👍🏽 👨‍👩‍👧 🇩🇪 ❤️", "\r\n", "\n", "\t", "x\r\ny", "한국어\u1100\u1161\u11a8", "ｈｅｌｌｏ　ｗｏｒｌｄ",
    "<s> literal specials </s> <mask>", "unknown: ꙮ 𓀀 ᚠᛇᚻ", "mixed 中文 English 日本語 한국어 русский",
    "Ω ohm Å angstrom K kelvin", "½ ¼ ¾ ⅓", "x² x³ H₂O", "İstanbul DİYARBAKIR ı", "ǅ ǈ ǋ",
]

RERANK_QUERY = "what is a panda"
RERANK_DOCS = ["hi", "it is a bear", "The giant panda is a bear species endemic to China.",
               "Der Panda ist ein Bär.", "パンダはクマです。", "the weather is nice today", "pandas eat bamboo"]
EMBED_TEXTS = TEXTS[:-1] + MULTI[:16] + [" ".join(["Ein langer Text, der sich wiederholt, bis er zu lang ist."] * 20)]


def corpus_lines():
    import random
    rng = random.Random(7)
    lines = list(SAMPLES) + MULTI + TEXTS + RERANK_DOCS
    for _ in range(3000):
        k = rng.randint(3, 14)
        lines.append(" ".join(rng.choice(WORDS) if rng.random() < 0.5 else rng.choice(MULTI + SAMPLES).split(" ")[0]
                              for _ in range(k)))
    return [ln for ln in lines if ln.strip()]


def train_spm(workdir):
    import sentencepiece as spm
    path = os.path.join(workdir, "corpus.txt")
    with open(path, "w", encoding="utf-8") as f:
        for ln in corpus_lines():
            f.write(ln.replace("\n", " ").replace("\r", " ") + "\n")
    prefix = os.path.join(workdir, "spm")
    spm.SentencePieceTrainer.train(input=path, model_prefix=prefix, vocab_size=1200, model_type="unigram",
                                   character_coverage=0.995, hard_vocab_limit=False, normalization_rule_name="nmt_nfkc",
                                   unk_id=0, bos_id=1, eos_id=2, pad_id=-1, num_threads=2, seed_sentencepiece_size=20000)
    return prefix + ".model"


def build_tokenizer(spm_model, out):
    """tokenizer.json in the hub's XLM-R form (what XLMRobertaTokenizerFast wrote for years)."""
    from sentencepiece import sentencepiece_model_pb2 as pb
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers, processors
    from tokenizers.models import Unigram
    from transformers import PreTrainedTokenizerFast

    proto = pb.ModelProto()
    with open(spm_model, "rb") as f:
        proto.ParseFromString(f.read())
    vocab = [("<s>", 0.0), ("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0)]
    vocab += [(p.piece, p.score) for p in proto.pieces[3:]]
    vocab += [("<mask>", 0.0)]
    tk = Tokenizer(Unigram(vocab, unk_id=3, byte_fallback=False))
    tk.normalizer = normalizers.Sequence([normalizers.Precompiled(proto.normalizer_spec.precompiled_charsmap),
                                          normalizers.Replace(Regex(" {2,}"), " ")])
    tk.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    tk.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    tk.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in
                           ("<s>", "<pad>", "</s>", "<unk>")] + [AddedToken("<mask>", special=True, lstrip=True,
                                                                             normalized=False)])
    tk.post_processor = processors.TemplateProcessing(single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>",
                                                      special_tokens=[("<s>", 0), ("</s>", 2)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<s>", eos_token="</s>", sep_token="</s>",
                                   cls_token="<s>", unk_token="<unk>", pad_token="<pad>", mask_token="<mask>",
                                   model_input_names=["input_ids", "attention_mask"])
    os.makedirs(out, exist_ok=True)
    fast.save_pretrained(out)
    shutil.copy(spm_model, os.path.join(out, "sentencepiece.bpe.model"))
    return fast, len(vocab)


def perturb(model, torch):
    with torch.no_grad():  # biases and norms away from their 0 / 1 init, so every one is tested
        for name, p in model.named_parameters():
            if name.endswith("bias") or "LayerNorm" in name:
                p.add_(torch.randn_like(p) * 0.2)


def config(n_vocab, **kw):
    from transformers import XLMRobertaConfig
    return XLMRobertaConfig(vocab_size=n_vocab, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                            intermediate_size=64, max_position_embeddings=64 + 2, type_vocab_size=1, pad_token_id=1,
                            bos_token_id=0, eos_token_id=2, initializer_range=0.3, **kw)


def embedder(fast, n_vocab, out):
    import torch
    from sentence_transformers import SentenceTransformer
    from transformers import XLMRobertaModel

    torch.manual_seed(41)
    model = XLMRobertaModel(config(n_vocab), add_pooling_layer=False).eval()
    perturb(model, torch)
    model.save_pretrained(out, safe_serialization=True)
    os.makedirs(os.path.join(out, "1_Pooling"), exist_ok=True)
    with open(os.path.join(out, "1_Pooling", "config.json"), "w") as f:
        json.dump({"word_embedding_dimension": 32, "pooling_mode_cls_token": False, "pooling_mode_mean_tokens": True,
                   "pooling_mode_max_tokens": False, "pooling_mode_mean_sqrt_len_tokens": False}, f, indent=1)
    with open(os.path.join(out, "modules.json"), "w") as f:
        json.dump([{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                   {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
                   {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}],
                  f, indent=1)
    with open(os.path.join(out, "sentence_bert_config.json"), "w") as f:
        json.dump({"max_seq_length": 48, "do_lower_case": False}, f)
    st = SentenceTransformer(out, device="cpu")
    emb = st.encode(EMBED_TEXTS, convert_to_numpy=True, normalize_embeddings=False).astype(np.float32)
    n_tok = [len(st.tokenize([t])["input_ids"][0]) for t in EMBED_TEXTS]
    np.savez(os.path.join(HERE, "xlmr_embeddings.npz"), texts=np.array(EMBED_TEXTS), embeddings=emb,
             n_tokens=np.array(n_tok), max_seq_length=np.array(st.max_seq_length))


def reranker(fast, n_vocab, out):
    import torch
    from transformers import XLMRobertaForSequenceClassification

    torch.manual_seed(43)
    model = XLMRobertaForSequenceClassification(config(n_vocab, num_labels=1)).eval()
    perturb(model, torch)
    model.save_pretrained(out, safe_serialization=True)
    enc = fast([RERANK_QUERY] * len(RERANK_DOCS), RERANK_DOCS, padding=True, return_tensors="pt")
    with torch.no_grad():
        scores = model(**enc).logits[:, 0].tolist()
    pairs = [fast(RERANK_QUERY, d)["input_ids"] for d in RERANK_DOCS]
    with open(os.path.join(HERE, "tiny_xlmr_reranker.json"), "w") as f:
        json.dump({"query": RERANK_QUERY, "documents": RERANK_DOCS, "scores": scores, "input_ids": pairs}, f,
                  indent=1, ensure_ascii=False)


def tokens_fixture(folder):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
    tok.no_truncation()
    tok.no_padding()
    ss = strings() + MULTI
    ids = [tok.encode(s).ids for s in ss]
    with open(os.path.join(HERE, "xlmr_tokens.json"), "w", encoding="utf-8") as f:
        json.dump({"strings": ss, "ids": ids}, f, ensure_ascii=False)


if __name__ == "__main__":
    emb_dir, rr_dir = os.path.join(HERE, "tiny-xlmr"), os.path.join(HERE, "tiny-xlmr-reranker")
    for d in (emb_dir, rr_dir):
        shutil.rmtree(d, ignore_errors=True)
    with tempfile.TemporaryDirectory() as work:
        model_file = train_spm(work)
        fast, n_vocab = build_tokenizer(model_file, emb_dir)
        build_tokenizer(model_file, rr_dir)
    tokens_fixture(emb_dir)
    embedder(fast, n_vocab, emb_dir)
    reranker(fast, n_vocab, rr_dir)
    for d in (emb_dir, rr_dir):
        llama_cpp_convert(d, d + ".llamacpp.gguf")
