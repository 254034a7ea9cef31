#!/usr/bin/env python3
"""What the live page costs the runner: the `knee run` process's own CPU time (user + sys,
its nodes not counted) on the same echo run with `--live` and a client polling it as the
page does (/state.json every second, /metrics every 5 s, the page and plotly.js once),
against `--no-live`.

The runs alternate, 3 times each (--smoke: once), and the ratio is of the medians. Exits 0
even when the target is missed (this is a measurement), 1 when something broke.

    python3 bench/live_cost.py [--smoke]
"""

import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import benchlib
from benchlib import BENCH_DIR, BenchError, Row, Section, find_knee_node, median

#: The page's own poll, and a Prometheus scrape (a short scrape interval).
STATE_EVERY_S = 1.0
METRICS_EVERY_S = 5.0
#: The live page's CPU over the runner's without it: at most this.
TARGET_RATIO = 1.10
#: Slack on top of a run's own length before it counts as hung.
CHILD_SLACK_S = 60.0
URL = re.compile(r"live page:\s+(http://[^\s]+/)")
#: The runner's own CPU, printed by the wrapper below as it exits.
CPU_LINE = re.compile(r"^RUNNER_CPU_S (\S+)$", re.M)
WRAPPER = (
    "import resource, sys\n"
    "from knee.cli import main\n"
    "code = main(sys.argv[1:])\n"
    "r = resource.getrusage(resource.RUSAGE_SELF)\n"
    "print(f'RUNNER_CPU_S {r.ru_utime + r.ru_stime}', file=sys.stderr)\n"
    "sys.exit(code)\n"
)

SPEC = """
[experiment]
name = "live-cost"
system = "echo"

[load]
schedule = "poisson"
rate_per_s = {rate}
duration_s = {duration_s}
warmup_s = 0.5
"""


@dataclass(frozen=True)
class Plan:
    rate_per_s: float
    duration_s: float
    #: Runs with the page and without it (medians).
    repeats: int = 3


FULL = Plan(rate_per_s=5000, duration_s=20)
SMOKE = Plan(rate_per_s=500, duration_s=2, repeats=1)


class Poller:
    """A client that follows the page as a browser and a Prometheus scraper would."""

    def __init__(self, url: str) -> None:
        self.url, self.requests, self.errors = url, 0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _get(self, path: str) -> None:
        try:
            with urllib.request.urlopen(self.url + path, timeout=5) as r:
                r.read()
            self.requests += 1
        except OSError:
            self.errors += 1

    def _run(self) -> None:
        self._get("")
        self._get("plotly.js")
        next_metrics = time.monotonic()
        while not self._stop.wait(STATE_EVERY_S):
            self._get("state.json")
            if time.monotonic() >= next_metrics:
                self._get("metrics")
                next_metrics += METRICS_EVERY_S

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


def run_once(spec: Path, out: Path, live: bool, timeout_s: float) -> tuple[float, int]:
    """One run; returns the runner's CPU seconds and the poller's requests served."""
    cmd = [sys.executable, "-c", WRAPPER, "run", str(spec), "--out", str(out)]
    cmd += ["--no-report", "--no-progress", "--live" if live else "--no-live"]
    env = {**os.environ, "PYTHONPATH": str(BENCH_DIR.parent / "python")}
    env["KNEE_NODE"] = str(find_knee_node())
    errors = out.parent / "stderr.txt"
    with open(errors, "w") as stderr:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=stderr, text=True, env=env)
    poller = None
    served = 0
    # The run's end bounds the reading below; this bounds the run.
    timer = threading.Timer(timeout_s, proc.kill)
    timer.start()
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if live and poller is None and (m := URL.search(line)):
                poller = Poller(m.group(1))
        proc.wait()
    finally:
        timer.cancel()
        if poller is not None:
            poller.stop()
            served = poller.requests
    err = errors.read_text()
    if proc.returncode == -9:
        raise BenchError(f"knee run took over {timeout_s:.0f} s")
    if proc.returncode != 0:
        raise BenchError(f"knee run exited {proc.returncode}: {err.strip()[-500:]}")
    if live and (poller is None or served < 2):  # the page and plotly.js at least
        raise BenchError(f"the page was not followed: {served} requests served")
    found = CPU_LINE.search(err)
    if found is None:
        raise BenchError("the runner's CPU line is missing")
    return float(found.group(1)), served


def run_all(plan: Plan) -> list[Section]:
    timeout_s = plan.duration_s + CHILD_SLACK_S
    with tempfile.TemporaryDirectory(prefix="knee-live-cost-") as tmp:
        spec = Path(tmp) / "spec.toml"
        spec.write_text(SPEC.format(rate=plan.rate_per_s, duration_s=plan.duration_s))
        without, with_page, served = [], [], []
        for i in range(plan.repeats):
            out = Path(tmp) / f"runs-{i}"
            cpu, _ = run_once(spec, out, live=False, timeout_s=timeout_s)
            without.append(cpu)
            cpu, n = run_once(spec, out, live=True, timeout_s=timeout_s)
            with_page.append(cpu)
            served.append(n)
    base, live = median(without), median(with_page)
    ratio = live / base
    row = Row(
        name=f"runner CPU s, echo at {plan.rate_per_s:g}/s for {plan.duration_s:g} s",
        knee=f"{live:.2f} (--live, polled)",
        baseline=f"{base:.2f} (--no-live)",
        ratio=ratio,
        target=f"<= {TARGET_RATIO:.2f}",
        passed=ratio <= TARGET_RATIO,
    )
    metrics = {
        "live_over_no_live_cpu_ratio": ratio,
        "runner_cpu_s_live": live,
        "runner_cpu_s_no_live": base,
        "page_requests_served": float(median([float(n) for n in served])),
    }
    return [Section([row], metrics)]


def main() -> int:
    args = benchlib.speed_args(__doc__, "one short run of each: seconds")
    plan = benchlib.pick_plan(args, SMOKE, FULL, FULL)
    return benchlib.timed_report(
        "live_cost", lambda: run_all(plan), f"medians of {plan.repeats} runs each"
    )


if __name__ == "__main__":
    sys.exit(main())
