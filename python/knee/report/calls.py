"""What the sections of the request/response systems (knee.report.systems.http and .grpc)
share: per point, the replies by status and the failures by reason in one cell each, the
requests that waited for a connection to be made with their connect time, and a finding on
the point that failed most."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, TypeVar

from knee.report import fmt
from knee.report.data import ReportRun
from knee.report.html import Section
from knee.report.kit import Col, Finding, Html, esc, findings, table


class PointCalls(Protocol):
    """One point's calls as knee.analysis.http and knee.analysis.grpc count them."""

    @property
    def point(self) -> int: ...
    @property
    def reasons(self) -> dict[str, int]: ...  # failure reason -> calls
    @property
    def sent(self) -> int: ...  # calls sent on a connection
    @property
    def connected(self) -> int: ...  # of those, sent on a connection made for them
    @property
    def connect_p50_ns(self) -> float | None: ...
    @property
    def connect_max_ns(self) -> float | None: ...


P = TypeVar("P", bound=PointCalls)


def counts(by: Mapping[Any, int], none: str) -> str:
    """ "name: n, ..." in the order of the names (an HTTP status or a gRPC code's name)."""
    return ", ".join(f"{name}: {n}" for name, n in sorted(by.items())) or none


def reasons(p: PointCalls) -> str:
    return counts(p.reasons, "none")


def labels(rr: ReportRun) -> dict[int, str]:
    """Each point's label, by its index."""
    return {p["point"]: str(p.get("label", p["point"])) for p in rr.points}


def connect_cells(p: PointCalls) -> list[str]:
    """The new connections of those sent, and their connect time's p50 and max (ms)."""
    new = f"{p.connected} of {p.sent}" if p.sent else "-"
    return [new, fmt.ms(p.connect_p50_ns), fmt.ms(p.connect_max_ns)]


def connect_cols(what: str, max_tip: str = "") -> list[Col | str]:
    """The columns of `connect_cells`; `what`: "calls" or "requests"."""
    return [
        Col("new connections", tip=f"{what} sent on a connection made for them, of those sent"),
        Col("connect p50 (ms)", tip="their connect time: TCP connect, and TLS for https"),
        Col("connect max (ms)", tip=max_tip),
    ]


def most_failed(
    pts: Sequence[P], names: dict[int, str], title: str, had: str, said: Callable[[P], str]
) -> Finding | None:
    """The points that had failures, and the one with most of them (`said` of it, in
    words); None when no call failed."""
    failing = [p for p in pts if p.reasons]
    if not failing:
        return None
    worst = max(failing, key=lambda p: sum(p.reasons.values()))
    return Finding(
        title,
        Html(
            f"{len(failing)} points had {had}; most at "
            f"{esc(names.get(worst.point, worst.point))}: {esc(said(worst))}."
        ),
    )


def section(
    key: str,
    title: str,
    intro: Html,
    found: list[Finding],
    all_good: str,
    cols: Sequence[Col | str],
    rows: list[list[Any]],
) -> list[Section]:
    """The system's one section: its intro, its findings and the table of its points."""
    blocks: list[Any] = [intro, findings(found, all_good), table(list(cols), rows, scroll=True)]
    return [Section(key, title, blocks)]
