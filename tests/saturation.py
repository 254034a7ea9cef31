"""A server's output at an overloaded point, measured from samples.parquet independently of
knee's statistics (the tests that check a fitted capacity against it)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd


@dataclass
class Saturation:
    throughput_per_s: float  # OK replies received in the window, per second
    waiting: int  # requests sent by the window's end and answered after it
    before: int  # replies received before the window: the server's work before it
    hit_ratio: float  # of the replies received in the window (matrix's cache-hit flag)


def saturation(samples: pd.DataFrame, point: int) -> Saturation:
    """The server's output at an overloaded point: OK replies received per second inside the
    schedule window, [first post-warm-up intended send, + (max - min) n / (n - 1)]."""
    mine = samples[samples["point"] == point]
    intended = np.sort(mine.loc[~mine["warmup"].astype(bool), "intended_ns"].to_numpy())
    n = len(intended)
    start = int(intended[0])
    end = start + (int(intended[-1]) - start) * n / (n - 1)
    received = mine["received_ns"].to_numpy()
    ok = (mine["status"].astype(str) == "ok").to_numpy()
    inside = ok & (received >= start) & (received <= end)
    sent = mine["sent_ns"].to_numpy()
    # Only a system whose samples keep `flags` (matrix's cache hit) can have hits: http's
    # record field is its `http_status`.
    flags = mine["flags"].to_numpy() if "flags" in mine else np.zeros(len(mine), np.int64)
    return Saturation(
        throughput_per_s=int(np.count_nonzero(inside)) / ((end - start) / 1e9),
        waiting=int(np.count_nonzero((sent >= 0) & (sent <= end) & (received > end))),
        before=int(np.count_nonzero((received >= 0) & (received < start))),
        hit_ratio=float(np.mean((flags[inside] & 1) != 0)),
    )
