"""A local server that speaks the Hugging Face Hub's file API, for tests (no hub is reachable).

    with FakeHub({"user/Repo-GGUF": {"Repo-Q4_K_M.gguf": path_or_bytes}}) as hub:
        env = {"HF_ENDPOINT": hub.url, "HF_HUB_CACHE": str(tmp / "hf")}
        # edgellm pull hf.co/user/Repo-GGUF:Q4_K_M  ...
        hub.requests     # [(method, path, headers)] as served

What huggingface_hub (v1/v2) calls, answered as huggingface.co answers it:
- GET /api/models/{repo} and /api/models/{repo}/revision/{rev} (HfApi.model_info; `blobs=true`
  adds sizes and LFS sha256 to `siblings`) -> the repository's JSON, `sha` its commit;
- HEAD /{repo}/resolve/{rev}/{file} (get_hf_file_metadata) -> X-Repo-Commit, ETag and
  X-Linked-Etag (the LFS sha256, quoted), X-Linked-Size, Content-Length, Accept-Ranges;
- GET of the same path (http_get), honouring `Range: bytes=N-` with 206 and Content-Range.
Errors carry huggingface.co's X-Error-Code (RepoNotFound, RevisionNotFound, EntryNotFound), so
the client raises its typed errors. `token=` makes every route answer 401 without
`Authorization: Bearer <token>` (a private repository). `drop_after={file: n}` closes the
connection after n bytes of that file's first full GET, as a network that drops mid-file.
`stated_sha256={file: hex}` states another SHA-256 than the bytes have (a corrupted transfer).
"""
from __future__ import annotations

import hashlib
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Dict, List, Optional, Tuple, Union
from urllib.parse import unquote, urlsplit

Content = Union[bytes, Path]
_CHUNK = 1 << 20


class _File:
    def __init__(self, content: Content):
        self.content = content
        self.size = len(content) if isinstance(content, bytes) else Path(content).stat().st_size
        h = hashlib.sha256()
        for block in self.blocks(0):
            h.update(block)
        self.sha256 = h.hexdigest()
        self.git_oid = hashlib.sha1(f"blob {self.size}\0".encode() + self.sha256.encode()).hexdigest()

    def blocks(self, start: int):
        if isinstance(self.content, bytes):
            for i in range(start, self.size, _CHUNK):
                yield self.content[i:i + _CHUNK]
            return
        with open(self.content, "rb") as f:
            f.seek(start)
            for block in iter(lambda: f.read(_CHUNK), b""):
                yield block


class FakeHub:
    def __init__(self, repos: Dict[str, Dict[str, Content]], token: Optional[str] = None,
                 drop_after: Optional[Dict[str, int]] = None,
                 stated_sha256: Optional[Dict[str, str]] = None):
        self.repos = {repo: {name: _File(c) for name, c in files.items()} for repo, files in repos.items()}
        self.commits = {repo: hashlib.sha1(repo.encode()).hexdigest() for repo in repos}
        self.token = token
        self.drop_after = dict(drop_after or {})
        self.stated_sha256 = dict(stated_sha256 or {})
        self.requests: List[Tuple[str, str, Dict[str, str]]] = []
        self._server: Optional[ThreadingHTTPServer] = None

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def gets(self, filename: str) -> List[Dict[str, str]]:
        """The headers of each GET of `filename`, in order."""
        return [h for m, p, h in self.requests if m == "GET" and p.endswith("/" + filename)]

    def __enter__(self) -> "FakeHub":
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def do_HEAD(self):
                hub._serve(self, head=True)

            def do_GET(self):
                hub._serve(self, head=False)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    # ---- the routes -----------------------------------------------------------------------
    def _serve(self, h: BaseHTTPRequestHandler, head: bool) -> None:
        path = unquote(urlsplit(h.path).path)
        self.requests.append(("HEAD" if head else "GET", path, dict(h.headers.items())))
        if self.token and h.headers.get("Authorization") != f"Bearer {self.token}":
            return self._error(h, 401, "RepoNotFound", "Invalid credentials in Authorization header")
        m = re.match(r"^/api/models/([^/]+/[^/]+?)(?:/revision/([^/]+))?/?$", path)
        if m and not head:
            return self._model_info(h, m.group(1), m.group(2), "blobs=true" in (h.path or "").lower())
        m = re.match(r"^/([^/]+/[^/]+)/resolve/([^/]+)/(.+)$", path)
        if m:
            return self._resolve(h, m.group(1), m.group(2), m.group(3), head)
        self._error(h, 404, None, f"no route {path}")

    def _error(self, h, status: int, code: Optional[str], message: str, commit: str = "") -> None:
        body = json.dumps({"error": message}).encode()
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(body)))
        if code:
            h.send_header("X-Error-Code", code)
            h.send_header("X-Error-Message", message)
        if commit:
            h.send_header("X-Repo-Commit", commit)
        h.end_headers()
        if h.command != "HEAD":
            h.wfile.write(body)

    def _repo(self, h, repo: str, revision: Optional[str]):
        if repo not in self.repos:
            self._error(h, 404, "RepoNotFound", f"Repository Not Found for url: {repo}")
            return None
        if revision not in (None, "main", self.commits[repo]):
            self._error(h, 404, "RevisionNotFound", f"Invalid rev id: {revision}")
            return None
        return self.repos[repo]

    def _model_info(self, h, repo: str, revision: Optional[str], blobs: bool) -> None:
        files = self._repo(h, repo, revision)
        if files is None:
            return
        siblings = []
        for name, f in sorted(files.items()):
            s = {"rfilename": name}
            if blobs:
                s.update(size=f.size, blobId=f.git_oid,
                         lfs={"size": f.size, "sha256": self.stated_sha256.get(name, f.sha256),
                              "pointerSize": 134})
            siblings.append(s)
        body = json.dumps({"_id": repo, "id": repo, "modelId": repo, "author": repo.split("/")[0],
                           "sha": self.commits[repo], "private": self.token is not None,
                           "gated": False, "disabled": False, "tags": ["gguf"],
                           "lastModified": "2026-01-01T00:00:00.000Z", "siblings": siblings}).encode()
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)

    def _resolve(self, h, repo: str, revision: str, name: str, head: bool) -> None:
        files = self._repo(h, repo, revision)
        if files is None:
            return
        commit = self.commits[repo]
        f = files.get(name)
        if f is None:
            return self._error(h, 404, "EntryNotFound", f"{name} does not exist", commit=commit)
        start = 0
        rng = h.headers.get("Range")
        if rng and not head:
            m = re.match(r"^bytes=(\d+)-$", rng.strip())
            if m is None or int(m.group(1)) >= f.size:
                return self._error(h, 416, None, f"unsatisfiable range {rng}")
            start = int(m.group(1))
        h.send_response(206 if start else 200)
        h.send_header("Content-Type", "application/octet-stream")
        h.send_header("Content-Length", str(f.size - start))
        h.send_header("Accept-Ranges", "bytes")
        sha = self.stated_sha256.get(name, f.sha256)
        h.send_header("ETag", f'"{sha}"')
        h.send_header("X-Linked-Etag", f'"{sha}"')
        h.send_header("X-Linked-Size", str(f.size))
        h.send_header("X-Repo-Commit", commit)
        if start:
            h.send_header("Content-Range", f"bytes {start}-{f.size - 1}/{f.size}")
        h.end_headers()
        if head:
            return
        drop = self.drop_after.pop(name, None) if not start else None
        sent = start
        try:
            for block in f.blocks(start):
                if drop is not None and sent + len(block) >= drop:
                    h.wfile.write(block[:drop - sent])
                    h.wfile.flush()
                    h.close_connection = True
                    h.connection.shutdown(2)  # the network drops: the body ends short
                    return
                h.wfile.write(block)
                sent += len(block)
        except (BrokenPipeError, ConnectionResetError):
            pass
