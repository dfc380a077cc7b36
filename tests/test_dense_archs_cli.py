"""`edgellm info` and `edgellm run` on tiny phi3 and gemma2 models with a real tokenizer and the
chat templates their GGUFs carry (random weights: the tests pin the plumbing, not the text)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

pytest.importorskip("edgellm._core", reason="edgellm._core is not built (scripts/dev-build.sh)")

from edgellm.cli import main  # noqa: E402
from test_chat_template import GEMMA2_TEMPLATE, PHI35_TEMPLATE  # noqa: E402
from tiny_vocab_model import write_tiny_vocab_arch_model  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
MODELS = {
    "phi3": dict(chat_template=PHI35_TEMPLATE, control_tokens=("<|user|>", "<|assistant|>", "<|system|>", "<|end|>"),
                 n_rot=24),
    "gemma2": dict(chat_template=GEMMA2_TEMPLATE, control_tokens=("<start_of_turn>", "<end_of_turn>")),
}


@pytest.fixture(scope="module", params=sorted(MODELS))
def model(request, tmp_path_factory):
    arch = request.param
    path = tmp_path_factory.mktemp("dense") / f"tiny-{arch}.gguf"
    return arch, str(write_tiny_vocab_arch_model(path, arch, **MODELS[arch]))


def test_info_names_the_architecture(model):
    arch, path = model
    r = CliRunner().invoke(main, ["info", path, "--json"])
    assert r.exit_code == 0, r.output
    info = json.loads(r.output)
    assert info["architecture"] == arch and info["n_layers"] == 3 and info["chat_template"] is True
    assert info["tokenizer"]["model"] == "gpt2"
    text = CliRunner().invoke(main, ["info", path])
    assert text.exit_code == 0 and f"architecture    {arch}" in text.output


def _env(tmp_path):
    env = dict(os.environ)
    if env.get("EDGELLM_BUILD_DIR"):  # a development build: the package comes from the checkout
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "python"), env.get("PYTHONPATH")]))
        env["EDGELLM_BUILD_DIR"] = os.path.abspath(env["EDGELLM_BUILD_DIR"])
    env["EDGELLM_HISTORY"] = str(tmp_path / "history")
    return env


def test_run_one_shot_through_the_files_chat_template(model, tmp_path):
    arch, path = model
    args = [sys.executable, "-m", "edgellm", "run", path, "--temp", "0", "-n", "8", "-t", "1"]
    r = subprocess.run(args + ["--verbose", "Hello there"], input="", capture_output=True, text=True,
                       env=_env(tmp_path), timeout=300)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    # the prompt went through the template: its special tokens count as one token each
    assert "prompt eval count:" in r.stderr
    again = subprocess.run(args + ["Hello there"], input="", capture_output=True, text=True, env=_env(tmp_path),
                           timeout=300)
    assert again.returncode == 0 and again.stdout == r.stdout  # greedy: the same answer


def test_llm_renders_the_files_template_and_chats(model):
    import edgellm
    from edgellm.chat_template import ChatTemplateError

    arch, path = model
    llm = edgellm.LLM(path, n_threads=1)
    try:
        msgs = [{"role": "user", "content": "Hi"}]
        want = {"phi3": "<|user|>\nHi<|end|>\n<|assistant|>\n",
                "gemma2": "<|endoftext|><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n"}[arch]
        assert llm.apply_chat_template(msgs) == want
        ids = llm.chat_prompt_ids(msgs) if arch == "phi3" else None
        if ids is not None:  # <|user|>, <|end|>, <|assistant|> are one token each
            pieces = [llm.token_to_piece(i).decode() for i in ids]
            assert sum(1 for t in pieces if t in MODELS["phi3"]["control_tokens"]) == 3, pieces
        out = llm.chat(msgs, edgellm.SamplingParams(max_tokens=4, temperature=0))
        assert out.usage.completion_tokens <= 4
        if arch == "gemma2":
            with pytest.raises(ChatTemplateError, match="System role not supported"):
                llm.apply_chat_template([{"role": "system", "content": "S"}] + msgs)
    finally:
        llm.close()


def test_engine_n_ctx_picks_phi3s_longrope_factors(tmp_path):
    # The engine loads the model for its n_ctx: beyond the original context (128 here) the long
    # factors, else the short ones, as the reference does for the same context.
    import numpy as np

    import edgellm
    from reference.forward import ReferenceModel

    path = str(write_tiny_vocab_arch_model(tmp_path / "phi3.gguf", "phi3", **MODELS["phi3"]))
    ids = [259, 72, 105, 263, 120, 32, 97, 98, 260, 99]
    got = {}
    for n_ctx in (64, 512):
        llm = edgellm.LLM(path, n_ctx=n_ctx, n_threads=1, kv_type="f32")
        try:
            got[n_ctx] = np.asarray(llm.eval_logits(ids))
        finally:
            llm.close()
        np.testing.assert_allclose(got[n_ctx], ReferenceModel(path, n_ctx=n_ctx).forward(ids), rtol=0, atol=1e-4)
    assert np.abs(got[64] - got[512]).max() > 1e-2


def test_memory_plan_counts_fused_views_as_matrices(model):
    import edgellm

    arch, path = model
    p = edgellm.LLM.plan(path, n_ctx=64)
    # 3 layers of q, k, v, o, gate, up, down (phi3's as views of attn_qkv and ffn_up), plus the
    # output head (phi3's output.weight, gemma2's tied token_embd)
    assert p.matrices_packed + p.matrices_mapped == 3 * 7 + 1
