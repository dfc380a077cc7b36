"""Records the SmolVLM (Idefics3) vision references edgellm's tests compare against
(tests/test_vision_smolvlm.py). Needs torch and transformers (not requirements of edgellm) and
llama.cpp's convert_hf_to_gguf.py; run from the repository root:
    /work/venv-ref/bin/python tests/data/vision/make_smolvlm_fixtures.py [LLAMA_CPP_DIR]
It builds a tiny random-weight SmolVLMForConditionalGeneration (SigLIP tower: 64 px tiles, 8 px
patches -> 64 patches, pixel-shuffled 2x2 to 16 tokens a tile; the processor resizes the longest
edge to 192 px, so an image is up to 3 x 3 tiles plus the global image; text: a 4-layer Llama on
tests/data/hf/spm.model plus SmolVLM's added tokens), saves it in the published layout
(model.text_model.*, model.vision_model.*, model.connector.*), converts it with llama.cpp's
converter (smolvlm-tiny.gguf, F32, and mmproj-smolvlm-tiny.gguf, `--mmproj`; mmproj-smolvlm-tiny-f16.gguf,
F16), keeps the checkpoint as hf-smolvlm/ (for tests/test_vision_convert.py) and records with
transformers' own SmolVLMProcessor (PIL image backend) and model:
  smolvlm.npz  per reference image i: prompt_i (rendered chat text), ids_i (input_ids),
               pixels_i (pixel_values: tiles then the global image), logprobs_i (first-step
               log-softmax), greedy_i (8 tokens);
               per preprocessing image j of tests/vision_images.py: pre_pixels_j, pre_grid_j (rows, cols)
The text GGUF's SentencePiece vocabulary gets llama.cpp's space prefix before every text fragment
(tokenizer.ggml.model 'llama'); the transformers tokenizer is built to do the same (Metaspace,
prepend 'always'), and checked against sentencepiece on space-prefixed text.
Recorded with torch 2.14.1 (CPU), transformers 5.25.0, Pillow 13.0.0."""
import json
import os
import shutil
import sys
import tempfile

import numpy as np
import torch

from make_vision_fixtures import HERE, SPM_MODEL, convert, greedy_reference, load_back, spm_pieces, vision_images
GRID = 3  # row / column marker tokens up to <row_3_col_3>
ADDED = (["<|im_start|>", "<end_of_utterance>", "<fake_token_around_image>", "<image>", "<global-img>"] +
         [f"<row_{r}_col_{c}>" for r in range(1, GRID + 1) for c in range(1, GRID + 1)])
N_SPM = 400
IMAGE_ID = N_SPM + ADDED.index("<image>")
TEMPLATE = ("<|im_start|>{% for message in messages %}{{message['role'] | capitalize}}{% if message['content'] is "
            "string %}{{': ' + message['content']}}{% else %}{% if message['content'][0]['type'] == 'image' %}"
            "{{':'}}{% else %}{{': '}}{% endif %}{% for line in message['content'] %}{% if line['type'] == 'text' %}"
            "{{line['text']}}{% elif line['type'] == 'image' %}{{ '<image>' }}{% endif %}{% endfor %}{% endif %}"
            "<end_of_utterance>\n{% endfor %}{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}")
TILE, PATCH, SCALE, LONGEST = 64, 8, 2, 192
SEQ_LEN = (TILE // PATCH) ** 2 // SCALE ** 2
# the reference images: (height, width) -> 3x2, 3x3 and 1x3 tiles
REFERENCE_SHAPES = [(150, 100), (40, 50), (30, 200)]
QUESTIONS = ["Describe this image.", "What is in the picture?", "Count the shapes."]
N_GREEDY = 8


def config() -> dict:
    text = {"model_type": "llama", "architectures": ["VLlama3ForCausalLM"], "hidden_size": 64,
            "intermediate_size": 96, "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
            "head_dim": 16, "max_position_embeddings": 1024, "rms_norm_eps": 1e-5, "vocab_size": N_SPM + len(ADDED),
            "hidden_act": "silu", "rope_theta": 100000.0, "bos_token_id": 1, "eos_token_id": N_SPM + 1,
            "pad_token_id": 0, "tie_word_embeddings": False}
    vision = {"model_type": "smolvlm_vision", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_channels": 3, "image_size": TILE, "patch_size": PATCH,
              "layer_norm_eps": 1e-6, "hidden_act": "gelu_pytorch_tanh"}
    return {"text_config": text, "vision_config": vision, "scale_factor": SCALE, "image_token_id": IMAGE_ID,
            "tie_word_embeddings": False}


def randomize(model, seed=0):
    """Weights at scales that make every part matter (transformers' init leaves near-flat logits)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            r = torch.randn(p.shape, generator=g, dtype=torch.float32)
            if "embed_tokens" in name:
                p.copy_(r * 0.5)
            elif "patch_embedding.weight" in name:
                p.copy_(r * 0.05)
            elif "position_embedding" in name:
                p.copy_(r * 0.3)
            elif "norm" in name and name.endswith("weight"):
                p.copy_(1 + r * 0.1)  # LayerNorm and Llama's RMSNorm: w as is
            elif name.endswith("bias"):
                p.copy_(r * 0.1)
            else:
                p.copy_(r * 0.15)
            if name == "lm_head.weight":  # control and added tokens never the greedy pick (they end a turn)
                p[:3] = 0
                p[N_SPM:] = 0


def write_spm_tokenizer(d, added_tokens, template, eos):
    """tests/data/hf/spm.model with `added_tokens` after its 400 pieces, for llama.cpp's converter."""
    shutil.copy(SPM_MODEL, os.path.join(d, "tokenizer.model"))
    with open(os.path.join(d, "added_tokens.json"), "w") as f:
        json.dump({t: N_SPM + i for i, t in enumerate(added_tokens)}, f)
    added = {str(N_SPM + i): {"content": t, "lstrip": False, "normalized": False, "rstrip": False,
                              "single_word": False, "special": True} for i, t in enumerate(added_tokens)}
    cfg = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": eos,
           "pad_token": "<pad>", "unk_token": "<unk>", "add_bos_token": False, "add_eos_token": False,
           "added_tokens_decoder": added, "chat_template": template, "model_max_length": 1024}
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    with open(os.path.join(d, "chat_template.jinja"), "w") as f:
        f.write(template)


def write_tokenizer(d):
    write_spm_tokenizer(d, ADDED, TEMPLATE, "<end_of_utterance>")
    pre = {"image_processor_type": "SmolVLMImageProcessor", "do_convert_rgb": True, "do_normalize": True,
           "do_rescale": True, "do_resize": True, "do_pad": True, "do_image_splitting": True,
           "image_mean": [0.5] * 3, "image_std": [0.5] * 3, "resample": 1, "rescale_factor": 1 / 255,
           "size": {"longest_edge": LONGEST}, "max_image_size": {"longest_edge": TILE},
           "processor_class": "SmolVLMProcessor"}
    with open(os.path.join(d, "preprocessor_config.json"), "w") as f:
        json.dump(pre, f, indent=1)
    with open(os.path.join(d, "processor_config.json"), "w") as f:
        json.dump({"image_seq_len": SEQ_LEN, "processor_class": "SmolVLMProcessor"}, f)


def hf_tokenizer(added=ADDED, eos="<end_of_utterance>"):
    """A transformers tokenizer of tests/data/hf/spm.model's pieces plus `added` that, like llama.cpp's
    'llama' SentencePiece tokenizer, puts a space before every text fragment (Metaspace 'always');
    checked against sentencepiece on the space-prefixed text."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    sp, vocab, merges = spm_pieces()
    assert len(vocab) == N_SPM
    t = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    t.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always", split=False)
    t.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()])
    t.add_special_tokens([AddedToken(a, special=True, normalized=False) for a in added])
    tok = PreTrainedTokenizerFast(tokenizer_object=t, bos_token="<s>", eos_token=eos, unk_token="<unk>",
                                  pad_token="<pad>")
    for s in QUESTIONS + ["Hello world, the quick brown fox 123 jumps.\n\nünïcödé  x", "User:", "\nAssistant:"]:
        if tok.encode(s, add_special_tokens=False) != sp.encode(" " + s):
            sys.exit(f"the HF tokenizer differs from sentencepiece on {s!r}")
    assert tok.convert_tokens_to_ids(added) == list(range(N_SPM, N_SPM + len(added)))
    return tok


def skip_video_check(cls):
    """The processor's video class lookup fails without torchvision; images only here."""
    check = cls.check_argument_for_proper_class

    def check_but_video(self, name, arg):
        return None if name == "video_processor" else check(self, name, arg)
    cls.check_argument_for_proper_class = check_but_video


def processor():
    from transformers import SmolVLMProcessor
    from transformers.models.smolvlm import processing_smolvlm
    from transformers.models.smolvlm.image_processing_pil_smolvlm import SmolVLMImageProcessorPil

    processing_smolvlm.num2words = str  # used for videos only; the package is not installed
    ip = SmolVLMImageProcessorPil(size={"longest_edge": LONGEST}, max_image_size={"longest_edge": TILE},
                                  image_mean=[0.5] * 3, image_std=[0.5] * 3, do_image_splitting=True)

    from transformers.models.smolvlm.video_processing_smolvlm import SmolVLMVideoProcessor
    skip_video_check(SmolVLMProcessor)
    proc = SmolVLMProcessor(image_processor=ip, tokenizer=hf_tokenizer(), video_processor=SmolVLMVideoProcessor(),
                            image_seq_len=SEQ_LEN, chat_template=TEMPLATE)
    return proc, ip


def reference_image(i):
    from PIL import Image
    h, w = REFERENCE_SHAPES[i]
    return Image.fromarray(vision_images.image_array(h, w, 3, 200 + i), "RGB")


def main():
    llama_cpp = sys.argv[1] if len(sys.argv) > 1 else "/work/peers/llama.cpp"
    from transformers import SmolVLMConfig, SmolVLMForConditionalGeneration

    out = {}
    with tempfile.TemporaryDirectory() as d:
        cfg = SmolVLMConfig(**config())
        cfg.architectures = ["SmolVLMForConditionalGeneration"]
        torch.manual_seed(0)
        model = SmolVLMForConditionalGeneration(cfg).float()
        randomize(model)
        model.eval()
        from safetensors.torch import save_file
        save_file({k: v.contiguous() for k, v in model.state_dict().items()}, os.path.join(d, "model.safetensors"),
                  metadata={"format": "pt"})
        cfg.save_pretrained(d)
        write_tokenizer(d)
        model = load_back(SmolVLMForConditionalGeneration, d)
        proc, ip = processor()
        convert(llama_cpp, d, "smolvlm-tiny", "smolvlm-tiny.gguf")
        convert(llama_cpp, d, "smolvlm-tiny", "mmproj-smolvlm-tiny.gguf", mmproj=True)
        convert(llama_cpp, d, "smolvlm-tiny", "mmproj-smolvlm-tiny-f16.gguf", "f16", mmproj=True)
        from make_vision_fixtures import keep_checkpoint
        keep_checkpoint(d, "smolvlm")

        for i, q in enumerate(QUESTIONS):
            img = reference_image(i)
            img.save(os.path.join(HERE, f"smolvlm_image{i}.png"))
            messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": q}]}]
            text = proc.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
            inputs = proc(text=text, images=[img], return_tensors="pt")
            first, greedy = greedy_reference(model, inputs["input_ids"], N_GREEDY, lambda ids: {
                "pixel_values": inputs["pixel_values"], "pixel_attention_mask": inputs["pixel_attention_mask"]})
            out[f"prompt_{i}"] = np.array(text)
            out[f"ids_{i}"] = inputs["input_ids"][0].numpy().astype(np.int32)
            out[f"pixels_{i}"] = inputs["pixel_values"][0].numpy().astype(np.float32)
            out[f"logprobs_{i}"] = first
            out[f"greedy_{i}"] = greedy
            print(i, repr(text[:80]), inputs["pixel_values"].shape, "greedy", greedy)
        for j, arr in enumerate(vision_images.preprocessing_images()):
            r = ip(images=[vision_images.to_pil(arr)], return_tensors="np", return_row_col_info=True)
            out[f"pre_pixels_{j}"] = r["pixel_values"][0].astype(np.float32)
            out[f"pre_grid_{j}"] = np.array([r["rows"][0][0], r["cols"][0][0]], dtype=np.int32)
    np.savez_compressed(os.path.join(HERE, "smolvlm.npz"), **out)
    print("wrote", os.path.join(HERE, "smolvlm.npz"))


if __name__ == "__main__":
    main()
