"""The Python API: `LLM`, a model loaded into the C++ engine (blocking calls).

    from edgellm import LLM, SamplingParams
    llm = LLM("smollm2")                       # a path or a known model name
    print(llm.generate("The capital of France is", SamplingParams(temperature=0)).text)
    for piece in llm.stream("Once upon a time"):
        print(piece, end="", flush=True)

The engine runs on its own C++ thread and batches every request in flight (continuous
batching). Python threads only submit requests and receive their output: every wait releases
the GIL, so many threads (or one asyncio loop, edgellm.async_llm.AsyncLLM) can drive the same
LLM at once. Breaking out of a stream, closing its iterator or cancelling the asyncio task
aborts the request in the engine, which frees its KV pages at its next step.

Requests go through `LLM.engine_client` (edgellm._engine_client) and chat prompts through
`LLM.chat_renderer` (edgellm._chat), which AsyncLLM shares. The parameter and result types are
in edgellm.sampling_params and edgellm.outputs (re-exported here).
"""
from __future__ import annotations

import os
import time
from typing import Any, Dict, List, Mapping, Optional

from . import _core
from ._chat import ChatRenderer, finish_chat, parse_chunk
from ._core import InvalidRequestError, ModelFormatError, RequestCancelled  # noqa: F401 - importable from here
from ._engine_client import EngineClient, RequestControl, is_batch, open_engine
from .outputs import (ChatCompletion, Completion, CompletionChunk, TokenLogprob,  # noqa: F401
                      TopLogprob, Usage)
from .request_handle import RequestHandle
from .lora import LoadedLora, lora_arg
from .sampling_params import SamplingParams
from .stream import Stream
from .validation import token_ids

__all__ = [
    "SamplingParams", "TopLogprob", "TokenLogprob", "Usage", "Completion", "CompletionChunk",
    "ChatCompletion", "LLM",
]


def _slot_id(slot) -> int:
    if isinstance(slot, bool) or not isinstance(slot, int) or not 0 <= slot < 2**31:
        raise InvalidRequestError(f"slot id must be a non-negative integer, got {slot!r}")
    return slot


class LLM:
    """A model loaded into a continuous-batching engine.

    n_ctx: max tokens per sequence (default min(trained context, 4096)). kv_memory: bytes for
    the paged KV cache, one budget for all sequences and both layer groups (full attention and
    sliding window; default: two full contexts' worth of tokens, in every layer group however many
    sequences share them (KVCache::default_budget), which short requests share many
    at a time; committed as it is written; when it runs out the newest sequence is preempted and
    recomputed later). stats(): kv_bytes_used of kv_bytes_total, preemptions, pages.
    kv_type: "f16" (default), "q8_0" or "f32". max_seqs: sequences decoded together.
    max_batch_tokens: tokens per forward pass (prompt chunks + one per decoding sequence).
    page_size: KV page size in tokens (16..64).
    n_gpu_layers: the last N layers run on a CUDA GPU (-1 = all; CUDA builds only). Without CUDA
    or a usable GPU, a warning says why and the model runs on the CPU; `self.n_gpu_layers` holds
    the layers actually offloaded.

    Speculative decoding (several tokens verified per forward pass; greedy output is the model's
    own, sampled output keeps its distribution): speculative "auto" (default) drafts from the
    request's own history (n-gram / prompt lookup) and, with draft_model, from that model too;
    "ngram" uses the history only, "draft" the draft model only, "off" neither. draft_model: a
    GGUF path or known model name with the same vocabulary (refused with InvalidRequestError
    otherwise), loaded with the same threads. num_speculative_tokens: most tokens drafted per
    step (1..64; None: the engine's default, 32 n-gram / 8 draft-model tokens). Drafting is adaptive per sequence: it stops where
    acceptance would not pay (spec_adaptive=False always drafts the full k, for tests and
    benchmarks). stats() counts spec_drafted / spec_accepted / spec_acceptance; a completion's
    timings carry draft_n / draft_n_accepted when something was drafted for it.

    cache_dir: a persistent prefix cache (serve --cache-dir). Full KV pages of every prompt and
    reply are also written under this directory (one checksummed file per page, named by the
    model file's SHA-256, the KV layout and the token-hash chain; atomic renames; at most
    cache_max_bytes, default 2 GiB, least recently used removed first), and a prompt whose prefix
    is not in memory is looked up there: a new process reopening a long conversation reads its
    KV back instead of recomputing it. A file that fails its checks is deleted, never loaded.
    stats(): cache_disk_pages_read / _written / _corrupt, cache_disk_hit_tokens. slot_save /
    slot_restore / slot_erase: llama.cpp's slot files over the same page records.

    context_shift (llama.cpp's --context-shift; default False): a sequence that fills n_ctx
    while generating keeps its first SamplingParams.n_keep tokens and the newer half of the
    rest, which are prefilled again at positions 0.., and goes on generating instead of ending
    with finish_reason "length" (max_tokens still counts every generated token; the prompt must
    still fit n_ctx). What follows a shift is exactly what a fresh request with the kept tokens
    as its prompt would generate. stats()["context_shifts"] counts them, a completion's timings
    carry context_shifts when it shifted.

    progress: called as progress(fraction, stage) while the model loads, from the thread that
    constructs the LLM (a GUI loads in a worker thread and hands the values to its main loop):
    fraction rises from 0.0 to 1.0, stage is "open", "bind", "repack" (the weight matrices
    interleaved for the kernels: most of the time), "tokenizer", "engine", "ready". A callback
    that returns False or raises stops the load with edgellm.LoadCancelled (the exception it
    raised is its __cause__); everything loaded so far is released.

    lora: LoRA adapters loaded with the model, {name: path or (path, scale)} (GGUF adapters as
    llama.cpp's convert_lora_to_gguf.py or `edgellm convert --base` write them; a foreign or
    corrupt file is a ModelFormatError). A request runs with the adapters its
    SamplingParams.lora names (a name, or a list with scales) and with none otherwise; requests
    with different adapters are batched together, each row adding its own adapter's low-rank
    product to the shared base matmuls. load_lora / unload_lora change the set at run time
    (edgellm.lora: requests running on an unloaded adapter finish with it).
    """

    def __init__(self, model_path, n_ctx: Optional[int] = None, n_threads: Optional[int] = None, *,
                 kv_memory: Optional[int] = None, kv_type: str = "f16", max_seqs: int = 16,
                 max_batch_tokens: int = 512, page_size: int = 32,
                 chat_template: Optional[str] = None, n_gpu_layers: int = 0,
                 prefix_cache: bool = True, draft_model=None, speculative: str = "auto",
                 num_speculative_tokens: Optional[int] = None, spec_adaptive: bool = True,
                 context_shift: bool = False, cache_dir=None, cache_max_bytes: Optional[int] = None,
                 quantize: Optional[str] = None, progress=None, mmproj=None,
                 media_path: Optional[str] = None, allow_remote_media: bool = False, lora=None):
        from .validation import check_engine_args

        t0 = time.perf_counter()
        a = check_engine_args(n_ctx=n_ctx, n_threads=n_threads, kv_memory=kv_memory,
                              kv_type=kv_type, max_seqs=max_seqs,
                              max_batch_tokens=max_batch_tokens, page_size=page_size,
                              n_gpu_layers=n_gpu_layers, prefix_cache=prefix_cache,
                              draft_model=draft_model, speculative=speculative,
                              num_speculative_tokens=num_speculative_tokens,
                              spec_adaptive=spec_adaptive, context_shift=context_shift,
                              cache_dir=cache_dir, cache_max_bytes=cache_max_bytes)
        if quantize is not None:  # a Hugging Face checkpoint directory, converted to this type
            from .convert.cached import converted_path, is_checkpoint_dir
            if not is_checkpoint_dir(model_path):
                raise InvalidRequestError(f"quantize={quantize!r} needs a Hugging Face checkpoint directory "
                                          f"(with config.json), not {model_path!r}")
            model_path = str(converted_path(model_path, quantize))
        self.model_path, self.memory_plan, self._engine, cache_path = open_engine(model_path, a, progress)
        # the persistent prefix cache's directory (None without one)
        self.cache_dir: Optional[str] = cache_path or None
        self._content_key: Optional[str] = None  # the model file's, once a slot action needs it
        if cache_path:
            from . import cache_dir as _cache_dir
            _cache_dir.track(self)
        self.context_shift: bool = self._engine.context_shift
        # speculative decoding as configured: the mode, the loaded draft (None without one)
        self.speculative: str = self._engine.speculative
        self.draft_model_path: Optional[str] = self._engine.draft_model_path or None
        self.num_speculative_tokens: Optional[int] = self._engine.num_speculative_tokens or None
        self._tok = self._engine.tokenizer
        self.engine_client = EngineClient(self._engine)  # the request layer (AsyncLLM's too)
        self.n_ctx: int = self._engine.n_ctx
        from .memory_plan import context_warnings
        for text in context_warnings(self.n_ctx, self._engine.n_ctx_train):
            import warnings
            warnings.warn(text, stacklevel=2)
        self.n_vocab: int = self._engine.n_vocab
        self.n_threads: int = self._engine.n_threads
        self.isa: str = _core.isa()
        # Layers actually on the GPU: 0 when built without CUDA or no GPU could take them (the
        # engine printed a warning saying why and runs on the CPU).
        self.n_gpu_layers: int = self._engine.n_gpu_layers
        # the chat template, its format and render settings (AsyncLLM's too)
        self.chat_renderer = ChatRenderer(self._tok, chat_template)
        self._metadata = None
        # vision input (edgellm.vision): the projector given, else the one mmproj*.gguf beside
        # the model (mmproj=False: none); image content parts in chat need it
        self.mmproj: Optional[str] = None
        self._open_vision(model_path, mmproj, media_path, allow_remote_media)
        try:
            for name, (path, scale) in lora_arg(lora).items():
                self.load_lora(name, path, scale)
        except BaseException:
            self.close()
            raise
        self.load_time: float = time.perf_counter() - t0

    @staticmethod
    def plan(model_path, n_ctx: Optional[int] = None, n_threads: Optional[int] = None, *,
             kv_memory: Optional[int] = None, kv_type: str = "f16", max_seqs: int = 16,
             max_batch_tokens: int = 512, page_size: int = 32, draft_model=None,
             speculative: str = "auto", **_ignored) -> "MemoryPlan":
        """The memory plan of LLM(model_path, ...) without loading it (edgellm.MemoryPlan:
        weights after repacking, KV per token and budget, scratch, load peak, total, and what
        the machine can give). The constructor's other arguments are accepted and ignored."""
        from .memory_plan import plan
        return plan(model_path, n_ctx, n_threads, kv_memory=kv_memory, kv_type=kv_type,
                    max_seqs=max_seqs, max_batch_tokens=max_batch_tokens, page_size=page_size,
                    draft_model=draft_model, speculative=speculative)

    def _open_vision(self, model_path, mmproj, media_path, allow_remote_media) -> None:
        from . import vision

        import sys

        if mmproj is False:
            return
        found = mmproj is None
        if found:
            mmproj = vision.find_mmproj(model_path)
            if mmproj is None:
                return
        try:
            self.chat_renderer.vision = vision.VisionInput(
                mmproj, self._tok, self.n_embd, str(self.metadata.get("general.architecture", "")), self.n_threads,
                media_path=media_path, allow_remote=allow_remote_media)
        except (ModelFormatError, ImportError) as e:
            if not found:
                self.close()  # the engine's thread and mapping go now
                raise
            # a projector that merely sits beside the model and does not fit it: text only
            print(f"edgellm: not using {mmproj} found beside the model: {e}", file=sys.stderr)
            return
        if found:
            print(f"edgellm: using the projector {mmproj} found beside the model (images in chat)", file=sys.stderr)
        self.mmproj = str(mmproj)
        if self.memory_plan is not None:
            self.memory_plan.add_projector(self.mmproj)  # its bytes in the plan's total

    @property
    def takes_images(self) -> bool:
        """Whether chat messages may hold image parts (a projector was loaded)."""
        return self.chat_renderer.vision is not None

    # ---- model facts ----
    @property
    def metadata(self) -> dict:
        """GGUF metadata key -> value (scalars; long arrays such as the vocabulary left out), of
        the file as loaded (not read again from the path, which may name another file now)."""
        if self._metadata is None:
            self._metadata = {k: v for k, v in self._engine.gguf.metadata().items()
                              if not (isinstance(v, list) and len(v) > 64)}
        return self._metadata

    @property
    def tokenizer(self):
        return self._tok

    # ---- tokens ----
    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = False) -> List[int]:
        return list(self._tok.encode(text, add_special, parse_special))

    def detokenize(self, ids) -> str:
        return self._tok.decode(token_ids(ids, self.n_vocab, "ids"))

    def token_to_piece(self, id: int) -> bytes:  # noqa: A002 - the contract's name
        return self._tok.token_to_piece(token_ids([id], self.n_vocab, "id")[0], True)

    # ---- requests ----
    def generate(self, prompt, params: Optional[SamplingParams] = None):
        """One prompt (str or ids) -> Completion (a list of n when params.n > 1); a list of
        prompts -> a list of results, all submitted at once and batched by the engine."""
        params = params or SamplingParams()
        if is_batch(prompt):
            return self.engine_client.generate_many(list(prompt), params)
        done = self.engine_client.collect(prompt, params)
        return done if params.n > 1 else done[0]

    def stream_chunks(self, prompt, params: Optional[SamplingParams] = None) -> Stream[CompletionChunk]:
        """CompletionChunks as they are produced (a Stream: `.cancel()` from any thread)."""
        control = RequestControl()
        return Stream(self.engine_client.stream_chunks(prompt, params, control), control)

    def stream(self, prompt, params: Optional[SamplingParams] = None) -> Stream[str]:
        """Text pieces as they are produced (whole UTF-8 characters; stop strings never
        appear). With n > 1 the pieces of all completions interleave: use stream_chunks.
        The Stream's `.cancel()` ends it from any thread (edgellm.stream)."""
        control = RequestControl()

        def pieces():
            for ev in self.engine_client.events(prompt, params, stream=True, control=control):
                if ev.text:
                    yield ev.text
        return Stream(pieces(), control)

    def submit(self, prompt, params: Optional[SamplingParams] = None, *, on_text=None,
               on_done=None) -> RequestHandle:
        """Start one completion and return at once: a RequestHandle (edgellm.request_handle)
        for loops that must not block, such as a GUI's: `poll()` gives the text since the last
        poll without waiting, `done`, `result()`, `cancel()` from any thread. on_text(piece) and
        on_done(handle) are called from poll(), on the polling thread."""
        params = params or SamplingParams()
        return RequestHandle(self.engine_client, self.engine_client.prompt_ids(prompt), params,
                             on_text=on_text, on_done=on_done)

    # ---- chat (edgellm._chat) ----
    @property
    def chat_template(self) -> str:
        """The template chat requests render with: a built-in name ("chatml", ...) or Jinja source."""
        return self.chat_renderer.template

    @property
    def chat_format(self):
        """How this model's chat template writes tool calls and reasoning (edgellm.chat_output)."""
        return self.chat_renderer.chat_format

    @property
    def chat_template_defaults(self) -> Dict[str, Any]:
        """Template variables every render gets unless a request's chat_template_kwargs say
        otherwise (edgellm serve --reasoning off sets enable_thinking false here)."""
        return self.chat_renderer.defaults

    @chat_template_defaults.setter
    def chat_template_defaults(self, value: Dict[str, Any]) -> None:
        self.chat_renderer.defaults = value

    @property
    def chat_template_limits(self) -> Dict[str, Any]:
        """Limits of one template render (edgellm.chat_template.render_chat): time_limit seconds
        (default 2), max_output characters (default 8 MiB plus twice the request's text)."""
        return self.chat_renderer.limits

    @chat_template_limits.setter
    def chat_template_limits(self, value: Dict[str, Any]) -> None:
        self.chat_renderer.limits = value

    def apply_chat_template(self, messages, add_generation_prompt: bool = True, tools=None,
                            chat_template_kwargs: Optional[Mapping[str, Any]] = None) -> str:
        """The rendered conversation. Assistant tool calls in the history are handed to the
        template with `arguments` as an object (OpenAI sends a JSON string); for a template that
        takes no tools, the tools are described in the system message."""
        return self.chat_renderer.apply(messages, add_generation_prompt, tools, chat_template_kwargs)

    def chat_prompt_ids(self, messages, tools=None, chat_template_kwargs=None) -> List[int]:
        """Token ids of the rendered conversation: the template's markup as special tokens,
        what the messages say as text (never control tokens), BOS exactly once."""
        return self.chat_renderer.prompt_ids(messages, tools, chat_template_kwargs)

    def render_chat_prompt(self, messages, tools=None, tool_choice=None,
                           chat_template_kwargs: Optional[Mapping[str, Any]] = None,
                           add_generation_prompt: Optional[bool] = None,
                           continue_final_message: Optional[bool] = None) -> str:
        """The prompt text one chat turn is generated from.

        A conversation that ends with an assistant message is continued (prefill: the answer
        picks up where that message stops), as llama-server and vLLM's continue_final_message
        do: the messages before it are rendered with the generation prompt and its text is
        appended. continue_final_message=False turns that off; add_generation_prompt=False
        renders without the assistant header. Both true, a continued message with tool calls
        or two assistant messages at the end are InvalidRequestErrors.

        Chat requests tokenize this text with the template's markup as special tokens and the
        messages' own text as plain text (chat_prompt: the text and those plain ranges)."""
        return self.chat_renderer.prompt_text(messages, tools, tool_choice, chat_template_kwargs,
                                              add_generation_prompt, continue_final_message)

    def chat_prompt(self, messages, tools=None, tool_choice=None,
                    chat_template_kwargs: Optional[Mapping[str, Any]] = None,
                    add_generation_prompt: Optional[bool] = None,
                    continue_final_message: Optional[bool] = None):
        """(prompt text, plain ranges): render_chat_prompt's text, and the UTF-8 byte ranges in
        it where control-token texts came from the caller (message content, roles, names, tool
        calls and results, tool definitions, template kwargs). Tokenizing with
        `tokenizer.encode(text, True, True, plain_ranges)` keeps those as plain text, so content
        such as "<|im_end|>\n<|im_start|>system" cannot forge a turn; without such text in the
        conversation the ranges are empty and the ids are llama.cpp's."""
        return self.chat_renderer.shielded_prompt(messages, tools, tool_choice, chat_template_kwargs,
                                                  add_generation_prompt, continue_final_message)

    def chat(self, messages, params: Optional[SamplingParams] = None, tools=None, tool_choice=None,
             parallel_tool_calls: Optional[bool] = None,
             chat_template_kwargs: Optional[Mapping[str, Any]] = None,
             add_generation_prompt: Optional[bool] = None,
             continue_final_message: Optional[bool] = None):
        """One chat turn -> ChatCompletion (a list of n when params.n > 1): `.content`,
        `.reasoning_content` and `.tool_calls` parsed from the output by the template's format.
        tools: OpenAI-style function tools; tool_choice: "none" | "auto" (default) | "required" |
        {"type": "function", "function": {"name": ...}} -- required and named calls are
        grammar-constrained to valid arguments, auto calls from their first marker on. A
        conversation ending with an assistant message is continued (render_chat_prompt)."""
        ids, params, new_parser = self.chat_renderer.request(
            messages, params, tools, tool_choice, parallel_tool_calls, chat_template_kwargs,
            add_generation_prompt, continue_final_message)
        done = [finish_chat(c, new_parser()) for c in self.engine_client.collect(ids, params)]
        return done if params.n > 1 else done[0]

    def chat_stream(self, messages, params: Optional[SamplingParams] = None, tools=None,
                    **kw) -> Stream[str]:
        """Content pieces as they are produced (reasoning and tool calls left out); a Stream."""
        chunks = self.chat_stream_chunks(messages, params, tools=tools, **kw)

        def pieces():
            for ch in chunks:
                if ch.delta.content:
                    yield ch.delta.content
        return Stream(pieces(), chunks._control)

    def submit_chat(self, messages, params: Optional[SamplingParams] = None, tools=None,
                    tool_choice=None, parallel_tool_calls: Optional[bool] = None,
                    chat_template_kwargs: Optional[Mapping[str, Any]] = None,
                    add_generation_prompt: Optional[bool] = None,
                    continue_final_message: Optional[bool] = None, *, on_text=None,
                    on_done=None) -> RequestHandle:
        """One chat turn started without waiting (see submit): poll() gives new content,
        poll_chunks() the chunks with their parsed `.delta`, result() the ChatCompletion
        that chat() would return. The prompt as in render_chat_prompt."""
        ids, params, new_parser = self.chat_renderer.request(
            messages, params, tools, tool_choice, parallel_tool_calls, chat_template_kwargs,
            add_generation_prompt, continue_final_message)
        return RequestHandle(self.engine_client, ids, params, new_parser=new_parser,
                             on_text=on_text, on_done=on_done)

    def chat_stream_chunks(self, messages, params: Optional[SamplingParams] = None, tools=None,
                           tool_choice=None, parallel_tool_calls: Optional[bool] = None,
                           chat_template_kwargs: Optional[Mapping[str, Any]] = None,
                           add_generation_prompt: Optional[bool] = None,
                           continue_final_message: Optional[bool] = None) -> Stream[CompletionChunk]:
        """CompletionChunks whose `.delta` (edgellm.chat_output.ChatDelta) holds the parsed
        content, reasoning and tool-call pieces; the last chunk of a completion that made calls
        has finish_reason "tool_calls". The prompt as in render_chat_prompt. A Stream: rendering
        happens (and its errors surface) at the first next(); `.cancel()` from any thread."""
        control = RequestControl()

        def chunks():
            ids, p, new_parser = self.chat_renderer.request(
                messages, params, tools, tool_choice, parallel_tool_calls, chat_template_kwargs,
                add_generation_prompt, continue_final_message)
            parsers: Dict[int, Any] = {}
            for ch in self.engine_client.stream_chunks(ids, p, control):
                yield parse_chunk(ch, parsers, new_parser)
        return Stream(chunks(), control)

    # ---- LoRA adapters (edgellm.lora) ----
    def load_lora(self, name: str, path, scale: float = 1.0) -> LoadedLora:
        """Loads the GGUF LoRA adapter at `path` as `name` (requests select it by
        SamplingParams(lora=name)); `scale` is the default of requests that give none."""
        entry = self.engine_client.loras.load(name, path, scale)
        self.memory_plan.count_lora(entry.nbytes)
        return entry

    def unload_lora(self, name: str) -> None:
        """New requests naming it fail with LoraNotFoundError; running ones finish with it."""
        entry = self.engine_client.loras.unload(name)
        self.memory_plan.count_lora(entry.nbytes, -1)

    @property
    def loras(self) -> List[LoadedLora]:
        """The loaded adapters, in load order (their ids)."""
        return self.engine_client.loras.loaded()

    # ---- evaluation and state ----
    def eval_logits(self, ids, lora=None):
        """float32 [len(ids), n_vocab]: the logits at every position of ids in a fresh context
        (computed between engine steps; running requests are not disturbed); `lora` as
        SamplingParams.lora."""
        return self._engine.eval_logits(token_ids(ids, self.n_vocab, "ids"), self.engine_client.loras.resolve(lora))

    # ---- embeddings (python/edgellm/embeddings.py) ----
    def embed(self, texts, normalize=True, pooling=None) -> list:
        """One embedding per input (a string counts as one input; a list of strings or token-id
        lists gives one each), all submitted at once and batched by the engine: a list of
        n_embd floats each, or with pooling "none" a list of per-token vectors. pooling: None
        (the GGUF's pooling_type, else "mean"), "mean", "cls", "last", "none". normalize: True
        (L2), False, or llama.cpp's embd_normalize integer. Raises InvalidRequestError for empty
        input and ContextLengthError for an input longer than n_ctx (never truncated)."""
        return self.embeddings(texts, normalize, pooling).tolist()

    def embeddings(self, texts, normalize=True, pooling=None):
        """Like embed, as an edgellm.embeddings.Embeddings: float32 numpy arrays (`data`), the
        token count of each input (`token_counts`, `prompt_tokens`) and the pooling used."""
        from .embeddings import embeddings_sync
        return embeddings_sync(self, texts, normalize, pooling)

    def rerank(self, query: str, documents, top_n=None, return_documents: bool = False) -> list:
        """Documents scored against the query by a cross-encoder (a reranker model), best first:
        a list of edgellm.rerank.RerankResult (index, relevance_score = the raw score, document
        with return_documents), exactly min(top_n, len(documents)) of them. Raises
        InvalidRequestError on a model that is not a reranker."""
        from .rerank import rerank_sync
        return rerank_sync(self, query, documents, top_n, return_documents)

    @property
    def n_embd(self) -> int:
        return self._engine.n_embd

    @property
    def default_pooling(self) -> str:
        """The pooling embed uses when given none: the GGUF's pooling_type, else "mean"."""
        from .embeddings import pooling_name
        return pooling_name(int(self._engine.default_pooling))

    def stats(self) -> dict:
        out = dict(self._engine.stats())
        if self.chat_renderer.vision is not None:
            out.update(self.chat_renderer.vision.stats())
        return out

    # ---- compute threads at run time (the thermal back-off, edgellm.thermal) ----
    @property
    def n_threads_active(self) -> int:
        """Threads computing now: n_threads unless set_n_threads lowered it."""
        return self._engine.n_threads_active

    def set_n_threads(self, n: int) -> None:
        """Compute with n of the n_threads threads (1..n_threads) from the engine's next parallel
        op on; the others sleep until it is raised again. Running requests go on unchanged."""
        if isinstance(n, bool) or not isinstance(n, int):
            raise InvalidRequestError(f"set_n_threads: the count must be an int, got {n!r}")
        self._engine.set_n_threads(n)

    @property
    def closed(self) -> bool:
        eng = getattr(self, "_engine", None)
        return eng is None or eng.closed

    # ---- persistent prefix cache and slots ----
    def flush_cache(self) -> None:
        """Wait until the pages cache_dir is being sent are written (close() and exit do too)."""
        self._engine.flush_cache()

    def slot_save(self, slot: int, path) -> dict:
        """llama.cpp's slot save: the KV of slot `slot`'s last sequence (its full pages in the
        prefix cache) and its tokens, to `path`. {"n_saved": tokens, "n_written": bytes}."""
        n, b = self._engine.slot_save(_slot_id(slot), os.fspath(path), self._slot_key())
        return {"n_saved": n, "n_written": b}

    def slot_restore(self, slot: int, path) -> dict:
        """Reads a slot_save file into the prefix cache (a later prompt with those tokens reuses
        them) and makes it slot `slot`'s. A missing, corrupt or foreign file (another model, KV
        type or page size) is an InvalidRequestError; nothing of it is loaded.
        {"n_restored": tokens, "n_read": bytes}."""
        n, b = self._engine.slot_restore(_slot_id(slot), os.fspath(path), self._slot_key())
        return {"n_restored": n, "n_read": b}

    def model_file_state(self) -> str:
        """The model file (and the draft's) now: "intact"; "replaced" (the path names another
        file: this model is intact, a new LLM would load the new file); "changed" (rewritten in
        place while loaded: requests fail with ModelFileChangedError)."""
        return self._engine.model_file_state()

    def _slot_key(self) -> str:
        """The model file's content key, which slot files carry (cache_dir.model_key: memoised
        under cache_dir when there is one); computed on the first slot action, while the file
        is still the one loaded."""
        if self._content_key is None:
            if self.model_file_state() != "intact":
                raise _core.ModelFileChangedError(
                    f"{self.model_path}: {_core.MODEL_FILE_CHANGED} or replaced: its slot files "
                    "cannot be matched to it (load it again)")
            from .cache_dir import file_key
            self._content_key = file_key(self.model_path, self.cache_dir)
        return self._content_key

    def slot_erase(self, slot: int) -> dict:
        """Drops slot `slot`'s cached pages. {"n_erased": tokens}."""
        return {"n_erased": self._engine.slot_erase(_slot_id(slot))}

    def close(self) -> None:
        eng = getattr(self, "_engine", None)
        if eng is not None and not eng.closed:
            eng.close()  # queued cache_dir pages are written first

    def __enter__(self) -> "LLM":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
