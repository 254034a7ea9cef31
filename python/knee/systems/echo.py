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
        "request_bytes": Param("int", 16, "request body size", min=4, max=16 << 20),
        "reply_bytes": Param("int", 16, "reply body size", min=0, max=16 << 20),
    },
)
