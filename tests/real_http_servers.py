"""Real HTTP servers, not written for knee's tests, each with a tiny app (tests/http_apps/),
for the conformance matrix in tests/test_http_servers.py.

`real_server(name, workdir, knee_node)` is a context manager: it starts the server on a free
port of 127.0.0.1, waits until it accepts connections and answers its path with a 200
(at most START_TIMEOUT_S, else it fails quoting the server's stderr), yields a
`RealServer`, and stops it by its PID (SIGTERM, then SIGKILL to its own process group: a
server's workers go with it). Nothing is downloaded: scripts/http-servers installs node and
go, `.[test]` gunicorn and uvicorn, scripts/nginx nginx.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
APPS = Path(__file__).resolve().parent / "http_apps"
#: Where the Go app is built (once per session; go's own cache makes later builds quick).
GO_BUILD_DIR = REPO / "target" / "http-apps"

#: Seconds a server gets to accept connections and answer its path.
START_TIMEOUT_S = 20.0
#: Seconds between SIGTERM and SIGKILL.
STOP_GRACE_S = 5.0
#: Starts on a fresh free port when a server exits before accepting (another process may
#: take the port between finding it and the server binding it).
PORT_TRIES = 3
#: Bytes of a server's stderr quoted when it fails to start.
TAIL_BYTES = 2000

#: Every server of the matrix, in the order the tests list them.
NAMES = (
    "python-http.server",
    "gunicorn-sync",
    "uvicorn-h11",
    "node-http",
    "go-net-http",
    "nginx-keepalive",
    "nginx-close",
    "nginx-tls",
    "nginx-tls-close",
)


class ServerStartError(RuntimeError):
    """A server that did not start: what went wrong and the tail of its stderr."""


@dataclass(frozen=True)
class RealServer:
    """A running server: `url` (scheme://127.0.0.1:PORT) and the path to request."""

    name: str
    url: str
    path: str
    pid: int
    #: https: the throwaway CA that signed the server's certificate (PEM).
    ca_file: str | None = None

    @property
    def tls(self) -> bool:
        return self.url.startswith("https://")


@dataclass
class Launch:
    """How to start one server: on `port` (None: the server picks one and says so in a
    `ready` line, as `knee-node serve` does)."""

    argv: list[str]
    path: str = "/"
    scheme: str = "http"
    env: dict[str, str] = field(default_factory=dict)
    cwd: Path | None = None
    own_port: bool = True
    ca_file: str | None = None
    #: Ready when it accepts a connection, not when an HTTP/1.1 GET is answered (nginx
    #: before 1.25.1 speaks only HTTP/2 on a cleartext `http2` port).
    accept_only: bool = False


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _python_http_server(port: int, workdir: Path, _knee_node: str) -> Launch:
    """HTTP/1.0, a connection per request, listen backlog 5 (socketserver's default)."""
    root = workdir / "www"
    root.mkdir(exist_ok=True)
    (root / "index.html").write_text("<!doctype html><title>knee</title><p>hello\n")
    argv = [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"]
    return Launch([*argv, "--directory", str(root)], path="/index.html")


def _gunicorn(port: int, _workdir: Path, _knee_node: str) -> Launch:
    """Two sync workers: one request per connection, then the close."""
    argv = [sys.executable, "-m", "gunicorn", "--workers", "2", "--worker-class", "sync"]
    argv += ["--bind", f"127.0.0.1:{port}", "--graceful-timeout", "2", "--chdir", str(APPS)]
    return Launch([*argv, "wsgi_app:app"])


#: The known-capacity service (tests/http_apps/sleep_app.py): W sync workers, each request
#: sleeping SLEEP_MS, so at most W / SLEEP_MS requests per second.
SLEEP_WORKERS = 2
SLEEP_MS = 20.0


def _gunicorn_sleep(port: int, _workdir: Path, _knee_node: str) -> Launch:
    """gunicorn's sync workers in front of an app that sleeps: capacity W / sleep."""
    argv = [sys.executable, "-m", "gunicorn", "--workers", str(SLEEP_WORKERS)]
    argv += ["--worker-class", "sync", "--bind", f"127.0.0.1:{port}", "--graceful-timeout", "2"]
    argv += ["--chdir", str(APPS), "--backlog", "2048"]
    return Launch([*argv, "sleep_app:app"], env={"KNEE_SLEEP_MS": f"{SLEEP_MS:g}"})


#: As gunicorn-lock, sleeping SLOW_MS under the lock: at most 20/s, low enough that a probe
#: of 200 samples lasts seconds (tests/test_find.py's budget cut).
SLOW_MS = 50.0


def _gthread_locked_sleep(port: int, sleep_ms: float) -> Launch:
    """One gunicorn worker of 8 threads whose requests sleep `sleep_ms` under one lock:
    capacity 1 / sleep (threads, so that an idle connection does not hold the worker)."""
    argv = [sys.executable, "-m", "gunicorn", "--workers", "1", "--threads", "8"]
    argv += ["--worker-class", "gthread", "--bind", f"127.0.0.1:{port}"]
    argv += ["--graceful-timeout", "2", "--chdir", str(APPS), "--backlog", "2048"]
    env = {"KNEE_SLEEP_MS": f"{sleep_ms:g}", "KNEE_SLEEP_LOCK": "1"}
    return Launch([*argv, "sleep_app:app"], env=env)


def _gunicorn_slow(port: int, _workdir: Path, _knee_node: str) -> Launch:
    """The locked sleep of SLOW_MS."""
    return _gthread_locked_sleep(port, SLOW_MS)


def _gunicorn_lock(port: int, _workdir: Path, _knee_node: str) -> Launch:
    """The locked sleep of SLEEP_MS, without Server-Timing: capacity 1 / sleep, set by a
    lock no sampled resource shows."""
    return _gthread_locked_sleep(port, SLEEP_MS)


def _uvicorn(port: int, _workdir: Path, _knee_node: str) -> Launch:
    """h11, keep-alive (idle connections closed after 5 s: uvicorn's default)."""
    argv = [sys.executable, "-m", "uvicorn", "--app-dir", str(APPS), "--host", "127.0.0.1"]
    argv += ["--port", str(port), "--http", "h11", "--no-access-log", "--lifespan", "off"]
    return Launch([*argv, "asgi_app:app"])


def _node(port: int, _workdir: Path, _knee_node: str) -> Launch:
    node = shutil.which("node")
    if node is None:
        raise ServerStartError("node is missing: scripts/http-servers install installs it")
    return Launch([node, str(APPS / "node_app.js"), str(port)])


def go_binary() -> str:
    for found in (shutil.which("go"), "/usr/local/go/bin/go", "/usr/lib/go/bin/go"):
        if found and os.access(found, os.X_OK):
            return found
    raise ServerStartError("go is missing: scripts/http-servers install installs it")


@cache
def build_go_app(out_dir: Path = GO_BUILD_DIR, app: str = "go_app") -> Path:
    """`go build` of tests/http_apps/<app> (standard library only: go_app, go_h2, each with
    the local package tests/http_apps/hello) into `out_dir`, with go's caches there too;
    downloads are off (GOPROXY=off, GOTOOLCHAIN=local). Once per process and app."""
    out_dir.mkdir(parents=True, exist_ok=True)
    binary = out_dir / app.replace("_", "-")
    env = {
        **os.environ,
        "GOPATH": str(out_dir / "gopath"),
        "GOCACHE": str(out_dir / "gocache"),
        "GOFLAGS": "-mod=mod",
        "GOPROXY": "off",
        "GOTOOLCHAIN": "local",
        "CGO_ENABLED": "0",
    }
    proc = subprocess.run(
        [go_binary(), "build", "-o", str(binary), "."],
        cwd=APPS / app,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if proc.returncode != 0:
        raise ServerStartError(f"go build failed ({proc.returncode}):\n{proc.stderr[-TAIL_BYTES:]}")
    return binary


def _go(port: int, workdir: Path, _knee_node: str) -> Launch:
    return Launch([str(build_go_app()), str(port)])


def go_app_h2(
    tls: bool = False, h2c: bool = False, max_streams: int = 0, sleep_ms: int = 20
) -> Callable[[int, Path, str], Launch]:
    """Go net/http speaking HTTP/2: over TLS (h2 by ALPN, a throwaway certificate) or in
    cleartext by prior knowledge (h2c), with SETTINGS_MAX_CONCURRENT_STREAMS `max_streams`
    (0: Go's default, 250) and /sleep taking `sleep_ms`."""

    def launch(port: int, workdir: Path, _knee_node: str) -> Launch:
        argv = [str(build_go_app()), str(port), "-sleep-ms", str(sleep_ms)]
        argv += ["-max-streams", str(max_streams)] if max_streams else []
        argv += ["-h2c"] if h2c else []
        ca = None
        if tls:
            ca, cert, key = throwaway_certs(workdir / "tls")
            argv += ["-tls", f"{cert},{key}"]
        return Launch(argv, scheme="https" if tls else "http", ca_file=ca and str(ca))

    return launch


def _go_h2(tls: bool) -> Callable[[int, Path, str], Launch]:
    """Go net/http with HTTP/2 (tests/http_apps/go_h2): h2c by prior knowledge and HTTP/1.1
    on one port, or TLS with h2 by ALPN (and HTTP/1.1)."""

    def launch(port: int, workdir: Path, _knee_node: str) -> Launch:
        argv = [str(build_go_app(app="go_h2")), str(port)]
        ca = None
        if tls:
            ca, cert, key = throwaway_certs(workdir / "tls")
            argv += [str(cert), str(key)]
        return Launch(argv, scheme="https" if tls else "http", ca_file=ca and str(ca))

    return launch


def _openssl(*argv: str) -> None:
    proc = subprocess.run(
        ["openssl", *argv], capture_output=True, text=True, timeout=60, check=False
    )
    if proc.returncode != 0:
        raise ServerStartError(f"openssl {argv[0]} failed:\n{proc.stderr[-TAIL_BYTES:]}")


def throwaway_certs(folder: Path) -> tuple[Path, Path, Path]:
    """A throwaway CA and a server certificate it signs for 127.0.0.1 (CN and IP SAN), EC
    P-256, valid one day: (ca, cert, key). No one trusts the CA but a test that says so."""
    folder.mkdir(parents=True, exist_ok=True)
    ca, ca_key = folder / "ca.pem", folder / "ca.key"
    cert, key, csr = folder / "cert.pem", folder / "key.pem", folder / "cert.csr"
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    _openssl(
        "req", "-x509", *ec, "-keyout", str(ca_key), "-out", str(ca), "-days", "1",
        "-subj", "/CN=knee throwaway CA",
    )  # fmt: skip
    _openssl("req", "-new", *ec, "-keyout", str(key), "-out", str(csr), "-subj", "/CN=127.0.0.1")
    ext = folder / "leaf.ext"
    ext.write_text("basicConstraints=CA:FALSE\nsubjectAltName=IP:127.0.0.1\n")
    _openssl(
        "x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key),
        "-CAcreateserial", "-out", str(cert), "-days", "1", "-extfile", str(ext),
    )  # fmt: skip
    return ca, cert, key


def _nginx(
    keepalive: bool = True, tls: bool = False, http2: bool = False
) -> Callable[[int, Path, str], Launch]:
    """nginx as a point runs it (`knee-node serve http`, which picks the port); `http2`:
    h2 by ALPN over TLS, h2c by prior knowledge in cleartext."""

    def launch(_port: int, workdir: Path, knee_node: str) -> Launch:
        nginx: dict[str, object] = {"dir": str(workdir / "nginx"), "keepalive": keepalive}
        if http2:
            nginx["http2"] = True
        ca = None
        if tls:
            ca, cert, key = throwaway_certs(workdir / "tls")
            nginx["tls"] = {"cert": str(cert), "key": str(key)}
        config = {"listen": "127.0.0.1:0", "server": {"nginx": nginx}}
        argv = [knee_node, "serve", "http", "--name", "nginx", "--config", json.dumps(config)]
        scheme = "https" if tls else "http"
        return Launch(
            argv,
            scheme=scheme,
            own_port=False,
            ca_file=ca and str(ca),
            accept_only=http2 and not tls,
        )

    return launch


LAUNCHERS: dict[str, Callable[[int, Path, str], Launch]] = {
    "python-http.server": _python_http_server,
    "gunicorn-sync": _gunicorn,
    "uvicorn-h11": _uvicorn,
    "node-http": _node,
    "go-net-http": _go,
    "nginx-keepalive": _nginx(),
    "nginx-close": _nginx(keepalive=False),
    "nginx-tls": _nginx(tls=True),
    "nginx-tls-close": _nginx(keepalive=False, tls=True),
}
assert tuple(LAUNCHERS) == NAMES
#: Servers started by name outside the conformance matrix.
LAUNCHERS["gunicorn-sleep"] = _gunicorn_sleep
LAUNCHERS["gunicorn-lock"] = _gunicorn_lock
LAUNCHERS["gunicorn-slow"] = _gunicorn_slow
#: HTTP/2 servers (the h2 tests and benches); they answer HTTP/1.1 too.
LAUNCHERS["go-h2c"] = _go_h2(tls=False)
LAUNCHERS["go-h2-tls"] = _go_h2(tls=True)
LAUNCHERS["nginx-h2-tls"] = _nginx(tls=True, http2=True)
LAUNCHERS["nginx-h2c"] = _nginx(http2=True)
#: Go's go_app with one stream per connection (SETTINGS_MAX_CONCURRENT_STREAMS 1) and
#: /sleep taking 20 ms: the held test's server.
LAUNCHERS["go-h2c-one-stream"] = go_app_h2(h2c=True, max_streams=1)


def stop(proc: subprocess.Popen[bytes], grace_s: float = STOP_GRACE_S) -> None:
    """SIGTERM to the server's PID; SIGKILL to its process group (its own, made at the
    start: the server and any workers) if it is still there after `grace_s`, and to
    stragglers once it is gone."""
    if proc.poll() is None:
        try:
            os.kill(proc.pid, signal.SIGTERM)
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass
        except ProcessLookupError:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the group's id is the server's PID
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait(timeout=grace_s)


def _tail(path: Path) -> str:
    try:
        return path.read_bytes()[-TAIL_BYTES:].decode(errors="replace")
    except OSError:
        return ""


def _ready_addr(out: Path) -> str | None:
    """The address in a `knee-node serve` ready line, once printed."""
    for line in out.read_text(errors="replace").splitlines():
        if line.startswith("{") and (event := json.loads(line)).get("event") == "ready":
            return str(event["addr"])
    return None


def _answers(scheme: str, host: str, port: int, path: str) -> bool:
    """One GET of `path` answered 200 (certificates not checked: they are throwaway)."""
    try:
        if scheme == "https":
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
            conn: http.client.HTTPConnection = http.client.HTTPSConnection(
                host, port, timeout=2, context=context
            )
        else:
            conn = http.client.HTTPConnection(host, port, timeout=2)
        try:
            conn.request("GET", path)
            response = conn.getresponse()
            response.read()
            return response.status == 200
        finally:
            conn.close()
    except (OSError, http.client.HTTPException):
        return False


def _accepts(_scheme: str, host: str, port: int, _path: str) -> bool:
    """A TCP connection is accepted."""
    try:
        with socket.create_connection((host, port), timeout=2):
            return True
    except OSError:
        return False


class _Exited(Exception):
    """The server exited before it answered."""


def _wait_ready(
    proc: subprocess.Popen[bytes], launch: Launch, port: int, out: Path, deadline: float
) -> str:
    """host:port once the server answers its path; _Exited if it exits, ServerStartError
    after the deadline."""
    addr = None if not launch.own_port else f"127.0.0.1:{port}"
    while True:
        if proc.poll() is not None:
            raise _Exited(f"exited with {proc.returncode}")
        if addr is None:
            addr = _ready_addr(out)
        if addr is not None:
            host, _, p = addr.rpartition(":")
            ready = _accepts if launch.accept_only else _answers
            if ready(launch.scheme, host, int(p), launch.path):
                return addr
        if time.monotonic() >= deadline:
            raise ServerStartError(f"not answering {launch.path} within {START_TIMEOUT_S:g} s")
        time.sleep(0.05)


@contextmanager
def real_server(name: str, workdir: Path, knee_node: str) -> Iterator[RealServer]:
    """Starts server `name` (one of NAMES) with its files in `workdir`; stops it at the end."""
    make = LAUNCHERS[name]
    workdir.mkdir(parents=True, exist_ok=True)
    for attempt in range(1, PORT_TRIES + 1):
        port = free_port()
        launch = make(port, workdir, knee_node)
        out, err = workdir / f"{name}.{attempt}.out", workdir / f"{name}.{attempt}.err"
        with out.open("wb") as stdout, err.open("wb") as stderr:  # files: nothing to drain
            proc = subprocess.Popen(
                launch.argv,
                stdin=subprocess.DEVNULL,
                stdout=stdout,
                stderr=stderr,
                cwd=launch.cwd,
                env={**os.environ, **launch.env},
                start_new_session=True,  # its own process group, for its workers
            )
        try:
            addr = _wait_ready(proc, launch, port, out, time.monotonic() + START_TIMEOUT_S)
        except _Exited as e:
            stop(proc)
            if attempt == PORT_TRIES or not launch.own_port:
                raise ServerStartError(f"{name} {e}; stderr:\n{_tail(err)}") from None
            continue
        except BaseException as e:
            stop(proc)
            if isinstance(e, ServerStartError):
                raise ServerStartError(f"{name}: {e}; stderr:\n{_tail(err)}") from None
            raise
        try:
            url = f"{launch.scheme}://{addr}"
            yield RealServer(name, url, launch.path, proc.pid, launch.ca_file)
        finally:
            stop(proc)
        return
