"""What the server tests share: a free port, an app served by uvicorn on a worker thread, the
check of OpenAI's error envelope, and a chat template with a thinking switch."""
import asyncio
import socket
import threading
import time

import httpx

# A ChatML template that opens a <think> block unless enable_thinking is false (then empty).
THINK_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and not enable_thinking %}<think>\n\n</think>\n\n"
    "{% else %}<think>\n{% endif %}{% endif %}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(proc, base: str, timeout: float = 120) -> None:
    """Until `edgellm serve` (the subprocess `proc`) answers 200 on base/health; its stderr's
    tail in the failure when it exits first."""
    import urllib.request

    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(base + "/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        assert time.monotonic() < deadline, "serve did not come up"
        time.sleep(0.3)


def openai_error(r, status):
    """The `error` object of a response with that status, in OpenAI's envelope."""
    assert r.status_code == status, r.text
    err = r.json()["error"]
    # OpenAI's envelope; llama-server's context numbers may ride along
    assert {"message", "type", "param", "code"} <= set(err) <= \
        {"message", "type", "param", "code", "n_prompt_tokens", "n_ctx"}
    return err


class AppServer:
    """An ASGI app on 127.0.0.1:port, served by uvicorn in a daemon thread (start), until stop."""

    def start(self, app, port: int, log_level: str = "warning") -> None:
        import uvicorn

        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port,
                                                    log_level=log_level, lifespan="on"))
        self.server.install_signal_handlers = lambda: None  # older uvicorn
        # capture_signals only acts in the main thread; this is a worker thread
        self.thread = threading.Thread(target=lambda: asyncio.run(self.server.serve()),
                                       daemon=True)
        self.thread.start()

    def wait_started(self) -> None:
        deadline = time.monotonic() + 10
        while not self.server.started:
            assert time.monotonic() < deadline, "server did not start"
            time.sleep(0.01)

    def wait_ready(self):
        """Until GET /health answers 200 (the model loaded); returns self."""
        deadline = time.monotonic() + 10
        while True:
            try:
                if httpx.get(self.url + "/health").status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "server did not start"
            time.sleep(0.01)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)
