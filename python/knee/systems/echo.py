"""echo: the calibration system; replies with reply_bytes bytes at once."""

from __future__ import annotations

from knee.params import Param
from knee.systems.base import System

SYSTEM = System(
    name="echo",
    summary="calibration: replies with reply_bytes bytes at once",
    server={
        "threads": Param(
            "int", 0, "0 = reply on the connection's own thread; N = a pool", min=0, max=256
        ),
    },
    driver={
        # With their 12- and 44-byte headers, the frames fit the default 16 MiB frame limit.
        "request_bytes": Param("int", 16, "request body size", min=4, max=(16 << 20) - 12),
        "reply_bytes": Param("int", 16, "reply body size", min=0, max=(16 << 20) - 44),
    },
)
