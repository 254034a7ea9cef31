"""Real gRPC servers for tests/test_grpc.py, not written for knee beyond a tiny handler of
knee.test.Echo/Call (tests/protos/echo.proto), each with a capacity known by construction:
W calls served at once, each sleeping its request's sleep_ms (else the server's default),
so W / sleep calls a second; text == "fail" ends the call with UNAVAILABLE (14).

- grpcio (Python): `grpc.server(ThreadPoolExecutor(max_workers=W))` with a generic handler
  taking and returning bytes (no generated code). Run as `python3 tests/grpc_servers.py
  --workers W --sleep-ms S`: its own process, so that its threads do not share the test's
  interpreter. The three request fields are read by hand (`_fields`): a protobuf runtime
  is not needed for them.
- grpc-go (tests/grpc_apps/go_grpc, built by `scripts/grpc-servers install`), plaintext or
  TLS.

`grpc_server(kind, ...)` starts one on a free port of 127.0.0.1, waits for its `listening
HOST:PORT` line, yields its address, and stops it by its PID.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent import futures
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PROTO = REPO / "tests" / "protos" / "echo.proto"
CALL = "knee.test.Echo/Call"
#: Seconds a server gets to say where it listens.
START_TIMEOUT_S = 30.0
#: Calls waiting for a worker in the grpcio server, at most (beyond: RESOURCE_EXHAUSTED).
MAX_WAITING_CALLS = 10_000


def go_binary() -> str:
    """The grpc-go server, built (or found up to date) by the project's script."""
    script = REPO / "scripts" / "grpc-servers"
    subprocess.run([script, "install"], check=True, timeout=600)
    return subprocess.run(
        [script, "path"], check=True, capture_output=True, text=True
    ).stdout.strip()


@contextmanager
def grpc_server(
    kind: str,
    workers: int = 4,
    sleep_ms: int = 10,
    tls: tuple[Path, Path] | None = None,
) -> Iterator[str]:
    """`kind` "grpcio" or "go": yields "127.0.0.1:PORT"."""
    if kind == "grpcio":
        cmd = [sys.executable, str(Path(__file__).resolve())]
    elif kind == "go":
        cmd = [go_binary()]
    else:
        raise ValueError(kind)
    cmd += ["-listen", "127.0.0.1:0", "-workers", str(workers), "-sleep-ms", str(sleep_ms)]
    if tls is not None:
        if kind != "go":
            raise ValueError("TLS: the grpc-go server")
        cmd += ["-cert", str(tls[0]), "-key", str(tls[1])]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        line = proc.stdout.readline()
        if not line.startswith("listening ") or time.monotonic() > deadline:
            proc.kill()
            err = proc.stderr.read() if proc.stderr else ""
            raise RuntimeError(f"{kind} server did not start: {line!r} {err[-2000:]}")
        yield line.split()[1]
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# ------------------------------------------------------------------ the grpcio server


def _varint(b: bytes, i: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        byte = b[i]
        value |= (byte & 0x7F) << shift
        i += 1
        if not byte & 0x80:
            return value, i
        shift += 7


def _fields(b: bytes) -> tuple[str, int]:
    """EchoRequest's text (1) and sleep_ms (2); other fields skipped."""
    text, sleep_ms, i = "", 0, 0
    while i < len(b):
        tag, i = _varint(b, i)
        num, wire = tag >> 3, tag & 7
        if wire == 0:
            v, i = _varint(b, i)
            if num == 2:
                sleep_ms = v - (1 << 64) if v >= 1 << 63 else v
        elif wire == 2:
            n, i = _varint(b, i)
            if num == 1:
                text = b[i : i + n].decode()
            i += n
        elif wire == 1:
            i += 8
        elif wire == 5:
            i += 4
        else:
            raise ValueError(f"wire type {wire}")
    return text, sleep_ms


def _reply(text: str) -> bytes:
    raw = text.encode()
    return bytes([0x0A]) + _encode_varint(len(raw)) + raw


def _encode_varint(n: int) -> bytes:
    out = bytearray()
    while True:
        if n < 0x80:
            out.append(n)
            return bytes(out)
        out.append((n & 0x7F) | 0x80)
        n >>= 7


def serve_grpcio(listen: str, workers: int, sleep_ms: int) -> None:
    import grpc

    def call(request: bytes, context: grpc.ServicerContext) -> bytes:
        text, ms = _fields(request)
        if text == "fail":
            context.abort(grpc.StatusCode.UNAVAILABLE, "asked to fail")
        time.sleep((ms if ms > 0 else sleep_ms) / 1000)
        return _reply(text)

    handler = grpc.method_handlers_generic_handler(
        "knee.test.Echo", {"Call": grpc.unary_unary_rpc_method_handler(call)}
    )
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=workers),
        handlers=[handler],
        maximum_concurrent_rpcs=MAX_WAITING_CALLS,
    )
    port = server.add_insecure_port(listen)
    server.start()
    host = listen.rsplit(":", 1)[0]
    print(f"listening {host}:{port}", flush=True)
    import signal

    signal.signal(signal.SIGTERM, lambda *_: server.stop(0))
    server.wait_for_termination()


if __name__ == "__main__":
    p = argparse.ArgumentParser(description="the grpcio test server of knee.test.Echo")
    p.add_argument("-listen", default="127.0.0.1:0")
    p.add_argument("-workers", type=int, default=4)
    p.add_argument("-sleep-ms", dest="sleep_ms", type=int, default=10)
    a = p.parse_args()
    serve_grpcio(a.listen, a.workers, a.sleep_ms)
