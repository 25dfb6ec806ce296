"""The web console's static files (qinglong/shell/console/, package data of this distribution) on the user
listener under /console/. Touches nothing but those files, read once when the app is made.

The console decides nothing: it is a client of the user API like the CLI, sending the same bearer token. So this
module only serves bytes: GET only (another method is request.method_not_allowed, an unknown file
request.unknown_path, both qinglong/error@v1 like any unrouted request), each answer with the console's security
headers: a strict Content-Security-Policy (no inline script or style, no request but to this origin, no framing,
no form posts), nosniff, no referrer, frame denial, and no caching (a shell upgrade serves the new files at once).
Decision 0010 says why.
"""

from __future__ import annotations

from importlib import resources
from typing import Final

from aiohttp import web

PREFIX: Final = "/console/"
FILES: Final = {"index.html": "text/html", "console.js": "text/javascript", "console.css": "text/css"}
CSP: Final = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
HEADERS: Final = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
}


def add_console(app: web.Application) -> None:
    """Serve the console's files: `/console/` is index.html, `/console/<file>` each other file, `/console` redirects
    to `/console/`; every answer under /console (a refusal too) carries HEADERS."""
    folder = resources.files("qinglong.shell") / "console"
    for name, media_type in FILES.items():
        body = (folder / name).read_bytes()

        async def serve(request: web.Request, body: bytes = body, media_type: str = media_type) -> web.Response:
            return web.Response(body=body, content_type=media_type, charset="utf-8")

        app.router.add_get(PREFIX if name == "index.html" else PREFIX + name, serve, allow_head=False)

    async def slash(request: web.Request) -> web.Response:
        return web.Response(status=308, headers={"Location": PREFIX})

    async def secure(request: web.Request, response: web.StreamResponse) -> None:
        if request.path == PREFIX.rstrip("/") or request.path.startswith(PREFIX):
            response.headers.update(HEADERS)

    app.router.add_get(PREFIX.rstrip("/"), slash, allow_head=False)
    app.on_response_prepare.append(secure)
