"""The search's command-line options, read into knee.find.run.Options, and its answers as
printed at the end of `knee find` (and `knee http` with no rate)."""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.markup import escape

from knee.find.run import Options
from knee.httpcli import HttpArgsError, seconds
from knee.stats import slo as slo_mod
from knee.stats.summary import Answer, Bottleneck, RunAnswers


class FindArgsError(ValueError):
    """An option of the search that cannot be read (one line)."""


def _fraction(text: str, what: str) -> float:
    """'5%' or '0.05' -> 0.05."""
    t = text.strip()
    try:
        return float(t[:-1]) / 100 if t.endswith("%") else float(t)
    except ValueError:
        raise FindArgsError(f"{what}: expected a share such as 5% or 0.05, got {text!r}") from None


def options(args: argparse.Namespace) -> Options:
    try:
        budget_s = seconds(args.budget, "--budget")
        probe_s = seconds(args.probe, "--probe")
    except HttpArgsError as e:
        raise FindArgsError(str(e)) from None
    slo: slo_mod.Slo | None = None
    if getattr(args, "slo", None):
        try:
            slo = slo_mod.parse(args.slo)
        except slo_mod.SloError as e:
            raise FindArgsError(f"--slo: {e}") from None
    tolerance = _fraction(args.tolerance, "--tolerance")
    # Under 1%, neither the verdicts' noise nor rates kept to 4 significant digits narrow a
    # bracket any further.
    if not 0.01 <= tolerance < 1:
        raise FindArgsError(f"--tolerance: expected from 1% to below 100%, got {args.tolerance}")
    if probe_s < 2:
        raise FindArgsError(
            f"--probe: at least 2 s (a probe needs a warm-up and a window), got {args.probe}"
        )
    if budget_s < probe_s:
        raise FindArgsError(f"--budget ({args.budget}) is shorter than one probe ({args.probe})")
    for name in ("min_rate", "max_rate"):
        value = getattr(args, name, None)
        if value is not None and not value > 0:
            raise FindArgsError(
                f"--{name.replace('_', '-')}: expected a rate above 0, got {value:g}"
            )
    return Options(
        slo=slo,
        tolerance=tolerance,
        budget_s=budget_s,
        min_rate_per_s=args.min_rate,
        max_rate_per_s=args.max_rate,
        probe_s=probe_s,
        series=getattr(args, "series", None),
    )


def _interval(answer: Answer | None) -> str:
    if not answer:
        return "-"
    lo, hi = answer.get("interval_per_s") or [None, None]
    value = answer.get("rate_per_s")
    if value is None:
        return f"below {hi:.4g}/s" if hi else "not found"
    shown = f"{value:.4g}/s"
    if hi is None:
        return f"at least {shown}"
    return f"{shown}  [{lo:.4g}, {hi:.4g}]"


def state(answer: Answer | None) -> str:
    """'' for a decided answer; else its state and, when partial, that its hold did not run."""
    st = answer.get("state") if answer else None
    if st in (None, "decided"):
        return ""
    if st == "partial":
        return "(partial: not held) "
    return f"({st}) "


def set_by(bottleneck: Bottleneck) -> str:
    """The bottleneck's sentence (knee.resources.bottleneck.sentence) after "set by", as
    markup that shows it as it is."""
    return escape(str(bottleneck.get("sentence") or "").removeprefix("set by "))


def print_answers(console: Console, answers: RunAnswers) -> None:
    """One block per group: capacity, SLO capacity, knee, and how the search ended."""
    if answers.get("skipped_series"):
        names = ", ".join(answers["skipped_series"])
        console.print(f"not searched (no open-loop rate): series {names}", highlight=False)
    for group in answers.get("groups", []):
        title = group.get("label") or "answers"
        console.print(f"[bold]{title}[/]", highlight=False)
        cap = group["capacity"]
        console.print(
            f"  capacity      {_interval(cap)}  {state(cap)}{cap.get('detail', '')}",
            highlight=False,
        )
        sat = group.get("saturated_throughput")
        if sat:
            lo, hi = sat["ci_per_s"]
            console.print(
                f"  saturated     {sat['per_s']:.4g}/s done while over capacity  "
                f"[{lo:.4g}, {hi:.4g}]",
                highlight=False,
            )
        if bottleneck := group.get("bottleneck"):
            console.print(f"  set by        {set_by(bottleneck)}", highlight=False)
        if slo := group.get("slo_capacity"):
            console.print(f"  SLO {slo['slo']:<9} {_interval(slo)}  {state(slo)}", highlight=False)
        knee = group.get("knee")
        if knee:
            interval = knee.get("interval_per_s")
            shown = f"  [{interval[0]:.4g}, {interval[1]:.4g}]" if interval else ""
            console.print(
                f"  knee          {knee['rate_per_s']:.4g}/s{shown}  "
                f"({knee['method']}: {knee['why']})",
                highlight=False,
            )
        else:
            console.print("  knee          - (too few stable probes)", highlight=False)
        if model_error := group.get("model_error"):
            console.print(
                f"  [yellow]model[/]         the fit failed: {escape(model_error)}",
                highlight=False,
            )
        if interference := group.get("interference"):
            console.print(f"  [yellow]busy[/]          {interference['detail']}")
        if search := group.get("search"):
            console.print(
                f"  search        {search['probes']} probes, {search['wall_s']:.0f} s; "
                f"{search['stopped']}{': ' + search['detail'] if search.get('detail') else ''}",
                highlight=False,
            )
