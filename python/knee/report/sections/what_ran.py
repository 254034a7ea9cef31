"""What ran: the experiment, its status, the machine and software, the resolved spec."""

from __future__ import annotations

from typing import Any

from knee.report.data import ReportRun
from knee.report.html import Section, esc
from knee.run_params import planned


def section(rr: ReportRun) -> Section:
    summary = rr.run.summary
    spec = rr.run.spec
    exp = spec.get("experiment", {})
    env = rr.run.env
    rows = [
        ("experiment", exp.get("name") or summary.get("experiment")),
        ("system", rr.system),
        ("description", exp.get("description")),
        ("preset", summary.get("preset")),
        ("status", summary.get("status", "unknown (no summary.json)")),
        ("points measured", f"{len(rr.points)} of {_planned(rr)}"),
        ("seed", exp.get("seed")),
        ("started (UTC)", env.get("started_utc")),
        ("host", env.get("host")),
        ("cores", env.get("cores")),
        ("CPU", env.get("cpu_model")),
        ("memory", _gib(env.get("memory_bytes"))),
        ("OS / kernel", f"{env.get('os', '?')} {env.get('kernel', '')}"),
        ("Python", env.get("python")),
        ("knee / knee-node", f"{env.get('knee_version')} / {env.get('knee_node_version')}"),
        ("git revision", env.get("git_revision")),
        ("packages", ", ".join(f"{k} {v}" for k, v in (env.get("packages") or {}).items())),
        ("report built with", _report_tools()),
    ]
    blocks = [_table(rows), _warmup(rr), _series(spec), _failures(rr)]
    spec_text = (rr.path / "spec.toml").read_text() if (rr.path / "spec.toml").exists() else ""
    blocks.append(
        f"<details><summary>resolved spec (spec.toml)</summary><pre>{esc(spec_text)}</pre>"
        "</details>"
    )
    return Section("what-ran", "What ran", [b for b in blocks if b])


def _planned(rr: ReportRun) -> str:
    """How many points the run planned (plan.json; `knee.run_params`)."""
    points = planned(rr.run)
    return str(len(points)) if points else "?"


def _report_tools() -> str:
    from importlib import metadata

    return ", ".join(f"{pkg} {metadata.version(pkg)}" for pkg in ("plotly", "matplotlib"))


def _gib(n: Any) -> str:
    return f"{n / 2**30:.1f} GiB" if isinstance(n, int | float) else "?"


def _table(rows: list[tuple[str, Any]]) -> str:
    body = "".join(
        f'<tr><th class="l">{esc(k)}</th><td class="l">{esc("-" if v is None else v)}</td></tr>'
        for k, v in rows
    )
    return f"<table>{body}</table>"


def _warmup(rr: ReportRun) -> str:
    load = rr.run.spec.get("load", {})
    excluded = sum(int(p.get("warmup_count") or 0) for p in rr.points)
    return (
        f"<p>Warm-up: requests meant to leave in the first {esc(load.get('warmup_s', '?'))} s "
        f"of each point (and the first {esc(load.get('warmup_requests', 0))} requests; series "
        f"may override both) are excluded from every statistic: {excluded} requests in all. "
        "Latency counts from each request's intended send time.</p>"
    )


def _series(spec: dict[str, Any]) -> str:
    series = spec.get("series") or {}
    if not series:
        return ""
    items = "".join(
        f"<li><b>{esc(name)}</b>: {esc(s.get('description', ''))}</li>"
        for name, s in series.items()
    )
    return f"<p>Series:</p><ul>{items}</ul>"


def _failures(rr: ReportRun) -> str:
    events = rr.run.events
    if events.empty or "kind" not in events:
        return ""
    bad = events[events["kind"].isin(["run_failed", "run_interrupted"])]
    if bad.empty:
        return ""
    lines = "".join(
        f"<li>{esc(r.kind)} at {r.t_s:.1f} s: {esc(r.detail)}</li>" for r in bad.itertuples()
    )
    return f'<div class="note">This run did not complete:<ul>{lines}</ul></div>'
