"""Statistics (knee.stats): hand-computed values on small fixed data, scipy as the reference
for the distributions' formulas, and every check present on a real run."""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import scipy.stats as st
from report_helpers import run_spec

from knee import results
from knee.stats import distribution, point_stats
from knee.stats.checks import (
    anderson_darling_expon,
    autocorrelation_check,
    lag1_autocorrelation,
    poisson_check,
    sender_check,
    support_check,
)
from knee.stats.groups import by_key, group_entry
from knee.stats.intervals import (
    mean_ci,
    order_statistic_ranks,
    poisson_count_ci,
    quantile_ci,
    quantile_rank,
)
from knee.stats.point import PointSettings
from knee.stats.rates import Requests, rates, schedule_window
from knee.stats.stability import stability
from knee.stats.tail import clustering, top1

# ---------------------------------------------------------------- intervals


def test_median_of_20_is_bounded_by_ranks_6_and_15() -> None:
    # Binomial(20, 1/2): F(5) = 0.0207 <= 2.5% < F(6) = 0.0577; F(14) = 0.9793 >= 97.5%.
    assert order_statistic_ranks(20, 0.5) == (6, 15)
    values = np.arange(1.0, 21.0) * 10  # x_(i) = 10 i
    assert quantile_ci(values, 0.5) == [60.0, 150.0]
    coverage = st.binom.cdf(14, 20, 0.5) - st.binom.cdf(5, 20, 0.5)
    assert coverage >= 0.95


def test_too_few_samples_give_no_interval() -> None:
    # Median: P(all 5 above) = 1/32 > 2.5%, so no rank can bound it from below; 6 suffice.
    assert order_statistic_ranks(5, 0.5) is None
    assert order_statistic_ranks(6, 0.5) == (1, 6)
    # p99.9 needs P(all n below it) = 0.999^n <= 2.5%, i.e. n >= 3688.
    assert order_statistic_ranks(3687, 0.999) is None
    assert order_statistic_ranks(3688, 0.999) is not None
    assert order_statistic_ranks(0, 0.5) is None


def _scipy_ranks(n: int, q: float) -> tuple[int, int] | None:
    cdf = st.binom.cdf(np.arange(n + 1), n, q)
    below = np.flatnonzero(cdf <= 0.025)
    above = np.flatnonzero(cdf >= 0.975)
    if len(below) == 0 or len(above) == 0 or above[0] + 1 > n:
        return None
    return int(below[-1]) + 1, int(above[0]) + 1


@pytest.mark.parametrize("n", [7, 20, 99, 100, 101, 1000, 3700, 10_000, 123_457, 1_000_000])
@pytest.mark.parametrize("q", [0.5, 0.9, 0.99, 0.999])
def test_order_statistic_ranks_match_the_exact_binomial(n: int, q: float) -> None:
    assert order_statistic_ranks(n, q) == _scipy_ranks(n, q)


def test_quantile_rank_is_the_inverted_cdf_without_float_error() -> None:
    assert quantile_rank(10_000, 0.99) == 9900  # 10_000 * 0.99 = 9900.000000000002 in floats
    assert quantile_rank(20, 0.5) == 10
    assert quantile_rank(21, 0.5) == 11
    assert quantile_rank(1, 0.999) == 1


def test_mean_interval_is_the_t_interval_for_up_to_30_samples() -> None:
    x = np.array([3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0, 5.0, 3.0])
    half = st.t.ppf(0.975, 9) * x.std(ddof=1) / math.sqrt(10)
    lo, hi = mean_ci(x)
    assert lo == pytest.approx(x.mean() - half, rel=1e-4)
    assert hi == pytest.approx(x.mean() + half, rel=1e-4)
    assert mean_ci(x[:4]) is None


def test_mean_interval_uses_batches_of_consecutive_samples() -> None:
    # 60 samples -> 30 batches of 2: (0, 1), (2, 3), ... the batch means are 0.5, 2.5, ...
    x = np.arange(60.0)
    batch_means = x.reshape(30, 2).mean(axis=1)
    half = st.t.ppf(0.975, 29) * batch_means.std(ddof=1) / math.sqrt(30)
    lo, hi = mean_ci(x)
    assert (lo + hi) / 2 == pytest.approx(29.5)
    assert (hi - lo) / 2 == pytest.approx(half, rel=1e-4)
    # A slow wave (strongly autocorrelated: batches of 100 cover a third of a period each)
    # gets a far wider interval than single samples' t interval would claim.
    wave = np.sin(2 * np.pi * np.arange(3000) / 300)
    iid_half = st.t.ppf(0.975, 2999) * wave.std(ddof=1) / math.sqrt(3000)
    lo, hi = mean_ci(wave)
    assert lo < 0 < hi
    assert (hi - lo) / 2 > 5 * iid_half


@pytest.mark.parametrize("count", [0, 1, 2, 5, 20, 100, 999, 1000, 1001, 5000, 100_000])
def test_poisson_count_interval_is_garwoods(count: int) -> None:
    lo, hi = poisson_count_ci(count)
    ref_lo = st.chi2.ppf(0.025, 2 * count) / 2 if count else 0.0
    ref_hi = st.chi2.ppf(0.975, 2 * count + 2) / 2
    tol = 1e-9
    assert lo == pytest.approx(ref_lo, rel=tol, abs=1e-12)
    assert hi == pytest.approx(ref_hi, rel=tol)


# ---------------------------------------------------------------- distributions


def test_distribution_by_hand() -> None:
    x = np.array([5, 1, 4, 2, 3, 10, 9, 8, 7, 6] * 25)  # n = 250, values 1..10 x 25 each
    d = distribution(x)
    assert d["n"] == 250
    assert d["mean"] == 5.5
    assert d["std"] == pytest.approx(x.std(ddof=1))
    # x_(ceil(n q)): ranks 125, 225, 248, 250 of the sorted values (each value 25 times).
    assert (d["p50"], d["p90"], d["p99"], d["p999"], d["max"]) == (5.0, 9.0, 10.0, 10.0, 10.0)
    # p50: 125 samples beyond it; p90: 25; so only the median is supported.
    assert d["supported"] == {"p50": True, "p90": False, "p99": False, "p999": False}
    lo_rank, hi_rank = _scipy_ranks(250, 0.5)
    s = np.sort(x)
    assert d["ci"]["p50"] == [float(s[lo_rank - 1]), float(s[hi_rank - 1])]
    assert d["ci"]["p999"] is None
    json.dumps(d)  # plain JSON types only


def test_empty_distribution_has_every_key() -> None:
    d = distribution(np.array([], dtype=np.int64))
    assert d["n"] == 0 and d["mean"] is None and d["p99"] is None
    assert d["ci"] == {"mean": None, "p50": None, "p90": None, "p99": None, "p999": None}
    assert not any(d["supported"].values())


def test_support_counts_samples_beyond_each_percentile() -> None:
    assert distribution(np.arange(1000))["supported"]["p90"] is True  # exactly 100 beyond
    assert distribution(np.arange(999))["supported"]["p90"] is False
    assert distribution(np.arange(10_000))["supported"]["p99"] is True


# ---------------------------------------------------------------- checks


def test_sender_check_verdicts() -> None:
    inside = sender_check(90.0, 96.4, [88.6, 104.6], 0, 1000, 1.0)
    assert inside["verdict"] == "pass" and "inside the 95%" in inside["detail"]
    assert inside["value"] == pytest.approx(96.4 / 90 - 1)
    # A generator that really sent 50/s against 100/s fails, however narrow the interval.
    behind = sender_check(100.0, 50.0, [46.0, 54.0], 0, 500, 1.0)
    assert behind["verdict"] == "fail" and "below the target" in behind["detail"]
    above = sender_check(100.0, 110.0, [109.0, 111.0], 0, 11_000, 1.0)
    assert above["verdict"] == "warn"
    # Late sends beyond 1% fail even at the right rate; 1% exactly passes.
    late = sender_check(100.0, 100.0, [95.0, 105.0], 11, 1000, 1.0)
    assert late["verdict"] == "fail" and "11 of 1000 sends" in late["detail"]
    assert sender_check(100.0, 100.0, [95.0, 105.0], 10, 1000, 1.0)["verdict"] == "pass"
    closed = sender_check(None, 50.0, [45.0, 55.0], 0, 500, 1.0)
    assert closed["verdict"] == "pass" and closed["value"] == 0.0
    assert sender_check(100.0, 0.0, None, 0, 0, 1.0)["verdict"] == "n/a"
    # A Poisson schedule that drew 168/s of 191.5/s, every send on time: the schedule's
    # draw, not the generator's shortfall. Sends below the draw still fail.
    drew = sender_check(191.5, 167.7, [151.2, 185.5], 1, 378, 1.0, scheduled_per_s=168.0)
    assert drew["verdict"] == "pass" and drew["limit"] is None, drew
    assert "as the schedule drew 168/s: the sends kept to the schedule" in drew["detail"]
    short = sender_check(191.5, 150.0, [135.0, 165.0], 1, 378, 1.0, scheduled_per_s=190.0)
    assert short["verdict"] == "fail" and short["limit"] == "generator", short


def test_the_scheduled_rate_is_the_schedules_own_draw() -> None:
    """`scheduled_rate_per_s` counts every request made due after warm-up, sent or not, over
    the span of their intended times; `achieved_rate_per_s` only the sent ones."""
    from knee.stats.rates import Requests, rates

    intended = np.arange(100, dtype=np.int64) * 10_000_000  # 100/s for 1 s
    sent = intended.copy()
    sent[50:] = -1  # the second half never sent
    r = Requests(
        intended_ns=intended,
        sent_ns=sent,
        received_ns=np.where(sent >= 0, sent + 1_000_000, -1),
        ok=sent >= 0,
        timeout=np.zeros(100, dtype=bool),
        post=np.ones(100, dtype=bool),
        bytes_out=np.zeros(100),
        bytes_in=np.zeros(100),
    )
    out = rates(r, None, timeout_ms=None, late_ms=None)
    assert out["scheduled_rate_per_s"] == pytest.approx(100.0)
    assert out["sent"] == 50 and out["achieved_rate_per_s"] == pytest.approx(100.0)


def test_anderson_darling_matches_scipy() -> None:
    rng = np.random.default_rng(7)
    for x in (rng.exponential(2.0, 50), rng.exponential(1.0, 3000), rng.uniform(0, 1, 200)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # scipy's critical-value API
            ref = st.anderson(x, dist="expon")
        assert anderson_darling_expon(x) == pytest.approx(ref.statistic, rel=1e-9)


def test_poisson_check_verdicts() -> None:
    rng = np.random.default_rng(3)
    poisson_sends = np.cumsum(rng.exponential(1e6, 2000)).astype(np.int64)
    assert poisson_check("poisson", poisson_sends)["verdict"] == "pass"
    # Sends at a constant pace are far from exponential gaps.
    paced = np.arange(0, 2000 * 1_000_000, 1_000_000)
    bad = poisson_check("poisson", paced)
    assert bad["verdict"] == "fail" and bad["value"] > 1.959
    assert poisson_check("closed", poisson_sends)["verdict"] == "n/a"
    assert poisson_check("poisson", poisson_sends[:5])["verdict"] == "n/a"


def test_lag1_autocorrelation_by_hand() -> None:
    # mean 3, deviations -2..2: sum of neighbour products 2 + 0 + 0 + 2 = 4, squares 10.
    assert lag1_autocorrelation(np.array([1, 2, 3, 4, 5])) == pytest.approx(0.4)
    assert lag1_autocorrelation(np.array([7, 7, 7])) is None
    alternating = np.tile([1.0, 3.0], 20)
    check = autocorrelation_check(alternating)
    assert check["value"] == pytest.approx(-0.975) and check["verdict"] == "fail"
    rising = autocorrelation_check(np.arange(100.0))
    assert rising["verdict"] == "fail" and rising["value"] > 0.9
    noise = autocorrelation_check(np.random.default_rng(5).normal(size=2000))
    assert noise["verdict"] == "pass"


def test_support_check_verdicts() -> None:
    assert support_check(150)["verdict"] == "fail" and support_check(150)["value"] is None
    partial = support_check(1000)
    assert partial["verdict"] == "warn" and partial["value"] == 0.9
    assert "p99 needs 10000" in partial["detail"]
    assert support_check(100_000)["verdict"] == "pass"


# ---------------------------------------------------------------- the top 1%


def test_top1_shares_and_with_without() -> None:
    n = 1000
    server = np.full(n, 8, dtype=np.int64)
    network = np.full(n, 2, dtype=np.int64)
    late = np.zeros(n, dtype=np.int64)
    slow = np.arange(500, 1000, 50)  # 10 slow requests, spread out: server 98, network 2
    server[slow] = 98
    latency = server + network + late
    intended = np.arange(n, dtype=np.int64) * 1_000_000
    t = top1(latency, server, network, late, intended, distribution(latency), np.sort(latency))
    assert t["count"] == 10
    assert t["top"]["server_share"] == pytest.approx(0.98)
    assert t["top"]["network_share"] == pytest.approx(0.02)
    assert t["top"]["late_share"] == 0
    assert t["rest"]["server_share"] == pytest.approx(0.8)
    assert t["top"]["mean_ns"] == 100 and t["rest"]["mean_ns"] == 10
    assert t["with"]["max"] == 100 and t["without"]["max"] == 10
    assert t["without"]["n"] == 990
    assert t["threshold_ns"] == t["with"]["p99"] == 10


def test_clustering_by_hand() -> None:
    n = 1000
    intended = np.arange(n, dtype=np.int64)
    spread = np.zeros(n, dtype=bool)
    spread[np.arange(50, 1000, 100)] = True  # one in each other bin: chi2 = 10, 19 dof
    c = clustering(spread, intended)
    assert c["verdict"] == "scattered" and c["longest_run"] == 1
    assert c["index_of_dispersion"] == pytest.approx(10 / 19, rel=0.05)
    burst = np.zeros(n, dtype=bool)
    burst[600:610] = True
    c = clustering(burst, intended)
    assert c["verdict"] == "clustered" and c["longest_run"] == 10
    # Three in a row out of 300 with 3 in the top: by chance 300 (1/100)^3 = 3e-4 times.
    few = np.zeros(300, dtype=bool)
    few[100:103] = True
    assert clustering(few, np.arange(300))["verdict"] == "clustered"


# ---------------------------------------------------------------- groups and points


def _requests(n: int, ok: np.ndarray, received_ns: np.ndarray) -> Requests:
    """n requests meant to leave every 100 ms from 0, sent on time, none of them warm-up."""
    intended = np.arange(n, dtype=np.int64) * 100_000_000
    return Requests(
        intended_ns=intended,
        sent_ns=intended.copy(),
        received_ns=received_ns,
        ok=ok,
        timeout=np.zeros(n, dtype=bool),
        post=np.ones(n, dtype=bool),
        bytes_out=np.full(n, 10),
        bytes_in=np.full(n, 20),
    )


def test_groups_by_operation() -> None:
    keys = np.array([1, 1, 2, 2, 2, 1])
    codes = np.array([0, 1, 0, 0, 3, 0])  # ok, timeout, ok, ok, error, ok
    ok_keys = keys[codes == 0]  # 1, 2, 2, 1
    latency = np.array([10, 20, 30, 40])
    received = np.where(codes == 0, np.arange(6) * 100_000_000 + 50, -1)
    r = _requests(6, codes == 0, received)
    window = schedule_window(r.intended_ns)  # 6 requests 0.1 s apart: 0.6 s

    def group_rates(mask: np.ndarray | None) -> dict:
        return rates(r, window, timeout_ms=None, late_ms=1.0, mask=mask)

    out = by_key(keys, keys, codes, group_rates, latency, latency // 2, latency // 4, whole={})
    assert set(out) == {"1", "2"}
    assert out["1"]["count"] == 3 and out["2"]["count"] == 3
    assert out["1"]["status_rates"]["timeout"] == pytest.approx(1 / 3)
    assert out["2"]["status_rates"]["error"] == pytest.approx(1 / 3)
    assert out["1"]["throughput_per_s"] == pytest.approx(2 / 0.6)  # 2 OK in the window
    assert out["1"]["latency_ok_ns"]["mean"] == np.mean(latency[ok_keys == 1]) == 25
    # Headline: the timeout ranks above both successes, so the median is x_(2) of 3 and
    # p90 lands on the timeout.
    assert out["1"]["latency_ns"]["p50"] == 40 and out["1"]["latency_ns"]["p90"] is None
    assert out["1"]["latency_ns"]["failed"] == {
        "p90": "timeout",
        "p99": "timeout",
        "p999": "timeout",
    }
    ones = np.ones(6, dtype=int)
    single = by_key(ones, ones, codes, group_rates, latency, latency, latency, whole={"w": 1})
    assert single == {"1": {"w": 1}}
    entry = group_entry(
        codes, rates(r, None, timeout_ms=None, late_ms=None), latency, latency, latency
    )
    assert entry["throughput_per_s"] == 0.0


def test_throughput_counts_replies_inside_the_window_only() -> None:
    """An overloaded server: 10 requests sent every 100 ms (a 1 s window), answered one per
    200 ms. 5 replies land inside the window, 5 drain after it; 4 are in flight at its end."""
    n = 10
    received = np.arange(1, n + 1, dtype=np.int64) * 200_000_000 - 100_000_000  # 0.1 .. 1.9 s
    r = _requests(n, np.ones(n, dtype=bool), received)
    window = schedule_window(r.intended_ns)
    assert window is not None and window.length_s == pytest.approx(1.0)
    out = rates(r, window, timeout_ms=60_000, late_ms=1.0)
    assert out["achieved_rate_per_s"] == pytest.approx(10.0)
    assert out["ok_in_window"] == 5 and out["throughput_per_s"] == pytest.approx(5.0)
    assert out["drain"] == {"replies": 5, "ok": 5, "until_s": pytest.approx(0.9)}
    assert out["backlog"] == 5  # sent by 1.0 s, answered after it
    assert out["bytes_in_per_s"] == pytest.approx(5 * 20)


def test_achieved_rate_is_from_actual_sends() -> None:
    """A sender 2x behind its schedule: 100 requests meant for 1 s went out over 2 s."""
    n = 100
    r = _requests(n, np.ones(n, dtype=bool), np.full(n, -1))
    r = Requests(**{**r.__dict__, "intended_ns": r.intended_ns // 10})  # meant 10 ms apart
    out = rates(r, schedule_window(r.intended_ns), timeout_ms=None, late_ms=1.0)
    assert out["achieved_rate_per_s"] == pytest.approx(10.0)  # sent 100 ms apart
    assert out["late_sends"] == n - 1 and out["late_send_share"] == pytest.approx(0.99)


def _records(n: int, gap_ns: int, status: list[int]) -> np.ndarray:
    """A hand-made sample file's records: request i meant to leave at i * gap, sent 1 us
    late, 30 us server residence of which 10 us queued, answered 100 us after sending."""
    r = np.zeros(n, dtype=results.SAMPLE_DTYPE)
    base = 1_000_000_000
    r["request_id"] = np.arange(n)
    r["intended_ns"] = base + np.arange(n) * gap_ns
    r["sent_ns"] = r["intended_ns"] + 1_000
    r["received_ns"] = r["sent_ns"] + 100_000
    r["server_ns"] = 30_000
    r["queue_ns"] = 10_000
    r["service_ns"] = 20_000
    r["bytes_out"] = 64
    r["bytes_in"] = 32
    r["status"] = status
    failed = r["status"] != 0
    r["received_ns"][failed] = 0
    return r


def test_point_stats_by_hand() -> None:
    status = [0] * 8 + [1, 3]  # 8 ok, a timeout, an error
    recs = _records(12, 10_000_000, [0, 0] + status)  # 2 warm-up requests first
    frame = results.samples_frame(
        recs, point=0, series="main", node="load", run_start_ns=0, warmup_end_ns=0
    )
    frame.loc[:1, "warmup"] = True  # the first 2 requests
    frame = frame.iloc[::-1].reset_index(drop=True)  # completion order differs from send order
    s = point_stats(
        frame,
        PointSettings(schedule="constant", target_rate_per_s=100.0, late_ms=1.0, timeout_ms=5.0),
    )
    assert s["count"] == 10 and s["warmup_count"] == 2
    # Every status name is counted, including those only some systems produce.
    assert s["statuses"] == {name: 0 for name in results.STATUS_NAMES} | {
        "ok": 8,
        "timeout": 1,
        "error": 1,
    }
    assert s["status_rates"]["ok"] == 0.8
    # 10 requests 10 ms apart: a span of 90 ms, stretched by 10/9 to cover 10 gaps = 0.1 s.
    assert s["window_s"] == pytest.approx(0.1)
    assert s["achieved_rate_per_s"] == pytest.approx(100.0)
    assert s["throughput_per_s"] == pytest.approx(80.0)
    # Sent: 10 x 64 B over the sends' 0.1 s; replies in the window: 8 x 32 B over 0.1 s.
    assert s["throughput_bytes_per_s"] == pytest.approx((10 * 64 + 8 * 32) / 0.1)
    assert s["late_sends"] == 0 and s["backlog"] == 0 and s["drain"]["replies"] == 0
    lo, hi = s["achieved_rate_ci_per_s"]
    assert lo == pytest.approx(st.chi2.ppf(0.025, 20) / 2 / 0.1)
    assert hi == pytest.approx(st.chi2.ppf(0.975, 22) / 2 / 0.1)
    lat = s["latency_ok_ns"]
    assert lat["n"] == 8 and lat["mean"] == lat["max"] == 101_000  # 1 us late + 100 us
    # Headline: 10 requests, the timeout and the error ranked last: p50 is x_(5), an OK
    # one; p90 is x_(9), a failure of mixed kinds.
    head = s["latency_ns"]
    assert head["n"] == 10 and head["failures"] == 2 and head["mean"] is None
    assert head["p50"] == 101_000 and head["p90"] is None and head["max"] is None
    assert head["failed"] == {"p90": "failed", "p99": "failed", "p999": "failed"}
    assert s["stability"]["verdict"] == "n/a"  # 8 OK samples
    assert s["server_ns"]["mean"] == 30_000 and s["network_ns"]["mean"] == 70_000
    assert s["queue_ns"]["p50"] == 10_000 and s["service_ns"]["p99"] == 20_000
    assert s["detail_ns"]["max"] == 0
    verdicts = {c["name"]: c["verdict"] for c in s["checks"]}
    assert verdicts == {
        "sender": "pass",
        "poisson": "n/a",  # a constant schedule
        "autocorrelation": "n/a",  # every latency equal
        "percentile_support": "fail",
    }
    assert list(s["by_op"]) == ["0"] and s["by_op"]["0"]["count"] == 10
    assert s["top1"]["count"] == 0 and s["top1"]["without"]["n"] == 8
    json.dumps(s)


def test_a_point_of_warm_up_only_has_every_key() -> None:
    recs = _records(5, 10_000_000, [0] * 5)
    frame = results.samples_frame(
        recs, point=0, series="main", node="load", run_start_ns=0, warmup_end_ns=1 << 62
    )
    s = point_stats(frame, PointSettings(schedule="poisson", target_rate_per_s=100.0))
    assert s["count"] == 0 and s["warmup_count"] == 5
    assert s["latency_ns"]["n"] == 0 and s["achieved_rate_ci_per_s"] is None
    verdicts = {c["name"]: c["verdict"] for c in s["checks"]}
    assert verdicts == {
        "sender": "n/a",  # nothing was sent
        "poisson": "n/a",
        "autocorrelation": "n/a",
        "percentile_support": "fail",
    }
    assert s["by_op"] == {} and s["top1"]["count"] == 0
    assert s["top1"]["clustering"]["index_of_dispersion"] == 0.0
    json.dumps(s)


def test_point_of_a_million_samples_is_vectorized() -> None:
    """Not a speed assertion (see bench/stats_speed.py): a large point goes through."""
    n = 1_000_000
    recs = _records(n, 1_000, [0] * n)
    rng = np.random.default_rng(11)
    recs["intended_ns"] = recs["intended_ns"][0] + np.cumsum(rng.exponential(1_000, n)).astype(
        np.uint64
    )
    recs["sent_ns"] = recs["intended_ns"] + 500
    recs["server_ns"] = rng.exponential(20_000, n).astype(np.uint64)
    recs["received_ns"] = recs["sent_ns"] + recs["server_ns"] + 50_000
    frame = results.samples_frame(
        recs, point=0, series="main", node="load", run_start_ns=0, warmup_end_ns=0
    )
    s = point_stats(frame, PointSettings(schedule="poisson", target_rate_per_s=1e6))
    assert s["latency_ns"]["supported"]["p999"] is True
    assert s["latency_ns"]["ci"]["p999"][0] <= s["latency_ns"]["p999"]
    assert s["top1"]["count"] == 10_000
    assert {c["name"]: c["verdict"] for c in s["checks"]}["poisson"] == "pass"


ECHO_SPEC = """
[experiment]
name = "stats-echo"
system = "echo"

[load]
schedule = "poisson"
rate_per_s = 500
duration_s = 2.5
warmup_s = 0.5

[series.open]

[series.closed.load]
schedule = "closed"
clients = 2
think_ms = 1
requests = 400
warmup_s = 0
warmup_requests = 20
"""


def test_every_check_has_a_verdict_on_a_real_run(tmp_path: Path) -> None:
    run_dir = run_spec(ECHO_SPEC, tmp_path, "echo", timeout_s=180)
    points = json.loads((run_dir / "summary.json").read_text())["points"]
    assert [p["series"] for p in points] == ["open", "closed"]
    names = ["sender", "poisson", "autocorrelation", "percentile_support", "interference"]
    for p in points:
        assert [c["name"] for c in p["checks"]] == names
        assert all(c["verdict"] in ("pass", "warn", "fail", "n/a") for c in p["checks"])
        assert all(isinstance(c["detail"], str) and c["detail"] for c in p["checks"])
        assert p["stability"]["verdict"] == "stable", p["stability"]
        for key in ("latency_ok_ns", "server_ns", "network_ns", "queue_ns", "service_ns"):
            d = p[key]
            assert d["n"] == p["statuses"]["ok"] > 100, key
            assert d["ci"]["mean"][0] <= d["mean"] <= d["ci"]["mean"][1], key
            assert d["ci"]["p50"][0] <= d["p50"] <= d["ci"]["p50"][1], key
        assert len(p["by_op"]) == 1 and len(p["by_service"]) == 1  # echo: one of each
        (op,) = p["by_op"].values()
        assert op["latency_ns"] == p["latency_ns"] and op["count"] == p["count"]
        assert set(p["top1"]) >= {"threshold_ns", "count", "with", "without", "top", "rest"}
        assert p["top1"]["clustering"]["verdict"] in ("clustered", "scattered")
    open_point, closed_point = points
    verdicts = {c["name"]: c["verdict"] for c in open_point["checks"]}
    assert verdicts["sender"] != "n/a" and verdicts["poisson"] != "n/a"
    lo, hi = open_point["achieved_rate_ci_per_s"]
    assert lo < open_point["achieved_rate_per_s"] < hi
    closed = {c["name"]: c["verdict"] for c in closed_point["checks"]}
    assert closed["sender"] != "n/a" and closed["poisson"] == "n/a"
    # The run's samples give the same figures when read back.
    samples = pd.read_parquet(run_dir / "samples.parquet")
    again = point_stats(
        samples[samples["point"] == 0],
        PointSettings(schedule="poisson", target_rate_per_s=500, late_ms=1.0, timeout_ms=5000.0),
    )
    assert again["latency_ns"] == open_point["latency_ns"]
    assert again["checks"] == open_point["checks"][:-1]  # the runner adds interference


def test_warmup_requests_apply_per_point_over_all_recorders(tmp_path: Path) -> None:
    """Two recorders of one point, interleaved in time: the point's first 3 requests are
    warm-up, not the first 3 of each recorder."""
    raws = []
    for i, node in enumerate(("load-0", "load-1")):
        recs = _records(5, 10_000_000, [0] * 5)
        recs["intended_ns"] += i * 5_000_000  # load-1's requests fall between load-0's
        path = f"raw/p000-{node}.samples.bin"
        (tmp_path / "raw").mkdir(exist_ok=True)
        recs.tofile(tmp_path / path)
        raws.append(
            results.RawFile(
                point=0,
                series="main",
                node=node,
                samples=path,
                histogram="",
                run_start_ns=0,
                warmup_end_ns=0,
                warmup_requests=3,
            )
        )
    frame = results.point_frame(tmp_path, raws)
    first = frame.sort_values("intended_ns")["warmup"].to_numpy()
    assert first.tolist() == [True] * 3 + [False] * 7
    assert point_stats(frame)["warmup_count"] == 3


def _md1(rho: float, n: int, seed: int) -> dict:
    """A simulated M/D/1 queue (service 1 ms, Poisson arrivals at rho per ms), as the
    stability verdict sees it: latency by send time, and what completed in the window."""
    rng = np.random.default_rng(seed)
    service_ns = 1_000_000.0
    arrival = np.cumsum(rng.exponential(service_ns / rho, n))
    wait = np.zeros(n)
    for i in range(1, n):  # Lindley's recursion: test data, not knee's own analysis
        wait[i] = max(0.0, wait[i - 1] + service_ns - (arrival[i] - arrival[i - 1]))
    latency = wait + service_ns
    done = arrival + latency
    end = arrival[-1]
    return {
        "intended_ok_ns": arrival,
        "latency_ok_ns": latency,
        "window_s": (end - arrival[0]) / 1e9,
        "sent_in_window": n,
        "ok_in_window": int(np.count_nonzero(done <= end)),
        "backlog": int(np.count_nonzero(done > end)),
    }


def test_stability_verdict_on_simulated_queues() -> None:
    """Stable below capacity (a 1% test over 20 runs at rho 0.8: at most 2 false alarms),
    unstable above it, with the growth in the detail."""
    below = [stability(**_md1(0.8, 4000, seed))["verdict"] for seed in range(20)]
    assert below.count("unstable") <= 2, below
    assert set(below) <= {"stable", "unstable"}
    for seed in range(5):
        over = stability(**_md1(1.3, 4000, seed))
        assert over["verdict"] == "unstable", over
        # The queue grows by 0.3 ms of work per ms: about 0.3 s of latency per s.
        assert over["trend_ns_per_s"] == pytest.approx(0.3e9, rel=0.2)
        assert "its mean depends on the run's length" in over["detail"]
        assert over["queueing"] is True
    few = stability(**_md1(0.5, 8, 0))
    assert few["verdict"] == "n/a"


def test_stability_of_a_target_that_fails_without_a_queue() -> None:
    """A target that sheds load: 30% of the requests fail, the served ones keep a flat
    latency. Unstable for the failures, and the detail does not claim a growing mean."""
    rng = np.random.default_rng(7)
    intended_ns = np.sort(rng.uniform(0, 10e9, 700))
    shed = stability(
        intended_ok_ns=intended_ns,
        latency_ok_ns=rng.exponential(300e3, 700) + 100e3,
        window_s=10.0,
        sent_in_window=1000,
        ok_in_window=700,
        backlog=0,
    )
    assert shed["verdict"] == "unstable", shed
    assert shed["reasons"] == ["only 70% of the requests sent completed OK within the schedule"]
    assert shed["detail"].endswith("failing, with no growing queue"), shed["detail"]
    assert "depends on the run's length" not in shed["detail"]
    assert shed["queueing"] is False
