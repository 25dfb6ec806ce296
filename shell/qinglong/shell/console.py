"""The web console's static files (qinglong/shell/console/, package data of this distribution) on the user
listener under /console/. Touches nothing but those files, read once when the app is made.

The console decides nothing: it is a client of the user API like the CLI, sending the same bearer token. So this
module only serves bytes: GET only (another method is request.method_not_allowed, an unknown file
request.unknown_path, both qinglong/error@v1 like any unrouted request), each answer with the console's security
headers: a strict Content-Security-Policy (no inline script or style, no request but to this origin, no framing,
no form posts), nosniff, no referrer, frame denial, and no caching (a shell upgrade serves the new files at once).
Decision 0010 says why. One more file, `wire.js`, is made here from qinglong.wire: the facts of the wire console.js
imports (the user API's paths, its request schemas, the Run statuses), so the console never restates them.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Final

from aiohttp import web

from qinglong.wire import CANCELLATION_SCHEMA, ENQUEUE_SCHEMA, TASK_SCHEMA, paths
from qinglong.wire.common import ENDED_RUN_STATUSES, RUN_STATUSES
from qinglong.wire.reasons import ENDS, START_FAILURES

PREFIX: Final = "/console/"
FILES: Final = {"index.html": "text/html", "console.js": "text/javascript", "console.css": "text/css"}
CSP: Final = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
USER_PATHS: Final = (  # of wire.paths
    "PROJECT", "RUNS", "RUN", "RUN_CANCELLATION", "RUN_OUTPUT", "TASKS", "WORKERS",
    "TASK", "TASK_STATUS", "TASK_SCHEDULE", "SCHEDULE_PREVIEW",
)  # fmt: skip
NOTIFY_PATHS: Final = ("NOTIFY_RULES", "NOTIFY_DELIVERIES")  # the notifications page (read only)
WIRE: Final = {  # what wire.js exports, by name
    "PATHS": {name: getattr(paths, name) for name in USER_PATHS + NOTIFY_PATHS},
    "ENQUEUE_SCHEMA": ENQUEUE_SCHEMA,
    "CANCELLATION_SCHEMA": CANCELLATION_SCHEMA,
    "TASK_SCHEMA": TASK_SCHEMA,
    "RUN_STATUSES": RUN_STATUSES,
    "ENDED_RUN_STATUSES": ENDED_RUN_STATUSES,
    "START_FAILURES": dict(START_FAILURES),  # why an Attempt ended without an exit code: code → message
    "ENDS": dict(ENDS),
}
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
    bodies = {name: ((folder / name).read_bytes(), media_type) for name, media_type in FILES.items()}
    bodies["wire.js"] = (wire_module(), "text/javascript")
    for name, (body, media_type) in bodies.items():

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


def wire_module() -> bytes:
    """`wire.js`: WIRE as the exports of an ES module (JSON values, so no markup and no code but the exports)."""
    exports = "".join(f"export const {name} = {json.dumps(value)};\n" for name, value in WIRE.items())
    return f"// Made by qinglong.shell.console from qinglong.wire when the shell starts.\n{exports}".encode()
