"""edgellm: a CPU/edge-first runtime for quantized GGUF language models."""
import os as _os

# Development builds (scripts/dev-build.sh) leave _core in a build folder; EDGELLM_BUILD_DIR
# points the package at it. Installed packages carry _core beside this file.
_build_dir = _os.environ.get("EDGELLM_BUILD_DIR")
if _build_dir:
    __path__.insert(0, _os.path.abspath(_build_dir))

from ._core import (  # noqa: E402
    ContextLengthError,
    EdgeLLMError,
    InvalidRequestError,
    LoadCancelled,
    ModelFileChangedError,
    ModelFormatError,
    ModelShardError,
    RequestCancelled,
    StorageError,
)
from .model_file import ModelFile  # noqa: E402
from .memory_plan import MemoryPlan, MemoryPlanError  # noqa: E402
from .sampling_params import SamplingParams  # noqa: E402
from .outputs import Completion, CompletionChunk, TokenLogprob, TopLogprob, Usage  # noqa: E402
from .llm import LLM  # noqa: E402
from .lora import LoraNotFoundError  # noqa: E402
from .request_handle import RequestHandle  # noqa: E402
from .stream import AsyncStream, Stream  # noqa: E402
from .async_llm import AsyncLLM  # noqa: E402
from . import hub  # noqa: E402,F401 - registers its names (hf.co/..., pulled, copied) with models.resolve

__version__ = "0.1.0"

__all__ = [
    "EdgeLLMError",
    "ModelFormatError",
    "ModelShardError",
    "InvalidRequestError",
    "ContextLengthError",
    "RequestCancelled",
    "LoadCancelled",
    "ModelFileChangedError",
    "StorageError",
    "LoraNotFoundError",
    "MemoryPlanError",
    "MemoryPlan",
    "ModelFile",
    "LLM",
    "AsyncLLM",
    "RequestHandle",
    "Stream",
    "AsyncStream",
    "SamplingParams",
    "Completion",
    "CompletionChunk",
    "TokenLogprob",
    "TopLogprob",
    "Usage",
]
