"""The grpc target (docs/grpc.md) on real processes: knee-node's load generator against
real gRPC servers of known capacity (tests/grpc_servers.py: grpcio, and grpc-go in
plaintext and TLS), the call built from tests/protos/echo.proto and JSON; each mistake in
the call is one line before the start; `knee grpc` end to end, and its search."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from grpc_servers import CALL, PROTO, grpc_server
from real_http_servers import throwaway_certs
from report_helpers import only_dir, run_knee, run_knee_each

from knee.contract import GRPC_ARGS, GRPC_CODES

REASON = {name: code for code, name in GRPC_ARGS.items()}
CODE = {name: code for code, name in GRPC_CODES.items()}
OK, TIMEOUT, DROP, ERROR = 0, 1, 2, 3


def driver(data: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "proto_files": [str(PROTO)],
        "call": CALL,
        "data": json.dumps(data or {"text": "hello"}),
        **extra,
    }


def calls(run_load: Any, target: str, rate_per_s: int, duration_s: float, **config: Any) -> Any:
    """`knee-node load grpc` at `rate_per_s` calls a second for `duration_s`."""
    schedule = {"kind": "constant", "rate_per_s": rate_per_s}
    return run_load("grpc", target, schedule, duration_s=duration_s, **config)


def one_line(stderr: str) -> str:
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, stderr
    return lines[0]


# ------------------------------------------------------------------ before the start


def test_grpc_check_builds_the_call_or_says_why_in_one_line(knee_node: str, tmp_path: Path) -> None:
    def check(config: dict[str, Any]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [knee_node, "grpc-check", "--config", json.dumps(config)],
            capture_output=True,
            text=True,
            timeout=30,
        )

    ok = check(driver({"text": "hi", "sleep_ms": 5}))
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout) == {
        "path": "/knee.test.Echo/Call",
        "input": "knee.test.EchoRequest",
        "output": "knee.test.EchoReply",
        "message_bytes": 6,
    }
    bad_proto = tmp_path / "bad.proto"
    bad_proto.write_text('syntax = "proto3";\nmessage A {\n  int32 x = 1\n}\n')
    for config, words in [
        ({**driver(), "proto_files": [str(bad_proto)]}, "proto bad.proto:4:1: expected ';'"),
        ({**driver(), "call": "knee.test.Echo/Nope"}, "has no method Nope"),
        ({**driver(), "call": "knee.test.Nope/Call"}, "no service knee.test.Nope"),
        ({**driver(), "call": "knee.test.Echo/Watch"}, "knee makes unary calls only"),
        ({**driver(), "call": "knee.test.Echo/Upload"}, "client streaming"),
        (driver({"txt": "hi"}), "unrecognized field name 'txt'"),
        (driver({"sleep_ms": "soon"}), "data does not match knee.test.EchoRequest: field sleep_ms"),
    ]:
        out = check(config)
        assert out.returncode == 2
        assert words in one_line(out.stderr), out.stderr


def test_knee_grpc_refuses_each_mistake_in_one_line(tmp_path: Path) -> None:
    bad_proto = tmp_path / "bad.proto"
    bad_proto.write_text('syntax = "proto3";\nmessage A { int32 x = 1 }\n')
    base = ["grpc", "127.0.0.1:9", "--rate", "10", "--duration", "1s"]
    mistakes = [
        (["--proto", str(bad_proto), "--call", "A/B"], "proto bad.proto:2:25: expected ';'"),
        (["--proto", str(PROTO), "--call", "knee.test.Echo/Nope"], "has no method Nope"),
        (["--proto", str(PROTO), "--call", CALL, "-d", '{"text": 5}'], "field text: invalid type"),
        (["--proto", str(PROTO), "--call", CALL, "-d", "{text"], "--data: not JSON"),
        (["--proto", str(PROTO), "--call", "knee.test.Echo/Watch"], "unary calls only"),
        (["--call", CALL], "give --proto FILE"),
        (["--proto", str(PROTO), "--call", CALL, "--insecure"], "for https:// targets"),
    ]
    outs = run_knee_each([[*base, *args, "--out", str(tmp_path / "runs")] for args, _ in mistakes])
    for out, (_, words) in zip(outs, mistakes, strict=True):
        assert out.returncode == 2, out
        line = one_line(out.stderr)
        assert line.startswith("knee grpc: ") and words in line, line
    assert not (tmp_path / "runs").exists(), "nothing started"


def test_the_node_refuses_a_call_that_does_not_match_in_one_line(
    run_load: Any,
) -> None:
    run = calls(run_load, "127.0.0.1:9", 10, 1, check=False, driver=driver({"text": ["a"]}))
    assert run.returncode != 0 and run.events == []
    assert "data does not match knee.test.EchoRequest" in one_line(run.stderr)


# ------------------------------------------------------------------ calls


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    return throwaway_certs(tmp_path_factory.mktemp("grpc-tls"))


def codes(records: np.ndarray) -> dict[str, int]:
    values, counts = np.unique(records["flags"], return_counts=True)
    return {GRPC_CODES[int(v)]: int(n) for v, n in zip(values, counts, strict=True)}


@pytest.mark.parametrize("kind", ["grpcio", "go", "go-tls", "go-tls-insecure"])
def test_every_call_is_ok_and_its_reply_counted(
    kind: str, run_load: Any, certs: tuple[Path, Path, Path]
) -> None:
    ca, cert, key = certs
    tls = (cert, key) if kind.startswith("go-tls") else None
    extra: dict[str, Any] = {}
    if kind == "go-tls":
        extra = {"tls_ca_file": str(ca)}
    elif kind == "go-tls-insecure":
        extra = {"tls_insecure": True}
    with grpc_server(kind.split("-")[0], workers=4, sleep_ms=2, tls=tls) as addr:
        target = f"https://{addr}" if tls else addr
        data = {"text": "hello", "pad": "AAAA"}
        run = calls(run_load, target, 100, 2, connections=2, driver=driver(data, **extra))
    r = run.records
    assert len(r) == 200
    assert codes(r) == {"OK": 200}, r[r["status"] != OK][:5]
    assert (r["status"] == OK).all() and (r["arg"] == 0).all()
    # The reply: EchoReply{text: "hello"} = 7 bytes, framed (5), in a HEADERS, DATA and
    # trailers (HPACK-compressed): more than the message, and the same for every call.
    assert (r["bytes_in"] > 12).all()
    # The request: EchoRequest{text, pad} = 12 bytes framed to 17, with its headers.
    assert (r["bytes_out"] >= 17).all()


def test_a_status_from_the_server_is_an_error_with_its_code(run_load: Any) -> None:
    with grpc_server("go", workers=2, sleep_ms=1) as addr:
        run = calls(run_load, addr, 50, 1, driver=driver({"text": "fail"}))
    r = run.records
    assert len(r) == 50
    assert (r["status"] == ERROR).all()
    assert (r["flags"] == CODE["UNAVAILABLE"]).all() and CODE["UNAVAILABLE"] == 14
    assert (r["arg"] == REASON["grpc_status"]).all()


@pytest.mark.parametrize("kind", ["grpcio", "go"])
def test_a_deadline_shorter_than_the_call_is_deadline_exceeded(kind: str, run_load: Any) -> None:
    """The server's sleep (300 ms) outlasts the deadline (100 ms, sent as grpc-timeout):
    the server ends the call with DEADLINE_EXCEEDED, or resets its stream at the deadline
    (grpc-go's), or knee's timeout comes first; the code is 4 every time."""
    with grpc_server(kind, workers=8, sleep_ms=300) as addr:
        run = calls(run_load, addr, 20, 1, timeout_ms=100, driver=driver())
    r = run.records
    assert len(r) == 20
    assert (r["flags"] == CODE["DEADLINE_EXCEEDED"]).all() and CODE["DEADLINE_EXCEEDED"] == 4
    reasons = {GRPC_ARGS[int(a)] for a in r["arg"]}
    assert reasons <= {"grpc_status", "timeout", "reset"}, reasons
    assert (r["status"] != OK).all()


# ------------------------------------------------------------------ knee grpc


def test_knee_grpc_writes_a_run_and_a_report(tmp_path: Path) -> None:
    request = tmp_path / "req.json"
    request.write_text('{"text": "hello", "sleepMs": 1}')
    with grpc_server("go", workers=4, sleep_ms=2) as addr:
        out = run_knee(
            "grpc", addr, "--proto", str(PROTO), "--call", CALL,
            "-d", f"@{request}", "-m", '{"x-team": "blue"}', "-H", "x-run: 1",
            "--rate", "100", "--duration", "3s", "--warmup", "0.5s", "--connections", "2",
            "--out", str(tmp_path / "runs"), "--no-progress",
            timeout_s=120,
        )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    run_dir = only_dir(tmp_path / "runs")
    summary = json.loads((run_dir / "summary.json").read_text())
    (point,) = summary["points"]
    assert point["target_rate_per_s"] == 100
    html = (run_dir / "report.html").read_text()
    assert "gRPC: status codes, failures and connects" in html
    assert "OK: " in html and "Every call was OK." in html
    spec = (run_dir / "spec.toml").read_text()
    assert "x-team" in spec and "x-run" in spec and "knee.test.Echo/Call" in spec
    assert "sleepMs" in spec, "the message's JSON from the file"


def test_knee_grpc_with_no_rate_finds_a_grpcio_servers_capacity(tmp_path: Path) -> None:
    """grpcio with 8 worker threads, each call sleeping 40 ms: at most 200 calls/s; the
    search finds it within 10%. A longer test: the search's probes, bounded by --budget."""
    workers, sleep_ms = 8, 40
    truth = workers / (sleep_ms / 1e3)
    with grpc_server("grpcio", workers=workers, sleep_ms=sleep_ms) as addr:
        proc = run_knee(
            "grpc", addr, "--proto", str(PROTO), "--call", CALL, "-d", '{"text": "x"}',
            "--probe", "4s", "--tolerance", "2%", "--budget", "200s", "--min-rate", "20",
            "--out", str(tmp_path / "runs"), "--no-progress", "--json",
            timeout_s=400,
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    answers = json.loads(proc.stdout[proc.stdout.index("\n{\n") + 1 :])
    capacity = answers["groups"][0]["capacity"]
    print(f"\nfound {capacity['rate_per_s']:.1f}/s, by construction {truth:.0f}/s")
    assert capacity["limited_by"] != "generator", capacity
    assert 0.9 * truth <= capacity["rate_per_s"] <= 1.1 * truth, capacity
