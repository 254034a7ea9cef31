"""The contract between the planes, as knee-node describes it: `contract.json` (next to this
file) is the output of `knee-node describe`, checked in. Nothing here is written by hand:
every name below is read from it, and `tests/test_contract.py` holds the file equal to what
the built knee-node prints.

What it holds, per system: the sample `op` codes and their names, the `flags` bits, fixed
sizes, http's `arg` codes, what each generic sample column holds (and the name
`knee.results.point_frame` gives it), and every config key a node reads (type, default,
bounds). Also the sample statuses, the record size, the load generator's keys, and the
fields of every event a node prints. No logic beyond reading: plain data.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NotRequired, TypedDict


class KeySpec(TypedDict):
    """One config key as described: its type, whether required, its default (any TOML
    value), its bounds and what else `knee-node describe` says of it."""

    type: str  # "int", "float", "str", "bool", "list", "object"
    required: bool
    default: Any
    min: float | None
    max: float | None
    min_exclusive: NotRequired[bool]
    choices: NotRequired[list[str]]
    derived: NotRequired[str]  # how a 0 in a spec is derived


class Column(TypedDict):
    name: str  # the column's name in the system's frames
    meaning: str


class PartContract(TypedDict):
    """A system's (or the load generator's) part of the contract."""

    ops: dict[str, int]
    flags: dict[str, int]
    sizes: dict[str, int]
    args: NotRequired[dict[str, int]]
    columns: dict[str, Column]
    constants: NotRequired[dict[str, Any]]  # ints, floats, lists and tables, by name
    keys: dict[str, KeySpec]


class Described(TypedDict):
    """The whole of `knee-node describe`."""

    systems: dict[str, PartContract]
    statuses: list[str]
    sample_bytes: int
    sample_layout: list[list[str]]  # [name, numpy type]
    load: PartContract
    events: dict[str, list[str]]
    timeseries: list[str]


#: The whole of `knee-node describe`.
DESCRIBED: Described = json.loads((Path(__file__).parent / "contract.json").read_text())
#: (dict[str, Any], not PartContract: knee.live.samples reads it with `(... or {}).get`.)
SYSTEMS: dict[str, Any] = DESCRIBED["systems"]
#: A sample record, field by field (name, numpy type), as knee-node's recorder writes it.
SAMPLE_LAYOUT: list[tuple[str, str]] = [(str(n), str(t)) for n, t in DESCRIBED["sample_layout"]]
#: The most clients a closed loop may have (load.clients), which the MVA model solves for.
MAX_CLIENTS: int = DESCRIBED["load"]["constants"]["max_clients"]
#: Most chat replicas and share peers one point may plan (the specs' bounds).
CHAT_MAX_REPLICAS: int = SYSTEMS["chat"]["constants"]["max_planned_replicas"]
SHARE_MAX_PEERS: int = SYSTEMS["share"]["constants"]["max_planned_peers"]
#: The load generator's part (`load.*` keys).
LOAD: PartContract = DESCRIBED["load"]
#: Sample statuses in code order.
STATUSES: tuple[str, ...] = tuple(DESCRIBED["statuses"])
SAMPLE_BYTES: int = DESCRIBED["sample_bytes"]
#: Each stdout event's common fields, by event name.
EVENT_FIELDS: dict[str, tuple[str, ...]] = {
    name: tuple(fields) for name, fields in DESCRIBED["events"].items()
}
#: The fields of `stats` and `progress` lines kept as time-series columns.
TIMESERIES_FIELDS: tuple[str, ...] = tuple(DESCRIBED["timeseries"])


def key(system: str | None, name: str) -> KeySpec:
    """A config key as described ("section.name"): type, required, default, min, max,
    min_exclusive, choices, derived. `system` None: the load generator's."""
    part = LOAD if system is None else SYSTEMS[system]
    return part["keys"][name].copy()


def maximum(system: str | None, name: str) -> float:
    """The max of a key described with one (as key(): `system` None, the load generator)."""
    top = key(system, name)["max"]
    if top is None:
        raise KeyError(f"{name}: described without a max")
    return top


def columns(system: str) -> dict[str, str]:
    """{record field: the column's name in the system's frames} for the renamed ones."""
    return {
        field: c["name"] for field, c in SYSTEMS[system]["columns"].items() if c["name"] != field
    }


def _ops(system: str) -> dict[int, str]:
    return {code: name for name, code in SYSTEMS[system]["ops"].items()}


def _op(system: str, name: str) -> int:
    return int(SYSTEMS[system]["ops"][name])


def _flag(system: str, name: str) -> int:
    return int(SYSTEMS[system]["flags"][name])


def _size(system: str, name: str) -> int:
    return int(SYSTEMS[system]["sizes"][name])


def _max(system: str, name: str) -> int:
    return int(SYSTEMS[system]["keys"][name]["max"])


# ------------------------------------------------------------------ echo, matrix

ECHO_OPS = _ops("echo")
MATRIX_OPS = _ops("matrix")
#: Reply flag: the result came from the server's result cache.
MATRIX_FLAG_CACHE_HIT = _flag("matrix", "cache_hit")

# ------------------------------------------------------------------ chat

CHAT_OPS = _ops("chat")
#: The operations that change the database (deduplicated and audited).
CHAT_WRITE_OPS = tuple(SYSTEMS["chat"]["constants"]["write_ops"])
CHAT_FLAG_NOT_PRIMARY = _flag("chat", "not_primary")
CHAT_FLAG_DUPLICATE = _flag("chat", "duplicate")

# ------------------------------------------------------------------ share

SHARE_OPS = _ops("share")
SHARE_FLAG_CHECKSUM_MISMATCH = _flag("share", "checksum_mismatch")
SHARE_FLAG_REPLICA = _flag("share", "replica")
SHARE_FLAG_FOR_OBTAIN = _flag("share", "for_obtain")
SHARE_FLAG_NOT_FOUND = _flag("share", "not_found")

# ------------------------------------------------------------------ stream

STREAM_OPS = _ops("stream")
STREAM_OP_BLOCK = _op("stream", "block")
#: Most block services one point may have (server.services is a list of them).
STREAM_MAX_SERVICES = _max("stream", "client.services")
STREAM_FLAG_REDUNDANT = _flag("stream", "redundant")
STREAM_FLAG_RETRANSMISSION = _flag("stream", "retransmission")
STREAM_FLAG_HEDGED = _flag("stream", "hedged")
#: A block is a square of RGB pixels, 3 bytes each.
STREAM_BLOCK_BYTES = _size("stream", "block_bytes")
STREAM_BLOCK_SIDE_PX = int(round((STREAM_BLOCK_BYTES // 3) ** 0.5))

# ------------------------------------------------------------------ slices

SLICES_OPS = _ops("slices")
SLICES_OP_ITEM = _op("slices", "item")
SLICES_ITEM_HEADER_BYTES = _size("slices", "item_header_bytes")
SLICES_REPLY_HEADER_BYTES = _size("slices", "reply_header_bytes")
SLICES_PN_LOG_RECORD_BYTES = _size("slices", "pn_log_record_bytes")
SLICES_MAX_SLICES = _max("slices", "server.slices")
SLICES_MAX_IMAGE_BYTES = _size("slices", "max_image_bytes")
SLICES_MAX_CONTROL_BYTES = _size("slices", "max_control_bytes")
#: PNs a point may plan: each is a process with its own Zenoh session. (The spec's bound on
#: its topology: no node reads it; knee-node states it beside the roles' own.)
SLICES_MAX_PNS: int = SYSTEMS["slices"]["constants"]["max_planned_pns"]
#: A PN's log record, field by field (name, numpy type), as the PN writes it.
SLICES_PN_LOG_LAYOUT: list[tuple[str, str]] = [
    (str(n), str(t)) for n, t in SYSTEMS["slices"]["constants"]["pn_log_layout"]
]
#: A PN log record's kinds by name.
SLICES_PN_LOG_KINDS: dict[str, int] = dict(SYSTEMS["slices"]["constants"]["pn_log_kinds"])

# ------------------------------------------------------------------ http

#: Why an http request failed (its sample's `arg`, read as `fail_reason`; 0: it did not).
HTTP_ARGS = {code: name for name, code in SYSTEMS["http"]["args"].items()}
HTTP_MAX_ENTRIES = _size("http", "max_entries")
HTTP_MAX_FILE_LINES = _size("http", "max_file_lines")
HTTP_MAX_REQUEST_BODY_BYTES = _size("http", "max_request_body_bytes")

# ------------------------------------------------------------------ grpc

#: Why a gRPC call failed (its sample's `arg`, read as `fail_reason`; 0: it did not):
#: http's reasons and gRPC's own (grpc_status, grpc_no_status, http_status, not_grpc).
GRPC_ARGS = {code: name for name, code in SYSTEMS["grpc"]["args"].items()}
#: gRPC's status codes by number (the samples' `flags`, read as `grpc_status`).
GRPC_CODES: dict[int, str] = dict(enumerate(SYSTEMS["grpc"]["constants"]["codes"]))
GRPC_MAX_METADATA = _size("grpc", "max_metadata")
