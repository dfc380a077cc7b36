"""OpenAI's Responses API: `POST /v1/responses`, `GET /v1/responses/{id}` (and its
`/input_items`), `DELETE /v1/responses/{id}`.

A request's wire model (responses_models.ResponsesBody) says what it asks of the shared chat API
(`llm.chat_stream_chunks`): instructions -> a leading system message (not carried to later
turns), input items -> chat messages, previous_response_id -> the stored conversation of that
response, prepended. The chat API's ChatDeltas become output items: reasoning -> a `reasoning`
item, content -> a `message` item with one `output_text` part, tool calls -> `function_call`
items. Responses are kept in memory (`ResponseStore`: an LRU bounded in count and in bytes)
unless `store: false`. The request's life is lifecycle.py's.
"""
import inspect
import itertools
import json
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from edgellm.chat_output import ChatDelta, new_call_id

from . import media
from . import responses_models as W
from .errors import APIError, invalid
from .lifecycle import Encoder, Generation, Lifecycle, read_json
from .progress import progress_of, progress_timings, prompt_progress, running_timings, timings
from .responses_models import event
from .answer_items import ItemAssembler
from .wire import chunk_delta, named_event, new_id, parse

JSON = Dict[str, Any]
ENDPOINT = "responses"
STORE_MAX = 1024          # responses kept for previous_response_id / GET, least recently used out
STORE_MAX_BYTES = 256 << 20  # and at most this many bytes of them (their JSON), LRU out


# --- the request as a chat conversation ------------------------------------------------------------

def parse_request(raw: Any, images: bool = False) -> W.ResponsesBody:
    """A checked `POST /v1/responses` body (a 400 naming the field on anything wrong); `images`:
    the model takes input_image parts. Its chat messages and items are made now: their 400s too."""
    req = parse(W.ResponsesBody, raw, {"images": images})
    req.input_messages, req.items  # noqa: B018
    return req


def conversation(req: W.ResponsesBody, history: List[JSON]) -> List[JSON]:
    """The chat messages to run: instructions, the earlier turns, this request's input (tool
    results named after the calls they answer, found in the history)."""
    names = {c["id"]: c["function"]["name"] for m in history for c in m.get("tool_calls", ())}
    for m in req.input_messages:
        if m["role"] == "tool" and "name" not in m and m["tool_call_id"] in names:
            m["name"] = names[m["tool_call_id"]]
    head = [{"role": "system", "content": req.instructions}] if req.instructions else []
    return head + [dict(m) for m in history] + req.input_messages


def open_chat(llm, messages: List[JSON], params, req: W.ResponsesBody):
    """llm.chat_stream_chunks with the tool and template arguments it takes."""
    fn = llm.chat_stream_chunks
    try:
        sig = inspect.signature(fn).parameters
        takes_all = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in sig.values())
    except (TypeError, ValueError):
        sig, takes_all = {}, True
    kwargs: JSON = {"tools": req.chat_tools}
    extra = {"tool_choice": req.chat_tool_choice, "parallel_tool_calls": req.parallel_tool_calls,
             "chat_template_kwargs": req.template_kwargs}
    for key, value in extra.items():
        if value is not None and (takes_all or key in sig):
            kwargs[key] = value
    if "tool_choice" not in kwargs and req.chat_tool_choice == "none":
        kwargs["tools"] = None  # an older chat API: render no tools, so none can be called
    return fn(messages, params, **kwargs)


# --- the stored responses ------------------------------------------------------------------------

@dataclass
class StoredResponse:
    body: JSON               # the response object, as GET returns it
    history: List[JSON]      # chat messages up to and including its output (no instructions)
    items: List[JSON] = field(default_factory=list)  # its own input items, in order
    size: int = 0            # bytes it holds (its JSON), set by ResponseStore.put

    def measure(self) -> int:
        return len(json.dumps([self.body, self.history, self.items], ensure_ascii=False))


class ResponseStore:
    """Responses by id, least recently used dropped beyond `capacity` responses or `max_bytes`
    bytes (each measured as its JSON: input items the template never renders count too)."""

    def __init__(self, capacity: int = STORE_MAX, max_bytes: Optional[int] = None):
        self.capacity, self.bytes = capacity, 0
        self.max_bytes = STORE_MAX_BYTES if max_bytes is None else max_bytes
        self._items: "OrderedDict[str, StoredResponse]" = OrderedDict()

    def put(self, rid: str, stored: StoredResponse) -> bool:
        """Keep `stored` (False: it alone is over max_bytes, so it is not kept)."""
        self.delete(rid)
        stored.size = stored.measure()
        if stored.size > self.max_bytes:
            return False
        self._items[rid], self.bytes = stored, self.bytes + stored.size
        while len(self._items) > self.capacity or self.bytes > self.max_bytes:
            self.bytes -= self._items.popitem(last=False)[1].size
        return True

    def get(self, rid: str) -> Optional[StoredResponse]:
        if rid in self._items:
            self._items.move_to_end(rid)
        return self._items.get(rid)

    def delete(self, rid: str) -> bool:
        stored = self._items.pop(rid, None)
        self.bytes -= 0 if stored is None else stored.size
        return stored is not None

    def __len__(self) -> int:
        return len(self._items)


# --- output items from chat deltas -------------------------------------------------------------

class OutputBuilder(ItemAssembler):
    """The output items of one response from ChatDeltas (answer_items.py), and the stream
    events of each step (`feed`, `finish` return them without sequence numbers). Whitespace
    between items is dropped; only an answer's own leading whitespace is kept."""

    def __init__(self):
        super().__init__()
        self.reasoning_tokens = 0

    def feed(self, delta: ChatDelta, n_tokens: int = 0) -> List[JSON]:
        if delta.reasoning and not delta.content and not delta.tool_calls:
            self.reasoning_tokens += n_tokens
        return super().feed(delta)

    def keep_held(self) -> bool:
        return len(self.items) == 1

    def begin(self, kind: str, tc) -> List[JSON]:
        if kind == "call":
            item, part = W.OutCall(id=new_id("fc_"), call_id=tc.id or new_call_id(),
                                   name=tc.name or ""), None
        elif kind == "text":
            item, part = W.OutMessage(id=new_id("msg_")), W.OutputText()
        else:
            item, part = W.OutReasoning(id=new_id("rs_")), W.ReasoningOut()
        self.items.append(item)
        pos = len(self.items) - 1
        events = [event("response.output_item.added", output_index=pos, item=item)]
        if part is not None:
            item.content.append(part)
            events.append(event("response.content_part.added", item_id=item.id,
                                output_index=pos, content_index=0, part=part))
        return events

    def extend(self, pos: int, kind: str, text: str) -> List[JSON]:
        item = self.items[pos]
        part = item.content[0]
        part.text += text
        return [event(f"response.{part.type}.delta", item_id=item.id, output_index=pos,
                      content_index=0, delta=text)]

    def extend_call(self, pos: int, tc, live: bool) -> List[JSON]:
        item = self.items[pos]
        if tc.name and not item.name:
            item.name = tc.name
        if not tc.arguments:
            return []
        item.arguments += tc.arguments
        return [event("response.function_call_arguments.delta", item_id=item.id,
                      output_index=pos, delta=tc.arguments)] if live else []

    def end(self, pos: int, status: str) -> List[JSON]:
        item = self.items[pos]
        item.status = status
        where = {"item_id": item.id, "output_index": pos}
        if item.type == "function_call":
            events = [event("response.function_call_arguments.done", **where, name=item.name,
                            arguments=item.arguments)]
        else:
            part = item.content[0]
            events = [event(f"response.{part.type}.done", **where, content_index=0, text=part.text),
                      event("response.content_part.done", **where, content_index=0, part=part)]
        return events + [event("response.output_item.done", output_index=pos, item=item)]

    def finish(self, status: str) -> List[JSON]:
        """Close the open item; `status` "incomplete" marks it cut off. An answer with no item
        at all still gets a message (empty, or the whitespace it wrote), so `output_text` is
        always there; whitespace held back after other items is dropped."""
        events: List[JSON] = []
        if not self.items:
            events = self._open_item("text")
            if self.held:
                events += self.extend(0, "text", self.held)
        self.held = ""
        return events + self.close_item(status)

    def output(self) -> List[JSON]:
        return [it.model_dump() for it in self.items]

    def assistant_message(self) -> JSON:
        """This output as one chat message, for the stored conversation."""
        kinds = {kind: [it for it in self.items if it.type == kind]
                 for kind in ("message", "reasoning", "function_call")}
        msg: JSON = {"role": "assistant",
                     "content": "".join(it.content[0].text for it in kinds["message"])}
        if kinds["reasoning"]:
            msg["reasoning_content"] = "\n".join(it.content[0].text for it in kinds["reasoning"])
        if kinds["function_call"]:
            msg["tool_calls"] = [{"id": it.call_id, "type": "function",
                                  "function": {"name": it.name, "arguments": it.arguments}}
                                 for it in kinds["function_call"]]
        return msg


# --- one response's answer -----------------------------------------------------------------------

class ResponseEncoder(Encoder):
    """The response object and its stream events (numbered as they are sent); kept in the store
    when it ends completed or incomplete."""

    def __init__(self, api: "ResponsesAPI", req: W.ResponsesBody, params, history: List[JSON]):
        self.api, self.req, self.params, self.history = api, req, params, history
        self.rid, self.created = new_id("resp_"), time.time()
        self.builder = OutputBuilder()
        self.finish_reason: Optional[str] = None
        self.usage = self.timings = None
        # timings_per_token: llama-server's figures so far, the prompt's from the progress
        # events when there were any, else known at the first token
        self.per_token = req.stream and req.timings_per_token
        self.t0, self.first = time.monotonic(), None
        self.prompt_n = self.n = 0
        self._events: List[JSON] = []
        self._seq = itertools.count()
        self._start = self.body("in_progress")

    def body(self, status: str, error: Optional[str] = None) -> JSON:
        echo = dict(self.req.echo)
        # What was really used: SamplingParams' defaults fill what the client left out.
        for key in ("temperature", "top_p"):
            if echo[key] is None:
                echo[key] = getattr(self.params, key, None)
        u = self.usage
        usage = None if u is None else W.Usage(
            input_tokens=u.prompt_tokens, output_tokens=u.completion_tokens,
            total_tokens=u.prompt_tokens + u.completion_tokens,
            input_tokens_details={"cached_tokens": getattr(u, "cached_tokens", 0) or 0},
            output_tokens_details={"reasoning_tokens": self.builder.reasoning_tokens})
        return W.ResponseObject(
            id=self.rid, created_at=int(self.created), status=status, model=self.api.config.model_id,
            error=None if error is None else W.ErrorInfo(code="server_error", message=error),
            incomplete_details={"reason": "max_output_tokens"} if status == "incomplete" else None,
            output=self.builder.items, usage=usage,
            completed_at=int(time.time()) if status == "completed" else None, **echo).model_dump()

    def add(self, index: int, chunk) -> None:
        events = []
        progress = progress_of(chunk)
        if progress is not None:  # return_progress, as llama-server sends it
            ev = event("response.in_progress", response=self._start)
            if self.per_token:
                ev["timings"] = progress_timings(progress)
                self.prompt_n = ev["timings"]["prompt_n"]
            events.append({**ev, "prompt_progress": prompt_progress(progress)})
        fed = self.builder.feed(chunk_delta(chunk), len(chunk.token_ids or ()))
        if self.per_token and chunk.token_ids:
            self.n += len(chunk.token_ids)
            self.first = self.first or time.monotonic()
            if fed:  # llama-server: on the step's last event
                fed[-1] = dict(fed[-1], timings=running_timings(self.t0, self.first, self.n,
                                                                self.prompt_n))
        if chunk.finish_reason is not None:
            self.finish_reason, self.timings = chunk.finish_reason, chunk.timings
        if chunk.usage is not None:
            self.usage = chunk.usage
        self._events = events + fed

    def start(self) -> List[JSON]:
        return [event("response.created", response=self._start),
                event("response.in_progress", response=self._start)]

    def events(self, index: int, chunk) -> List[JSON]:
        return self._events

    def finish(self) -> List[JSON]:
        status = {"length": "incomplete", "cancelled": "failed"}.get(self.finish_reason,
                                                                      "completed")
        events = self.builder.finish("incomplete" if status == "incomplete" else "completed")
        self.final = self.body(status, "the request was cancelled by the server"
                               if status == "failed" else None)
        if self.req.store and status != "failed":
            kept = [dict(m) for m in self.history] + self.req.input_messages + \
                [self.builder.assistant_message()]
            self.api.store.put(self.rid, StoredResponse(self.final, kept, self.req.items))
        done = event(f"response.{status}", response=self.final)
        if self.per_token and self.timings:
            done["timings"] = timings(self.timings)
        return events + [done]

    def error(self, err: APIError) -> List[JSON]:
        return self.builder.finish("incomplete") + [
            event("error", code=err.code, message=err.message, param=err.param),
            event("response.failed", response=self.body("failed", err.message))]

    def response(self) -> Response:
        self.finish()
        return JSONResponse(self.final)

    def frame(self, ev: JSON) -> bytes:
        return named_event({**ev, "sequence_number": next(self._seq)})


# --- the routes ----------------------------------------------------------------------------------

class ResponsesAPI:
    def __init__(self, routes, store: Optional[ResponseStore] = None):
        self.host = getattr(routes, "host", routes)  # the OpenAI Routes, or the EngineHost
        self.config, self.life = self.host.config, Lifecycle(self.host)
        self.store = store if store is not None else ResponseStore()  # an empty one is falsy

    def _stored(self, rid: str) -> StoredResponse:
        stored = self.store.get(rid)
        if stored is None:
            raise APIError(404, f"no response with id '{rid}' (responses are kept in memory, the "
                                f"{self.store.capacity} most recent with store: true)",
                           "invalid_request_error", "response_id", "response_not_found")
        return stored

    async def retrieve(self, request: Request) -> Response:
        async def work() -> Response:
            for key, value in request.query_params.items():
                if (key == "stream" and value.lower() in ("false", "0", "")) or \
                        key in ("include", "include[]"):  # nothing more than what was stored
                    continue
                raise invalid(f"query parameter '{key}' is not supported: a stored response is "
                              "returned whole (no streaming replay: there are no background "
                              "responses)", key, "unsupported")
            return JSONResponse(self._stored(request.path_params["response_id"]).body)
        return await self.life.answer(ENDPOINT, work)

    async def input_items(self, request: Request) -> Response:
        """The stored response's own input items (not those of earlier responses), a cursor
        page as OpenAI's: `limit` 1..100 (20), `order` desc (default) | asc, `after` an id."""
        async def work() -> Response:
            rid = request.path_params["response_id"]
            stored, q = self._stored(rid), parse(W.ItemsQuery, dict(request.query_params))
            items = stored.items if q.order == "asc" else stored.items[::-1]
            if q.after is not None:
                ids = [it["id"] for it in items]
                if q.after not in ids:
                    raise invalid(f"no input item '{q.after}' in response '{rid}'", "after",
                                  "invalid_value")
                items = items[ids.index(q.after) + 1:]
            page = items[:q.limit]
            return JSONResponse(W.ItemsPage(
                data=page, first_id=page[0]["id"] if page else None,
                last_id=page[-1]["id"] if page else None, has_more=len(items) > q.limit
            ).model_dump())
        return await self.life.answer(ENDPOINT, work)

    async def delete(self, request: Request) -> Response:
        async def work() -> Response:
            rid = request.path_params["response_id"]
            self._stored(rid) and self.store.delete(rid)
            return JSONResponse(W.Deleted(id=rid).model_dump())
        return await self.life.answer(ENDPOINT, work)

    def _history(self, req: W.ResponsesBody) -> List[JSON]:
        if req.previous_response_id is None:
            return []
        stored = self.store.get(req.previous_response_id)
        if stored is None:
            raise invalid(f"previous response with id '{req.previous_response_id}' not found "
                          "(responses are kept in memory while the server runs, only with "
                          "store: true)", "previous_response_id", "previous_response_not_found")
        limit = getattr(self.config, "max_body_size", None)
        if limit and stored.size > limit:  # a continued conversation counts as if sent whole
            raise APIError(413, f"the conversation of previous_response_id is {stored.size} "
                                f"bytes, over the server's request limit of {limit} bytes "
                                "(edgellm serve --max-body-size); start a new one",
                           "invalid_request_error", "previous_response_id", "request_too_large")
        return stored.history

    async def create(self, request: Request) -> Response:
        async def plan(llm) -> Generation:
            req = parse_request(await read_json(request), media.takes_images(llm))
            history = self._history(req)
            messages, params = conversation(req, history), self.host.sampling_params(req.sampling)
            return Generation(lambda: [open_chat(llm, messages, params, req)],
                              ResponseEncoder(self, req, params, history), stream=req.stream,
                              param="input")
        return await self.life.run(request, ENDPOINT, plan, param="input")
