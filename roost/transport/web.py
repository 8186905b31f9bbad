"""A static page and its files, for the demo page served by ``roost serve`` at ``/``.

Only the files present in the directory when the app is built are served, by exact name (no path
from the request ever reaches the file system). Pages get a strict Content-Security-Policy: scripts,
styles and connections from the same origin only — the page works with no external resource.
"""

from __future__ import annotations

from pathlib import Path

from starlette.requests import Request
from starlette.responses import FileResponse, PlainTextResponse, Response
from starlette.routing import Route

__all__ = ["CSP", "web_routes"]

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
}
_HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff", "Cache-Control": "no-cache"}


def web_routes(web_dir: Path) -> list[Route]:
    files = {p.name: p for p in web_dir.iterdir() if p.is_file() and p.suffix in _TYPES}
    if "index.html" not in files:
        raise ValueError(f"{web_dir} has no index.html")

    def respond(name: str) -> Response:
        path = files.get(name)
        if path is None:
            return PlainTextResponse("not found", status_code=404)
        return FileResponse(path, media_type=_TYPES[path.suffix], headers=_HEADERS)

    async def index(request: Request) -> Response:
        return respond("index.html")

    async def asset(request: Request) -> Response:
        return respond(request.path_params["file"])

    return [Route("/", index, methods=["GET"]), Route("/web/{file}", asset, methods=["GET"])]
