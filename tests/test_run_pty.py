"""`edgellm run` as a person uses it: the real program with SmolLM2-135M in a pseudo-terminal
(pexpect), greedy decoding. prompt_toolkit drives the terminal (TERM=xterm, and TERM=dumb
for the input test; CPR queries off because pexpect does not answer them). One-shot and piped modes run with pipes.

The prompts were chosen for what SmolLM2-135M answers reliably under greedy decoding: told
"The secret code is 4217." it repeats the code when asked; asked cold, it does not.
"""
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

pexpect = pytest.importorskip("pexpect")

pytestmark = [pytest.mark.real_model, pytest.mark.slow]

REPO = Path(__file__).resolve().parent.parent
# Escape sequences and carriage returns: what a terminal interprets, not what it shows.
ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07]*\x07|\x1b[=>()][0-9A-Za-z]?|\r")
N_PREDICT = "32"


def _env(tmp_path, term_type="xterm"):
    env = dict(os.environ)
    if env.get("EDGELLM_BUILD_DIR"):  # a development build: the package comes from the checkout
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "python"), env.get("PYTHONPATH")]))
        env["EDGELLM_BUILD_DIR"] = os.path.abspath(env["EDGELLM_BUILD_DIR"])
    env["EDGELLM_HISTORY"] = str(tmp_path / "history")
    env["TERM"] = term_type
    env["PROMPT_TOOLKIT_NO_CPR"] = "1"
    env.pop("NO_COLOR", None)
    return env


class Terminal:
    """The program in a pty; `wait_for` matches on the screen text with escapes removed."""

    def __init__(self, model, tmp_path, *args, term_type="xterm"):
        self.child = pexpect.spawn(
            sys.executable, ["-m", "edgellm", "run", str(model), "--temp", "0", "-n", N_PREDICT,
                             "-c", "1024", *args],
            env=_env(tmp_path, term_type), cwd=str(tmp_path), encoding="utf-8", timeout=120,
            dimensions=(50, 250))
        self.term_type = term_type
        self.transcript = ""  # everything the program wrote
        self.pos = 0          # how much of the clean transcript matches have consumed

    def wait_for(self, pattern, timeout=120):
        """Consume output up to the first match of `pattern`; the clean text up to it."""
        rx = re.compile(pattern, re.S)
        end = time.time() + timeout
        while True:
            clean = ANSI.sub("", self.transcript)
            m = rx.search(clean, self.pos)
            if m:
                start, self.pos = self.pos, m.end()
                return clean[start:m.end()]
            if time.time() > end:
                raise AssertionError(f"timed out waiting for {pattern!r}; screen ends with:\n"
                                     f"{ANSI.sub('', self.transcript)[-1500:]}")
            try:
                data = self.child.read_nonblocking(65536, timeout=0.2)
            except pexpect.TIMEOUT:
                continue
            except pexpect.EOF:
                raise AssertionError(f"program ended while waiting for {pattern!r}:\n"
                                     f"{ANSI.sub('', self.transcript)[-1500:]}")
            self.transcript += data

    def prompt(self):
        seen = self.wait_for(r">>>")
        if self.term_type == "dumb":
            # prompt_toolkit's dumb-terminal prompt prints ">>> " before it switches the tty to
            # raw mode; a Ctrl+D sent in that gap is eaten by the cooked line discipline.
            time.sleep(0.5)
        return seen

    def ask(self, text):
        """Send a message; the answer text (between the echoed message and the timing line)."""
        self.child.send(text + "\r")
        # speculative decoding (on by default: --spec auto) appends its counts when it drafted
        seen = self.wait_for(r"prompt: \d+ tok, [\d.-]+ t/s · answer: \d+ tok, [\d.-]+ t/s"
                             r"( · drafted \d+, accepted \d+ \(\d+%\))?\n")
        self.prompt()
        body = seen.rsplit(text, 1)[-1]
        return body[: body.rfind("prompt:")].strip()

    def command(self, text, until):
        self.child.send(text + "\r")
        out = self.wait_for(until)
        self.prompt()
        return out

    def ctrl_d(self):
        self.child.sendcontrol("d")
        self.child.expect(pexpect.EOF, timeout=30)
        self.child.close()
        return self.child.exitstatus

    def close(self):
        if self.child.isalive():
            self.child.terminate(force=True)


@pytest.fixture
def term(smollm2_path, tmp_path):
    made = []

    def start(*args, term_type="xterm"):
        t = Terminal(smollm2_path, tmp_path, *args, term_type=term_type)
        made.append(t)
        return t
    yield start
    for t in made:
        t.close()


def test_three_turn_chat_regen_clear_save_load(term, tmp_path):
    t = term()
    banner = t.prompt()
    assert "Q4_1" in banner and "context 1024" in banner and re.search(r"ISA \w+", banner)
    assert "loaded in" in banner

    t.ask("The secret code is 4217.")
    second = t.ask("What is the secret code?")
    assert "4217" in second                      # the answer depends on the first turn
    third = t.ask("What is the capital of France?")
    assert "Paris" in third

    out = t.command("/set parameter temperature 0", r"Set parameter 'temperature' to '0.0'")
    regen = t.ask("/regen")
    assert regen == third                        # greedy: the same answer again

    t.command(f"/save {tmp_path / 'chat.json'}", r"Saved 6 messages to")
    doc = json.loads((tmp_path / "chat.json").read_text(encoding="utf-8"))
    assert [m["role"] for m in doc["messages"]] == ["user", "assistant"] * 3
    assert doc["messages"][0]["content"] == "The secret code is 4217."
    assert "4217" in doc["messages"][3]["content"]
    assert doc["parameters"] == {"temperature": 0.0}

    t.command("/clear", r"Cleared session context")
    cold = t.ask("What is the secret code?")
    assert "4217" not in cold                    # the history really was cleared

    t.command(f"/load {tmp_path / 'chat.json'}", r"Loaded 6 messages from")
    shown = t.command("/show history", r"assistant: The capital of France is Paris[^\n]*\n")
    assert "user: The secret code is 4217." in shown
    assert "user: What is the capital of France?" in shown
    assert "What is the secret code?\nassistant: The secret code is a code" not in shown

    assert t.ctrl_d() == 0


def test_ctrl_c_stops_the_answer_and_the_chat_goes_on(term):
    t = term("-n", "400")
    t.prompt()
    t.child.send("Write a long story about a dragon who lives in a castle.\r")
    story = t.wait_for(r"castle\.\n(\S+\s+){12}")  # a dozen words of the answer streamed
    t.child.sendcontrol("c")
    t.prompt()                                     # back at the prompt, not dead
    answer = t.ask("What is the capital of France?")
    assert "Paris" in answer

    shown = t.command("/show history", r"assistant: The capital of France[^\n]*\n")
    partial = re.search(r"assistant: (.*?)\nuser: What is the capital", shown, re.S).group(1)
    assert len(partial.split()) >= 12              # the partial story was kept
    assert story.split("castle.\n", 1)[1].split()[0] in partial

    t.child.sendcontrol("c")                       # at an empty prompt: how to leave
    t.wait_for(r"Use Ctrl \+ d or /bye to exit\.")
    t.prompt()
    t.child.send("/bye\r")
    t.child.expect(pexpect.EOF, timeout=30)
    t.child.close()
    assert t.child.exitstatus == 0


@pytest.mark.parametrize("term_type", ["xterm", "dumb"])
def test_multiline_blocks_and_bracketed_paste(term, term_type, tmp_path):
    t = term("-n", "4", term_type=term_type)
    t.prompt()
    t.child.send('"""\r')
    t.wait_for(r"\.\.\.")
    t.child.send("first line\r")
    t.wait_for(r"\.\.\.")
    t.child.send("second line\r")
    t.wait_for(r"\.\.\.")
    t.child.send('"""\r')
    t.wait_for(r"answer: \d+ tok")
    t.prompt()
    # A pasted block (bracketed paste) is one message even though it holds newlines.
    t.child.send("\x1b[200~pasted one\npasted two\x1b[201~")
    t.child.send("\r")
    t.wait_for(r"answer: \d+ tok")
    t.prompt()
    shown = t.command("/show history", r"user: pasted one\npasted two\nassistant: [^\n]*\n")
    assert "user: first line\nsecond line\nassistant:" in shown
    t.command("/show parameters", r"num_predict\s+4")
    out = t.command("/nonsense", r"Type /\? for help")
    assert "Unknown command '/nonsense'" in out
    if term_type == "xterm":  # a dumb terminal gets no line editing, hence no recall
        t.child.send("\x1b[A")  # Up: the last entry comes back
        again = t.command("", r"Type /\? for help")
        assert "Unknown command '/nonsense'" in again
    assert t.ctrl_d() == 0
    if term_type == "xterm":
        history = (tmp_path / "history").read_text(encoding="utf-8")
        assert "+first line\n+second line\n" in history      # the block, as one entry
        assert "+pasted one\n+pasted two\n" in history


def test_a_long_chat_drops_its_oldest_turns_to_fit_the_context(term):
    t = term("-c", "128", "-n", "16", "--system", "You are brief.")
    t.prompt()
    questions = ["The secret code is 4217.", "What is the capital of France?",
                 "What is the capital of Italy?", "What is the capital of Spain?",
                 "What is the capital of Germany?"]
    for q in questions:
        t.ask(q)
    screen = ANSI.sub("", t.transcript)
    assert screen.count("outgrew the context of 128 tokens") == 1   # said once
    shown = t.command("/show history", r"user: What is the capital of Germany\?\nassistant: [^\n]*\n")
    assert shown.count("system: You are brief.") == 1               # the system message stays
    assert "The secret code is 4217." not in shown                  # the oldest turn went
    assert t.ctrl_d() == 0


def _run(model, args, stdin=None, tmp_path=None):
    return subprocess.run([sys.executable, "-m", "edgellm", "run", str(model), "--temp", "0",
                           "-n", N_PREDICT, *args], input=stdin, capture_output=True, text=True,
                          env=_env(tmp_path), timeout=300)


def test_one_shot_and_piped_print_only_the_answer(smollm2_path, tmp_path):
    question = "The secret code is 4217. What is the secret code?"
    one = _run(smollm2_path, [question], stdin="", tmp_path=tmp_path)
    assert one.returncode == 0, one.stderr
    piped = _run(smollm2_path, [], stdin=question + "\n", tmp_path=tmp_path)
    assert piped.returncode == 0, piped.stderr
    for r in (one, piped):
        assert "\x1b" not in r.stdout and "\x1b" not in r.stderr
        assert ">>>" not in r.stdout and "edgellm ·" not in r.stdout and "t/s" not in r.stdout
        assert r.stdout.strip() and r.stdout.endswith("\n")
    assert "4217" in one.stdout
    assert piped.stdout == one.stdout            # the same question either way, greedy

    verbose = _run(smollm2_path, ["--verbose", question], stdin="", tmp_path=tmp_path)
    assert verbose.stdout == one.stdout          # the block goes to stderr
    assert re.search(r"^eval rate:\s+[\d.]+ tokens/s$", verbose.stderr, re.M)
    assert re.search(r"^prompt eval count:\s+\d+ token\(s\)$", verbose.stderr, re.M)


def test_bad_arguments_are_reported(smollm2_path, tmp_path):
    r = _run(smollm2_path, ["--chat-template", "no-such-template", "hi"], stdin="", tmp_path=tmp_path)
    assert r.returncode != 0 and "unknown chat template" in r.stderr
    r = _run(tmp_path / "missing.gguf", ["hi"], stdin="", tmp_path=tmp_path)
    assert r.returncode != 0 and "missing.gguf" in r.stderr and "Traceback" not in r.stderr
