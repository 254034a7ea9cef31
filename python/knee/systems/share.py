"""share (report 002): peer-to-peer file sharing with a central or a distributed index.

A point runs, in order: the central index (central design only), peer-0..peer-{n-1}
(`knee-node serve share`: each generates its files into the point's scratch folder and
serves obtain; in the distributed design each is also an index partition), then one
recording client per peer (`knee-node load share`), whose samples are pooled. See
docs/share.md.
"""

from __future__ import annotations

from knee import contract
from knee.config_values import ConfigTable, ConfigValue, integer, items
from knee.params import Param, Point, RuleError, Sections, from_node
from knee.systems.base import NodePlan, System

#: The client's phases (docs/share.md), in their default order.
PHASES = tuple(contract.key("share", "client.phases")["default"])


def _share_rule(s: Sections) -> None:
    server, load = s["server"], s["load"]
    if server["design"] == "distributed" and server["index"] != "concurrent":
        raise RuleError(
            "server.index",
            f"the distributed design's partitions are concurrent maps; got {server['index']!r}",
        )
    if load["duration_s"] is None:
        raise RuleError("load.duration_s", "missing: share clients need a time bound")
    phases = items(s["driver"], "phases")
    if not phases or any(p not in PHASES for p in phases):
        raise RuleError("driver.phases", f"a list of {', '.join(PHASES)}; got {phases!r}")
    if load["schedule"] != "closed" or load["clients"] != 1:
        raise RuleError(
            "load.schedule",
            "share clients run closed loop, one per peer: schedule = 'closed', clients = 1",
        )


def _topology(point: Point) -> list[NodePlan]:
    server, driver, load = point.server, point.driver, point.load
    n, seed = integer(server, "peers"), point.experiment["seed"]
    central = server["design"] == "central"
    plans: list[NodePlan] = []
    if central:
        index: ConfigTable = {"role": "index", "index": server["index"]}
        if server["index"] == "sqlite-global-lock":
            index["db_path"] = "{scratch}/index.sqlite3"
        index["max_entries"] = server["max_index_entries"]
        plans.append(NodePlan("index", "serve", {"server": index}))
    for k in range(n):
        peer = {
            "role": "peer",
            "index": "none" if central else "concurrent",
            "share_dir": f"{{scratch}}/peer-{k}",
            "peer_index": k,
            "files": server["files"],
            "file_bytes": server["file_bytes"],
            "seed": seed,
            "max_entries": server["max_index_entries"],
            "corrupt_every": server["corrupt_every"],
        }
        plans.append(NodePlan(f"peer-{k}", "serve", {"server": peer}))
    peers: list[ConfigValue] = [f"{{addr:peer-{k}}}" for k in range(n)]
    for k in range(n):
        client: ConfigTable = {
            "peer_index": k,
            "peers": peers,
            "ops": driver["ops"],
            "seed": seed,
            "timeout_ms": load["timeout_ms"],
            "duration_s": load["duration_s"],
            "warmup_s": load["warmup_s"],
            "phases": list(items(driver, "phases")),
        }
        if central:
            client["index"] = "{addr:index}"
        if driver["download"]:
            client["download_dir"] = f"{{scratch}}/peer-{k}-downloads"
        plans.append(NodePlan(f"client-{k}", "load", client, records=True))
    return plans


SYSTEM = System(
    name="share",
    parts=(("index", "the central index"), ("peer-*", "peer {n}"), ("client-*", "client {n}")),
    summary="peer-to-peer file sharing, central or distributed index (report 002)",
    server={
        "design": Param(
            "str",
            "distributed",
            "central: one index server; distributed: hash-partitioned over the peers",
            choices=("central", "distributed"),
        ),
        "index": from_node(
            "share",
            "server.index",
            "central index: sqlite-global-lock (the report's baseline) or concurrent",
            # A peer's "none" is the topology's choice, not the spec's.
            choices=("sqlite-global-lock", "concurrent"),
            default="concurrent",
        ),
        "peers": Param(
            "int", 2, "peers (each with one client)", min=1, max=contract.SHARE_MAX_PEERS
        ),
        # A peer shares files; the central index's node has none (the node's 0).
        "files": from_node("share", "server.files", "files each peer shares", default=50, min=1),
        "file_bytes": from_node(
            "share", "server.file_bytes", "size of each file", default=1024, min=1
        ),
        "max_index_entries": from_node(
            "share",
            "server.max_entries",
            "entries each index (central, or a peer's partition) holds; a register beyond "
            "is refused",
        ),
        "corrupt_every": from_node(
            "share",
            "server.corrupt_every",
            "fault injection: every Nth obtain a peer serves has one byte flipped, which "
            "the client's checksum must refuse (0: none)",
        ),
    },
    driver={
        "ops": from_node(
            "share",
            "client.ops",
            "operations per phase (register, search, obtain)",
            default=100,  # the node requires it
        ),
        "download": Param(
            "bool", False, "write downloads into the scratch folder (else verify and discard)"
        ),
        "phases": from_node(
            "share",
            "client.phases",
            "the phases each client runs, in order (share-chaos leaves out unregister: its "
            "barrier waits for markers that a killed owner and replica may both have lost)",
        ),
    },
    rules=(_share_rule,),
    topology=_topology,
)
