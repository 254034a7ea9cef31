"""A probe stopped as soon as its decision is clear (docs/find.md, "A probe that decides
early").

The runner shows a watch every progress line of a point (knee.runner.local.Watch). This
watch reads the samples the recorders have flushed so far (every 100 ms,
knee.results.SAMPLE_DTYPE) once the probe has run EARLY_AFTER of its length, and stops it
when, on two looks in a row, everything its full-length decision weighs is already clear
of its thresholds by the margins that make a full-length verdict undecided
(knee.stats.decision's MARGINAL_*), with the trend extrapolated to the full length:

- at least EARLY_MIN_SAMPLES OK samples after warm-up (the low probe: EARLY_MIN_SAMPLES_LOW);
- the trend of OK latency (knee.stats.stability.trend, the same Mann-Kendall test) not
  significant at MARGINAL_P, and its Theil-Sen slope carried over the *full* length under
  MARGINAL_FRACTION of the mean latency;
- the requests sent and not over (progress line) under MARGINAL_FRACTION of the backlog
  rule over the requests sent so far (sends that wait count as late sends);
- failures under half the error share, late sends under half the generator's share;
- with an SLO that this probe must judge: its decision (knee.stats.slo) met or missed.

It only ever stops a probe that looks stable: the point's verdict is then decided from
all its samples by the same rules as any point, so stopping can only turn a would-be
"unstable" (a false alarm at the trend's 1%, or a real one) into "stable" if the growth
was too small to show in the first looks; the answer's own rate is confirmed by a hold
that is never stopped early (knee.find.search.HOLD).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from knee.results import SAMPLE_DTYPE
from knee.stats import slo as slo_mod
from knee.stats.decision import ERROR_SHARE, GENERATOR_LATE_SHARE, MARGINAL_FRACTION, MARGINAL_P
from knee.stats.stability import BACKLOG_MIN, BACKLOG_SHARE, trend

#: A look needs this share of the probe's length run, and this many OK samples after
#: warm-up (the trend test's 30 batches of a few samples each); the low probe, whose
#: purpose is the low-load latency's mean, EARLY_MIN_SAMPLES_LOW.
EARLY_AFTER = 0.5
EARLY_MIN_SAMPLES = 100
EARLY_MIN_SAMPLES_LOW = 50
#: Looks in a row that must all find the decision clear.
EARLY_LOOKS = 2
#: Status code of an OK sample (knee-node's recorder.rs).
STATUS_OK = 0


def _samples(files: list[Path]) -> np.ndarray:
    """The whole records flushed so far (a record being written is left out)."""
    parts = []
    for path in files:
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            continue
        count = size // SAMPLE_DTYPE.itemsize
        if count:
            parts.append(np.fromfile(path, dtype=SAMPLE_DTYPE, count=count))
    return np.concatenate(parts) if parts else np.zeros(0, dtype=SAMPLE_DTYPE)


def look(
    records: np.ndarray,
    progress: dict[str, Any],
    length_s: float,
    warmup_s: float,
    slo: slo_mod.Slo | None,
    min_samples: int = EARLY_MIN_SAMPLES,
) -> str | None:
    """Why the probe's decision is already clear (one phrase), or None to keep running."""
    t_s = float(progress.get("t_s") or 0.0)
    if t_s < EARLY_AFTER * length_s or not len(records):
        return None
    intended = records["intended_ns"].astype(np.int64)
    post = intended >= intended.min() + int(warmup_s * 1e9)
    answered = records["received_ns"] > 0
    ok = post & answered & (records["status"] == STATUS_OK)
    n_ok, failed = int(ok.sum()), int((post & answered & ~ok).sum())
    if n_ok < min_samples or failed > 0.5 * ERROR_SHARE * (n_ok + failed):
        return None
    latency = (records["received_ns"][ok].astype(np.int64) - intended[ok]).astype(np.float64)
    order = np.argsort(intended[ok], kind="stable")
    latency, times = latency[order], intended[ok][order]
    found = trend(times, latency)
    mean_ns = float(latency.mean())
    window_s = max(length_s - warmup_s, 1e-9)
    if found is None or found["p"] < MARGINAL_P:
        return None
    growth_ns = found["slope_ns_per_s"] * window_s  # carried over the full length
    if growth_ns > MARGINAL_FRACTION * mean_ns:
        return None
    # In flight: sent and not over. Sends that wait (for a connection the target holds, or
    # the generator's own pace) show as late sends, below.
    sent = float(progress.get("sent") or 0)
    outstanding = sent - float(progress.get("completed") or 0)
    if outstanding > MARGINAL_FRACTION * max(BACKLOG_MIN, BACKLOG_SHARE * sent):
        return None
    if sent and float(progress.get("late_sends") or 0) / sent > 0.5 * GENERATOR_LATE_SHARE:
        return None
    slo_part = ""
    if slo is not None:
        sorted_ok = np.sort(latency)
        verdict = slo_mod.decide(sorted_ok, latency, failed, slo, False)
        if verdict["verdict"] == "undecided":
            return None
        slo_part = f"; SLO {verdict['verdict']}"
    return (
        f"decided early at {t_s:.0f} s of {length_s:.0f} s: {n_ok} OK samples, no growing "
        f"trend (p = {found['p']:.2g}, {growth_ns / 1e6:+.3g} ms over the full length), "
        f"{outstanding:.0f} in flight{slo_part}"
    )


def early_watch(
    files: Callable[[], list[Path]],
    length_s: float,
    warmup_s: float,
    slo: slo_mod.Slo | None,
    min_samples: int = EARLY_MIN_SAMPLES,
) -> Callable[[dict[str, Any]], str | None]:
    """A runner watch that stops a probe whose decision is clear on EARLY_LOOKS looks in a
    row; `files` lists the point's samples files (they appear once the recorders start)."""
    clear = [0]

    def watch(progress: dict[str, Any]) -> str | None:
        why = look(_samples(files()), progress, length_s, warmup_s, slo, min_samples)
        clear[0] = clear[0] + 1 if why else 0
        return why if clear[0] >= EARLY_LOOKS else None

    return watch
