"""An ASGI app for uvicorn (tests/real_http_servers.py): `GET /` answers 200 with a short
body; anything else 404. HTTP only (no lifespan events needed)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

BODY = b"hello from uvicorn\n"


async def app(
    scope: dict[str, Any],
    receive: Callable[[], Awaitable[dict[str, Any]]],
    send: Callable[[dict[str, Any]], Awaitable[None]],
) -> None:
    if scope["type"] != "http":
        return  # lifespan: nothing to set up
    ok = scope["path"] == "/"
    body = BODY if ok else b""
    headers = [(b"content-type", b"text/plain"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 200 if ok else 404, "headers": headers})
    await send({"type": "http.response.body", "body": body})
