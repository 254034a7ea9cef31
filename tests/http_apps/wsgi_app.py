"""A WSGI app for gunicorn (tests/real_http_servers.py): `GET /` answers 200 with a short
body; `/forbidden` 403 to every request (a wrong URL, as a service would refuse it);
anything else 404."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

BODY = b"hello from gunicorn\n"


def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    if environ.get("PATH_INFO") == "/forbidden":
        body = b"forbidden\n"
        headers = [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))]
        start_response("403 Forbidden", headers)
        return [body]
    if environ.get("PATH_INFO") != "/":
        start_response("404 Not Found", [("Content-Type", "text/plain"), ("Content-Length", "0")])
        return [b""]
    headers = [("Content-Type", "text/plain"), ("Content-Length", str(len(BODY)))]
    start_response("200 OK", headers)
    return [BODY]
