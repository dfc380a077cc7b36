"""Records the Qwen2.5-VL preprocessing references edgellm's tests compare against
(tests/test_vision_qwen25vl.py). Needs transformers (not a requirement of edgellm); run from the
repository root:
    /work/venv-ref/bin/python tests/data/vision/make_qwen25vl_fixtures.py
transformers' Qwen2VLImageProcessorPil (what Qwen2_5_VLProcessor uses: dynamic resolution by
smart_resize to multiples of 28 px within [min_pixels, max_pixels], bicubic, CLIP's mean / std,
patches of 2 x 14 x 14 in 2 x 2 merge order) on the 20 images of tests/vision_images.py, twice:
with Qwen2.5-VL's published pixel bounds and with a max_pixels small enough to shrink most of them; and the vision tower of a tiny random
Qwen2_5_VLForConditionalGeneration (4 blocks, full attention in blocks 1 and 3, 112 px windows
elsewhere; converted by llama.cpp's --mmproj to mmproj-qwen25vl-tiny.gguf and, F16,
mmproj-qwen25vl-tiny-f16.gguf; the checkpoint kept as hf-qwen25vl/ for tests/test_vision_convert.py) on 3 images.
  qwen25vl.npz  pre_pixels_{k}_{j} (the processor's flattened patches) and pre_grid_{k}_{j}
                (grid_t, grid_h, grid_w) for bounds k (BOUNDS) and image j;
                tower_pixels_i, tower_grid_i, tower_embd_i (the merged embeddings, pooler_output)
Recorded with torch 2.14.1 (CPU), transformers 5.25.0, Pillow 13.0.0 (re-run with torch 2.14.1+cu130 on CPU:
the same bytes). Where the venv's torchvision does not load, run with PYTHONPATH pointing at a
sitecustomize.py holding `import sys; sys.modules['torchvision'] = None`."""
import json
import os
import sys
import tempfile

import numpy as np
import torch

from make_vision_fixtures import HERE, greedy_reference, vision_images

CLIP_MEAN, CLIP_STD = (0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711)

# (min_pixels, max_pixels): Qwen2.5-VL's preprocessor_config.json, and a small budget
BOUNDS = [(3136, 12845056), (3136, 28 * 28 * 48)]

ADDED = ["<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]
TEMPLATE = ("{% for message in messages %}<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}"
            "{{ message['content'] }}{% else %}{% for c in message['content'] %}{% if c['type'] == 'image' %}"
            "<|vision_start|><|image_pad|><|vision_end|>{% elif c['type'] == 'text' %}{{ c['text'] }}{% endif %}"
            "{% endfor %}{% endif %}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
            "{% endif %}")
QUESTIONS = ["Describe this image.", "What is in the picture?", "Count the shapes."]
N_GREEDY = 8
TEXT = {"model_type": "qwen2_5_vl_text", "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 400 + len(ADDED), "rms_norm_eps": 1e-6,
        "bos_token_id": 1, "eos_token_id": 401, "tie_word_embeddings": False,
        "max_position_embeddings": 1024, "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0,
                                                              "mrope_section": [2, 3, 3]}}
VISION = {"depth": 4, "hidden_size": 32, "intermediate_size": 48, "num_heads": 2, "patch_size": 14,
          "spatial_merge_size": 2, "temporal_patch_size": 2, "window_size": 112, "out_hidden_size": 64,
          "fullatt_block_indexes": [1, 3], "hidden_act": "silu"}
# the images whose tower output is recorded: (height, width) -> grids of 6x8, 10x14 (windows cut at the edge), 4x4
TOWER_SHAPES = [(84, 112), (140, 196), (50, 50)]


def randomize(model, seed=0):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            r = torch.randn(p.shape, generator=g, dtype=torch.float32)
            if "norm" in name and name.endswith("weight") or "ln_q" in name:
                p.copy_(1 + r * 0.1)
            elif name.endswith("bias"):
                p.copy_(r * 0.1)
            elif "patch_embed" in name:
                p.copy_(r * 0.05)
            else:
                p.copy_(r * 0.15)
            if name == "lm_head.weight":  # control and added tokens never the greedy pick (they end a turn)
                p[:3] = 0
                p[400:] = 0


def record_tower(out, llama_cpp):
    """A tiny random Qwen2_5_VLForConditionalGeneration's vision tower: llama.cpp's --mmproj file of
    it (mmproj-qwen25vl-tiny.gguf) and its merged embeddings for TOWER_SHAPES."""
    from safetensors.torch import save_file
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
    from make_smolvlm_fixtures import write_spm_tokenizer
    from make_vision_fixtures import convert, keep_checkpoint, load_back

    cfg = Qwen2_5_VLConfig(text_config=TEXT, vision_config=VISION, image_token_id=404, video_token_id=405,
                           vision_start_token_id=402, vision_end_token_id=403, tie_word_embeddings=False)
    cfg.architectures = ["Qwen2_5_VLForConditionalGeneration"]
    torch.manual_seed(0)
    model = Qwen2_5_VLForConditionalGeneration(cfg).float()
    randomize(model)
    with tempfile.TemporaryDirectory() as d:
        # the published layout: visual.*, model.* (text), lm_head
        sd = {}
        for k, v in model.state_dict().items():
            k = k.replace("model.visual.", "visual.").replace("model.language_model.", "model.")
            sd[k] = v.contiguous()
        save_file(sd, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
        cfg.save_pretrained(d)
        with open(os.path.join(d, "preprocessor_config.json"), "w") as f:
            json.dump({"image_processor_type": "Qwen2VLImageProcessor", "min_pixels": 3136, "max_pixels": 12845056,
                       "patch_size": 14, "temporal_patch_size": 2, "merge_size": 2,
                       "image_mean": list(CLIP_MEAN), "image_std": list(CLIP_STD)}, f)
        write_spm_tokenizer(d, ADDED, TEMPLATE, "<|im_end|>")
        model = load_back(Qwen2_5_VLForConditionalGeneration, d)
        convert(llama_cpp, d, "qwen25vl-tiny", "qwen25vl-tiny.gguf")
        convert(llama_cpp, d, "qwen25vl-tiny", "mmproj-qwen25vl-tiny.gguf", mmproj=True)
        convert(llama_cpp, d, "qwen25vl-tiny", "mmproj-qwen25vl-tiny-f16.gguf", "f16", mmproj=True)
        keep_checkpoint(d, "qwen25vl")
    ip = Qwen2VLImageProcessorPil()
    for i, (h, w) in enumerate(TOWER_SHAPES):
        img = vision_images.to_pil((vision_images.image_array(h, w, 3, 300 + i), "RGB"))
        r = ip(images=[img], return_tensors="pt")
        with torch.no_grad():
            emb = model.model.visual(r["pixel_values"], grid_thw=r["image_grid_thw"]).pooler_output
        out[f"tower_grid_{i}"] = r["image_grid_thw"][0].numpy().astype(np.int32)
        out[f"tower_pixels_{i}"] = r["pixel_values"].numpy().astype(np.float32)
        out[f"tower_embd_{i}"] = emb.numpy().astype(np.float32)
        print("tower", i, tuple(r["image_grid_thw"][0].tolist()), tuple(emb.shape))
    record_chat(out, model, ip)


def record_chat(out, model, ip):
    """transformers' Qwen2_5_VLProcessor and model on the tower images with QUESTIONS: the rendered
    prompt, its ids, the first step's log-softmax and N_GREEDY greedy tokens."""
    from transformers import Qwen2_5_VLProcessor
    from make_smolvlm_fixtures import hf_tokenizer, skip_video_check

    skip_video_check(Qwen2_5_VLProcessor)
    proc = Qwen2_5_VLProcessor(image_processor=ip, tokenizer=hf_tokenizer(ADDED, "<|im_end|>"),
                               video_processor=None, chat_template=TEMPLATE)
    for i, q in enumerate(QUESTIONS):
        h, w = TOWER_SHAPES[i]
        img = vision_images.to_pil((vision_images.image_array(h, w, 3, 300 + i), "RGB"))
        img.save(os.path.join(HERE, f"qwen25vl_image{i}.png"))
        messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": q}]}]
        text = proc.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        inputs = proc(text=[text], images=[img], return_tensors="pt")
        mm = inputs["mm_token_type_ids"]  # what get_rope_index needs for M-RoPE (generated tokens: text, 0)

        def step(ids):
            pad = torch.zeros((1, ids.shape[1] - mm.shape[1]), dtype=mm.dtype)
            return {"pixel_values": inputs["pixel_values"], "image_grid_thw": inputs["image_grid_thw"],
                    "mm_token_type_ids": torch.cat([mm, pad], 1)}
        first, greedy = greedy_reference(model, inputs["input_ids"], N_GREEDY, step)
        out[f"prompt_{i}"] = np.array(text)
        out[f"ids_{i}"] = inputs["input_ids"][0].numpy().astype(np.int32)
        out[f"logprobs_{i}"] = first
        out[f"greedy_{i}"] = greedy
        print(i, repr(text), "greedy", greedy)


def main():
    llama_cpp = sys.argv[1] if len(sys.argv) > 1 else "/work/peers/llama.cpp"
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    out = {}
    for k, (lo, hi) in enumerate(BOUNDS):
        ip = Qwen2VLImageProcessorPil(size={"shortest_edge": lo, "longest_edge": hi})
        for j, spec in enumerate(vision_images.preprocessing_images()):
            r = ip(images=[vision_images.to_pil(spec)], return_tensors="np")
            out[f"pre_pixels_{k}_{j}"] = r["pixel_values"].astype(np.float32)
            out[f"pre_grid_{k}_{j}"] = r["image_grid_thw"][0].astype(np.int32)
    record_tower(out, llama_cpp)
    np.savez_compressed(os.path.join(HERE, "qwen25vl.npz"), **out)
    print("wrote", os.path.join(HERE, "qwen25vl.npz"))


if __name__ == "__main__":
    main()
