"""echo: the calibration system; replies with reply_bytes bytes at once."""

from __future__ import annotations

from knee.params import from_node
from knee.systems.base import System

SYSTEM = System(
    name="echo",
    summary="calibration: replies with reply_bytes bytes at once",
    server={
        "threads": from_node(
            "echo", "server.threads", "0 = reply on the connection's own thread; N = a pool"
        ),
    },
    driver={
        # With their headers, the frames fit the default frame limit (knee-node's bound).
        "request_bytes": from_node("echo", "driver.request_bytes", "request body size"),
        "reply_bytes": from_node("echo", "driver.reply_bytes", "reply body size"),
    },
)
