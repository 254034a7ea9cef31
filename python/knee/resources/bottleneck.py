"""The bottleneck, named (docs/explain.md): of the resources a run measured (knee.resources
.usage), the one whose utilization reaches 1 first as the load rises, the capacity it
implies (1 / D_max, the utilization law's bound) next to the measured one, and the next
bottleneck (1 / D_2: what doubling the first would buy at most).

At a point, resources rank by U. Along a load curve they rank by D, read at the highest
rate the system kept up with (where U is largest, so fixed costs weigh least): at equal X,
U = X D, so the largest D is the largest U there and the first to reach 1. A passive
resource (below) has its D read where it is smallest, at low load: its hold time without
the queues it waits in.

Four rules keep the name right:
- A worker pool whose busy time is mostly CPU time (its node's CPU busy >= ON_CPU of the
  pool's busy) is busy computing: the CPU is named, as the pool's threads can use it, with
  their busy time per request as its demand (the rest of it: a thread waiting for a core,
  or handing its request on).
- The generator's connections are held for each request's whole response time, queueing
  at the target included: they fill because the target is slow. At a point they rank after
  any other resource near its limit (U >= NEAR); along a curve their demand is their hold
  time at low load, which the target's queue does not inflate.
- The bound 1/D agrees with the measured capacity when its value lies within the measured
  interval widened by TOLERANCE on each side. When its whole interval lies above that, the
  bound is above what was measured: something the run cannot see sets the limit (a lock,
  the kernel's accept queue, a remote dependency), and that is said instead of naming the
  busiest resource seen. A value outside whose interval still reaches in is not called
  either way ("unclear").
- A target that refused work at once (429 or 503 replies, knee.resources.shedding) where the
  load passed its capacity is named as shedding load, with the share it refused and the
  statuses, whatever its resources' bounds say.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from knee.resources.shedding import sentence as shed_sentence
from knee.resources.shedding import shedding
from knee.resources.usage import MACHINE
from knee.stats.decision import decide
from knee.stats.summary import (
    Bottleneck,
    GeneratorShare,
    NamedResource,
    PointStats,
    Resource,
)

#: A pool whose node's CPU was busy at least this share of the pool's busy time is
#: computing, not waiting (the rest: its threads descheduled on a busy machine, and the
#: per-second CPU samples' own error).
ON_CPU = 0.6
#: The bound agrees with the measured capacity when it lies within the measured interval
#: widened by this share on each side ([lo (1 - TOLERANCE), hi (1 + TOLERANCE)]).
TOLERANCE = 0.10
#: Below this U at the highest rate kept up with, a resource is not near its limit.
NEAR = 0.7
#: Resources held for a request's whole response time (waiting on others included): the
#: generator's connections. They are the limit only when no other resource is near its own.
PASSIVE = ("connections",)


def _rate(point: PointStats) -> float:
    return float(point.get("target_rate_per_s") or point.get("completion_rate_per_s") or 0.0)


def ranked(resources: dict[str, Resource]) -> list[tuple[str, Resource]]:
    """A point's resources with a known U, busiest first; a CPU-bound pool counts as its
    node's CPU (the pool entry is dropped, its node's CPU takes the pool's U)."""
    out: dict[str, Resource] = {}
    for name, r in resources.items():
        if r.get("u") is None:
            continue
        out[name] = r
    for name, r in list(out.items()):
        if r.get("kind") == "pool" and (r.get("on_cpu") or 0.0) >= ON_CPU:
            node = name.removeprefix("pool:")
            if node in out:
                # The CPU as the pool's threads use it: its demand is their busy time per
                # request (at least ON_CPU of it on a core; the rest a thread that waited
                # for one, or handed its request on), the pool's U and D.
                keys = ("u", "u_ci", "d_ns", "bound_per_s", "bound_ci_per_s")
                cpu_u = out[node]["u"]
                out[node] = cast(Resource, {**out[node], **{k: r.get(k) for k in keys}})
                out[node] |= {"cpu_u": cpu_u, "threads": r.get("capacity")}
                del out[name]
    _shared_cores(out)
    order = sorted(out.items(), key=lambda kv: -float(kv[1]["u"] or 0.0))
    if any(r["kind"] not in PASSIVE and (r["u"] or 0.0) >= NEAR for _, r in order):
        # Held through the whole response, waiting on the target included: they fill
        # because a resource of the target is near its limit, so they rank after it.
        order.sort(key=lambda kv: kv[1]["kind"] in PASSIVE)  # stable: U order kept
    return order


def _shared_cores(out: dict[str, Resource]) -> None:
    """The machine's cores (knee.resources.usage's `machine`: the run's processes sharing
    them) count only near their limit (U >= NEAR) and when a node could use every core
    (no limit of its own, and a pool no smaller): that node is then limited by the cores
    it shares with the rest of the run, the generator included, and it folds into the
    machine, which keeps the larger U and D of the two, with its pool when the pool has
    more threads than the cores (they wait for the cores). Otherwise the machine is left out:
    the sum of resources ranked on their own, each with a limit of its own."""
    machine = out.pop(MACHINE, None)
    if machine is None or float(machine.get("u") or 0.0) < NEAR:
        return
    cores = float(machine.get("machine_cores") or machine.get("capacity") or 0.0)
    shared = [
        name
        for name, r in out.items()
        if name != MACHINE
        and r.get("kind") == "cpu"
        and not r.get("generator")
        and r.get("role") not in ("host", MACHINE)
        and float(r.get("capacity") or 0.0) >= cores
    ]
    if not shared:
        return  # no node could use every core: each is held by its own limit
    keys = ("u", "u_ci", "d_ns", "bound_per_s", "bound_ci_per_s")
    top = max([machine, *(out[n] for n in shared)], key=lambda r: float(r.get("u") or 0.0))
    users = ", ".join(str(out[n]["label"]).removesuffix("'s CPU") for n in shared)
    folded = cast(Resource, {**machine, **{k: top.get(k) for k in keys}, "shared_by": shared})
    folded["label"] = f"{machine['label']}: {users} and the generator"
    for name in shared:
        del out[name]
        pool = out.get(f"pool:{name}")
        if pool is not None and float(pool.get("capacity") or 0.0) > cores:
            del out[f"pool:{name}"]  # more threads than cores: they wait for the cores
    out[MACHINE] = folded


def by_demand(ref: PointStats, points: list[PointStats]) -> list[tuple[str, Resource]]:
    """The reference point's resources, largest demand D first: the first to reach U = 1 as
    the load rises. The demand of a passive resource, or of one whose time includes the
    wait for it (a lock's), is its smallest over the points: its time without the queues
    (at low load), so that a passive one is not named for the target's slowness, and a
    lock's is the time it is held."""
    out = []
    for name, r in ranked(ref.get("resources") or {}):
        if r["kind"] in PASSIVE or r.get("includes_waiting"):
            ds = _low_load_demand(name, r, points)
            if ds and min(ds) < (r.get("d_ns") or 0.0):
                d = min(ds)
                r = {**r, "d_ns": d, "bound_per_s": 1e9 / d, "bound_ci_per_s": None}
                r["held_at_low_load"] = True
        if r.get("d_ns"):
            out.append((name, r))
    return sorted(out, key=lambda kv: -float(kv[1]["d_ns"] or 0.0))


def _low_load_demand(name: str, r: Resource, points: list[PointStats]) -> list[float]:
    """Its demand where it waited least: a passive resource's at every point (the least
    is its hold time at low load); a lock's at the point of lowest load only (a contended
    point's U is clamped at 1, so its D there would be 1 / X, the measured rate itself)."""
    have = [p for p in points if (p.get("resources") or {}).get(name, {}).get("d_ns")]
    if r.get("includes_waiting"):
        calm = [p for p in have if not p["resources"][name].get("contended")]
        have = (
            [min(calm, key=lambda p: float(p.get("completion_rate_per_s") or 0.0))] if calm else []
        )
    return [float(p["resources"][name]["d_ns"] or 0.0) for p in have]


def reference(points: list[PointStats], below: float | None = None) -> PointStats | None:
    """The point the demands are read at: the highest rate kept up with (at most `below`,
    the measured capacity's lower end, when one is given: a search's repeats can show a
    rate above its final bracket stable), else (nothing kept up) the one that completed
    the most."""
    if not points:
        return None
    good = [p for p in points if decide(p).capacity == "stable" and p.get("resources")]
    if below is not None and any(_rate(p) <= below * (1 + 1e-9) for p in good):
        good = [p for p in good if _rate(p) <= below * (1 + 1e-9)]
    if good:
        return max(good, key=_rate)
    with_resources = [p for p in points if p.get("resources")]
    if not with_resources:
        return None
    return max(with_resources, key=lambda p: float(p.get("completion_rate_per_s") or 0.0))


def _named(name: str, r: Resource) -> NamedResource:
    out: NamedResource = {
        "resource": name,
        "kind": r.get("kind"),
        "label": r.get("label"),
        "u": r.get("u"),
        "u_ci": r.get("u_ci"),
        "d_ns": r.get("d_ns"),
        "bound_per_s": r.get("bound_per_s"),
        "bound_ci_per_s": r.get("bound_ci_per_s"),
        "capacity": r.get("capacity"),
        "capacity_unit": r.get("capacity_unit"),
    }
    if threads := r.get("threads"):
        out["threads"] = threads
        out["label"] = folded_label(r)
    return out


def folded_label(r: Mapping[str, Any]) -> str:
    """A resource's label; a CPU with its CPU-bound pool folded in (`ranked`) says so."""
    label = str(r.get("label"))
    if threads := r.get("threads"):
        label += f" ({int(threads)} worker thread{'s' if threads != 1 else ''}, busy computing)"
    return label


def measured(
    capacity: Mapping[str, Any] | None, saturated: Mapping[str, Any] | None
) -> tuple[float | None, float | None]:
    """The measured capacity as an interval: from the highest rate kept up with to the
    lowest not (or the saturated throughput's upper bound, when higher)."""
    lo, hi = ((capacity or {}).get("interval_per_s") or [None, None])[:2]
    if saturated and saturated.get("ci_per_s"):
        s_lo, s_hi = saturated["ci_per_s"]
        lo = lo if lo is not None else s_lo
        hi = s_hi if hi is None else max(hi, s_hi)
    return lo, hi


def agreement(
    bound: NamedResource, lo: float | None, hi: float | None
) -> tuple[str | None, float | None]:
    """The bound 1/D against the measured capacity [lo, hi] widened by TOLERANCE on each
    side, W = [lo (1 - TOLERANCE), hi (1 + TOLERANCE)] (docs/explain.md):

    - "agrees": the bound's value lies in W;
    - "above": its whole interval (`bound_ci_per_s`; the value alone without one) lies
      over W: a limit the run cannot see;
    - "below": its whole interval lies under W;
    - "unclear": its value lies outside W but its interval reaches into W;
    - None: the side of W it would be compared with is open (no upper end measured).

    And the ratio bound / measured (measured: the bracket's geometric midpoint, or its
    lower end when open)."""
    b = bound.get("bound_per_s")
    if not b:
        return None, None
    b_lo, b_hi = bound.get("bound_ci_per_s") or [b, b]
    b_lo, b_hi = b_lo or b, b_hi or b
    ref = (lo * hi) ** 0.5 if lo and hi else lo
    ratio = b / ref if ref else None
    w_lo = None if lo is None else lo * (1 - TOLERANCE)
    w_hi = None if hi is None else hi * (1 + TOLERANCE)
    if w_lo is not None and b < w_lo:
        return ("below" if b_hi < w_lo else "unclear"), ratio
    if w_hi is None:
        return None, ratio
    if b > w_hi:
        return ("above" if b_lo > w_hi else "unclear"), ratio
    return "agrees", ratio


def explain(
    points: list[PointStats],
    capacity: Mapping[str, Any] | None = None,
    saturated: Mapping[str, Any] | None = None,
) -> Bottleneck | None:
    """The bottleneck of one load curve (a group of points at rising rates), with its bound
    against the measured capacity and the next one; None when no point measured resources."""
    lo, hi = measured(capacity, saturated)
    ref = reference(points, (capacity or {}).get("rate_per_s"))
    if ref is None:
        return None
    order = by_demand(ref, points)
    if not order:
        return None
    first = order[0]
    # The next bottleneck is what would limit once the first is relieved.
    second = order[1] if len(order) > 1 else None
    top = _named(*first)
    verdict, ratio = agreement(top, lo, hi)
    # Failures, not a resource, set a capacity where the target refused work at once.
    shed = shedding(points)
    if shed is not None:
        verdict = None
    out: Bottleneck = {
        "at_point": ref.get("point"),
        "at_rate_per_s": _rate(ref),
        "bottleneck": top,
        "next": _named(*second) if second else None,
        "measured_per_s": [lo, hi],
        "agreement": verdict,
        "bound_ratio": ratio,
        "unseen": verdict == "above",
        "sheds": shed,
        "generator": generator(ref),
        "per_point": [
            {
                "point": p.get("point"),
                "rate_per_s": _rate(p),
                "ranked": [n for n, _ in ranked(p.get("resources") or {})],
            }
            for p in points
            if p.get("resources")
        ],
    }
    b1, b2 = top["bound_per_s"], out["next"]["bound_per_s"] if out["next"] else None
    if b1 and b2:
        out["doubling_gain"] = min(2.0 * b1, b2) / b1
    out["sentence"] = sentence(out)
    return out


def generator(point: PointStats) -> GeneratorShare:
    """The load generator's own share: its CPU (busiest generator node), its late sends and
    its connections."""
    res = point.get("resources") or {}
    # A generator node without CPU samples is unknown, not idle: left out of the maximum.
    cpus = [
        r
        for r in res.values()
        if r.get("kind") == "cpu" and r.get("generator") and r.get("cpu_percent") is not None
    ]
    conns = res.get("connections") or {}
    busiest = max(cpus, key=lambda r: float(r.get("cpu_percent") or 0.0)) if cpus else {}
    return {
        "cpu_percent": float(busiest.get("cpu_percent") or 0.0) if cpus else None,
        "cpu_wait_percent": busiest.get("cpu_wait_percent"),
        "late_send_share": point.get("late_send_share"),
        "connections_u": conns.get("u"),
        "all_connections_busy_share": conns.get("all_busy_share"),
    }


def _pct(u: float | None) -> str:
    return "?" if u is None else f"{100 * u:.0f}%"


def _per_s(v: float | None) -> str:
    return "?" if v is None else f"{v:.4g}/s"


def sentence(ex: Bottleneck) -> str:
    """The "set by ..." line: the bottleneck, its U where the load was last kept up with,
    its bound against the measured capacity; the generator's share; the next bottleneck."""
    top, nxt, gen = ex["bottleneck"], ex.get("next"), ex["generator"]
    at = _per_s(ex["at_rate_per_s"])
    parts: list[str] = []
    if sheds := ex.get("sheds"):
        parts.append(
            shed_sentence(sheds)
            + f"; the busiest resource seen, {top['label']}, was {_pct(top['u'])} busy at {at}"
        )
    elif ex["unseen"]:
        parts.append(
            "set by something the run cannot see (a lock, the kernel's accept queue, a remote "
            f"dependency): the busiest resource seen, {top['label']}, was {_pct(top['u'])} busy "
            f"at {at}, and would allow {_per_s(top['bound_per_s'])}, above the "
            f"{_per_s(ex['measured_per_s'][1])} measured"
        )
    elif (top.get("u") or 0.0) < NEAR and ex["measured_per_s"][1] is None:
        parts.append(
            f"not reached: the busiest resource, {top['label']}, was {_pct(top['u'])} busy at "
            f"{at}, the highest rate measured; it would allow {_per_s(top['bound_per_s'])}"
        )
    else:
        line = f"set by {top['label']}, {_pct(top['u'])} busy at {at}"
        line += f"; its bound 1/D = {_per_s(top['bound_per_s'])}"
        if ex["agreement"] == "agrees":
            line += " agrees with the measured capacity"
        elif ex["agreement"] == "unclear":
            line += (
                f" is {ex['bound_ratio']:.2f} times the measured capacity, outside it by 10%, "
                "but its own interval reaches it: the run cannot tell"
                if ex.get("bound_ratio")
                else " lies outside the measured capacity, but its own interval reaches it"
            )
        elif ex["agreement"] == "below":
            line += (
                " is below the measured capacity (the time it was measured busy per request "
                "includes waiting, or its demand fell as the load rose)"
            )
        parts.append(line)
    if gen.get("cpu_percent") is not None:
        used = f"the generator used {gen['cpu_percent']:.0f}% of a core"
        if gen.get("cpu_wait_percent") is not None:
            used += f" and waited for one {gen['cpu_wait_percent']:.0f}% of the time"
        parts.append(used)
    if gen.get("connections_u") is not None and top["resource"] != "connections":
        parts.append(f"its connections were {_pct(gen['connections_u'])} busy")
    if nxt is not None and nxt.get("bound_per_s") and not ex["unseen"] and not ex.get("sheds"):
        gain = ex.get("doubling_gain")
        parts.append(
            f"next: {nxt['label']} ({_pct(nxt['u'])} busy, bound {_per_s(nxt['bound_per_s'])}"
            + (f"; doubling the first buys at most x{gain:.2f})" if gain else ")")
        )
    return "; ".join(parts)
