"""Records the decoder-reranker references of tests/test_encoders_rerank_decoder.py (issue 41:
Qwen3-Reranker, which scores a yes/no answer token), with the shared reference venv:

    /work/venv-ref/bin/python tests/data/encoders/make_qwen3_reranker_fixtures.py

Writes, beside this script:
  tiny-qwen3-reranker/        a random-weight transformers Qwen3ForCausalLM (untied lm_head) with a small
                              byte-level BPE trained here (Qwen2's pre-tokenizer split, the ChatML and
                              think markers as special tokens, "yes" and "no" single tokens)
  tiny-qwen3-reranker.llamacpp.gguf
                              llama.cpp's convert_hf_to_gguf.py output (--outtype f32): it recognises a
                              Qwen3 reranker by the folder name and writes pooling_type rank, cls.output
                              (the lm_head rows of "yes" and "no") and the "rerank" chat template. Its
                              BPE pre-tokenizer check (a hash of known vocabularies) is answered "qwen2".
  tiny_qwen3_reranker.json    for QUERY and DOCS: the prompt ids (the rerank template filled, as
                              tokenizers encodes it) and transformers' scores: softmax over the last
                              position's logits of ("yes", "no"), first = P(yes), Qwen3-Reranker's score
Recorded with torch 2.x CPU, transformers 5.25.0, tokenizers 0.23.3."""
import json
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from llama_cpp_convert import llama_cpp_convert  # noqa: E402
OUT = os.path.join(HERE, "tiny-qwen3-reranker")
# llama.cpp's rerank template for Qwen3 rerankers (conversion/qwen.py), {query} / {document} filled
TEMPLATE = ("<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the Instruct "
            "provided. Note that the answer can only be \"yes\" or \"no\".<|im_end|>\n"
            "<|im_start|>user\n<Instruct>: Given a web search query, retrieve relevant passages that answer the query\n"
            "<Query>: {query}\n<Document>: {document}<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n")
QUERY = "what is a panda"
DOCS = ["hi", "it is a bear", "The giant panda is a bear species endemic to China.", "pandas eat bamboo",
        "the weather is nice today", "Der Panda ist ein Bär."]
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
               r"|\s+(?!\S)|\s+")


def tokenizer():
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated"),
                                                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tk.decoder = decoders.ByteLevel()
    corpus = [TEMPLATE.format(query=QUERY, document=d) for d in DOCS] * 20 + ["yes no yes no"] * 50 + DOCS * 10
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tk.train_from_iterator(corpus, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tk, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    assert fast.convert_tokens_to_ids("yes") != fast.unk_token_id and fast.convert_tokens_to_ids("no") is not None
    return fast


def main():
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    shutil.rmtree(OUT, ignore_errors=True)
    fast = tokenizer()
    fast.save_pretrained(OUT)
    torch.manual_seed(53)
    cfg = Qwen3Config(vocab_size=len(fast), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=512,
                      rms_norm_eps=1e-6, tie_word_embeddings=False, initializer_range=0.2,
                      rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
                      bos_token_id=None, eos_token_id=fast.convert_tokens_to_ids("<|im_end|>"))
    model = Qwen3ForCausalLM(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(torch.randn_like(p) * 0.2)
    model.save_pretrained(OUT, safe_serialization=True)
    yes, no = fast.convert_tokens_to_ids("yes"), fast.convert_tokens_to_ids("no")
    ids, scores = [], []
    with torch.no_grad():
        for d in DOCS:
            x = fast(TEMPLATE.format(query=QUERY, document=d), add_special_tokens=False)["input_ids"]
            logits = model(input_ids=torch.tensor([x])).logits[0, -1]
            p = torch.softmax(torch.stack([logits[yes], logits[no]]).double(), 0)
            ids.append(x)
            scores.append(float(p[0]))
    with open(os.path.join(HERE, "tiny_qwen3_reranker.json"), "w", encoding="utf-8") as f:
        json.dump({"query": QUERY, "documents": DOCS, "scores": scores, "input_ids": ids, "yes": yes, "no": no}, f,
                  ensure_ascii=False, indent=1)
    llama_cpp_convert(OUT, OUT + ".llamacpp.gguf", pre="qwen2")


if __name__ == "__main__":
    main()
