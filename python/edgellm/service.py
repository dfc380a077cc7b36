"""A systemd unit that runs `edgellm serve` (`edgellm service install`, docs/raspberry-pi.md).

The unit runs the serve command line exactly as given (checked by `edgellm serve`'s own option
parser first, so a typo fails at install time, not at boot), with paths made absolute (a unit
runs in /), words quoted by systemd's rules, and a stop timeout that covers the server's
--shutdown-grace so running requests finish before systemd kills it.
"""
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional

# serve options whose value is a path, made absolute for the unit
_PATH_OPTIONS = ("--api-key-file", "--cache-dir", "--slot-save-path", "--draft", "--chat-template")
_SAFE_WORD = re.compile(r"^[A-Za-z0-9_@%+=:,./-]+$")


class ServiceError(ValueError):
    """The unit cannot be written as asked (a key on the command line, an unwritable folder)."""


def systemd_quote(word: str) -> str:
    """One ExecStart word: `%` and `$` escaped (specifiers, variables), quoted when needed."""
    word = word.replace("%", "%%").replace("$", "$$")
    if _SAFE_WORD.match(word):
        return word
    return '"' + word.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _absolute_paths(args: List[str]) -> List[str]:
    out: List[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        name, eq, value = a.partition("=")
        if name in _PATH_OPTIONS and eq:
            out.append(f"{name}={_absolute_if_path(value, name)}")
        elif a in _PATH_OPTIONS and i + 1 < len(args):
            out += [a, _absolute_if_path(args[i + 1], a)]
            i += 1
        else:
            out.append(a)
        i += 1
    return out


def _absolute_if_path(value: str, option: str) -> str:
    # --draft and --chat-template also take known names; only existing files become paths
    if option in ("--draft", "--chat-template") and not os.path.exists(value):
        return value
    return str(Path(value).expanduser().absolute())


def shutdown_grace(args: List[str]) -> float:
    """--shutdown-grace's value in a serve command line (serve's default: 5 s)."""
    grace = 5.0
    for i, a in enumerate(args):
        if a == "--shutdown-grace" and i + 1 < len(args):
            grace = float(args[i + 1])
        elif a.startswith("--shutdown-grace="):
            grace = float(a.split("=", 1)[1])
    return grace


@dataclass
class ServiceUnit:
    model: str
    serve_args: List[str] = field(default_factory=list)
    executable: List[str] = field(default_factory=list)  # argv before "serve"
    user_unit: bool = False         # a systemd --user unit (no User=, WantedBy=default.target)
    run_as: Optional[str] = None    # User= of a system unit
    environment: dict = field(default_factory=dict)
    memory_max: Optional[str] = None
    nice: int = 5

    def exec_start(self) -> List[str]:
        model = self.model
        if os.path.exists(model):
            model = str(Path(model).absolute())
        return [*self.executable, "serve", model, *_absolute_paths(self.serve_args)]

    def text(self) -> str:
        if any(a == "--api-key" or a.startswith("--api-key=") for a in self.serve_args):
            raise ServiceError("--api-key would be written into the unit file, which every user "
                               "can read; put the key in a file and give --api-key-file")
        argv = [systemd_quote(w) for w in self.exec_start()]
        lines = ["[Unit]",
                 f"Description=edgellm OpenAI-compatible server ({os.path.basename(self.model)})",
                 "After=network-online.target", "Wants=network-online.target", "",
                 "[Service]", "Type=exec"]
        if not self.user_unit and self.run_as:
            lines.append(f"User={self.run_as}")
        for k in sorted(self.environment):
            lines.append("Environment=" + systemd_quote(f"{k}={self.environment[k]}"))
        lines.append("ExecStart=" + " \\\n    ".join(_wrap(argv)))
        lines += ["Restart=on-failure", "RestartSec=5",
                  "# covers serve's --shutdown-grace: running requests finish before a kill",
                  f"TimeoutStopSec={int(shutdown_grace(self.serve_args)) + 25}"]
        if self.memory_max:
            lines.append(f"MemoryMax={self.memory_max}")
        lines += [f"Nice={self.nice}", "", "[Install]",
                  f"WantedBy={'default.target' if self.user_unit else 'multi-user.target'}", ""]
        return "\n".join(lines)


def _wrap(words: List[str], width: int = 88) -> List[str]:
    """ExecStart words in lines of about `width` characters (joined with backslash-newline);
    an option stays on the line of its value."""
    lines: List[str] = []
    cur = ""
    for i, w in enumerate(words):
        glued = i > 0 and words[i - 1].startswith("--") and not w.startswith("-")
        if cur and not glued and len(cur) + 1 + len(w) > width:
            lines.append(cur)
            cur = w
        else:
            cur = f"{cur} {w}" if cur else w
    if cur:
        lines.append(cur)
    return lines


def unit_dir(user_unit: bool) -> Path:
    if user_unit:
        base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
        return Path(base) / "systemd" / "user"
    return Path("/etc/systemd/system")
