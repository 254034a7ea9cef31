"""The spec's hosts, placement, limits and load generators: checked before anything runs,
one line per problem; and several generators really splitting a point (real nodes)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from test_runner import only_run_dir, run_knee, write_spec

from knee.hosts.spec import Placement
from knee.spec import SpecError, load_spec
from knee.systems import SYSTEMS, plan_nodes

ECHO = """
[experiment]
name = "h"
system = "echo"

[load]
schedule = "poisson"
rate_per_s = 300
duration_s = 3
warmup_s = 0.5
"""

NETNS = """
[hosts.a]
kind = "netns"
rate_mbit = 100

[hosts.b]
kind = "netns"
"""


def spec_error(tmp_path: Path, text: str) -> SpecError:
    with pytest.raises(SpecError) as info:
        load_spec(write_spec(tmp_path, text))
    assert "\n" not in str(info.value)
    return info.value


def nodes_of(path: Path) -> dict[str, str]:
    spec = load_spec(path)
    point = spec.points[0]
    names = [p.name for p in plan_nodes(SYSTEMS[spec.experiment["system"]], point)]
    return spec.placement.for_point(point.placement).place(names)


def test_without_hosts_every_node_is_local(tmp_path: Path) -> None:
    spec = load_spec(write_spec(tmp_path, ECHO))
    assert spec.placement == Placement()
    assert nodes_of(write_spec(tmp_path, ECHO)) == {"server": "local", "load": "local"}


def test_placement_puts_nodes_on_hosts_and_deals_lists_round_robin(tmp_path: Path) -> None:
    text = ECHO.replace("duration_s = 3", "duration_s = 3\ngenerators = 3") + NETNS
    text += '[placement]\nserver = "a"\n"load-*" = ["a", "b"]\n'
    assert nodes_of(write_spec(tmp_path, text)) == {
        "server": "a",
        "load-0": "a",
        "load-1": "b",
        "load-2": "a",
    }
    resolved = load_spec(write_spec(tmp_path, text)).resolved
    assert resolved["hosts"]["a"] == {"kind": "netns", "description": "", "rate_mbit": 100.0}
    assert resolved["placement"] == {"server": "a", "load-*": ["a", "b"]}


def test_a_series_places_its_own_nodes(tmp_path: Path) -> None:
    text = (
        ECHO
        + NETNS
        + """
[series.lan]
placement = { "*" = "a" }
[series.loopback]
"""
    )
    spec = load_spec(write_spec(tmp_path, text))
    lan, loop = spec.points
    names = ["server", "load"]
    assert spec.placement.for_point(lan.placement).place(names) == {"server": "a", "load": "a"}
    assert spec.placement.for_point(loop.placement).place(names) == {
        "server": "local",
        "load": "local",
    }


BAD_HOSTS = [
    (
        '[placement]\nserver = "nope"\n',
        "placement.server",
        "unknown host 'nope'; hosts: local, a, b",
    ),
    (
        '[hosts.x]\nkind = "vm"\n',
        "hosts.x.kind",
        "expected one of local, netns, ssh, docker, swarm, got 'vm'",
    ),
    (
        '[hosts.x]\nkind = "netns"\nrate_mbit = -1\n',
        "hosts.x.rate_mbit",
        "expected a number >= 0.01 and <= 100000, got -1 (integer)",
    ),
    (
        '[hosts.x]\nkind = "netns"\nloss_percent = 101\n',
        "hosts.x.loss_percent",
        "expected a number >= 0 and <= 100, got 101 (integer)",
    ),
    ('[hosts.x]\nkind = "ssh"\n', "hosts.x.address", "missing (a string)"),
    (
        '[hosts.x]\nkind = "netns"\nrate = 10\n',
        "hosts.x.rate",
        "unknown key; expected one of: kind, description, cpu_cores, cpuset, memory_mb, "
        "rate_mbit, loss_percent, delay_ms (did you mean 'rate_mbit'?)",
    ),
    (
        "[limits.server]\ncpu_cores = 0\n",
        "limits.server.cpu_cores",
        "expected a number >= 0.01 and <= 1024, got 0 (integer)",
    ),
    (
        '[placement]\nserver = "a"\n',
        "placement",
        "point 'main' puts nodes on networks that cannot reach each other (server on the "
        "emulated network; load on this machine's loopback); place every node of a point on "
        "one network",
    ),
]


@pytest.mark.parametrize(("extra", "key", "message"), BAD_HOSTS)
def test_bad_hosts_are_one_line_errors(tmp_path: Path, extra: str, key: str, message: str) -> None:
    err = spec_error(tmp_path, ECHO + NETNS + extra)
    assert (err.key, err.message) == (key, message)


def test_generators_split_the_rate_clients_and_requests() -> None:
    from knee.systems.base import NodePlan, split_generators

    plan = NodePlan(
        "load",
        "load",
        {
            "schedule": {"kind": "poisson", "rate_per_s": 300.0},
            "requests": 10,
            "seed": 1,
            "driver": {"client_prefix": "load"},
        },
        records=True,
    )
    server = NodePlan("server", "serve", {})
    out = split_generators([server, plan], 3)
    assert [p.name for p in out] == ["server", "load-0", "load-1", "load-2"]
    loads = [p.config for p in out[1:]]
    assert [c["schedule"]["rate_per_s"] for c in loads] == [100.0, 100.0, 100.0]
    assert [c["requests"] for c in loads] == [4, 3, 3]
    assert len({c["seed"] for c in loads}) == 3
    assert [c["driver"]["client_prefix"] for c in loads] == ["load-0", "load-1", "load-2"]
    assert plan.config["schedule"]["rate_per_s"] == 300.0  # the plan itself is untouched


def test_generators_that_cannot_split_are_refused(tmp_path: Path) -> None:
    closed = ECHO.replace('schedule = "poisson"', 'schedule = "closed"\nclients = 2')
    err = spec_error(tmp_path, closed.replace("duration_s = 3", "duration_s = 3\ngenerators = 3"))
    assert err.key == "load.generators"
    assert err.message == "3 generators cannot share 2 clients: give each one (in point 'main')"


def test_three_generators_share_a_point_and_are_pooled(tmp_path: Path) -> None:
    """Three real load generators at 300/s in all: each sends about a third, every request
    of each is in samples.parquet, and the point's rate is what they sent together."""
    text = ECHO.replace("duration_s = 3", "duration_s = 3\ngenerators = 3")
    out = tmp_path / "runs"
    proc = run_knee("run", str(write_spec(tmp_path, text)), "--out", str(out), "--no-report")
    assert proc.returncode == 0, proc.stderr
    run_dir = only_run_dir(out)
    point = json.loads((run_dir / "summary.json").read_text())["points"][0]
    gens = point["generators"]
    assert [g["node"] for g in gens] == ["load-0", "load-1", "load-2"]
    samples = pd.read_parquet(run_dir / "samples.parquet")
    post = samples[~samples["warmup"]]
    counts = post[post["sent_ns"] >= 0].groupby("node", observed=True).size()
    for g in gens:
        assert g["target_rate_per_s"] == pytest.approx(100.0)
        assert g["sent"] == counts[g["node"]]
        assert g["sender"]["name"] == "sender"
    assert sum(g["sent"] for g in gens) == point["sent"]
    # Pooled, not averaged: the point's p99 is the p99 of every generator's requests.
    assert point["count"] == len(post)
    configs = [
        json.loads((run_dir / "nodes" / f"load-{i}.p000.json").read_text()) for i in range(3)
    ]
    assert [c["schedule"]["rate_per_s"] for c in configs] == [100.0] * 3
    record = json.loads((run_dir / "points" / "p000.json").read_text())
    assert {n["name"]: n["host"] for n in record["topology"]} == {
        "server": "local",
        "load-0": "local",
        "load-1": "local",
        "load-2": "local",
    }
