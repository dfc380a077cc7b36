"""The slash commands, as Ollama users know them (`/set parameter`, `/show`, `/clear`, `/bye`)
plus llama-cli's `/read` and `/regen`, and `/save` / `/load` of a conversation as JSON.

`execute(app, line)` runs one command against a ReplApp and returns False when the session
should end. Commands print through app.render; they never raise for bad input.
"""
from __future__ import annotations

import os
from typing import Callable, Dict, List

from .conversation import Conversation, ConversationFileError
from .model_facts import info_rows, template_text
from .params import PARAMETERS, ParameterError, Parameters, effective as effective_params

__all__ = ["execute", "HELP", "is_command"]

HELP = '''Available Commands:
  /set            Set session variables
  /unset          Unset session variables (e.g. a stop string)
  /show           Show model information
  /clear          Clear session context (keeps the system message)
  /regen          Regenerate the last answer
  /read <file>    Send a text file's contents as the message
  /save <file>    Save the conversation (system, messages, parameters) as JSON
  /load <file>    Load a conversation saved with /save
  /bye, /exit     Exit
  /?, /help       Help for a command
  /? shortcuts    Help for keyboard shortcuts

Use """ to begin a multi-line message.'''

HELP_SET = '''Available Commands:
  /set parameter ...     Set a parameter
  /set system <string>   Set the system message
  /set verbose           Show the detailed timing block after each answer
  /set quiet             Show only the one-line timing summary
  /unset parameter NAME  Back to the default (stop: /unset parameter stop "User:" removes one)

Use """ to begin a multi-line system message.'''

HELP_SHOW = '''Available Commands:
  /show info         Show details for this model
  /show parameters   Show parameters for this session
  /show system       Show the system message
  /show template     Show the chat template
  /show history      Show the conversation so far'''

HELP_SHORTCUTS = '''Available keyboard shortcuts:
  Ctrl + a            Move to the beginning of the line (Home)
  Ctrl + e            Move to the end of the line (End)
   Alt + b            Move back (left) one word
   Alt + f            Move forward (right) one word
  Ctrl + k            Delete the sentence after the cursor
  Ctrl + u            Delete the sentence before the cursor
  Ctrl + w            Delete the word before the cursor
  Ctrl + g            Edit the current line in $EDITOR

  Ctrl + l            Clear the screen
  Ctrl + c            Stop the model from responding
  Ctrl + d            Exit (/bye)'''


def _help_parameters() -> str:
    width = max(len(n) for n in PARAMETERS) + 2
    rows = [f"  /set parameter {name:<{width}}{spec.help}" for name, spec in PARAMETERS.items()]
    return "Available Parameters:\n" + "\n".join(rows)


def is_command(text: str) -> bool:
    """A line starting with '/'. A multi-line text is a message (a pasted block), except
    `/set system` with a triple-quoted block, whose system message may span lines."""
    if not text.startswith("/"):
        return False
    return "\n" not in text.strip() or text.startswith("/set system")


def _rest(line: str, n_words: int) -> str:
    """The text after the first n_words words, keeping its inner spacing."""
    rest = line.strip()
    for _ in range(n_words):
        parts = rest.split(None, 1)
        rest = parts[1] if len(parts) > 1 else ""
    return rest


# ---- the commands ----------------------------------------------------------------------------

def _bye(app, line: str, args: List[str]) -> bool:
    return False


def _help(app, line: str, args: List[str]) -> bool:
    topic = args[0].lstrip("/") if args else ""
    text = {"set": HELP_SET, "show": HELP_SHOW, "shortcuts": HELP_SHORTCUTS, "shortcut": HELP_SHORTCUTS,
            "parameter": _help_parameters(), "parameters": _help_parameters()}.get(topic, HELP)
    app.render.info(text)
    return True


def _clear(app, line: str, args: List[str]) -> bool:
    app.conversation.clear()
    app.render.info("Cleared session context")
    return True


def _set(app, line: str, args: List[str]) -> bool:
    if not args:
        app.render.info(HELP_SET)
        return True
    what = args[0]
    if what == "parameter":
        if len(args) < 2:
            app.render.info(_help_parameters())
            return True
        name = args[1]
        values = Parameters.split_args(_rest(line, 3))
        try:
            if name == "num_ctx":
                if len(values) != 1:
                    raise ParameterError("num_ctx takes one value")
                n_ctx = PARAMETERS["num_ctx"].parse(values[0])
                app.reload(n_ctx)
                app.params.values["num_ctx"] = n_ctx
                app.render.info(f"Set parameter 'num_ctx' to '{n_ctx}' (model reloaded)")
                return True
            value = app.params.set(name, values)
        except ParameterError as e:
            app.render.error(f"Couldn't set parameter: {e}")
            return True
        except Exception as e:  # a reload that failed: the old model stays loaded
            from edgellm.memory_plan import message_for
            app.render.error(f"Couldn't set parameter: {message_for(e, 'repl')}")
            return True
        shown = ", ".join(value) if isinstance(value, list) else value
        app.render.info(f"Set parameter '{name}' to '{shown}'")
        return True
    if what == "system":
        text = _rest(line, 2)
        if text.startswith('"""'):
            text = text[3:]
            text = text[:-3] if text.rstrip().endswith('"""') else text
            text = text.strip()
        if not text:
            app.render.error("/set system needs the system message, e.g. /set system You are terse.")
            return True
        app.conversation.system = text
        app.render.info("Set system message.")
        return True
    if what == "verbose":
        app.verbose = True
        app.render.info("Set 'verbose' mode.")
        return True
    if what == "quiet":
        app.verbose = False
        app.render.info("Set 'quiet' mode.")
        return True
    app.render.info(f"Unknown command '/set {what}'. Type /? set for help")
    return True


def _unset(app, line: str, args: List[str]) -> bool:
    """`/unset parameter NAME [STRING...]` (num_ctx: the context the session started with
    stays loaded until the next /set)."""
    if len(args) < 2 or args[0] != "parameter":
        app.render.info('Usage: /unset parameter NAME  (stop: /unset parameter stop "STRING")')
        return True
    try:
        now = app.params.unset(args[1], Parameters.split_args(_rest(line, 3)))
    except ParameterError as e:
        app.render.error(f"Couldn't unset parameter: {e}")
        return True
    app.render.info(f"Unset parameter '{args[1]}': {now}")
    return True


def _show(app, line: str, args: List[str]) -> bool:
    if not args:
        app.render.info(HELP_SHOW)
        return True
    what = args[0]
    if what == "info":
        rows = info_rows(app.llm)
        width = max(len(k) for k, _ in rows) + 4
        app.render.info("  Model\n" + "\n".join(f"    {k:<{width}}{v}" for k, v in rows))
    elif what in ("parameters", "parameter"):
        _show_parameters(app)
    elif what == "system":
        if app.conversation.system:
            app.render.info(app.conversation.system)
        else:
            app.render.info("No system message was specified for this session "
                            "(the chat template may add its own default).")
    elif what == "template":
        app.render.info(template_text(app.llm))
    elif what in ("history", "messages"):
        msgs = app.conversation.rendered()
        if not msgs:
            app.render.info("No messages yet.")
        for m in msgs:
            app.render.info(f"{m['role']}: {m['content']}")
    else:
        app.render.info(f"Unknown command '/show {what}'. Type /? show for help")
    return True


def _show_parameters(app) -> None:
    p = app.sampling_params()
    effective = {**effective_params(p), "num_ctx": getattr(app.llm, "n_ctx", "-")}
    stops = p.stop_list()
    user = app.params.values
    lines = ["User defined parameters:"]
    if user:
        for name, value in user.items():
            shown = " ".join(repr(s) for s in value) if isinstance(value, list) else value
            lines.append(f"  {name:<20}{shown}")
    else:
        lines.append("  (none)")
    lines.append("")
    lines.append("Session parameters (what the next answer uses):")
    for name, value in effective.items():
        lines.append(f"  {name:<20}{value}")
    lines.append(f"  {'stop':<20}{' '.join(repr(s) for s in stops) if stops else '(none)'}")
    app.render.info("\n".join(lines))


def _regen(app, line: str, args: List[str]) -> bool:
    if not app.conversation.rewind_last_answer():
        app.render.info("Nothing to regenerate yet: ask something first.")
        return True
    app.generate()
    return True


def _read(app, line: str, args: List[str]) -> bool:
    path = os.path.expanduser(_rest(line, 1).strip().strip('"').strip("'"))
    if not path:
        app.render.error("/read needs a file name, e.g. /read notes.txt")
        return True
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except UnicodeDecodeError:
        app.render.error(f"cannot read {path}: not UTF-8 text")
        return True
    except OSError as e:
        app.render.error(f"cannot read {path}: {e.strerror or e}")
        return True
    if not text.strip():
        app.render.error(f"{path} is empty")
        return True
    app.send(text.rstrip("\n"))
    return True


def _save(app, line: str, args: List[str]) -> bool:
    path = _rest(line, 1).strip()
    if not path:
        app.render.error("/save needs a file name, e.g. /save chat.json")
        return True
    try:
        app.conversation.save(path, app.params.to_json(), getattr(app.llm, "model_path", None))
    except ConversationFileError as e:
        app.render.error(str(e))
        return True
    n = len(app.conversation.messages)
    app.render.info(f"Saved {n} message{'s' if n != 1 else ''} to {path}")
    return True


def _load(app, line: str, args: List[str]) -> bool:
    path = _rest(line, 1).strip()
    if not path:
        app.render.error("/load needs a file name, e.g. /load chat.json")
        return True
    try:
        conversation, raw_params = Conversation.load(path)
        params = Parameters.from_json(raw_params, path)
    except (ConversationFileError, ParameterError) as e:
        app.render.error(str(e))
        return True
    n_ctx = params.get("num_ctx")
    if n_ctx and n_ctx != getattr(app.llm, "n_ctx", None):
        try:
            app.reload(n_ctx)
        except Exception as e:
            from edgellm.memory_plan import message_for
            app.render.error(f"{path}: cannot reload the model with num_ctx {n_ctx}: "
                             f"{message_for(e, 'repl')}")
            return True
    app.conversation = conversation
    app.params = params
    n = len(conversation.messages)
    app.render.info(f"Loaded {n} message{'s' if n != 1 else ''} from {path}")
    return True


_COMMANDS: Dict[str, Callable] = {
    "/bye": _bye, "/exit": _bye, "/quit": _bye,
    "/help": _help, "/?": _help,
    "/clear": _clear,
    "/set": _set,
    "/unset": _unset,
    "/show": _show,
    "/regen": _regen,
    "/read": _read,
    "/save": _save,
    "/load": _load,
}


def execute(app, line: str) -> bool:
    words = line.strip().split()
    name = words[0].lower()
    handler = _COMMANDS.get(name)
    if handler is None:
        app.render.info(f"Unknown command '{words[0]}'. Type /? for help")
        return True
    return handler(app, line, words[1:])
