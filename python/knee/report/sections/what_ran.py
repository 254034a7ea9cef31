"""What ran: the experiment, its status, the machine and software, the hosts and limits, the
load generators' own sending, the resolved spec."""

from __future__ import annotations

from typing import Any

from knee.report.data import ReportRun
from knee.report.html import Section, esc
from knee.report.kit.tables import Col, Row, table, verdict
from knee.report.types import HostEnv, HostsEnv, Limits, SeriesSpec
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
    blocks = [
        _table(rows),
        _hosts(env.get("hosts")),
        _generators(rr),
        _warmup(rr),
        _series(spec.get("series") or {}),
        _failures(rr),
    ]
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


def _limits(limits: Limits | None) -> str:
    if not limits:
        return "-"
    parts = []
    if limits.get("cpu_cores") is not None:
        parts.append(f"{limits['cpu_cores']:g} cores")
    if limits.get("cpuset") is not None:
        parts.append(f"cpus {limits['cpuset']}")
    if (memory := limits.get("memory_bytes")) is not None:
        parts.append(f"{memory / 2**20:g} MiB")
    return ", ".join(parts) or "-"


def _link(h: HostEnv) -> str:
    parts = []
    if h.get("rate_mbit") is not None:
        parts.append(f"{h['rate_mbit']:g} Mbit/s")
    if h.get("loss_percent"):
        parts.append(f"{h['loss_percent']:g}% loss")
    if h.get("delay_ms"):
        parts.append(f"{h['delay_ms']:g} ms delay")
    if (offset := h.get("clock_offset_ns")) is not None:
        unc = h.get("clock_uncertainty_ns") or 0
        parts.append(f"clock offset {offset / 1e6:+.3f} ± {unc / 1e6:.3f} ms")
    return ", ".join(parts) or "-"


def _hosts(hosts: HostsEnv | None) -> str:
    """The hosts the nodes ran on (env.json's `hosts`, as knee.hosts made them)."""
    if not hosts:
        return ""
    rows = [
        Row([h["name"], h["kind"], h.get("address"), _link(h), _limits(h.get("limits"))])
        for h in hosts.get("hosts", [])
    ]
    placed = "; ".join(f"{g} on {t}" for g, t in (hosts.get("placement") or {}).items())
    own = "; ".join(f"{g}: {_limits(x)}" for g, x in (hosts.get("node_limits") or {}).items())
    notes = "".join(
        f"<p>{esc(label)}: {esc(text)}</p>"
        for label, text in (("Placement", placed), ("Limits per node", own))
        if text
    )
    cols = [Col("host", True), Col("kind", True), Col("address", True), Col("link", True)]
    return str(table([*cols, Col("limits (all its nodes)", True)], rows, heading="Hosts")) + notes


def _generators(rr: ReportRun) -> str:
    """Each load generator's achieved rate and late sends, when a point had several."""
    rows = []
    for p in rr.points:
        for g in p.get("generators") or []:
            check = g.get("sender")
            rows.append(
                Row(
                    [
                        p.get("label"),
                        g["node"],
                        g.get("target_rate_per_s"),
                        g.get("achieved_rate_per_s"),
                        g.get("late_sends"),
                        g.get("late_send_share"),
                        verdict(
                            check.get("verdict") if check else None,
                            check.get("detail", "") if check else "",
                        ),
                    ]
                )
            )
    if not rows:
        return ""
    cols = [
        Col("point", True),
        Col("generator", True),
        Col("target /s", tip="the point's target rate, split evenly"),
        Col("sent /s", tip="achieved send rate after warm-up"),
        Col("late sends"),
        Col("late share"),
        Col("sender", tip="did this generator send what its schedule asked?"),
    ]
    return str(
        table(
            cols,
            rows,
            scroll=True,
            heading="Load generators (latency is pooled over all of them)",
        )
    )


def _warmup(rr: ReportRun) -> str:
    load = rr.run.spec.get("load", {})
    excluded = sum(int(p.get("warmup_count") or 0) for p in rr.points)
    return (
        f"<p>Warm-up: requests meant to leave in the first {esc(load.get('warmup_s', '?'))} s "
        f"of each point (and the first {esc(load.get('warmup_requests', 0))} requests; series "
        f"may override both) are excluded from every statistic: {excluded} requests in all. "
        "Latency counts from each request's intended send time.</p>"
    )


def _series(series: dict[str, SeriesSpec]) -> str:
    """The spec's series (`[series.<name>]`), each with its description and placement."""
    if not series:
        return ""

    def placed(s: SeriesSpec) -> str:
        rules = "; ".join(f"{g} on {t}" for g, t in (s.get("placement") or {}).items())
        return f" (placement: {rules})" if rules else ""

    items = "".join(
        f"<li><b>{esc(name)}</b>: {esc(s.get('description', ''))}{esc(placed(s))}</li>"
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
