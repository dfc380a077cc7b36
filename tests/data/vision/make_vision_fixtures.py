"""Records the Gemma 3 vision references edgellm's tests compare against (tests/test_vision.py).
Needs torch and transformers (not requirements of edgellm) and llama.cpp's convert_hf_to_gguf.py;
run from the repository root:
    /work/venv-ref/bin/python tests/data/vision/make_vision_fixtures.py [LLAMA_CPP_DIR]
It builds a tiny random-weight Gemma3ForConditionalGeneration (SigLIP tower: 112 px, 14 px
patches -> 64 patches, pooled 2x2 to 16 soft tokens; text: tests/hf_checkpoints.py's gemma3
widths, 6 layers in Gemma 3's 5 local : 1 global pattern (the one llama.cpp's converter implies:
it writes no pattern key) with an 8-token window, so image blocks straddle the window, on
tests/data/hf/spm.model plus Gemma 3's five added tokens), saves it as a checkpoint,
converts it with llama.cpp's converter (gemma3-tiny.gguf, F32, and mmproj-gemma3-tiny.gguf,
`--mmproj`; mmproj-gemma3-tiny-f16.gguf, F16 as published projectors are), keeps the checkpoint
as hf-gemma3/ (tests/test_vision_convert.py converts it with `edgellm convert` and compares with
these files), and records with transformers' own Gemma3Processor (PIL image backend) and model:
  gemma3.npz  per reference image i: prompt_i (rendered chat text), ids_i (input_ids),
              pixels_i (pixel_values), logprobs_i (first-step log-softmax), greedy_i (8 tokens);
              pre_pixels_j for the 20 preprocessing images of tests/vision_images.py
Recorded with torch 2.14.1 (CPU), transformers 5.25.0, Pillow 13.0.0."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, TESTS)
import vision_images  # noqa: E402

SPM_MODEL = os.path.join(TESTS, "data", "hf", "spm.model")
ADDED = ["<start_of_turn>", "<end_of_turn>", "<start_of_image>", "<end_of_image>", "<image_soft_token>"]
GEMMA3_TEMPLATE = (
    "{{ bos_token }}\n"
    "{%- if messages[0]['role'] == 'system' -%}\n"
    "    {%- if messages[0]['content'] is string -%}\n"
    "        {%- set first_user_prefix = messages[0]['content'] + '\\n\\n' -%}\n"
    "    {%- else -%}\n"
    "        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\\n\\n' -%}\n"
    "    {%- endif -%}\n"
    "    {%- set loop_messages = messages[1:] -%}\n"
    "{%- else -%}\n"
    "    {%- set first_user_prefix = \"\" -%}\n"
    "    {%- set loop_messages = messages -%}\n"
    "{%- endif -%}\n"
    "{%- for message in loop_messages -%}\n"
    "    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}\n"
    "        {{ raise_exception(\"Conversation roles must alternate user/assistant/user/assistant/...\") }}\n"
    "    {%- endif -%}\n"
    "    {%- if (message['role'] == 'assistant') -%}\n"
    "        {%- set role = \"model\" -%}\n"
    "    {%- else -%}\n"
    "        {%- set role = message['role'] -%}\n"
    "    {%- endif -%}\n"
    "    {{ '<start_of_turn>' + role + '\\n' + (first_user_prefix if loop.first else \"\") }}\n"
    "    {%- if message['content'] is string -%}\n"
    "        {{ message['content'] | trim }}\n"
    "    {%- elif message['content'] is iterable -%}\n"
    "        {%- for item in message['content'] -%}\n"
    "            {%- if item['type'] == 'image' -%}\n"
    "                {{ '<start_of_image>' }}\n"
    "            {%- elif item['type'] == 'text' -%}\n"
    "                {{ item['text'] | trim }}\n"
    "            {%- endif -%}\n"
    "        {%- endfor -%}\n"
    "    {%- else -%}\n"
    "        {{ raise_exception(\"Invalid content type\") }}\n"
    "    {%- endif -%}\n"
    "    {{ '<end_of_turn>\\n' }}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}\n"
    "    {{'<start_of_turn>model\\n'}}\n"
    "{%- endif -%}\n")
IMAGE_SIZE, PATCH, MM_TOKENS = 112, 14, 16
QUESTIONS = ["Describe this image.", "What is in the picture?", "Count the shapes."]
N_GREEDY = 8


def config() -> dict:
    text = {"model_type": "gemma3_text", "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 6,
            "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "query_pre_attn_scalar": 16,
            "max_position_embeddings": 1024, "rms_norm_eps": 1e-6, "vocab_size": 400 + len(ADDED),
            "hidden_activation": "gelu_pytorch_tanh", "sliding_window": 8,
            "layer_types": ["sliding_attention"] * 5 + ["full_attention"], "rope_theta": 1000000.0,
            "rope_local_base_freq": 10000.0, "final_logit_softcapping": None, "attn_logit_softcapping": None,
            "bos_token_id": 2, "eos_token_id": 1, "pad_token_id": 0, "tie_word_embeddings": True}
    vision = {"model_type": "siglip_vision_model", "hidden_size": 32, "intermediate_size": 64,
              "num_hidden_layers": 2, "num_attention_heads": 4, "num_channels": 3, "image_size": IMAGE_SIZE,
              "patch_size": PATCH, "layer_norm_eps": 1e-6, "hidden_act": "gelu_pytorch_tanh",
              "vision_use_head": False}
    return {"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3", "text_config": text,
            "vision_config": vision, "mm_tokens_per_image": MM_TOKENS, "boi_token_index": 402,
            "eoi_token_index": 403, "image_token_index": 404, "initializer_range": 0.02,
            "tie_word_embeddings": True, "torch_dtype": "float32"}


def randomize(model, seed=0):
    """Weights at scales that make every part matter (transformers' init leaves near-flat logits)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            r = torch.randn(p.shape, generator=g, dtype=torch.float32)
            if "embed_tokens" in name:
                p.copy_(r * 0.5 / 8)
            elif "patch_embedding.weight" in name:
                p.copy_(r * 0.05)
            elif "position_embedding" in name:
                p.copy_(r * 0.3)
            elif "layer_norm" in name and name.endswith("weight") or "post_layernorm.weight" in name:
                p.copy_(1 + r * 0.1)       # SigLIP LayerNorm: w as is
            elif "norm" in name and name.endswith("weight"):
                p.copy_(r * 0.1)           # Gemma RMSNorm: 1 + w
            elif name.endswith("bias"):
                p.copy_(r * 0.1)
            else:
                p.copy_(r * 0.15)
            if "mm_input_projection" in name:  # llama.cpp's converter stores it as F16
                p.copy_(p.half().float())


def save_checkpoint(model, cfg, d):
    """The published Gemma 3 layout (language_model.model.*, vision_tower.vision_model.*,
    multi_modal_projector.*), which llama.cpp's converter maps; transformers reads it too."""
    from safetensors.torch import save_file

    rename = (("model.language_model.", "language_model.model."), ("model.vision_tower.", "vision_tower.vision_model."),
              ("model.multi_modal_projector.", "multi_modal_projector."))
    sd = {}
    for k, v in model.state_dict().items():
        if k == "lm_head.weight":
            continue  # tied
        for a, b in rename:
            if k.startswith(a):
                k = b + k[len(a):]
        sd[k] = v.contiguous()
    save_file(sd, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    cfg.save_pretrained(d)


def write_tokenizer(d):
    shutil.copy(SPM_MODEL, os.path.join(d, "tokenizer.model"))
    added = {str(400 + i): {"content": t, "lstrip": False, "normalized": False, "rstrip": False,
                            "single_word": False, "special": True} for i, t in enumerate(ADDED)}
    with open(os.path.join(d, "added_tokens.json"), "w") as f:
        json.dump({t: 400 + i for i, t in enumerate(ADDED)}, f)
    cfg = {"tokenizer_class": "GemmaTokenizer", "bos_token": "<s>", "eos_token": "<end_of_turn>",
           "pad_token": "<pad>", "unk_token": "<unk>", "add_bos_token": True, "add_eos_token": False,
           "added_tokens_decoder": added, "chat_template": GEMMA3_TEMPLATE,
           "extra_special_tokens": {"boi_token": "<start_of_image>", "eoi_token": "<end_of_image>",
                                    "image_token": "<image_soft_token>"},
           "boi_token": "<start_of_image>", "eoi_token": "<end_of_image>", "image_token": "<image_soft_token>",
           "processor_class": "Gemma3Processor", "model_max_length": 1024, "spaces_between_special_tokens": False}
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    with open(os.path.join(d, "chat_template.jinja"), "w") as f:
        f.write(GEMMA3_TEMPLATE)
    pre = {"image_processor_type": "Gemma3ImageProcessor", "do_convert_rgb": True, "do_normalize": True,
           "do_rescale": True, "do_resize": True, "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5],
           "resample": 2, "rescale_factor": 1 / 255, "size": {"height": IMAGE_SIZE, "width": IMAGE_SIZE},
           "image_seq_length": MM_TOKENS, "do_pan_and_scan": None, "processor_class": "Gemma3Processor"}
    with open(os.path.join(d, "preprocessor_config.json"), "w") as f:
        json.dump(pre, f, indent=1)
    with open(os.path.join(d, "processor_config.json"), "w") as f:
        json.dump({"image_seq_length": MM_TOKENS, "processor_class": "Gemma3Processor"}, f)


def spm_pieces():
    """(sentencepiece processor, vocab, merges) of tests/data/hf/spm.model: its BPE rebuilt from the
    pieces (the venv has no protobuf for transformers' own SentencePiece extraction)."""
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=SPM_MODEL)
    n = sp.get_piece_size()
    vocab = {sp.id_to_piece(i): i for i in range(n)}
    merges = []
    for i in range(n):
        p = sp.id_to_piece(i)
        if sp.is_control(i) or sp.is_unknown(i) or sp.is_byte(i) or len(p) < 2:
            continue
        splits = sorted((vocab[p[:k]], vocab[p[k:]], p[:k], p[k:]) for k in range(1, len(p))
                        if p[:k] in vocab and p[k:] in vocab)
        merges += [(a, b) for _, _, a, b in splits]
    return sp, vocab, merges


def load_back(cls, d):
    """The checkpoint in `d` as transformers reads it (F32, eager attention); every tensor used."""
    model, info = cls.from_pretrained(d, dtype=torch.float32, output_loading_info=True, attn_implementation="eager")
    if any(info.values()):
        sys.exit(f"transformers did not load the checkpoint as written: {info}")
    return model.eval()


def convert(llama_cpp, d, name, out, outtype="f32", mmproj=False):
    """llama.cpp's convert_hf_to_gguf.py on `d` (--model-name: else the temporary folder's name
    makes the files differ per run)."""
    env = dict(os.environ, PYTHONPATH=os.path.join(llama_cpp, "gguf-py"))
    subprocess.run([sys.executable, os.path.join(llama_cpp, "convert_hf_to_gguf.py"), d, "--model-name", name,
                    "--outtype", outtype, *(["--mmproj"] if mmproj else []), "--outfile", os.path.join(HERE, out)],
                   check=True, env=env)


def keep_checkpoint(d, name):
    """Copies the checkpoint folder `d` to hf-<name>/ beside this script: tests convert it with
    `edgellm convert` (no torch) and compare with the llama.cpp files converted from it here."""
    dst = os.path.join(HERE, f"hf-{name}")
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(d, dst)


def greedy_reference(model, ids, n, step):
    """(first step's log-softmax as float32, n greedy tokens): step(ids) gives the forward's other
    inputs for the ids so far."""
    greedy, first = [], None
    with torch.no_grad():
        for _ in range(n):
            logits = model(input_ids=ids, attention_mask=torch.ones_like(ids), **step(ids)).logits[0, -1].double()
            lp = torch.log_softmax(logits, -1)
            if first is None:
                first = lp.numpy().astype(np.float32)
            t = int(torch.argmax(lp))
            greedy.append(t)
            ids = torch.cat([ids, torch.tensor([[t]])], 1)
    return first, np.array(greedy, dtype=np.int32)


def hf_tokenizer():
    """transformers' GemmaTokenizer of tests/data/hf/spm.model plus ADDED (built from the pieces: the
    venv has no protobuf for transformers' own SentencePiece extraction); checked against
    sentencepiece itself."""
    from transformers import GemmaTokenizer

    sp, vocab, merges = spm_pieces()
    n = len(vocab)
    for i, t in enumerate(ADDED):
        vocab[t] = n + i
    tok = GemmaTokenizer(vocab=vocab, merges=merges, bos_token="<s>", eos_token="<end_of_turn>",
                         unk_token="<unk>", pad_token="<pad>",
                         extra_special_tokens={"boi_token": ADDED[2], "eoi_token": ADDED[3], "image_token": ADDED[4]})
    tok.add_special_tokens({"additional_special_tokens": ADDED})
    for s in QUESTIONS + ["Hello world, the quick brown fox 123 jumps.\n\nünïcödé  x", "user\n", "model\n"]:
        if tok.encode(s, add_special_tokens=False) != sp.encode(s):
            sys.exit(f"the HF tokenizer differs from sentencepiece on {s!r}")
    assert tok.convert_tokens_to_ids(ADDED) == list(range(400, 405))
    assert (tok.boi_token_id, tok.eoi_token_id, tok.image_token_id) == (402, 403, 404)
    return tok


def processor():
    from transformers import Gemma3Processor
    from transformers.models.gemma3.image_processing_pil_gemma3 import Gemma3ImageProcessorPil

    ip = Gemma3ImageProcessorPil(size={"height": IMAGE_SIZE, "width": IMAGE_SIZE}, image_mean=[0.5] * 3,
                                 image_std=[0.5] * 3, resample=2, do_pan_and_scan=False)
    return Gemma3Processor(image_processor=ip, tokenizer=hf_tokenizer(), chat_template=GEMMA3_TEMPLATE,
                           image_seq_length=MM_TOKENS), ip


def main():
    llama_cpp = sys.argv[1] if len(sys.argv) > 1 else "/work/peers/llama.cpp"
    from transformers import Gemma3Config, Gemma3ForConditionalGeneration
    from PIL import Image

    out = {}
    with tempfile.TemporaryDirectory() as d:
        cfg = Gemma3Config(**{k: v for k, v in config().items() if k not in ("architectures", "model_type")})
        cfg.architectures = ["Gemma3ForConditionalGeneration"]
        torch.manual_seed(0)
        model = Gemma3ForConditionalGeneration(cfg).float()
        randomize(model)
        model.eval()
        save_checkpoint(model, cfg, d)
        write_tokenizer(d)
        model = load_back(Gemma3ForConditionalGeneration, d)
        proc, ip = processor()

        convert(llama_cpp, d, "gemma3-tiny", "gemma3-tiny.gguf")
        convert(llama_cpp, d, "gemma3-tiny", "mmproj-gemma3-tiny.gguf", mmproj=True)
        convert(llama_cpp, d, "gemma3-tiny", "mmproj-gemma3-tiny-f16.gguf", "f16", mmproj=True)
        keep_checkpoint(d, "gemma3")

        for i, q in enumerate(QUESTIONS):
            img = Image.open(os.path.join(HERE, f"image{i}.png"))
            messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": q}]}]
            text = proc.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
            inputs = proc(text=text, images=[img], return_tensors="pt")
            tt = inputs["token_type_ids"]

            def step(ids):  # generated tokens are text (type 0)
                pad = torch.zeros((1, ids.shape[1] - tt.shape[1]), dtype=tt.dtype)
                return {"pixel_values": inputs["pixel_values"], "token_type_ids": torch.cat([tt, pad], 1)}
            first, greedy = greedy_reference(model, inputs["input_ids"], N_GREEDY, step)
            out[f"prompt_{i}"] = np.array(text)
            out[f"ids_{i}"] = inputs["input_ids"][0].numpy().astype(np.int32)
            out[f"pixels_{i}"] = inputs["pixel_values"][0].numpy().astype(np.float32)
            out[f"logprobs_{i}"] = first
            out[f"greedy_{i}"] = greedy
            print(i, repr(text[:80]), "greedy", greedy)
        for j, arr in enumerate(vision_images.preprocessing_images()):
            pv = ip(images=[vision_images.to_pil(arr)], return_tensors="np")["pixel_values"][0]
            out[f"pre_pixels_{j}"] = pv.astype(np.float32)
    np.savez_compressed(os.path.join(HERE, "gemma3.npz"), **out)
    print("wrote", os.path.join(HERE, "gemma3.npz"))


if __name__ == "__main__":
    main()
