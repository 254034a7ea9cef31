"""The summary table: one row per point with 95% intervals and the checks' verdicts, then
the checks' details and the per-operation / per-service breakdowns."""

from __future__ import annotations

from typing import Any

from knee.report import fmt
from knee.report.data import ReportRun
from knee.report.html import Section, esc
from knee.results import STATUS_NAMES

PERCENTILES = (("mean", "mean"), ("p50", "p50"), ("p90", "p90"), ("p99", "p99"), ("p999", "p99.9"))
CHECKS = ("sender", "poisson", "autocorrelation", "percentile_support", "interference")
CHECK_TITLES = ("sender", "Poisson", "autocorr.", "support", "interference")


def section(rr: ReportRun) -> Section:
    if not rr.points:
        return Section("summary", "Summary", ['<p class="note">No point was measured.</p>'])
    blocks = [
        "<p>Latency in ms from the intended send time, every request after warm-up: a "
        "timeout, drop or error counts as slower than any success, so a percentile that lands "
        "on one reads &gt; timeout (all failures timed out) or failed. The mean is over "
        "successful requests only (a mean over failures has no value). Grey brackets: 95% "
        "distribution-free confidence interval (order statistics for percentiles); a "
        "percentile marked * has fewer than ~100 samples beyond it, so it is not supported by "
        "the data. <i>sent/s</i>: requests really sent over the span of their send times; "
        "<i>late</i>: sends later than load.late_ms; <i>done/s</i>: successful replies that "
        "completed inside the point's window, with the replies that drained a backlog after "
        "it below. An <i>unstable</i> point (shaded) was not keeping up: its mean and "
        "percentiles depend on how long it ran. Server and network mean in one cell, network "
        "below. Hover a verdict for its detail.</p>",
        _main_table(rr.points),
        _unstable_notes(rr.points),
        _checks_table(rr.points),
        _ok_only_table(rr.points),
        _breakdown(rr.points, "by_op", "operation"),
        _breakdown(rr.points, "by_service", "service"),
    ]
    return Section("summary", "Summary", [b for b in blocks if b])


def _dist_cell(dist: dict[str, Any] | None, key: str) -> str:
    failed = ((dist or {}).get("failed") or {}).get(key)
    if failed is not None:
        text = "&gt; timeout" if failed == "timeout" else "failed"
        return f'<td class="v-fail" title="this percentile lands on a failed request">{text}</td>'
    if not dist or dist.get(key) is None:
        return "<td>-</td>"
    supported = (dist.get("supported") or {}).get(key, True)
    star = "" if supported else "*"
    ci = fmt.ms_interval((dist.get("ci") or {}).get(key))
    title = "" if supported else ' title="fewer than ~100 samples beyond this percentile"'
    return f'<td{title}>{fmt.ms(dist[key])}{star}<span class="ci">{esc(ci)}</span></td>'


def _statuses(rates: dict[str, Any]) -> str:
    """ok's rate, and each other status that happened (every name in STATUS_NAMES)."""
    others = "".join(
        f'<span class="ci">{esc(s)} {fmt.pct(rates.get(s))}</span>'
        for s in STATUS_NAMES
        if s != "ok" and rates.get(s)
    )
    return f"ok {fmt.pct(rates.get('ok'))}{others}"


def _verdict_cell(check: dict[str, Any] | None) -> str:
    if check is None:
        return '<td class="v-na">-</td>'
    verdict = str(check.get("verdict", "n/a"))
    css = {"pass": "v-pass", "warn": "v-warn", "fail": "v-fail"}.get(verdict, "v-na")
    return f'<td class="{css}" title="{esc(check.get("detail", ""))}">{esc(verdict)}</td>'


def _checks_by_name(point: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {str(c.get("name")): c for c in point.get("checks") or []}


def _main_table(points: list[dict[str, Any]]) -> str:
    head = (
        '<tr><th class="l">point</th><th>n</th><th>target/s</th><th>sent/s</th><th>late</th>'
        f'<th title="{esc(", ".join(STATUS_NAMES))}">statuses</th>'
        + "".join(f"<th>{esc(label)}</th>" for _, label in PERCENTILES)
        + "<th>max</th><th>server / network mean</th><th>done/s</th><th>stability</th>"
        + "".join(f"<th>{esc(c)}</th>" for c in CHECK_TITLES)
        + "</tr>"
    )
    rows = []
    for p in points:
        lat = _with_ok_mean(p)
        rates = p.get("status_rates") or {}
        checks = _checks_by_name(p)
        stability = p.get("stability") or {}
        unstable = stability.get("verdict") == "unstable"
        drain = (p.get("drain") or {}).get("replies")
        achieved_ci = fmt.interval(p.get("achieved_rate_ci_per_s"))
        bytes_per_s = p.get("throughput_bytes_per_s")
        if bytes_per_s is None and "bytes_in_per_s" in p:
            bytes_per_s = (p.get("bytes_in_per_s") or 0) + (p.get("bytes_out_per_s") or 0)
        rows.append(
            f"<tr{' class=unstable' if unstable else ''}>"
            f'<td class="l">{esc(p.get("label", p.get("point")))}</td>'
            f"<td>{esc(p.get('count', '-'))}</td>"
            f"<td>{fmt.num(p.get('target_rate_per_s'))}</td>"
            f"<td>{fmt.num(p.get('achieved_rate_per_s'))}"
            f'<span class="ci">{esc(achieved_ci)}</span></td>'
            f"<td>{esc(p.get('late_sends', '-'))}</td>"
            f"<td>{_statuses(rates)}</td>"
            + "".join(_dist_cell(lat, key) for key, _ in PERCENTILES)
            + f"<td>{fmt.ms(lat.get('max'))}</td>"
            f"<td>{fmt.ms((p.get('server_ns') or {}).get('mean'))}"
            f'<span class="ci">{fmt.ms((p.get("network_ns") or {}).get("mean"))}</span></td>'
            f'<td>{fmt.num(p.get("throughput_per_s"))}/s<span class="ci">'
            f"{fmt.bytes_rate(bytes_per_s)}"
            + (f"; {drain} drained after" if drain else "")
            + "</span></td>"
            + _stability_cell(stability)
            + "".join(_verdict_cell(checks.get(c)) for c in CHECKS)
            + "</tr>"
        )
    return f'<div style="overflow-x:auto"><table>{head}{"".join(rows)}</table></div>'


def _with_ok_mean(p: dict[str, Any]) -> dict[str, Any]:
    """The headline distribution with the OK replies' mean and its interval (a mean over
    failed requests has no value)."""
    lat = dict(p.get("latency_ns") or {})
    ok = p.get("latency_ok_ns") or {}
    if ok:
        lat["mean"] = ok.get("mean")
        lat["ci"] = {**(lat.get("ci") or {}), "mean": (ok.get("ci") or {}).get("mean")}
    return lat


def _stability_cell(stability: dict[str, Any]) -> str:
    verdict = str(stability.get("verdict", "n/a"))
    css = {"stable": "v-pass", "unstable": "v-fail"}.get(verdict, "v-na")
    return f'<td class="{css}" title="{esc(stability.get("detail", ""))}">{esc(verdict)}</td>'


def _unstable_notes(points: list[dict[str, Any]]) -> str:
    notes = [
        f"<li><b>{esc(p.get('label'))}</b>: {esc((p.get('stability') or {}).get('detail'))}</li>"
        for p in points
        if (p.get("stability") or {}).get("verdict") == "unstable"
    ]
    if not notes:
        return ""
    return (
        '<p class="note">Unstable points: the system did not keep up, so their means and '
        "percentiles grow with the length of the run; models are not fitted to them.</p>"
        f"<ul>{''.join(notes)}</ul>"
    )


def _ok_only_table(points: list[dict[str, Any]]) -> str:
    """The distribution of successful requests alone, labelled as such."""
    if not any(p.get("latency_ok_ns") for p in points):
        return ""
    rows = []
    for p in points:
        ok = p.get("latency_ok_ns") or {}
        rows.append(
            f'<tr><td class="l">{esc(p.get("label"))}</td><td>{esc(ok.get("n", "-"))}</td>'
            + "".join(_dist_cell(ok, key) for key, _ in PERCENTILES)
            + f"<td>{fmt.ms(ok.get('max'))}</td></tr>"
        )
    head = (
        '<tr><th class="l">point</th><th>n ok</th>'
        + "".join(f"<th>{esc(label)}</th>" for _, label in PERCENTILES)
        + "<th>max</th></tr>"
    )
    return (
        "<details><summary>Successful requests only (OK replies; failures left out, so "
        f"these percentiles understate the tail when requests failed)</summary><table>{head}"
        f"{''.join(rows)}</table></details>"
    )


def _checks_table(points: list[dict[str, Any]]) -> str:
    rows = []
    for p in points:
        for c in p.get("checks") or []:
            verdict = str(c.get("verdict", "n/a"))
            css = {"pass": "v-pass", "warn": "v-warn", "fail": "v-fail"}.get(verdict, "v-na")
            rows.append(
                f'<tr><td class="l">{esc(p.get("label"))}</td><td class="l">{esc(c.get("name"))}'
                f'</td><td class="{css}">{esc(verdict)}</td><td>{fmt.num(c.get("value"))}</td>'
                f'<td class="l">{esc(c.get("detail", ""))}</td></tr>'
            )
    if not rows:
        return '<p class="note">This run\'s summary has no checks.</p>'
    return (
        "<details><summary>Checks in detail (sender: rate sent vs target and late sends; "
        "Poisson inter-arrivals by Anderson-Darling; lag-1 autocorrelation of latency; samples "
        "beyond each percentile; CPU used by other processes on the machine)</summary><table>"
        '<tr><th class="l">point</th>'
        '<th class="l">check</th><th>verdict</th><th>value</th><th class="l">detail</th></tr>'
        + "".join(rows)
        + "</table></details>"
    )


def _breakdown(points: list[dict[str, Any]], key: str, what: str) -> str:
    """Per-operation or per-service rows, shown when some point has more than one."""
    if not any(len(p.get(key) or {}) > 1 for p in points):
        return ""
    rows = []
    for p in points:
        for name, entry in (p.get(key) or {}).items():
            lat = entry.get("latency_ns") or {}
            rates = entry.get("status_rates") or {}
            rows.append(
                f'<tr><td class="l">{esc(p.get("label"))}</td><td class="l">{esc(name)}</td>'
                f"<td>{esc(entry.get('count', '-'))}</td>"
                f"<td>{fmt.num(entry.get('throughput_per_s'))}</td>"
                + "".join(f"<td>{fmt.pct(rates.get(s))}</td>" for s in STATUS_NAMES)
                + "".join(_dist_cell(lat, k) for k, _ in PERCENTILES)
                + f"<td>{fmt.ms((entry.get('server_ns') or {}).get('mean'))}</td>"
                f"<td>{fmt.ms((entry.get('network_ns') or {}).get('mean'))}</td></tr>"
            )
    head = (
        f'<tr><th class="l">point</th><th class="l">{esc(what)}</th><th>n</th><th>req/s</th>'
        + "".join(f"<th>{esc(s)}</th>" for s in STATUS_NAMES)
        + "".join(f"<th>{esc(label)}</th>" for _, label in PERCENTILES)
        + "<th>server mean</th><th>network mean</th></tr>"
    )
    return f"<h3>Per {esc(what)}</h3><table>{head}{''.join(rows)}</table>"
