"""The terminal chat behind `edgellm run MODEL`: an Ollama-style REPL over edgellm.LLM.

    input.py         line readers (prompt_toolkit / plain) and \"\"\" multi-line messages
    commands.py      /help /set /show /clear /regen /read /save /load /bye
    conversation.py  system prompt + turns, trimming to the context, JSON save/load
    params.py        Ollama parameter names <-> SamplingParams
    render.py        banner, streamed answers, timing line, Ollama's --verbose block
    model_facts.py   model name, quantization, /show info and template
    app.py           the loop and one-shot answering
"""
from .app import ReplApp, answer_once
from .conversation import Conversation
from .input import PlainReader, PromptToolkitReader, history_path, read_message
from .params import Parameters, ParameterError
from .render import Renderer

__all__ = ["ReplApp", "answer_once", "Conversation", "Parameters", "ParameterError", "Renderer",
           "PlainReader", "PromptToolkitReader", "history_path", "read_message"]
