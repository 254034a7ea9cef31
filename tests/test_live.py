"""`--live` (docs/live.md): one real run with the page open in headless Chromium while its
points run, /metrics scraped and parsed by prometheus_client's own parser, clients that hang
or flood, and the server gone when the run ends. One run, shared by the tests below."""

from __future__ import annotations

import http.client
import json
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image
from prometheus_client.parser import text_string_to_metric_families
from report_helpers import chromium

import knee
from knee.live import Live
from knee.live.options import DEFAULT_AFTER_S, address, expected_run_s, wanted
from knee.live.samples import BUCKETS_S, Tail, failure_names, has_held
from knee.live.server import MAX_CLIENTS
from knee.live.state import HISTORY_S, METRICS_POINTS, LiveState, NodeLive
from knee.params import Point
from knee.results import SAMPLE_DTYPE
from knee.runner.display import warnings_of
from knee.spec import load_spec

SPEC = """
[experiment]
name = "live-test"
system = "echo"

[load]
schedule = "poisson"
rate_per_s = 300
duration_s = 8
warmup_s = 0.5

[sweep]
"load.rate_per_s" = [200, 300]
"""
#: The run's bound: two 8 s points, their statistics and the report, on a busy machine.
RUN_TIMEOUT_S = 120.0
#: report_helpers' Chromium resolves no name; the page is on a loopback address.
LOOPBACK = "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"
URL = re.compile(r"live page:\s+(http://127\.0\.0\.1:\d+/)")


def _get(url: str, timeout_s: float = 5.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout_s) as r:
        return r.read()


def _state(url: str) -> dict[str, Any]:
    return json.loads(_get(url + "state.json"))


def _wait_for(what: str, check: Any, timeout_s: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if found := check():
            return found
        time.sleep(0.2)
    pytest.fail(f"timed out waiting for {what}")


@dataclass
class LiveRun:
    spec: Path
    run_dir: Path
    url: str
    code: int
    stdout: str
    dom: str
    shot: Path
    state_while_running: dict[str, Any]
    metrics_after_point_0: str
    state_after_point_0: dict[str, Any]
    busy_status: int
    hung: list[socket.socket] = field(default_factory=list)
    refused_after_end: bool = False
    last_state: dict[str, Any] = field(default_factory=dict)


def _chromium(url: str, tmp: Path, args: list[str], name: str) -> subprocess.CompletedProcess:
    # The page polls every second: virtual time lets it poll a few times, then the DOM is
    # dumped (or the screenshot taken).
    return chromium(["--virtual-time-budget=4000", LOOPBACK, *args, url], tmp / f"profile-{name}")


@pytest.fixture(scope="module")
def live_run(tmp_path_factory: pytest.TempPathFactory) -> LiveRun:
    tmp = tmp_path_factory.mktemp("live")
    spec = tmp / "spec.toml"
    spec.write_text(SPEC)
    cmd = [sys.executable, "-m", "knee.cli", "run", str(spec), "--out", str(tmp / "runs")]
    proc = subprocess.Popen(
        [*cmd, "--live", "--no-progress"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)  # type: ignore[arg-type]
    reader.start()
    hung: list[socket.socket] = []
    try:
        url = _wait_for(
            "the page's URL",
            lambda: next((m.group(1) for ln in list(lines) if (m := URL.search(ln))), None),
        )
        # The first point runs and has a few seconds of data.
        running = _wait_for(
            "the first point's data",
            lambda: (s := _state(url))["current"] and len(s["current"]["seconds"]) >= 2 and s,
        )
        dom_res: list[subprocess.CompletedProcess] = []
        shot = tmp / "live.png"
        shooter = threading.Thread(
            target=lambda: dom_res.append(
                _chromium(url, tmp, [f"--screenshot={shot}", "--window-size=1400,1400"], "shot")
            )
        )
        shooter.start()
        dom = _chromium(url, tmp, ["--dump-dom"], "dom")
        shooter.join(timeout=150)
        assert dom.returncode == 0, dom.stderr.decode(errors="replace")[-2000:]
        assert dom_res and dom_res[0].returncode == 0
        # Point 0 ended: its counters are final on /metrics while point 1 runs.
        after_0 = _wait_for("the first point's end", lambda: (s := _state(url))["points"] and s)
        metrics_text = _get(url + "metrics").decode()
        # A flood: every slot held by a client that sends nothing; one more is refused.
        host, port = address(url.removeprefix("http://").rstrip("/"))
        flood = [socket.create_connection((host, port)) for _ in range(MAX_CLIENTS)]
        # Until the server has taken them all (within their 2 s timeout), one more may get in.
        deadline = time.monotonic() + 1.5
        while True:
            conn = http.client.HTTPConnection(host, port, timeout=5)
            conn.request("GET", "/state.json")
            busy_status = conn.getresponse().status
            conn.close()
            if busy_status == 503 or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        hung.extend(flood)
        # A client that asks for the chart library and never reads its 3 MB.
        slow = socket.create_connection((host, port))
        slow.sendall(b"GET /plotly.js HTTP/1.1\r\nHost: x\r\n\r\n")
        hung.append(slow)
        # A page that follows the run to its end, as an open browser tab does.
        last: list[dict[str, Any]] = []

        def follow() -> None:
            while True:
                try:
                    last[:] = [_state(url)]
                except urllib.error.HTTPError:  # 503 while the flood holds every slot
                    pass
                except OSError:  # nothing listens: the server stopped
                    return
                time.sleep(0.3)

        follower = threading.Thread(target=follow, daemon=True)
        follower.start()
        code = proc.wait(timeout=RUN_TIMEOUT_S)
        follower.join(timeout=10)
        reader.join(timeout=5)
        try:
            socket.create_connection((host, port), timeout=2).close()
            refused = False
        except ConnectionRefusedError:
            refused = True
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert code == 0, proc.stderr.read() if proc.stderr else ""
    run_dir = next(d for d in (tmp / "runs").iterdir() if d.is_dir())
    return LiveRun(
        spec=spec,
        run_dir=run_dir,
        url=url,
        code=code,
        stdout="".join(lines),
        dom=dom.stdout.decode(errors="replace"),
        shot=shot,
        state_while_running=running,
        metrics_after_point_0=metrics_text,
        state_after_point_0=after_0,
        busy_status=busy_status,
        hung=hung,
        refused_after_end=refused,
        last_state=last[0],
    )


def _attrs(dom: str, element_id: str) -> dict[str, str]:
    tag = re.search(rf'<[a-z0-9]+ [^>]*id="{element_id}"[^>]*>', dom)
    assert tag, f"#{element_id} is missing"
    return dict(re.findall(r'([\w-]+)="([^"]*)"', tag.group(0)))


def test_the_page_draws_the_running_point_in_chromium(live_run: LiveRun) -> None:
    dom = live_run.dom
    body = dict(re.findall(r'([\w-]+)="([^"]*)"', re.search(r"<body([^>]*)>", dom).group(1)))
    assert body["data-errors"] == "0"
    assert int(body["data-polls"]) >= 1
    # The running point: its label and counts, its charts drawn with its seconds.
    label = _attrs(dom, "point-label")
    assert int(label["data-sent"]) > 0 and int(label["data-completed"]) > 0
    shown = r'id="point-label"[^>]*>main rate_per_s=(200|300) \(point [12](, ended)?\)<'
    assert re.search(shown, dom)
    for chart in ("chart-rates", "chart-latency", "chart-queue", "chart-failures"):
        attrs = _attrs(dom, chart)
        assert attrs.get("data-drawn") == "1", chart
        assert int(attrs["data-values"]) > 0, chart
    assert _attrs(dom, "chart-resources")["data-drawn"] == "1"
    assert _attrs(dom, "chart-load")["data-drawn"] == "1"
    assert "busiest now: " in dom
    with Image.open(live_run.shot) as im:
        rgb = np.asarray(im.convert("RGB"), dtype=float)
    assert rgb.mean(axis=2).std() > 10, "the screenshot is blank"
    # The traces are the only saturated colours on the page (text, axes and grid are grey):
    # a line across one chart is about 1,000 pixels, the legends' swatches together ~600.
    # Not the share of dark pixels: that is mostly text, and the page's text varies.
    coloured = (rgb.max(axis=2) - rgb.min(axis=2)) > 80
    assert coloured.mean() > 0.001, f"no trace drawn: {coloured.mean():.4%} coloured pixels"


def test_the_state_follows_the_running_point(live_run: LiveRun) -> None:
    s = live_run.state_while_running
    assert s["status"] == "running" and s["experiment"] == "live-test"
    cur = s["current"]
    assert cur["index"] == 0 and cur["target_per_s"] == 200
    rows = cur["seconds"]
    assert rows[-1]["sent_per_s"] > 0 and rows[-1]["target_per_s"] == 200
    assert any(r["p50_ms"] is not None and r["p99_ms"] >= r["p50_ms"] for r in rows)
    assert {"load", "server", "machine"} <= set(s["resources"])
    assert s["busiest"] in s["resources"]
    # The first point, finished, on the latency-against-load figure with its verdict.
    done = live_run.state_after_point_0["points"][0]
    stats = knee.open_run(live_run.run_dir).points[0]
    assert done["label"] == "main rate_per_s=200"
    assert done["done_per_s"] == stats["throughput_per_s"]
    assert done["p99_ms"] == stats["latency_ns"]["p99"] / 1e6
    flags = ", ".join(warnings_of(stats))  # UNSTABLE, a sender's or the machine's warning
    assert done["verdict"] == (flags or stats["stability"]["verdict"])


def test_metrics_parse_and_match_the_points_samples(live_run: LiveRun) -> None:
    families = {f.name: f for f in text_string_to_metric_families(live_run.metrics_after_point_0)}
    run = knee.open_run(live_run.run_dir)
    samples = run.samples
    p0 = samples[(samples["point"] == 0) & (samples["node"] == "load")]

    def value(family: str, suffix: str = "", **labels: str) -> float:
        found = [
            s.value
            for s in families[family].samples
            if s.name == family + suffix
            and s.labels.get("point") == "0"
            and all(s.labels.get(k) == v for k, v in labels.items())
        ]
        assert len(found) == 1, (family, suffix, labels, found)
        return found[0]

    assert families["knee_requests_sent"].type == "counter"
    assert value("knee_requests_sent", "_total", node="load") == (p0["sent_ns"] >= 0).sum()
    assert value("knee_requests_completed", "_total", node="load") == len(p0)
    late_ms = load_spec(live_run.spec, None).points[0].load["late_ms"]
    sent = p0["sent_ns"] >= 0
    late = sent & (p0["sent_ns"] - p0["intended_ns"] > late_ms * 1e6)
    assert value("knee_sends_late", "_total", node="load") == late.sum()
    assert value("knee_sends_held", "_total", node="load") == 0  # echo holds nothing
    ok = p0[p0["status"] == "ok"]
    latency = families["knee_request_latency_seconds"]
    assert latency.type == "histogram"
    for le in BUCKETS_S:
        count = value("knee_request_latency_seconds", "_bucket", node="load", le=repr(le))
        assert count == (ok["latency_ns"] <= round(le * 1e9)).sum(), le
    assert value("knee_request_latency_seconds", "_count", node="load") == len(ok)
    assert value("knee_request_latency_seconds", "_sum", node="load") == pytest.approx(
        ok["latency_ns"].sum() / 1e9
    )
    failed = p0[p0["status"] != "ok"]["status"].value_counts()
    for reason, count in failed[failed > 0].items():
        assert value("knee_requests_failed", "_total", node="load", reason=reason) == count
    labels = next(s.labels for s in families["knee_backlog_requests"].samples)
    assert labels == {"experiment": "live-test", "point": labels["point"], "series": "main"}
    assert value("knee_requests_in_flight", node="load") >= 0
    resources = {s.labels["resource"] for s in families["knee_resource_utilization"].samples}
    assert {"load", "server", "machine"} <= resources
    node_labels = {"experiment", "point", "series", "node"}
    assert set(families["knee_requests_in_flight"].samples[0].labels) == node_labels


def test_a_flood_is_refused_and_hung_clients_do_not_hold_the_runs_end(
    live_run: LiveRun,
) -> None:
    assert live_run.busy_status == 503
    # The run ended (exit 0) while the flood's sockets and a client that read nothing were
    # still connected: nothing waited for them. The server is gone: nothing listens.
    assert live_run.code == 0 and len(live_run.hung) == MAX_CLIENTS + 1
    assert live_run.refused_after_end
    for s in live_run.hung:
        s.settimeout(5)
        try:
            while s.recv(65536):  # what was sent before the close, then the end
                pass
        except ConnectionResetError:
            pass
        s.close()


def test_an_open_page_gets_the_last_state_and_the_reports_link(live_run: LiveRun) -> None:
    last = live_run.last_state
    assert last["status"] == "ended"
    assert last["report"] == str((live_run.run_dir / "report.html").resolve())
    assert [p["index"] for p in last["points"]] == [0, 1]


def test_the_url_is_printed_at_the_start(live_run: LiveRun) -> None:
    assert live_run.stdout.splitlines()[0].startswith(f"live page:     {live_run.url}")


# ------------------------------------------------------------------ options, no run


def test_live_is_on_when_asked_or_for_a_long_run_on_a_terminal(tmp_path: Path) -> None:
    spec_path = tmp_path / "spec.toml"
    spec_path.write_text(SPEC)
    points = load_spec(spec_path, None).points
    expected = expected_run_s(points)
    assert expected == 2 * (8 + 2) < DEFAULT_AFTER_S  # each point's duration and 2 s

    class Args:
        live: str | None = None
        no_live = False

    args = Args()
    assert wanted(args, expected, tty=True) is None  # under a minute
    assert wanted(args, 61.0, tty=True) == ("127.0.0.1", 0)
    assert wanted(args, 61.0, tty=False) is None  # not a terminal
    args.no_live = True
    assert wanted(args, 61.0, tty=True) is None
    args.no_live, args.live = False, "127.0.0.1:0"
    assert wanted(args, 1.0, tty=False) == ("127.0.0.1", 0)
    assert address("9100") == ("127.0.0.1", 9100)
    assert address("127.0.0.2:9100") == ("127.0.0.2", 9100)


def test_the_page_draws_a_search_and_links_the_report(tmp_path: Path) -> None:
    """A search's path, brackets and answers as find.json has them, and the report's link,
    drawn by the page (a Live fed directly, no run)."""
    live = Live(("127.0.0.1", 0), "search-test", "http", "search")
    url = live.start()
    try:
        probe = {"decision": {"capacity": "stable", "slo": None}, "phase": "low"}
        live.search(
            {
                "status": "running",
                "probes": [
                    {**probe, "point": 0, "rate_per_s": 10.0, "brackets": {"capacity": [10, None]}},
                    {**probe, "point": 1, "rate_per_s": 80.0, "brackets": {"capacity": [80, None]}},
                    {
                        **probe,
                        "point": 2,
                        "rate_per_s": 640.0,
                        "decision": {"capacity": "unstable"},
                        "brackets": {"capacity": [80, 640]},
                    },
                ],
                "answers": {
                    "groups": [
                        {
                            "label": "main",
                            "capacity": {
                                "rate_per_s": 300.0,
                                "interval_per_s": [290.0, 310.0],
                                "state": "decided",
                            },
                        }
                    ]
                },
            }
        )
        report = tmp_path / "report.html"
        live.report_written(report)
        state = _state(url)
        assert [p["rate_per_s"] for p in state["search"]["probes"]] == [10.0, 80.0, 640.0]
        assert state["report"] == str(report)
        res = chromium(
            ["--virtual-time-budget=3000", LOOPBACK, "--dump-dom", url], tmp_path / "profile"
        )
        dom = res.stdout.decode(errors="replace")
        assert _attrs(dom, "chart-search")["data-drawn"] == "1"
        assert int(_attrs(dom, "chart-search")["data-values"]) == 3 + 3 + 1  # probes, brackets
        assert "300/s [290, 310] (decided)" in dom
        assert f'href="file://{report}"' in dom
        # A page still polling gets the last state before the server stops.
        seen: list[str] = []
        stop = threading.Event()

        def follow() -> None:
            while not stop.wait(0.2):
                try:
                    seen.append(_state(url)["status"])
                except OSError:
                    return

        follower = threading.Thread(target=follow)
        follower.start()
        _wait_for("a poll", lambda: seen)
    finally:
        live.stop()
        stop.set()
        follower.join(timeout=10)
    assert seen[-1] == "ended"
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1].strip("/"))), 2)


def test_memory_is_bounded_by_rings() -> None:
    """The resources' seconds and /metrics' ended points are rings of fixed sizes."""
    state = LiveState("bounded", "echo", "run")
    row = {"node": "server", "role": "serve", "cpu_percent": 50.0}
    for t in range(HISTORY_S + 100):
        state.sampled([{**row, "t_s": float(t)}])
    assert len(state.resources["server"]) == HISTORY_S
    state.run_started(Path("/nonexistent"), 0)
    for i in range(METRICS_POINTS + 6):
        load = {"schedule": "poisson", "rate_per_s": 1.0 + i}
        point = Point(i, "main", {"load.rate_per_s": 1.0 + i}, {}, {}, load, {})
        state.point_started(point, None)
        state.point_finished(point, {"latency_ns": {}})
    ended = [p["point"] for p in state.metric_nodes()[1]["points"]]
    assert ended == list(range(6, METRICS_POINTS + 6))


def test_the_backlog_counts_sends_due_beyond_the_arrivals_spread(tmp_path: Path) -> None:
    node = NodeLive("load", Tail(tmp_path / "none.bin", 0, None, False))
    node.due, node.line = 100.0, {"sent": 90, "completed": 80}
    assert node.in_flight() == 10
    assert node.behind("constant") == 9  # 99 due (the last one may be this instant's)
    assert node.behind("poisson") == 0  # 10 short is within 3 sqrt(100) = 30
    node.line = {"sent": 50, "completed": 50}
    assert node.behind("poisson") == 20


def test_a_samples_file_is_counted_as_it_grows(tmp_path: Path) -> None:
    """Records appended in two flushes, a partial record left for the next look: counts by
    status or by http's fail_reason, late and held sends, the latency histogram."""
    reasons = failure_names("http")
    assert reasons is not None and has_held("http") and not has_held("echo")
    records = np.zeros(6, dtype=SAMPLE_DTYPE)
    records["intended_ns"] = 1_000_000
    records["sent_ns"] = [1_000_100, 1_000_100, 3_000_000, 1_000_100, 0, 1_000_100]
    records["received_ns"] = [1_200_000, 1_050_000_000, 3_100_000, 0, 0, 1_300_000]
    status = {name: i for i, name in enumerate(knee.contract.STATUSES)}
    records["status"] = [status[s] for s in ("ok", "ok", "ok", "timeout", "drop", "error")]
    by_name = {v: k for k, v in reasons.items()}
    records["arg"] = [0, 0, 0, by_name["timeout"], 0, by_name["status_5xx"]]
    records["service_ns"] = [0, 0, 1_500_000, 0, 0, 0]  # http: held_ns
    path = tmp_path / "p000-load.samples.bin"
    tail = Tail(path, late_ns=1_000_000, reasons=reasons, held=True)
    path.write_bytes(records[:2].tobytes() + records[2].tobytes()[:50])
    assert list(tail.look()) == [200_000, 1_049_000_000]
    path.write_bytes(records.tobytes())
    assert list(tail.look()) == [2_100_000]
    assert tail.records == 6 and tail.sent == 5 and tail.ok == 3
    assert tail.late == 1 and tail.held_sends == 1
    assert tail.failures == {"timeout": 1, "drop": 1, "status_5xx": 1}
    expected = np.bincount(
        np.searchsorted(np.array(BUCKETS_S) * 1e9, [200_000, 1_049_000_000, 2_100_000]),
        minlength=len(BUCKETS_S) + 1,
    )
    assert tail.buckets.tolist() == expected.tolist()


def test_a_failing_hook_never_fails_the_run(tmp_path: Path) -> None:
    live = Live(("127.0.0.1", 0), "broken", "echo", "run")
    live.run_started(tmp_path, 1)
    load = {"schedule": "poisson", "rate_per_s": 10.0}
    live.point_started(Point(0, "main", {}, {}, {}, load, {}), None)
    live.node_lines({"load": {"t_s": "not a number"}})  # raises inside: caught
    assert live.broken and "ValueError" in live.broken
    live.node_lines({"load": {"t_s": 1.0}})  # the page no longer follows; nothing raises
    live.server.server_close()


def test_a_links_u_is_its_busier_direction_over_its_rate() -> None:
    """An emulated host's link rows (cumulative interface bytes, as the runner samples
    them) against the host's rate_mbit."""
    state = LiveState("links", "echo", "run", {"h1": 1e6})  # 8 Mbit/s: 1 MB/s each way
    rows = [(1.0, 0, 0), (2.0, 250_000, 500_000), (3.0, 1_250_000, 600_000)]
    for t_s, rx, tx in rows:
        state.sampled(
            [{"t_s": t_s, "node": "link:h1", "role": "link", "bytes_rx": rx, "bytes_tx": tx}]
        )
    state.sampled(
        [{"t_s": 3.0, "node": "link:other", "role": "link", "bytes_rx": 1, "bytes_tx": 1}]
    )
    assert [u for _, u in state.resources["link:h1"]] == [0.5, 1.0]
    assert "link:other" not in state.resources  # no rate known: no U


@pytest.mark.parametrize(
    ("addr", "said"), [("abc:xyz", "expected HOST:PORT or PORT"), ("192.0.2.1:9", "cannot serve")]
)
def test_an_address_that_cannot_serve_is_refused_before_anything_runs(
    tmp_path: Path, addr: str, said: str
) -> None:
    spec = tmp_path / "spec.toml"
    spec.write_text(SPEC)
    out = tmp_path / "runs"
    res = subprocess.run(
        [sys.executable, "-m", "knee.cli", "run", str(spec), "--out", str(out), "--live", addr],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("knee run: --live: ") and said in lines[0]
    assert not out.exists()
