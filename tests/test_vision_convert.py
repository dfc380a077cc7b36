"""`edgellm convert` on vision-language checkpoints (convert/vlm.py): the tiny random Gemma 3,
SmolVLM and Qwen2.5-VL checkpoints of tests/data/vision/hf-* (kept by the make_*_fixtures.py
recording scripts, the very folders llama.cpp's convert_hf_to_gguf.py converted into the
committed *-tiny.gguf / mmproj-*.gguf files) → our text GGUF and projector GGUF:

- the layout equals llama.cpp's files: every key llama.cpp writes, with its value and type (the
  projector's key set exactly), the same tensor names, types and shapes, and the same bytes;
- the model on our files answers as transformers did (greedy tokens equal, first-step top-5
  log-probs within 0.05), through LLM(model, mmproj=...).chat and the OpenAI API;
- F16 projectors (SmolVLM, Qwen2.5-VL; Gemma 3's in test_vision.py) stay within the bound too."""
import os
import subprocess
import sys

import numpy as np
import pytest

edgellm = pytest.importorskip("edgellm")
pytest.importorskip("PIL")
gguf = pytest.importorskip("gguf")

import test_vision as g3  # noqa: E402
import test_vision_qwen25vl as qw  # noqa: E402
import test_vision_smolvlm as sv  # noqa: E402
from test_vision import DATA, _first_top, _server, check_against_reference, check_openai_chat, greedy  # noqa: E402

# family -> (llama.cpp's text file, its F32 projector, its F16 projector, reference, n_ctx, messages)
FAMILIES = {
    "gemma3": ("gemma3-tiny.gguf", "mmproj-gemma3-tiny.gguf", "mmproj-gemma3-tiny-f16.gguf", "gemma3.npz", 256,
               g3.messages),
    "smolvlm": ("smolvlm-tiny.gguf", "mmproj-smolvlm-tiny.gguf", "mmproj-smolvlm-tiny-f16.gguf", "smolvlm.npz", 512,
                sv.messages),
    "qwen25vl": ("qwen25vl-tiny.gguf", "mmproj-qwen25vl-tiny.gguf", "mmproj-qwen25vl-tiny-f16.gguf", "qwen25vl.npz",
                 256, qw.messages),
}
# The F16 projector's bound. F16 keeps 11 significant bits: each projector weight moves by at
# most 2^-11 (5e-4) of itself, the vision tower's outputs by about that relative amount, and the
# language model sees them as inputs of an 8-token step. Measured on these files (ours equal
# llama.cpp's bytes): max |log-prob difference| over the first step's top 5 of 0.0009 (SmolVLM)
# and 0.0016 (Qwen2.5-VL), against 0.0000 for the F32 projectors. So the F32 bound 0.05
# holds for F16 too, with a 30x margin; a bound looser than that is not needed here (real-size
# towers: more layers, each adding its rounding, stay well inside it by the same estimate).
F16_LOGPROB_TOL = 0.05


def _cli_convert(hf_dir, out, *args):
    r = subprocess.run([sys.executable, "-m", "edgellm", "convert", hf_dir, out, *args], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout


@pytest.fixture(scope="module")
def ours(tmp_path_factory):
    """family -> (text F32, projector F32, projector F16) written by `edgellm convert`."""
    out = {}
    d = tmp_path_factory.mktemp("vlm")
    for fam in FAMILIES:
        text = str(d / f"{fam}.gguf")
        log = _cli_convert(os.path.join(DATA, f"hf-{fam}"), text, "--type", "F32")
        assert f"mmproj-{fam}.gguf" in log  # the projector beside the model, named for auto-discovery
        f16 = str(d / f"mmproj-{fam}-f16.gguf")
        _cli_convert(os.path.join(DATA, f"hf-{fam}"), str(d / f"{fam}-f16-text.gguf"), "--type", "F32",
                     "--mmproj", f16, "--mmproj-type", "F16")
        out[fam] = (text, str(d / f"mmproj-{fam}.gguf"), f16)
    return out


def _read(path):
    r = gguf.GGUFReader(path)
    kv = {k: (v.types[0].name if v.types else None, v.contents()) for k, v in r.fields.items()
          if not k.startswith("GGUF.")}
    return kv, {t.name: t for t in r.tensors}


def _same_layout(theirs_path, ours_path, projector):
    theirs_kv, theirs_t = _read(theirs_path)
    ours_kv, ours_t = _read(ours_path)
    skip = {"general.name", "general.size_label"}  # the name given; a size label llama.cpp derives
    for k, v in theirs_kv.items():
        if k not in skip:
            assert ours_kv.get(k) == v, (k, ours_kv.get(k), v)
    if projector:  # the projector's keys exactly (the text file may carry more keys the engine reads)
        assert set(ours_kv) - skip == set(theirs_kv) - skip
    assert sorted(ours_t) == sorted(theirs_t)
    for n, t in theirs_t.items():
        o = ours_t[n]
        assert (o.tensor_type.name, list(o.shape)) == (t.tensor_type.name, list(t.shape)), n
        assert np.asarray(o.data).tobytes() == np.asarray(t.data).tobytes(), n


@pytest.mark.parametrize("fam", list(FAMILIES))
def test_text_and_projector_layout_equal_llamacpps(ours, fam):
    text, mm32, mm16 = ours[fam]
    theirs_text, theirs_mm32, theirs_mm16 = (os.path.join(DATA, f) for f in FAMILIES[fam][:3])
    _same_layout(theirs_text, text, projector=False)
    _same_layout(theirs_mm32, mm32, projector=True)
    _same_layout(theirs_mm16, mm16, projector=True)


def _check_chat(llm, ref, messages_of, tol=None):
    import test_vision
    old = test_vision.LOGPROB_TOL
    if tol is not None:
        test_vision.LOGPROB_TOL = tol
    try:
        for i in range(3):
            out = llm.chat(messages_of(i), greedy())
            check_against_reference(ref, i, [t.token_id for t in out.logprobs], _first_top(out))
    finally:
        test_vision.LOGPROB_TOL = old


@pytest.mark.parametrize("fam", list(FAMILIES))
def test_our_files_match_transformers_through_chat_and_openai(ours, fam):
    text, mm32, _ = ours[fam]
    _, _, _, npz, n_ctx, messages_of = FAMILIES[fam]
    ref = np.load(os.path.join(DATA, npz))
    with edgellm.LLM(text, mmproj=mm32, n_ctx=n_ctx, n_threads=2, kv_type="f32", max_seqs=4) as llm:
        _check_chat(llm, ref, messages_of)
        s = _server(text, mmproj=mm32, ctx_size=n_ctx)
        try:
            check_openai_chat(s.url, llm, ref, messages_of)
        finally:
            s.stop()


@pytest.mark.parametrize("fam", ["smolvlm", "qwen25vl"])
def test_f16_projectors_match_transformers(ours, fam):
    """Ours and llama.cpp's F16 projectors (equal bytes: the layout test) against the F32 references."""
    text, _, mm16 = ours[fam]
    _, _, _, npz, n_ctx, messages_of = FAMILIES[fam]
    ref = np.load(os.path.join(DATA, npz))
    with edgellm.LLM(text, mmproj=mm16, n_ctx=n_ctx, n_threads=2, kv_type="f32", max_seqs=4) as llm:
        _check_chat(llm, ref, messages_of, tol=F16_LOGPROB_TOL)


def test_dry_run_lists_both_files():
    log = _cli_convert(os.path.join(DATA, "hf-qwen25vl"), "/nonexistent/x.gguf", "--dry-run")
    assert "architecture Qwen2_5_VLForConditionalGeneration -> qwen2vl" in log
    assert "projector qwen2.5vl_merger, file type F16" in log and "v.patch_embd.weight.1" in log


def test_mmproj_options_refused_for_a_text_checkpoint(tmp_path):
    from hf_checkpoints import write_checkpoint
    d = write_checkpoint(str(tmp_path / "ck"), "qwen2")
    r = subprocess.run([sys.executable, "-m", "edgellm", "convert", d, str(tmp_path / "o.gguf"), "--mmproj",
                        str(tmp_path / "m.gguf")], capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "vision-language" in r.stderr


def test_broken_vision_checkpoints_are_typed_errors(tmp_path):
    import json
    import shutil

    from edgellm.convert import ConvertError
    from edgellm.convert.checkpoint import Checkpoint
    from edgellm.convert.vlm import plan_mmproj

    d = tmp_path / "q"
    shutil.copytree(os.path.join(DATA, "hf-qwen25vl"), d)
    cfg = json.load(open(d / "config.json"))
    cfg["vision_config"]["fullatt_block_indexes"] = [1, 2]
    json.dump(cfg, open(d / "config.json", "w"))
    with pytest.raises(ConvertError, match="fullatt_block_indexes"):
        plan_mmproj(Checkpoint(str(d)))
    cfg["vision_config"]["fullatt_block_indexes"] = [1, 3]
    cfg["vision_config"]["depth"] = 2
    json.dump(cfg, open(d / "config.json", "w"))
    with pytest.raises(ConvertError, match="past the vision tower's 2 layers"):
        plan_mmproj(Checkpoint(str(d)))
    cfg["vision_config"]["depth"] = 4
    cfg["rms_norm_eps"] = "small"
    json.dump(cfg, open(d / "config.json", "w"))
    with pytest.raises(ConvertError, match="rms_norm_eps = 'small' must be a number"):
        plan_mmproj(Checkpoint(str(d)))
    del cfg["vision_config"]
    json.dump(cfg, open(d / "config.json", "w"))
    with pytest.raises(ConvertError, match="no vision_config"):
        plan_mmproj(Checkpoint(str(d)))
    with pytest.raises(ConvertError, match="projector type 'Q8_0'"):
        plan_mmproj(Checkpoint(os.path.join(DATA, "hf-gemma3")), "Q8_0")


@pytest.mark.parametrize("fam,rename", [
    ("gemma3", (("language_model.model.", "model.language_model."), ("vision_tower.vision_model.",
                "model.vision_tower.vision_model."), ("multi_modal_projector.", "model.multi_modal_projector."))),
    ("qwen25vl", (("visual.", "model.visual."), ("model.", "model.language_model."))),
])
def test_transformers5_tensor_names_write_the_same_files(tmp_path, fam, rename):
    """The layout transformers 5 saves (everything under model.*): the same two files."""
    import shutil

    from safetensors.numpy import load_file, save_file

    from edgellm.convert import convert
    from edgellm.convert.vlm import convert_mmproj

    src = os.path.join(DATA, f"hf-{fam}")
    d = tmp_path / f"hf-{fam}"
    shutil.copytree(src, d)
    renamed = {}
    for k, v in load_file(os.path.join(src, "model.safetensors")).items():
        for a, b in rename:
            if k.startswith(a):
                k = b + k[len(a):]
                break
        renamed[k] = v
    save_file(renamed, str(d / "model.safetensors"))
    for hf_dir, tag in ((src, "a"), (str(d), "b")):
        convert(hf_dir, str(tmp_path / f"{tag}.gguf"), "F32")
        convert_mmproj(hf_dir, str(tmp_path / f"mm-{tag}.gguf"), "F16")
    _same_layout(str(tmp_path / "a.gguf"), str(tmp_path / "b.gguf"), projector=False)
    _same_layout(str(tmp_path / "mm-a.gguf"), str(tmp_path / "mm-b.gguf"), projector=True)
