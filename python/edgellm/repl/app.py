"""The REPL loop (`ReplApp.run`) and one-shot answering (`answer_once`).

One answer: fit the conversation into the context (dropping the oldest turns, telling the
user the first time), stream the chat completion piece by piece, then print the timing
summary. Ctrl+C while an answer streams raises KeyboardInterrupt in this thread (the engine
waits release the GIL and wake every 100 ms); closing the stream iterator then aborts the
request in the engine, and the partial answer stays in the conversation.
"""
from __future__ import annotations

import time
from typing import Callable, Optional

from .commands import execute, is_command
from .conversation import ContextOverflow, Conversation
from .finish import finish_notice, stream_answer
from .input import LineReader, image_paths, quiet_typing, read_message
from .params import Parameters
from .render import Renderer

__all__ = ["ReplApp", "answer_once", "count_prompt_tokens", "answer_reserve"]

EXIT_HINT = "Use Ctrl + d or /bye to exit."


def count_prompt_tokens(llm, messages) -> int:
    """Tokens of the conversation as the model will see it (template applied)."""
    ids_of = getattr(llm, "chat_prompt_ids", None)
    if ids_of is not None:
        return len(ids_of(messages))
    text = llm.apply_chat_template(messages, add_generation_prompt=True)
    return len(llm.tokenize(text, add_special=True, parse_special=True))


def answer_reserve(max_tokens: Optional[int], n_ctx: int, context_shift: bool = False) -> int:
    """Room kept for the answer when fitting the history: num_predict when it is set; with no
    limit, a quarter of the context (at most 1024 tokens) so an answer has space to start.
    With --context-shift an answer goes on past the context's end, so it needs no more than
    that quarter (which is also what each shift frees at least, the prompt being kept)."""
    quarter = min(n_ctx // 4, 1024)
    if max_tokens is not None:
        return min(int(max_tokens), quarter) if context_shift else int(max_tokens)
    return quarter


def _close(iterator) -> None:
    close = getattr(iterator, "close", None)
    if close is None:
        return
    while True:
        try:
            close()  # aborts the request in the engine
            return
        except KeyboardInterrupt:
            continue  # a second Ctrl+C while aborting: finish aborting all the same


class ReplApp:
    """A chat session over one LLM.

    llm: an edgellm.LLM (or anything with its chat_stream_chunks / apply_chat_template /
    tokenize / n_ctx). load_llm(n_ctx) builds a replacement when num_ctx changes.
    base_params: SamplingParams from the command line; /set parameter values override them.
    """

    def __init__(self, llm, reader: LineReader, render: Renderer, *, base_params=None,
                 system: Optional[str] = None, verbose: bool = False,
                 load_llm: Optional[Callable[[int], object]] = None):
        self.llm = llm
        self.reader = reader
        self.render = render
        self.base_params = base_params
        self.params = Parameters()
        self.conversation = Conversation(system)
        self.verbose = verbose
        self._load_llm = load_llm
        self._trim_told = False
        # Ollama reports the model load under "load duration" for the request that loaded it.
        self._pending_load_s = float(getattr(llm, "load_time", 0.0) or 0.0)

    # ---- settings ----
    def sampling_params(self):
        return self.params.sampling(self.base_params)

    def reload(self, n_ctx: int) -> None:
        """Load the model again with another context size; the old one stays if this fails."""
        if self._load_llm is None:
            raise RuntimeError("this session cannot reload its model")
        if n_ctx == getattr(self.llm, "n_ctx", None):
            return
        new = self._load_llm(n_ctx)
        old, self.llm = self.llm, new
        close = getattr(old, "close", None)
        if close is not None:
            close()
        self._pending_load_s = float(getattr(new, "load_time", 0.0) or 0.0)

    # ---- the loop ----
    def run(self) -> int:
        """Read, dispatch, answer until /bye or Ctrl+D; the exit status (0)."""
        try:
            while True:
                try:
                    text = read_message(self.reader)
                except KeyboardInterrupt:
                    self.render.end_line()
                    self.render.info(EXIT_HINT)
                    continue
                except EOFError:
                    self.render.end_line()
                    return 0
                if not text.strip():
                    continue
                try:
                    if is_command(text):
                        if not execute(self, text):
                            return 0
                        continue
                    self.send(text)
                except KeyboardInterrupt:
                    # Ctrl+C outside the streaming loop (rendering the prompt, reading a file,
                    # printing timings): drop what was being done, keep the session.
                    self.render.end_line()
        finally:
            self.reader.close()

    def send(self, text: str) -> None:
        self.conversation.add("user", with_images(self.llm, text, self.render))
        self.generate()

    # ---- answering ----
    def _fit(self, params) -> bool:
        n_ctx = int(self.llm.n_ctx)
        room = n_ctx - answer_reserve(params.max_tokens, n_ctx, bool(getattr(self.llm, "context_shift", False)))
        try:
            dropped = self.conversation.drop_oldest_until(
                lambda msgs: count_prompt_tokens(self.llm, msgs) <= room)
        except ContextOverflow:
            # The newest message cannot fit: say so and forget it, so the next one can.
            n = count_prompt_tokens(self.llm, self.conversation.rendered()[-1:])
            self.render.error(f"the message has about {n} tokens, more than the context of {n_ctx} "
                              f"leaves after {n_ctx - room} tokens kept for the answer; "
                              "shorten it, lower num_predict or raise num_ctx")
            self.conversation.messages.pop()
            return False
        if dropped and not self._trim_told:
            self._trim_told = True
            self.render.notice(f"(the conversation outgrew the context of {n_ctx} tokens: the "
                               "oldest messages are dropped from now on; the system message is kept)")
        return True

    def generate(self) -> None:
        """Answer the conversation's last user message, streaming to the terminal."""
        from .. import EdgeLLMError

        params = self.sampling_params()
        try:
            if not self._fit(params):
                return
        except EdgeLLMError as e:  # e.g. a chat template that rejects this conversation
            self.render.error(str(e))
            self.conversation.messages.pop()
            return
        t0 = time.perf_counter()
        parts = []
        final = None
        stream = None
        interrupted = False
        reason = None
        try:
            stream = self.llm.chat_stream_chunks(self.conversation.rendered(), params)
            with quiet_typing():  # keys typed meanwhile are not echoed into the answer
                final, reason = stream_answer(stream, self.render, parts)
        except KeyboardInterrupt:
            interrupted = True
        except EdgeLLMError as e:
            if stream is not None:
                _close(stream)
            self.render.end_line()
            self.render.error(str(e))
            self.conversation.messages.pop()  # the question that failed
            return
        finally:
            if stream is not None:
                _close(stream)
        total_s = time.perf_counter() - t0
        # The partial answer of an interrupted request stays: the user saw it.
        self.conversation.add("assistant", "".join(parts))
        self.render.end_line()
        if interrupted or final is None:
            self.render.line()
            return
        timings = final.timings or {}
        notice = finish_notice(reason, timings, params.max_tokens, int(self.llm.n_ctx))
        if notice:
            self.render.notice(notice)
        if self.verbose:
            self.render.verbose(timings, total_s, self._pending_load_s)
        elif final.finish_reason is not None:
            self.render.timings(timings)
        self._pending_load_s = 0.0
        self.render.line()


def with_images(llm, text: str, render: Renderer):
    """A message's content: for a model that takes images, the image files the text names
    (Ollama's rule, input.image_paths) attached as image parts before the rest of the text."""
    if getattr(llm, "takes_images", False) is not True:
        return text
    from ..vision import ImageError, file_part

    rest, paths = image_paths(text)
    parts = []
    for path in paths:
        try:
            parts.append(file_part(path))
        except (OSError, ImageError) as e:
            render.error(f"cannot attach {path}: {e}")
            return text
        render.line(f"Added image '{path}'", render.err)  # stdout carries the answer alone
    return parts + [{"type": "text", "text": rest}] if parts else text


def answer_once(llm, text: str, render: Renderer, *, base_params=None, system: Optional[str] = None,
                verbose: bool = False) -> int:
    """`edgellm run MODEL "question"` / piped stdin: print only the answer; the exit status."""
    from .. import EdgeLLMError

    conversation = Conversation(system)
    conversation.add("user", with_images(llm, text, render))
    params = Parameters().sampling(base_params)
    t0 = time.perf_counter()
    final = None
    stream = None
    reason = None
    try:
        stream = llm.chat_stream_chunks(conversation.rendered(), params)
        final, reason = stream_answer(stream, render)
    except KeyboardInterrupt:
        render.end_line()
        return 130
    except EdgeLLMError as e:
        render.end_line()
        render.error(str(e))
        return 1
    finally:
        if stream is not None:
            _close(stream)
    render.end_line()
    notice = final is not None and finish_notice(reason, final.timings, params.max_tokens,
                                                 int(llm.n_ctx))
    if notice:
        render.line(notice, render.err)  # stdout carries the answer alone
    if verbose and final is not None:
        render.verbose(final.timings or {}, time.perf_counter() - t0,
                       float(getattr(llm, "load_time", 0.0) or 0.0))
    return 0
