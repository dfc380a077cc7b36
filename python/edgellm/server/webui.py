"""The web chat page at `/` (README "Web chat"): index.html and its assets under /webui/, read
from the package's webui/ folder. No build step: the files are the page, plain ES2020 modules
and CSS that call the API (/v1/models, /v1/chat/completions) from the browser.

Only these paths are open without the API key (`open_paths`), so the page can load and then
ask for the key; every API route still needs it. The names are fixed when the app is built,
so a request can only ever name one of the files listed here.
"""
from pathlib import Path
from typing import Dict, List, Optional

from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import Route

from .errors import APIError

WEBUI_DIR = Path(__file__).with_name("webui")
ASSET_PREFIX = "/webui/"
CONTENT_TYPES = {".html": "text/html; charset=utf-8",
                 ".js": "text/javascript; charset=utf-8",
                 ".css": "text/css; charset=utf-8",
                 ".svg": "image/svg+xml",
                 ".png": "image/png"}
# The page runs only its own scripts and styles and talks only to this server: model output
# that got past the markdown renderer's escaping still could not run or load anything.
PAGE_POLICY = ("default-src 'self'; script-src 'self'; style-src 'self'; "
               "img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; "
               "frame-ancestors 'none'; form-action 'none'")
HEADERS = {"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff",
           "Content-Security-Policy": PAGE_POLICY, "Referrer-Policy": "no-referrer"}


def asset_files() -> Dict[str, Path]:
    """name -> file of every asset the page may load (index.html is served at / only)."""
    if not WEBUI_DIR.is_dir():
        return {}
    return {p.name: p for p in sorted(WEBUI_DIR.iterdir())
            if p.is_file() and p.suffix in CONTENT_TYPES and p.name != "index.html"}


class WebUI:
    def __init__(self):
        self.index, self.assets = WEBUI_DIR / "index.html", asset_files()
        self.open_paths: List[str] = ["/"] + [ASSET_PREFIX + name for name in self.assets]

    def routes(self) -> List[Route]:
        return [Route("/", self.page, methods=["GET", "HEAD"]),
                Route(ASSET_PREFIX + "{name}", self.asset, methods=["GET", "HEAD"])]

    async def page(self, request: Request) -> Response:
        return await self.asset(request, self.index)

    async def asset(self, request: Request, path: Optional[Path] = None) -> Response:
        path = path or self.assets.get(request.path_params["name"])
        if path is None:
            return APIError(404, f"no web chat file {request.url.path}", "not_found_error").response()
        return FileResponse(path, media_type=CONTENT_TYPES[path.suffix], headers=dict(HEADERS))
