#!/usr/bin/env python3
"""JUnit XML of run.py -> the per-file table and one reason per failing test (RESULTS.md).

    scripts/llama-server-suite/results.py build/llama-server-suite/junit.xml > part.md

The reasons are the table below: (file, test name prefix) -> why it fails against edgellm. A
failing test no entry covers is listed as "(no reason recorded)" so a new failure stands out.
"""
import sys
import xml.etree.ElementTree as ET

MODEL = "stand-in model: "
VISION = "multimodal input (tinygemma3, a vision model, has no stand-in)"
SYNTH = "--spec-synth-rates (llama-server's synthetic draft acceptance, a testing aid) refused by the shim"
REASONS = [
    # --- model substitution: SmolLM2 / Qwen2.5-Coder-0.5B write and tokenize differently ---
    ("test_basic", "test_load_split_model", MODEL + "content regex is stories15M's text"),
    ("test_tokenize", "test_tokenize_with_bos", MODEL + "SmolLM2 adds no BOS (stories260K's is id 1)"),
    ("test_completion", "test_completion[", MODEL + "prompt_n 18/46 are stories260K's token counts"),
    ("test_completion", "test_completion_stream[", MODEL + "prompt_n 18/46 are stories260K's token counts"),
    ("test_completion", "test_completion_with_openai_library", "system_fingerprint must start with 'b' (llama-server's build tag; edgellm's is edgellm-<version>-<isa>); content regex is stories260K's"),
    ("test_completion", "test_completion_stream_with_openai_library", MODEL + "content regex is stories260K's text"),
    ("test_completion", "test_nocache_long_input_prompt", MODEL + "the prompt is 225 SmolLM2 tokens, fits the 256-token slot (stories260K: over it)"),
    ("test_completion", "test_completion_response_fields", MODEL + "'prompt' must start with stories260K's BOS text '<s> '; SmolLM2 has none"),
    ("test_completion", "test_completion_prompt_cache", MODEL + "n_prompt = (40+r)*5+2 is stories260K's tokenization"),
    ("test_completion", "test_completion_unified", MODEL + "SmolLM2 ends with EOS before n_predict (predicted_n != n_predict)"),
    ("test_chat_completion", "test_chat_completion[", "system_fingerprint must start with 'b' (llama-server's build tag); then content regexes / prompt token counts are stories260K's"),
    ("test_chat_completion", "test_chat_completion_stream[", "system_fingerprint must start with 'b'; then content regex / token counts are stories260K's"),
    ("test_chat_completion", "test_chat_completion_with_openai_library", "system_fingerprint must start with 'b' (llama-server's build tag)"),
    ("test_chat_completion", "test_chat_completion_cached_tokens", MODEL + "prompt_tokens / cached_tokens are stories260K's counts (and KV pages are cached whole, 32 tokens)"),
    ("test_infill", "test_infill_", MODEL + "content regexes are stories260K-infill's; Qwen2.5-Coder fills in code (e.g. 'n_threads();\\n    printf(...)')"),
    ("test_ctx_shift", "test_ctx_shift_disabled_short_prompt", MODEL + "SmolLM2 ends with EOS after ~12 tokens; stories260K runs to the limit"),
    ("test_ctx_shift", "test_ctx_shift_disabled_long_prompt", MODEL + "LONG_TEXT is under 256 SmolLM2 tokens (stories260K: over), so it fits"),
    ("test_ctx_shift", "test_ctx_shift_disabled_stream", "/v1/completions refuses prompt + n_predict (1 + 256) over the 256-token context with a 400 (the OpenAI routes never truncate); llama-server generates until the context is full and ends with 'length'"),
    ("test_compat_oai_responses", "test_responses_with_openai_library", MODEL + "content regex is stories260K's text"),
    ("test_tool_call", "test_calc_result", MODEL + "Qwen2.5-Coder-0.5B stands in for the 3B: given the tool result it calls the tool again instead of answering (the prompt renders the result correctly)"),
    ("test_embedding", "test_embedding_usage", MODEL + "token counts are the BERT tokenizer's"),
    ("test_embedding", "test_embedding_pooling_none", MODEL + "per-token vector count is the BERT tokenizer's"),
    ("test_rerank", "test_rerank_usage", MODEL + "prompt_tokens are jina-reranker-v1-tiny-en's tokenization; the stand-in "
     "(a bge-reranker-v2-m3-shaped XLM-R) counts <s> q </s></s> d </s> with its own Unigram vocabulary"),
    ("test_embedding", "test_embedding_mixed_input", "an empty-string input is refused with 400 (SmolLM2 adds no BOS: nothing to embed); stories260K embeds its BOS"),
    # --- features edgellm does not have ---
    ("test_security", "test_access_static_assets_without_api_key", "GET / (edgellm's web chat) is open; llama-server's UI files /sw.js, /manifest.webmanifest, /_app/version.json do not exist here (401 behind the key)"),
    ("test_security", "test_correct_api_key", "POST /completions (plural) is OpenAI's legacy route here, kept by design; llama-server answers it natively ('content')"),
    ("test_security", "test_cors_origins_defaults_to_localhost_with_tools_enabled", "--tools (built-in server tools) refused by the shim: no such feature"),
    ("test_security", "test_cors_proxy_only_forwards_explicit_proxy_headers", "--ui-mcp-proxy refused: no /cors-proxy"),
    ("test_security", "test_local_media_file", "tinygemma3 (vision) has no stand-in: no multimodal input"),
    ("test_ctx_shift", "test_ctx_shift_enabled", MODEL + "SHORT_TEXT is 117 SmolLM2 tokens (stories260K: 226), so 117 + 96 fit the 256-token slot: no shift, truncated false"),
    ("test_slot_save", "test_slot_save_restore_", VISION),
    ("test_slot_save", "test_slot_restore_media_file_without_mmproj", VISION),
    ("test_slot_save", "", MODEL + "content regexes and token counts are tinyllama2's (84 saved tokens, prompt_n 6); slot files hold whole 32-token pages"),
    ("test_speculative", "test_with_and_without_draft", "the same tokens with and without the draft pass; then " + SYNTH),
    ("test_speculative", "test_synth_", SYNTH),
    ("test_speculative", "test_multi_requests_parallel", MODEL + "content regex is stories15M's text"),
    ("test_completion", "test_n_probs_post_sampling", MODEL + "at temperature 1.0 with seed 42 SmolLM2 samples <|im_end|> (p 0.02) as its 3rd token; the test wants 5 tokens"),
    ("test_stream", "", "llama-server's resumable streams (/v1/stream, X-Conversation-Id) in its router mode, on tinygemma3 (a vision model, no stand-in); edgellm's several-models serving (--models-dir) has no resumable streams"),
    ("test_metrics", "test_metrics_prompt_processed_and_cached", "the prefix cache reuses whole KV pages (32 tokens): a 10-token prompt is never cached (cache_n 0)"),
    ("test_chat_completion", "test_return_progress[64-4-False]", MODEL + "the prompt is 70 SmolLM2 tokens: 2 batches of 64, so 3 progress updates (stories260K: 129+ tokens, 4)"),
    ("test_chat_completion", "test_chat_completion_with_timings_per_token", "timings_per_token not supported on the OpenAI chat route (only on /completion)"),
    ("test_chat_completion", "test_chat_template_assistant_prefill[prefill1", "content parts are joined with a newline before the template (llama.cpp hands typed parts to templates that take them; Llama 3.1's joins with a blank line)"),
    ("test_chat_completion", "test_chat_template", MODEL + "the expected __verbose prompt starts with stories260K's BOS '<s> '; SmolLM2 has none"),
    ("test_chat_completion", "test_verbose_debug", "'verbose' / '__verbose' debug output not supported"),
    ("test_chat_completion", "test_chat_template_continue_final_message_vllm_compat", "'add_generation_prompt' / 'continue_final_message' not accepted on the chat route"),
    ("test_chat_completion", "test_apply_chat_template", "llama.cpp's built-in template name 'command-r' is not one of edgellm's built-ins"),
    ("test_chat_completion", "test_invalid_chat_completion_req", "two assistant messages in a row render fine with the model's template (llama.cpp's own check refuses them)"),
    ("test_chat_completion", "test_context_size_exceeded", "OpenAI chat route answers OpenAI's context_length_exceeded (invalid_request_error); exceed_context_size_error is on the native endpoints"),
    ("test_chat_completion", "test_chat_completion[None-Book-What is the best book-8-^ blue-23-8-length-True-This is not", "--chat-template with non-Jinja text is refused (edgellm: built-in name, file or Jinja)"),
    ("test_template", "test_date_inside_prompt[fireworks", "the firefunction-v2 template needs llama.cpp's 'functions' variable"),
    ("test_compat_anthropic", "test_anthropic_vision_base64_with_multimodal_model", "tinygemma3 (vision) has no stand-in"),
    ("test_compat_anthropic", "test_anthropic_tool_result_with_image", "images are refused with a clear 400 (the model takes no images); llama-server answers 500"),
    ("test_compat_anthropic", "test_anthropic_vision_format_accepted", "images are refused with a clear 400 (the model takes no images); llama-server answers 500"),
    ("test_compat_anthropic", "test_anthropic_empty_messages", "empty 'messages' is refused with 400, as Anthropic's API does; llama-server accepts it"),
    ("test_compat_oai_responses", "test_responses_stream_with_llama_telemetry", "progress and timings pass; a response cut off by max_output_tokens ends with OpenAI's response.incomplete, llama-server always sends response.completed"),
]


def reason(fname: str, name: str) -> str:
    best = None
    for f, prefix, why in REASONS:
        if f == fname and name.startswith(prefix) and (best is None or len(prefix) > len(best[0])):
            best = (prefix, why)
    return best[1] if best else "(no reason recorded)"


def main(path):
    root = ET.parse(path).getroot()
    table, fails = {}, []
    for c in root.iter("testcase"):
        fname = c.get("classname", "").split(".")[-1]
        row = table.setdefault(fname, [0, 0, 0, 0])
        row[3] += 1
        if c.find("failure") is not None or c.find("error") is not None:
            row[1] += 1
            fails.append((fname, c.get("name")))
        elif c.find("skipped") is not None:
            row[2] += 1
        else:
            row[0] += 1
    print("| file | passed | failed | skipped | total |")
    print("|---|---:|---:|---:|---:|")
    tot = [0, 0, 0, 0]
    for k in sorted(table):
        v = table[k]
        tot = [a + b for a, b in zip(tot, v)]
        print(f"| {k} | {v[0]} | {v[1]} | {v[2]} | {v[3]} |")
    print(f"| **total** | **{tot[0]}** | **{tot[1]}** | **{tot[2]}** | **{tot[3]}** |")
    print()
    print("### Every failing test, with its reason")
    print()
    for fname, name in fails:
        print(f"- `{fname}::{name}` — {reason(fname, name)}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "build/llama-server-suite/junit.xml")
