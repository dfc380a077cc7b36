"""A desktop chat window over edgellm: Tkinter (standard library) and edgellm only.

    python examples/desktop_chat/desktop_chat.py [--model PATH_OR_NAME] [--threads N]

Choose a GGUF file (Browse…) or type a path or a known model name (smollm2, gemma3, ...), press
Load (or Ctrl+L): the model loads in a worker thread while the progress bar follows the loader
(LLM(..., progress=...)); pressing Cancel during the load stops it. Type a message and press
Enter: the answer streams into the window from a RequestHandle polled by Tk's own timer
(`after`), so the window never freezes and no thread waits on the engine. Stop (Esc) cancels
the answer, New chat (Ctrl+N) starts over. The status line shows tokens and tokens per second.

Tk must only be touched from its own thread: the loader thread talks to it through a queue
that the main loop reads every few milliseconds.

Test hook (tests/test_desktop_example.py): with EDGELLM_DESKTOP_STATE=FILE the app writes its
visible state (transcript, status, which buttons are enabled and where they are on the screen)
to FILE as JSON whenever it changes, so a test driving the real window with X events can check
what it shows. It changes nothing else.
"""
from __future__ import annotations

import argparse
import json
import os
import queue
import threading
import time
import tkinter as tk
from tkinter import filedialog, ttk

import edgellm
from edgellm import LLM, SamplingParams

POLL_MS = 30       # how often the answer is polled while generating
LOAD_POLL_MS = 50  # how often the loader's queue is read while loading


class ModelLoader:
    """Loads an LLM in a worker thread; progress and the outcome go through a queue."""

    def __init__(self, model: str, n_threads):
        self.events: "queue.Queue" = queue.Queue()
        self._cancel = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(model, n_threads),
                                        name="edgellm-loader", daemon=True)
        self._thread.start()

    def _progress(self, fraction: float, stage: str) -> bool:
        self.events.put(("progress", fraction, stage))
        return not self._cancel.is_set()  # False stops the load (edgellm.LoadCancelled)

    def _run(self, model: str, n_threads) -> None:
        try:
            llm = LLM(model, n_threads=n_threads, progress=self._progress)
        except edgellm.LoadCancelled:
            self.events.put(("cancelled",))
        except Exception as e:  # shown in the status line: a bad path, a file that is not GGUF...
            self.events.put(("error", f"{type(e).__name__}: {e}"))
        else:
            self.events.put(("loaded", llm))

    def cancel(self) -> None:
        self._cancel.set()

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)


class ChatWindow:
    def __init__(self, root: tk.Tk, model: str, n_threads, max_tokens: int, temperature: float):
        self.root = root
        self.n_threads = n_threads
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.llm = None
        self.loader = None
        self.handle = None          # the answer being generated (edgellm.RequestHandle)
        self.messages = []          # the conversation sent with each turn
        self.t_first = None         # when the answer's first text arrived
        self.state_file = os.environ.get("EDGELLM_DESKTOP_STATE")
        self._last_state = None

        root.title("edgellm chat")
        root.geometry("760x560")
        root.protocol("WM_DELETE_WINDOW", self.quit)

        top = ttk.Frame(root, padding=6)
        top.pack(fill="x")
        ttk.Label(top, text="Model").pack(side="left")
        self.model_var = tk.StringVar(value=model)
        self.model_entry = ttk.Entry(top, textvariable=self.model_var)
        self.model_entry.pack(side="left", fill="x", expand=True, padx=4)
        self.browse_btn = ttk.Button(top, text="Browse…", command=self.browse)
        self.browse_btn.pack(side="left")
        self.load_btn = ttk.Button(top, text="Load", command=self.load_or_cancel)
        self.load_btn.pack(side="left", padx=(4, 0))

        bar = ttk.Frame(root, padding=(6, 0))
        bar.pack(fill="x")
        self.progress = ttk.Progressbar(bar, mode="determinate", maximum=100)
        self.progress.pack(side="left", fill="x", expand=True)
        self.stage_var = tk.StringVar(value="no model loaded")
        ttk.Label(bar, textvariable=self.stage_var, width=18).pack(side="left", padx=4)

        mid = ttk.Frame(root, padding=6)
        mid.pack(fill="both", expand=True)
        self.transcript = tk.Text(mid, wrap="word", state="disabled", height=20)
        scroll = ttk.Scrollbar(mid, command=self.transcript.yview)
        self.transcript["yscrollcommand"] = scroll.set
        scroll.pack(side="right", fill="y")
        self.transcript.pack(side="left", fill="both", expand=True)
        self.transcript.tag_configure("user", foreground="#1a4d8f", font=("TkDefaultFont", 10, "bold"))
        self.transcript.tag_configure("assistant", foreground="#202020")
        self.transcript.tag_configure("note", foreground="#8a8a8a")

        bottom = ttk.Frame(root, padding=6)
        bottom.pack(fill="x")
        self.input_var = tk.StringVar()
        self.input = ttk.Entry(bottom, textvariable=self.input_var)
        self.input.pack(side="left", fill="x", expand=True)
        self.input.bind("<Return>", lambda e: self.send())
        # a model that takes images (loaded with its projector, LLM(..., mmproj=) or the
        # mmproj*.gguf beside it): Image… attaches files to the next message
        self.images = []            # image files for the next message
        self.image_btn = ttk.Button(bottom, text="Image…", command=self.attach_image)
        self.image_btn.pack(side="left", padx=(4, 0))
        self.send_btn = ttk.Button(bottom, text="Send", command=self.send)
        self.send_btn.pack(side="left", padx=4)
        self.stop_btn = ttk.Button(bottom, text="Stop", command=self.stop)
        self.stop_btn.pack(side="left")
        self.new_btn = ttk.Button(bottom, text="New chat", command=self.new_chat)
        self.new_btn.pack(side="left", padx=(4, 0))

        self.status_var = tk.StringVar(value="Choose a GGUF model and press Load")
        ttk.Label(root, textvariable=self.status_var, anchor="w", relief="sunken",
                  padding=(6, 2)).pack(fill="x", side="bottom")

        root.bind_all("<Control-l>", lambda e: self.load_or_cancel())
        root.bind_all("<Escape>", lambda e: self.stop())
        root.bind_all("<Control-n>", lambda e: self.new_chat())
        self.input.focus_set()
        self._refresh_buttons()
        if self.state_file:
            root.after(100, self._state_loop)

    # ---- loading ----
    def browse(self) -> None:
        path = filedialog.askopenfilename(title="Choose a GGUF model",
                                          filetypes=[("GGUF models", "*.gguf"), ("All files", "*")])
        if path:
            self.model_var.set(path)

    def load_or_cancel(self) -> None:
        if self.loader is not None:  # the Load button reads Cancel while loading
            self.loader.cancel()
            self.stage_var.set("cancelling…")
            return
        model = self.model_var.get().strip()
        if not model:
            self.status_var.set("Type a model path or name, or press Browse…")
            return
        self.stop()
        if self.llm is not None:  # one model at a time: free the old one first
            self.llm.close()
            self.llm = None
        self.progress["value"] = 0
        self.stage_var.set("starting")
        self.status_var.set(f"Loading {model} …")
        self.loader = ModelLoader(model, self.n_threads)
        self._refresh_buttons()
        self.root.after(LOAD_POLL_MS, self._poll_loader)

    def _poll_loader(self) -> None:
        loader = self.loader
        if loader is None:
            return
        try:
            while True:
                ev = loader.events.get_nowait()
                kind = ev[0]
                if kind == "progress":
                    self.progress["value"] = 100.0 * ev[1]
                    self.stage_var.set(f"{ev[2]} {100 * ev[1]:.0f}%")
                    continue
                self.loader = None
                if kind == "loaded":
                    self.llm = ev[1]
                    self.progress["value"] = 100
                    self.stage_var.set("ready")
                    self.status_var.set(f"Loaded {os.path.basename(self.llm.model_path)} in "
                                        f"{self.llm.load_time:.1f} s · {self.llm.isa} · "
                                        f"{self.llm.n_threads} threads · context {self.llm.n_ctx}")
                elif kind == "cancelled":
                    self.progress["value"] = 0
                    self.stage_var.set("cancelled")
                    self.status_var.set("Load cancelled")
                else:
                    self.progress["value"] = 0
                    self.stage_var.set("failed")
                    self.status_var.set(ev[1])
                self._refresh_buttons()
                self._write_state()
                return
        except queue.Empty:
            pass
        self._write_state()
        self.root.after(LOAD_POLL_MS, self._poll_loader)

    # ---- chatting ----
    def _append(self, text: str, tag: str) -> None:
        self.transcript.configure(state="normal")
        self.transcript.insert("end", text, tag)
        self.transcript.configure(state="disabled")
        self.transcript.see("end")

    def attach_image(self) -> None:
        path = filedialog.askopenfilename(title="Choose an image", filetypes=[
            ("Images", "*.png *.jpg *.jpeg *.webp *.gif"), ("All files", "*")])
        if path:
            self.images.append(path)
            self.status_var.set("Attached " + ", ".join(os.path.basename(p) for p in self.images))
            self._write_state()

    def send(self) -> None:
        text = self.input_var.get().strip()
        if not text and not self.images:
            return
        if self.llm is None:
            self.status_var.set("Load a model first")
            return
        if self.handle is not None:
            self.status_var.set("Wait for the answer or press Stop")
            return
        content = text
        if self.images:  # the images, then the text, as OpenAI content parts
            from edgellm.vision import file_part
            try:
                content = [file_part(p) for p in self.images] + [{"type": "text", "text": text}]
            except OSError as e:
                self.status_var.set(f"cannot read the image: {e}")
                return
            text = " ".join(f"[{os.path.basename(p)}]" for p in self.images) + " " + text
            self.images = []
        self.input_var.set("")
        self.messages.append({"role": "user", "content": content})
        self._append(("\n" if self.messages[:-1] else "") + "You: " + text + "\n", "user")
        self._append("Assistant: ", "assistant")
        params = SamplingParams(max_tokens=self.max_tokens, temperature=self.temperature)
        try:
            self.handle = self.llm.submit_chat(self.messages, params,
                                               on_text=lambda piece: self._append(piece, "assistant"))
        except edgellm.EdgeLLMError as e:  # e.g. the conversation no longer fits the context
            self.messages.pop()
            self._append(f"[{e}]\n", "note")
            self.status_var.set(str(e))
            return
        self.t_first = None
        self.status_var.set("Thinking…")
        self._refresh_buttons()
        self._write_state()
        self.root.after(POLL_MS, self._poll_answer)

    def _poll_answer(self) -> None:
        h = self.handle
        if h is None:
            return
        try:
            piece = h.poll()  # never blocks; on_text has put the new text into the window
        except edgellm.EdgeLLMError as e:
            piece = ""
            self._append(f"\n[{e}]", "note")
        now = time.perf_counter()
        if piece and self.t_first is None:
            self.t_first = now
        if not h.done:
            n = h.completion_tokens
            if self.t_first is not None and n > 1 and now > self.t_first:
                self.status_var.set(f"Generating… {n} tokens · {(n - 1) / (now - self.t_first):.1f} tokens/s")
            self._write_state()
            self.root.after(POLL_MS, self._poll_answer)
            return
        self.handle = None
        reason = h.finish_reason
        self._append("\n", "assistant")
        if reason != "error":
            self.messages.append({"role": "assistant", "content": h.text})
        t = h.timings or {}
        u = h.usage
        words = {"stop": "done", "length": "token limit reached", "cancelled": "stopped"}
        self.status_var.set(f"{u.completion_tokens if u else h.completion_tokens} tokens · "
                            f"prompt {t.get('prompt_per_second', 0):.0f} tokens/s · "
                            f"answer {t.get('predicted_per_second', 0):.1f} tokens/s · "
                            f"{words.get(reason, reason)}")
        self._refresh_buttons()
        self._write_state()

    def stop(self) -> None:
        if self.handle is not None:
            self.handle.cancel()  # the poll loop sees the end and tidies up

    def new_chat(self) -> None:
        if self.handle is not None:
            self.handle.cancel()
            self.handle = None
        self.messages = []
        self.images = []
        self.transcript.configure(state="normal")
        self.transcript.delete("1.0", "end")
        self.transcript.configure(state="disabled")
        self.status_var.set("New chat" if self.llm is not None else "Choose a GGUF model and press Load")
        self._refresh_buttons()
        self._write_state()

    # ---- window state ----
    def _refresh_buttons(self) -> None:
        loading = self.loader is not None
        busy = self.handle is not None
        self.load_btn.configure(text="Cancel" if loading else "Load")
        self.browse_btn.state(["disabled"] if loading else ["!disabled"])
        self.send_btn.state(["!disabled"] if self.llm is not None and not busy and not loading else ["disabled"])
        self.image_btn.state(["!disabled"] if getattr(self.llm, "takes_images", False) and not busy
                             else ["disabled"])
        self.stop_btn.state(["!disabled"] if busy else ["disabled"])

    def _state_loop(self) -> None:
        self._write_state()
        self.root.after(100, self._state_loop)

    def _write_state(self) -> None:
        """The test hook (EDGELLM_DESKTOP_STATE): what the window shows, as JSON."""
        if not self.state_file:
            return
        self.root.update_idletasks()

        def box(w):
            return [w.winfo_rootx(), w.winfo_rooty(), w.winfo_width(), w.winfo_height()]
        state = {
            "window": box(self.root),
            "transcript": self.transcript.get("1.0", "end-1c"),
            "status": self.status_var.get(),
            "stage": self.stage_var.get(),
            "progress": float(self.progress["value"]),
            "loaded": self.llm is not None,
            "loading": self.loader is not None,
            "generating": self.handle is not None,
            "messages": len(self.messages),
            "images": list(self.images),
            "widgets": {name: {"box": box(w), "enabled": not w.instate(["disabled"])}
                        for name, w in (("load", self.load_btn), ("browse", self.browse_btn),
                                        ("send", self.send_btn), ("stop", self.stop_btn),
                                        ("image", self.image_btn),
                                        ("new", self.new_btn), ("input", self.input),
                                        ("model", self.model_entry))},
            "stats": self.llm.stats() if self.llm is not None else None,
        }
        state["widgets"]["transcript"] = {"box": box(self.transcript), "enabled": True}
        if state == self._last_state:
            return
        self._last_state = state
        tmp = self.state_file + ".tmp"
        with open(tmp, "w") as f:
            json.dump(state, f)
        os.replace(tmp, self.state_file)

    def quit(self) -> None:
        if self.loader is not None:  # stops at the loader's next progress call
            self.loader.cancel()
            self.loader.join(30)
            try:
                ev = self.loader.events.get_nowait()
                while ev[0] == "progress":
                    ev = self.loader.events.get_nowait()
                if ev[0] == "loaded":  # it had finished just before the cancel
                    ev[1].close()
            except queue.Empty:
                pass
        if self.handle is not None:
            self.handle.cancel()
        if self.llm is not None:
            self.llm.close()
        self.root.destroy()


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description="A desktop chat window over edgellm (Tkinter).")
    ap.add_argument("--model", default="", help="GGUF path or known model name to put in the model box")
    ap.add_argument("--threads", type=int, default=None, help="engine threads (default: physical cores)")
    ap.add_argument("--max-tokens", type=int, default=512, help="longest answer in tokens")
    ap.add_argument("--temperature", type=float, default=0.7)
    args = ap.parse_args(argv)
    root = tk.Tk()
    ChatWindow(root, args.model, args.threads, args.max_tokens, args.temperature)
    root.mainloop()


if __name__ == "__main__":
    main()
