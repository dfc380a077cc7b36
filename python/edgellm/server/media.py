"""Images on the wire, for every API. A content part that carries an image (the Responses API's
input_image, Anthropic's image block) is accepted where the served model takes images (the parse's
context: `wire.parse(Model, body, context(llm))`) and refused with its API's words elsewhere;
edgellm.vision.image_part turns each into the one internal shape, an OpenAI image_url part, which
the chat renderer (edgellm.vision.VisionInput) reads, decodes and encodes."""
from typing import Any, Dict, List

from pydantic import ValidationInfo, create_model, model_validator

from .. import vision
from .errors import Refusal
from .wire import Wire, of_type

JSON = Dict[str, Any]
TEXT_ONLY = "this model takes text only (serve it with its projector, --mmproj, to send images)"


def takes_images(llm) -> bool:
    """Whether `llm` (an LLM or AsyncLLM) was loaded with its projector."""
    return getattr(llm, "takes_images", False) is True


def context(llm) -> JSON:
    """The parse context of a request to `llm` (wire.parse)."""
    return {"images": takes_images(llm)}


def image_part_model(kind: str, refusal: str, **fields: Any) -> type:
    """The wire model of an image part `{"type": kind, **fields}`: valid where the parse's context
    says the model takes images, else `refusal` (a 400 naming '{where}.type')."""
    def check(cls, v: Any, info: ValidationInfo) -> Any:
        if not (info.context or {}).get("images"):
            raise Refusal(refusal, "unsupported", "{where}.type")
        return v
    base = of_type(kind, Wire, **fields)
    return create_model(base.__name__, __base__=base,
                        __validators__={"_takes_images": model_validator(mode="before")(check)})


def content(pieces: List[Any], join: str = "\n") -> Any:
    """A message's content from its text pieces and image parts (dicts from vision.image_part), in
    order: the texts joined when there is no image, else the content parts."""
    if not any(isinstance(p, dict) for p in pieces):
        return join.join(pieces)
    return [p if isinstance(p, dict) else {"type": "text", "text": p} for p in pieces]


def part(model, where: str) -> JSON:
    """An image part's wire model as the internal image_url part."""
    return vision.image_part(model.model_dump(exclude_none=True), where)
