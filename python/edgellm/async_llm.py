"""`AsyncLLM`: `LLM` for asyncio, over the same engine client and chat renderer.

    async with AsyncLLM("smollm2") as llm:
        print((await llm.generate("The capital of France is")).text)
        async for piece in llm.stream("Once upon a time"):
            print(piece, end="", flush=True)
"""
from __future__ import annotations

import asyncio
import functools
import inspect
from typing import Any, AsyncIterator, Dict, List, Mapping, Optional

from ._chat import finish_chat, parse_chunk
from ._engine_client import RequestControl, is_batch
from .llm import LLM
from .outputs import CompletionChunk
from .sampling_params import SamplingParams
from .stream import AsyncStream

__all__ = ["AsyncLLM"]


class AsyncLLM:
    """LLM for asyncio: the same constructor; awaitable generate/chat and async iterators.
    Cancelling the awaiting task or leaving an async iterator early aborts the request, and so
    does an iterator's `.cancel()` from any thread (edgellm.stream.AsyncStream).

    generate / chat / stream* render chat templates and tokenize prompts in a worker thread
    (the loop's default executor; the tokenizer releases the GIL), so a long prompt or a slow
    template never stalls the event loop; their errors surface when awaited: from generate /
    chat, or from an iterator's first chunk. tokenize / detokenize / apply_chat_template stay
    plain calls (run them in an executor for large inputs)."""

    def __init__(self, *args, **kwargs):
        self.llm = LLM(*args, **kwargs)

    def __getattr__(self, name):  # n_ctx, n_vocab, metadata, isa, ...
        if name == "llm":
            raise AttributeError(name)
        return getattr(self.llm, name)

    @property
    def _client(self):
        return self.llm.engine_client

    async def _off_loop(self, fn, *args):
        """fn(*args) in a worker thread (prompt rendering and tokenizing)."""
        return await asyncio.get_running_loop().run_in_executor(None, functools.partial(fn, *args))

    async def _prompt_ids(self, prompt) -> List[int]:
        return await self._off_loop(self._client.prompt_ids, prompt)

    async def _chat_request(self, *args):
        return await self._off_loop(self.llm.chat_renderer.request, *args)

    async def generate(self, prompt, params: Optional[SamplingParams] = None):
        params = params or SamplingParams()
        if is_batch(prompt):
            return list(await asyncio.gather(*(self.generate(p, params) for p in prompt)))
        return await self._client.async_collect(await self._prompt_ids(prompt), params)

    async def chat(self, messages, params: Optional[SamplingParams] = None, tools=None,
                   tool_choice=None, parallel_tool_calls: Optional[bool] = None,
                   chat_template_kwargs: Optional[Mapping[str, Any]] = None,
                   add_generation_prompt: Optional[bool] = None,
                   continue_final_message: Optional[bool] = None):
        ids, params, new_parser = await self._chat_request(messages, params, tools, tool_choice,
                                                           parallel_tool_calls, chat_template_kwargs,
                                                           add_generation_prompt, continue_final_message)
        done = await self._client.async_collect(ids, params)
        if params.n > 1:
            return [finish_chat(c, new_parser()) for c in done]
        return finish_chat(done, new_parser())

    async def _chunks(self, prompt, params: Optional[SamplingParams],
                      control: RequestControl) -> AsyncIterator[CompletionChunk]:
        """prompt: text or ids, tokenized off the loop; or an awaitable of the ids."""
        params = params or SamplingParams()
        ids = await prompt if inspect.isawaitable(prompt) else await self._prompt_ids(prompt)
        agen = self._client.async_stream_chunks(ids, params, control)
        try:
            async for ch in agen:
                yield ch
        finally:
            await agen.aclose()

    def stream_chunks(self, prompt, params: Optional[SamplingParams] = None) -> AsyncStream[CompletionChunk]:
        """Chunks as LLM.stream_chunks; the prompt is tokenized (and errors raised) at the first.
        An AsyncStream: `.cancel()` from any thread (edgellm.stream)."""
        control = RequestControl()
        return AsyncStream(self._chunks(prompt, params, control), control)

    def stream(self, prompt, params: Optional[SamplingParams] = None) -> AsyncStream[str]:
        control = RequestControl()

        async def pieces():
            agen = self._chunks(prompt, params, control)
            try:
                async for ch in agen:
                    if ch.text:
                        yield ch.text
            finally:
                await agen.aclose()
        return AsyncStream(pieces(), control)

    def chat_stream_chunks(self, messages, params: Optional[SamplingParams] = None, tools=None,
                           tool_choice=None, parallel_tool_calls: Optional[bool] = None,
                           chat_template_kwargs: Optional[Mapping[str, Any]] = None,
                           add_generation_prompt: Optional[bool] = None,
                           continue_final_message: Optional[bool] = None) -> AsyncIterator[CompletionChunk]:
        """As LLM.chat_stream_chunks: each chunk's `.delta` is its parsed ChatDelta. The prompt
        is rendered in a worker thread when the first chunk is awaited; a template or context
        error is raised there, before any chunk. An AsyncStream: `.cancel()` from any thread."""
        control = RequestControl()
        return AsyncStream(self._chat_chunks((messages, params, tools, tool_choice, parallel_tool_calls,
                                              chat_template_kwargs, add_generation_prompt,
                                              continue_final_message), control), control)

    async def _chat_chunks(self, request, control: RequestControl) -> AsyncIterator[CompletionChunk]:
        ids, params, new_parser = await self._chat_request(*request)
        parsers: Dict[int, Any] = {}

        async def ready():
            return ids
        agen = self._chunks(ready(), params, control)
        try:
            async for ch in agen:
                yield parse_chunk(ch, parsers, new_parser)
        finally:
            await agen.aclose()

    def chat_stream(self, messages, params: Optional[SamplingParams] = None, tools=None,
                    **kw) -> AsyncStream[str]:
        chunks = self.chat_stream_chunks(messages, params, tools=tools, **kw)

        async def pieces():
            try:
                async for ch in chunks:
                    if ch.delta.content:
                        yield ch.delta.content
            finally:
                await chunks.aclose()
        return AsyncStream(pieces(), chunks._control)

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = False) -> List[int]:
        return self.llm.tokenize(text, add_special, parse_special)

    def detokenize(self, ids) -> str:
        return self.llm.detokenize(ids)

    def apply_chat_template(self, messages, add_generation_prompt: bool = True, tools=None,
                            chat_template_kwargs=None) -> str:
        return self.llm.apply_chat_template(messages, add_generation_prompt, tools,
                                            chat_template_kwargs)

    def stats(self) -> dict:
        return self.llm.stats()

    async def eval_logits(self, ids):
        return await asyncio.get_running_loop().run_in_executor(None, self.llm.eval_logits, ids)

    async def embed(self, texts, normalize=True, pooling=None) -> list:
        """LLM.embed, awaitable: every input submitted at once; cancelling aborts them."""
        return (await self.embeddings(texts, normalize, pooling)).tolist()

    async def embeddings(self, texts, normalize=True, pooling=None):
        from .embeddings import embeddings_async
        return await embeddings_async(self, texts, normalize, pooling)

    async def rerank(self, query: str, documents, top_n=None, return_documents: bool = False) -> list:
        """LLM.rerank, awaitable: every pair submitted at once; cancelling aborts them."""
        from .rerank import rerank_async
        return (await rerank_async(self, query, documents, top_n, return_documents))[0]

    def close(self) -> None:
        self.llm.close()

    async def __aenter__(self) -> "AsyncLLM":
        return self

    async def __aexit__(self, *exc) -> None:
        self.close()

    def __enter__(self) -> "AsyncLLM":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
