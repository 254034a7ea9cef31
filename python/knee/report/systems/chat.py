"""The chat system's findings (report 001): the failover verdict (gap, operations lost and
applied twice, checked against the database), the sweep's five graph types and the magic-1%
table.

The figures' data and every number the findings state come from `knee.analysis.chat`; this
module only draws them and states in words what they show next to what the source report
found.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, cast

import numpy as np
import pandas as pd

from knee.analysis import chat
from knee.models.types import SeriesModels
from knee.report import fmt
from knee.report.data import ReportRun
from knee.report.figures import Axis, Figure, Marker, Trace
from knee.report.html import Section, esc
from knee.report.types import ChatCheck

#: The timeline draws at most this many requests per point (every slow one is kept).
MAX_DRAWN = 20_000
#: Event kinds marked on the failover timeline, with their colours.
#: The tail statistics drawn against the mean: (column, name).
TAILS = (("max_ms", "max"), ("p99_ms", "p99"))
PASS_FAIL_BG = {True: "#e3f5e1", False: "#fbdcdc"}
EVENT_COLORS = {
    "kill": "#d62728",
    "stop": "#d62728",
    "freeze": "#9467bd",
    "start": "#2ca02c",
    "resume": "#2ca02c",
}

SOURCE_CLIENTS = (
    "The source report found latency rising predictably with clients and reply size, "
    "except at 4 B replies with no pause, where more clients lowered it; at 7 clients a call "
    "took about 60 ms (16 calls/s)."
)
SOURCE_AREA = (
    "The source report drew these two area plots over its 48 configurations (images only; "
    "its text calls the behaviour generally predictable)."
)
SOURCE_BREAKDOWN = (
    "The source report found the middleware part of latency growing with the number of "
    "clients and with the reply size."
)
SOURCE_SCATTER = (
    "The source report drew 3-D scatter plots of reply size and request rate against this "
    "latency; here the reply size is the colour and the request rate the x axis."
)
SOURCE_THROUGHPUT = (
    "The source report plotted latency against throughput; its discussion puts 7 clients at "
    "about 60 ms per call, i.e. 16 calls/s."
)
SOURCE_MAGIC = (
    "The source report concluded that its system did not appear to adhere to the magic-1% "
    "rule, with the caveat of little data."
)


def sections(rr: ReportRun, models: list[SeriesModels]) -> list[Section]:
    labels = {p["point"]: str(p.get("label", p["point"])) for p in rr.points}
    out = [_failover(rr, point, labels) for point in chat.failover_points(rr.run)]
    if not any(len(rr.point_ok(p, ["point"])) for p in rr.sample_points()):
        return out  # no successful request after the warm-up: nothing to sweep
    cfg = chat.measured_configurations(rr.run)
    if len(cfg) >= 2:
        out.append(_sweep(rr, cfg))
    out.append(_magic(rr, labels))
    return out


def _count(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _amount(value: Any, unit: str) -> str:
    """ "4 B", "1 client", "3 clients"."""
    return f"{int(value)} {unit}" if unit == "B" else _count(int(value), unit)


def _span(span: tuple[float, float], show: Any) -> str:
    """ "a to b" over the configurations, or the one value."""
    lo, hi = show(span[0]), show(span[1])
    return lo if lo == hi else f"{lo} to {hi}"


def _verdict_row(name: str, value: str, good: bool | None) -> str:
    cls = "v-na" if good is None else "v-pass" if good else "v-fail"
    return f'<tr><td class="l">{esc(name)}</td><td class="{cls}">{esc(value)}</td></tr>'


# ------------------------------------------------------------------ failover


def _check(rr: ReportRun, point: int) -> ChatCheck | None:
    """The checker's verdict on the point (summary.json: knee.analysis.chat_checker), when
    it read the database."""
    check = next((p.get("check") for p in rr.points if p.get("point") == point), None)
    return cast(ChatCheck, check) if check and "lost" in check else None


def _failover(rr: ReportRun, point: int, labels: dict[int, str]) -> Section:
    f = chat.failover_summary(rr.run, point)
    integrity, missing, gap_ms, kill = f["integrity"], f["missing"], f["gap_ms"], f["down"]
    passed, judge = f["passed"], "the server's audit of the database"
    check = _check(rr, point)
    if check is not None:  # the database's own tables, read by the checker
        integrity = {k: int(check[k]) for k in ("acknowledged_writes", "applied_writes")}
        integrity |= {k: int(check[k]) for k in ("lost", "applied_twice")}
        passed = check["verdict"] == "PASS"
        judge = f"the {check['database']} database's own tables, read by the checker"
    verdict = (
        f'<p class="finding" style="font-size:18px; background:{PASS_FAIL_BG[passed]}"><b>'
        + ("PASS" if passed else "FAIL")
        + "</b>: "
        + (
            f"of {integrity['acknowledged_writes']} writes acknowledged to the clients, "
            f"{integrity['lost']} are missing from the database and "
            f"{integrity['applied_twice']} were applied more than once (the database's "
            f"operation log holds {integrity['applied_writes']} applications; checked "
            f"against {esc(judge)})."
            if integrity is not None
            else f"operations could not be checked against the database: {esc(missing)}."
        )
        + "</p>"
    )
    rows = [
        _verdict_row(
            "unavailability gap (longest time without a successful reply after the "
            f"{kill['kind']} of {kill['node']} at {kill['t_s']:.2f} s)",
            "-" if gap_ms is None else f"{gap_ms:.0f} ms",
            None,
        ),
        _verdict_row(
            "acknowledged writes",
            "-" if integrity is None else str(integrity["acknowledged_writes"]),
            None,
        ),
        _verdict_row(
            "operations lost (acknowledged, not in the database)",
            "-" if integrity is None else str(integrity["lost"]),
            None if integrity is None else integrity["lost"] == 0,
        ),
        _verdict_row(
            "operations applied twice (in the database more than once)",
            "-" if integrity is None else str(integrity["applied_twice"]),
            None if integrity is None else integrity["applied_twice"] == 0,
        ),
    ]
    if check is not None:
        rows += _cycle_rows(check)
    table = '<table><tr><th class="l">failover</th><th>value</th></tr>' + "".join(rows)
    table += "</table>"
    text = (
        f"<p>{f['requests']} requests in point {esc(labels.get(point, point))}: "
        f"{f['retried']} needed more than one attempt (at most {f['most_attempts']}), "
        f"{f['failed']} did not succeed within the retry budget; replicas "
        f"{', '.join(map(str, f['served_by'])) or 'none'} answered.</p>"
    )
    timeline = f["timeline"]
    fig = _timeline_figure(point, timeline["samples"], timeline["events"], gap_ms)
    title = "Chat: failover" + (
        f" (point {labels.get(point, point)})" if len(rr.points) > 1 else ""
    )
    return Section(f"chat-failover-p{point}", title, [verdict, table, text, fig])


def _cycle_rows(check: ChatCheck) -> list[str]:
    """The failures of the point and the unavailability after each (the checker's
    distribution: from each kill, stop or freeze to the first successful reply after it)."""
    failures = ", ".join(f"{n} {kind}" for kind, n in check["failures"].items() if n) or "none"
    gaps = check["unavailability"]
    rows = [_verdict_row("replica failures in the point", failures, None)]
    if gaps["count"]:
        rows.append(
            _verdict_row(
                f"unavailability per failure (from it to the next successful reply; "
                f"{gaps['count']} failures)",
                f"p50 {gaps['p50_ms']:.0f} ms, p90 {gaps['p90_ms']:.0f} ms, "
                f"max {gaps['max_ms']:.0f} ms",
                None,
            )
        )
    if gaps["unanswered"]:
        unanswered = str(gaps["unanswered"])
        rows.append(_verdict_row("failures no successful reply followed", unanswered, None))
    return rows


def _timeline_figure(
    point: int, frame: pd.DataFrame, events: pd.DataFrame, gap_ms: float | None
) -> Figure:
    drawn = chat.thin_timeline(frame, MAX_DRAWN)
    traces: list[Trace] = []
    ok = drawn[drawn["status"] == "ok"]
    for i, replica in enumerate(sorted(ok["replica"].unique())):
        part = ok[ok["replica"] == replica]
        traces.append(
            Trace(
                "points",
                f"ok, answered by replica-{int(replica)}",
                part["t_s"].tolist(),
                part["latency_ms"].tolist(),
                color=i,
                hover=[f"{a} attempt(s)" for a in part["attempts"].tolist()],
            )
        )
    for status, part in drawn[drawn["status"] != "ok"].groupby("status", observed=True):
        traces.append(
            Trace(
                "points",
                str(status),
                part["t_s"].tolist(),
                part["latency_ms"].tolist(),
                color=3,
                symbol="x",
            )
        )
    markers = [
        Marker(float(e.t_s), f"{e.kind} {e.node}", EVENT_COLORS.get(str(e.kind), "#555555"))
        for e in events.itertuples()
    ]
    thinned = (
        f" {len(drawn)} of the {len(frame)} requests are drawn (every one above the 99th "
        "percentile, and an even sample of the rest)."
        if len(drawn) < len(frame)
        else ""
    )
    return Figure(
        f"chat-failover-p{point}",
        "latency of each request over time, around the failover",
        Axis("intended send time (s since the run's start)"),
        Axis("latency (ms)", "log"),
        traces,
        markers,
        caption="The source report measured no failover (fault-free runs only); the issue asks "
        "for this figure. Each request at its intended send time, so the time a client spent "
        "retrying during the failover is in its latency; colours say which replica answered. "
        f"This run: the longest time without a successful reply was {fmt.num(gap_ms)} ms."
        + thinned,
    )


# ------------------------------------------------------------------ the sweep's five graphs


def _sweep(rr: ReportRun, cfg: pd.DataFrame) -> Section:
    blocks: list[str | Figure] = [
        f"<p>{len(cfg)} configurations (inter-request time x reply size x clients), the "
        "source report's five graph types. Latency splits into database (the transaction, "
        "as the replica measured it), server (the rest of the replica's residence) and "
        "network and middleware (round trip minus residence).</p>"
    ]
    for part in (_by_clients, _area, _breakdown, _scatter, _throughput):
        blocks.extend(part(rr, cfg))
    return Section("chat-sweep", "Chat: latency over the configurations (report 001)", blocks)


def _names(frame: pd.DataFrame) -> list[str]:
    """Each row's configuration in words."""
    return [
        f"{t:g} ms pause, {int(r)} B, {int(c)} clients"
        for t, r, c in zip(frame["think_ms"], frame["reply_bytes"], frame["clients"], strict=True)
    ]


def _by_clients(rr: ReportRun, cfg: pd.DataFrame) -> list[Any]:
    table = chat.latency_vs_clients(rr.run)
    if table.empty or len(table.index) < 2:
        return [
            "<p>No pause-free configurations with two or more client counts: no latency "
            "vs clients plot.</p>"
        ]
    clients = [int(c) for c in table.index]
    traces = [
        Trace("line", f"{int(reply)} B reply", clients, table[reply].tolist(), color=i)
        for i, reply in enumerate(table.columns)
    ]
    parts, fell = [], []
    for r in chat.latency_vs_clients_summary(table):
        parts.append(
            f"{r['reply_bytes']} B: {fmt.num(r['first_ms'])} ms with "
            f"{_count(r['first_clients'], 'client')} to {fmt.num(r['last_ms'])} ms with "
            f"{_count(r['last_clients'], 'client')}"
        )
        if r["fell"]:
            fell.append(f"{r['reply_bytes']} B")
    shape = (
        "more clients lowered the mean somewhere at " + ", ".join(fell)
        if fell
        else "the mean never fell as clients were added"
    )
    fig = Figure(
        "chat-latency-clients",
        "mean latency vs clients, per reply size (no pause)",
        Axis("clients (closed loop)"),
        Axis("mean latency (ms)"),
        traces,
        caption=f"{SOURCE_CLIENTS} This run: {'; '.join(parts)}; {shape}.",
    )
    return [fig]


def _area(rr: ReportRun, cfg: pd.DataFrame) -> list[Any]:
    area = chat.latency_area(rr.run).dropna(subset=["mean_ms"])
    return [_area_figure(area, key, name) for key, name in TAILS]


def _area_figure(area: pd.DataFrame, key: str, name: str) -> Figure:
    """The mean and one tail statistic of every configuration, sorted by the mean."""
    ranks, hover = area["rank"].tolist(), _names(area)
    a = chat.area_summary(area, key)
    (lowest, highest), worst = a["ratio"], a["widest"]
    mean, tail = area["mean_ms"], area[key]
    band = Trace(
        "band", f"mean to {name}", ranks, lo=mean.tolist(), hi=tail.tolist(), color=1, legend=False
    )
    return Figure(
        f"chat-area-{name}",
        f"mean and {name} latency, configurations sorted by mean",
        Axis("configuration (rank by mean latency)"),
        Axis("latency (ms)", "log"),
        [
            band,
            Trace("line", name, ranks, tail.tolist(), color=1, hover=hover),
            Trace("line", "mean", ranks, mean.tolist(), color=0, hover=hover),
        ],
        caption=f"{SOURCE_AREA} This run: the {name} is {lowest:.3g}x to {highest:.3g}x the "
        f"mean; the widest gap is at {hover[worst]} ({fmt.num(tail.iloc[worst])} ms against a "
        f"mean of {fmt.num(mean.iloc[worst])} ms).",
    )


def _breakdown(rr: ReportRun, cfg: pd.DataFrame) -> list[Any]:
    out: list[Any] = []
    held = chat.breakdown_fixed(cfg)
    fixed = {
        "clients": f"no pause, {int(held['clients'][1])} B replies",
        "reply_bytes": f"no pause, {int(held['reply_bytes'][1])} clients",
    }
    for by, unit in (("clients", "client"), ("reply_bytes", "B")):
        b = chat.breakdown(rr.run, by)
        summary = chat.breakdown_summary(b, by)
        if summary is None:
            out.append(f"<p>Fewer than two {by} values with {fixed[by]}: no breakdown.</p>")
            continue
        cats = [
            f"{_amount(v, unit)} · {'top 1%' if k == 'outlier' else 'rest'}"
            for v, k in zip(b[by], b["kind"], strict=True)
        ]
        traces = [
            Trace("bar", name, cats, b[col].tolist(), color=i)
            for i, (col, name) in enumerate(
                (
                    ("db_ms", "database"),
                    ("server_ms", "server"),
                    ("network_ms", "network + middleware"),
                )
            )
        ]
        (first, first_ms), (last, last_ms) = summary["first"], summary["last"]
        trend = "grows at every step" if summary["grows"] else "does not grow at every step"
        out.append(
            Figure(
                f"chat-breakdown-{'clients' if by == 'clients' else 'reply'}",
                f"latency parts of the top 1% and the rest, by {by.replace('_', ' ')} "
                f"({fixed[by]})",
                Axis(by.replace("_", " "), "category"),
                Axis("mean time (ms)"),
                traces,
                stacked=True,
                caption=f"{SOURCE_BREAKDOWN} This run: the network and middleware part of the "
                f"other 99% goes from {fmt.num(first_ms)} ms at {_amount(first, unit)} to "
                f"{fmt.num(last_ms)} ms at {_amount(last, unit)} ({trend}); in the top 1% the "
                f"database is {fmt.pct(summary['db_share_of_top'])} of the time.",
            )
        )
    return out


def _scatter(rr: ReportRun, cfg: pd.DataFrame) -> list[Any]:
    sc = chat.reply_rate_scatter(rr.run).dropna(subset=["throughput_per_s"])
    names = dict(zip(cfg["point"], _names(cfg), strict=True))
    figs = []
    for key, name in TAILS:
        traces = []
        for i, (reply, part) in enumerate(sc.groupby("reply_bytes")):
            traces.append(
                Trace(
                    "points",
                    f"{int(reply)} B reply",
                    part["throughput_per_s"].tolist(),
                    part[key].tolist(),
                    color=i,
                    hover=[names[p] for p in part["point"]],
                )
            )
        rho = chat.scatter_correlations(sc, key)
        figs.append(
            Figure(
                f"chat-scatter-{name}",
                f"{name} latency vs request rate and reply size",
                Axis("request rate (completed requests/s)", "log"),
                Axis(f"{name} latency (ms)", "log"),
                traces,
                caption=f"{SOURCE_SCATTER} This run: the {name} latency's rank correlation "
                f"with the request rate is {_rho(rho['rate'])} and with the reply size "
                f"{_rho(rho['reply'])} (Spearman, over {len(sc)} configurations).",
            )
        )
    return figs


def _rho(value: float) -> str:
    return "undefined (one value only)" if not np.isfinite(value) else f"{value:+.2f}"


def _throughput(rr: ReportRun, cfg: pd.DataFrame) -> list[Any]:
    lt = chat.latency_vs_throughput(rr.run).dropna(subset=["throughput_per_s"])
    traces = []
    for i, (think, part) in enumerate(lt.groupby("think_ms")):
        hover = _names(part)
        x = part["throughput_per_s"].tolist()
        mean = Trace(
            "points", f"{think:g} ms pause: mean", x, part["mean_ms"].tolist(), color=i, hover=hover
        )
        # The p99 as the mean's points, in hollow diamonds, one legend click away.
        p99 = replace(
            mean,
            name=f"{think:g} ms pause: p99",
            y=part["p99_ms"].tolist(),
            symbol="diamond-open",
            hidden=True,
        )
        traces += [mean, p99]
    best = chat.highest_throughput(lt)
    return [
        Figure(
            "chat-latency-throughput",
            "latency vs throughput, one point per configuration",
            Axis("throughput (completed requests/s)", "log"),
            Axis("latency (ms)", "log"),
            traces,
            caption=f"{SOURCE_THROUGHPUT} This run: the highest throughput, "
            f"{fmt.num(lt['throughput_per_s'].iloc[best])} requests/s, came with "
            f"{_names(lt)[best]} at a mean latency of {fmt.num(lt['mean_ms'].iloc[best])} ms "
            "(p99 one legend click away).",
        )
    ]


# ------------------------------------------------------------------ the magic 1%


def _magic(rr: ReportRun, labels: dict[int, str]) -> Section:
    m = chat.magic_one_percent(rr.run).dropna(subset=["mean_ms"])
    head = (
        '<table><tr><th class="l">configuration</th><th>n</th><th>mean</th><th>std</th>'
        "<th>max</th><th>mean w/o</th><th>std w/o</th><th>max w/o</th>"
        "<th>top 1% share of time</th><th>top 1% database</th><th>rule holds</th></tr>"
    )
    rows = []
    for r in m.itertuples():
        cells = [
            r.mean_ms,
            r.std_ms,
            r.max_ms,
            r.mean_without_ms,
            r.std_without_ms,
            r.max_without_ms,
        ]
        rows.append(
            f'<tr><td class="l">{esc(labels.get(r.point, r.point))}</td>'
            f"<td>{int(r.count)}</td>"
            + "".join(f"<td>{fmt.num(v)}</td>" for v in cells)
            + f"<td>{fmt.pct(r.top_share_of_time)}</td><td>{fmt.num(r.top_db_ms)}</td>"
            + _holds_cell(r.holds, int(r.count))
            + "</tr>"
        )
    summary = chat.magic_summary(m)
    text = (
        f"<p>{SOURCE_MAGIC} The rule (Dumitras and Narasimhan): leaving out the highest 1% of "
        "requests makes latency bounded and predictable. Here it holds for a configuration "
        f"when leaving out the 1% divides the standard deviation by at least "
        f"{chat.MAGIC_STD_FACTOR:g}. This run: it holds in {summary['held']} of "
        f"{summary['judged']} configurations with at least {chat.MAGIC_MIN_REQUESTS} requests; "
        f"the top 1% carries {_span(summary['top_share_of_time'], fmt.pct)} of the total "
        "latency, and without it the maximum falls by a factor of "
        f"{_span(summary['max_over_max_without'], lambda v: f'{v:.3g}')}. The top 1% of "
        f"the smallest configuration is {_count(summary['smallest_top_count'], 'request')} (the "
        "top 1% of n requests is the floor(n/100) slowest, those above the p99). Times "
        "in ms; w/o = without the top 1%.</p>"
    )
    return Section("chat-magic", "Chat: the magic 1%", [text, head + "".join(rows) + "</table>"])


def _holds_cell(holds: bool, requests: int) -> str:
    """The magic-1% verdict; n/a below 100 requests, where the slowest 1% is empty."""
    if requests < chat.MAGIC_MIN_REQUESTS:
        return '<td class="v-na" title="fewer than 100 requests: no slowest 1%">n/a</td>'
    return f'<td class="{"v-pass" if holds else "v-warn"}">{"yes" if holds else "no"}</td>'


def headline(rr: ReportRun) -> list[str] | None:
    """The failover verdict of each failover point, for the report's first section."""
    out = []
    for point in chat.failover_points(rr.run):
        f = chat.failover_summary(rr.run, point)
        integrity, check = f["integrity"], _check(rr, point)
        passed = check["verdict"] == "PASS" if check is not None else f["passed"]
        if check is not None:
            integrity = {k: int(check[k]) for k in ("acknowledged_writes", "lost", "applied_twice")}
        counts = (
            f"{integrity['lost']} of {integrity['acknowledged_writes']} acknowledged writes "
            f"lost, {integrity['applied_twice']} applied twice"
            if integrity is not None
            else "not checked against the database"
        )
        gap = f"{f['gap_ms']:.0f} ms" if f["gap_ms"] is not None else "unknown"
        out.append(
            f"Failover ({f['down']['kind']} of {f['down']['node']} at {f['down']['t_s']:.1f} s): "
            f"{'PASS' if passed else 'FAIL'}: {counts}; service gap {gap}, "
            f"{f['retried']} of {f['requests']} requests retried, {f['failed']} failed."
        )
    return out or None
