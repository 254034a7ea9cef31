"""share (report 002): every operation for both index designs with real peers, the owner's
failure in the distributed design, and bad input (names, changed files)."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import Processes, Server, StartServer
from wire_client import STATUS_BAD_REQUEST, STATUS_OK, STATUS_UNKNOWN_OP, Client, wait_closed

import knee
from knee.analysis import share as share_analysis
from knee.contract import SHARE_FLAG_CHECKSUM_MISMATCH as FLAG_CHECKSUM_MISMATCH
from knee.contract import SHARE_FLAG_FOR_OBTAIN as FLAG_FOR_OBTAIN
from knee.contract import SHARE_FLAG_REPLICA as FLAG_REPLICA
from knee.contract import SHARE_OPS as OPS

OP_REGISTER, OP_UNREGISTER, OP_SEARCH, OP_OBTAIN, OP_LIST = 1, 2, 3, 4, 5
U16, U64 = struct.Struct("<H"), struct.Struct("<Q")
CLIENT_TIMEOUT_S = 60.0


def s(text: str | bytes) -> bytes:
    raw = text.encode() if isinstance(text, str) else text
    return U16.pack(len(raw)) + raw


def register_body(peer: str, name: str | bytes, size: int = 1024, checksum: int = 7) -> bytes:
    return s(peer) + s(name) + U64.pack(size) + U64.pack(checksum)


def search(c: Client, name: str) -> list[tuple[str, int, int]]:
    reply = c.request(OP_SEARCH, s(name))
    assert reply.status == STATUS_OK, reply.reason
    (count,) = U16.unpack_from(reply.body)
    out, at = [], 2
    for _ in range(count):
        (n,) = U16.unpack_from(reply.body, at)
        peer = reply.body[at + 2 : at + 2 + n].decode()
        size, checksum = struct.unpack_from("<QQ", reply.body, at + 2 + n)
        out.append((peer, size, checksum))
        at += 2 + n + 16
    return out


def peer_config(tmp_path: Path, k: int, *, index: str, files: int = 3, size: int = 4096) -> dict:
    return {
        "role": "peer",
        "index": index,
        "share_dir": str(tmp_path / f"peer-{k}"),
        "peer_index": k,
        "files": files,
        "file_bytes": size,
        "seed": 1,
    }


def start_peers(
    start_server: StartServer, tmp_path: Path, n: int, *, index: str, **kw: Any
) -> list[Server]:
    peers = [start_server("share", peer_config(tmp_path, k, index=index, **kw)) for k in range(n)]
    for p in peers:
        p.wait_stats(lambda e: e.get("files_ready") is True, timeout_s=30)
    return peers


def run_client(
    knee_node: str, processes: Processes, tmp_path: Path, tag: str, **config: Any
) -> tuple[dict, np.ndarray, str]:
    """Runs `knee-node load share` to its end: its done event, samples and log."""
    config = {
        "seed": 1,
        "duration_s": 45,
        "timeout_ms": 5000,
        "samples_path": str(tmp_path / f"{tag}.samples.bin"),
        "histogram_path": str(tmp_path / f"{tag}.histogram.csv"),
        **config,
    }
    proc = processes.spawn(
        [knee_node, "load", "share", "--name", tag, "--config", json.dumps(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    out, err = proc.communicate(timeout=CLIENT_TIMEOUT_S)
    log = err.decode(errors="replace")
    assert proc.returncode == 0, log
    events = [json.loads(line) for line in out.decode().splitlines() if line.strip()]
    (done,) = [e for e in events if e["event"] == "done"]
    return done, knee.results.read_sample_records(config["samples_path"]), log


# --- every operation, both designs, through `knee run` ----------------------------------

SPEC = """
[experiment]
name = "share-test"
system = "share"

[server]
peers = 3
files = 4
file_bytes = 20000

[driver]
ops = 30
download = true

[load]
schedule = "closed"
duration_s = 60
warmup_s = 0

[series.central]
server = {{ design = "central" }}
sweep = {{ "server.index" = ["sqlite-global-lock", "concurrent"] }}

[series.distributed]
server = {{ design = "distributed" }}
"""


def test_every_operation_for_both_designs_through_knee_run(tmp_path: Path) -> None:
    spec = tmp_path / "share.toml"
    spec.write_text(SPEC.format())
    proc = subprocess.run(
        [sys.executable, "-m", "knee.cli", "run", str(spec), "--out", str(tmp_path / "runs")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (run_dir,) = (tmp_path / "runs").iterdir()
    run = knee.open_run(run_dir)
    samples = run.samples
    assert sorted(samples["point"].unique()) == [0, 1, 2]
    assert (samples["status"].astype(str) == "ok").all()
    for point, df in samples.groupby("point"):
        ops = df["op"].map(OPS)
        counts = ops.value_counts().to_dict()
        # 3 clients x (30 registers, 30 + 30 searches, 30 obtains, 4 unregisters)
        assert counts == {"register": 90, "search": 180, "obtain": 90, "unregister": 12}, point
        obtains = df[ops == "obtain"]
        assert (obtains["bytes_in"] >= 20000).all()
        # Downloads go to other peers than the client's own.
        assert (obtains["service"] != obtains["client"]).all()
        assert ((df["flags"] & FLAG_FOR_OBTAIN) != 0).sum() == 90
    # The figures' data: one row per point and operation, with the point's parameters.
    times = share_analysis.response_time_vs_nodes(run)
    assert len(times) == 12 and set(times["design"]) == {"central", "distributed"}
    assert (times["mean_ms"] > 0).all() and (times["peers"] == 3).all()
    rates = share_analysis.ops_per_second(run)
    assert (rates["per_client_per_s"] > 0).all() and (rates["aggregate_per_s"] > 0).all()
    sizes = share_analysis.obtain_vs_file_size(run)
    assert list(sizes["count"]) == [90, 90, 90] and (sizes["aggregate_mb_per_s"] > 0).all()
    assert share_analysis.replica_fallbacks(run)["replica"].sum() == 0
    # Scratch (generated files, downloads, the SQLite file) is removed after each point.
    assert not any((run_dir / "scratch").glob("*/peer-0/*"))


# --- the operations on the wire ----------------------------------------------------------


@pytest.mark.parametrize("index", ["sqlite-global-lock", "concurrent"])
def test_central_index_operations(start_server: StartServer, index: str) -> None:
    srv = start_server("share", {"role": "index", "index": index})
    with Client(srv.addr) as c:
        assert c.request(OP_REGISTER, register_body("127.0.0.1:1", "a.bin")).status == STATUS_OK
        assert c.request(OP_REGISTER, register_body("127.0.0.1:2", "a.bin", 5, 9)).status == 0
        assert c.request(OP_REGISTER, register_body("127.0.0.1:1", "a.bin", 6, 8)).status == 0
        assert sorted(search(c, "a.bin")) == [("127.0.0.1:1", 6, 8), ("127.0.0.1:2", 5, 9)]
        reply = c.request(OP_UNREGISTER, s("127.0.0.1:1") + s("a.bin"))
        assert (reply.status, reply.body) == (STATUS_OK, b"\x01")
        assert search(c, "a.bin") == [("127.0.0.1:2", 5, 9)]
        assert search(c, "missing.bin") == []
        # SQL metacharacters are data.
        evil = "x'); DROP TABLE files; --"
        assert c.request(OP_REGISTER, register_body("127.0.0.1:3", evil)).status == STATUS_OK
        assert search(c, evil) == [("127.0.0.1:3", 1024, 7)]
        assert search(c, "a.bin") == [("127.0.0.1:2", 5, 9)]
        reply = c.request(OP_OBTAIN, s("a.bin"))
        assert reply.status == STATUS_UNKNOWN_OP and "shares no files" in reply.reason


def test_peer_lists_and_streams_its_files(start_server: StartServer, tmp_path: Path) -> None:
    (peer,) = start_peers(start_server, tmp_path, 1, index="none", files=2, size=3_000_000)
    with Client(peer.addr) as c:
        listing = c.request(OP_LIST)
        assert listing.status == STATUS_OK and listing.body[0] == 1
        for name in ("f0-0000.bin", "f0-0001.bin"):
            reply = c.request(OP_OBTAIN, s(name))
            assert reply.status == STATUS_OK, reply.reason
            (size,) = U64.unpack(reply.body)
            on_disk = (tmp_path / "peer-0" / name).read_bytes()
            assert size == len(on_disk) == 3_000_000
            got = bytearray()
            while len(got) < size:
                got += c.sock.recv(size - len(got))
            assert bytes(got) == on_disk
        # A central-design peer has no index.
        assert c.request(OP_SEARCH, s("f0-0000.bin")).status == STATUS_UNKNOWN_OP


# --- the distributed design: the owner's failure -----------------------------------------


def test_owner_failure_falls_back_to_the_replica(
    knee_node: str, processes: Processes, start_server: StartServer, tmp_path: Path
) -> None:
    peers = start_peers(start_server, tmp_path, 3, index="concurrent", files=20)
    addrs = [p.addr for p in peers]
    common = {"peers": addrs, "ops": 20, "search_peers": [0]}
    done, rec, _ = run_client(
        knee_node, processes, tmp_path, "reg", peer_index=0, phases=["register"], **common
    )
    assert done["ok"] == 20 and (rec["flags"] & FLAG_REPLICA == 0).all()
    # Peer 1 owns some of peer 0's names (and replicates peer 0's partition).
    assert peers[1].stop() == 0
    done, rec, _ = run_client(
        knee_node, processes, tmp_path, "after", peer_index=2, phases=["search", "obtain"], **common
    )
    assert done["errors"] == done["drops"] == done["timeouts"] == 0
    assert len(rec) == 60 and (rec["status"] == 0).all()
    fell_back = rec[(rec["flags"] & FLAG_REPLICA) != 0]
    assert len(fell_back) > 0 and done["replica_fallbacks"] == len(fell_back)
    assert set(fell_back["service"]) == {2}  # peer 1's replica is peer 2
    assert set(rec[rec["op"] == OP_OBTAIN]["service"]) == {0}


# --- bad input --------------------------------------------------------------------------


def test_bad_names_are_refused_and_the_peer_keeps_serving(
    start_server: StartServer, tmp_path: Path
) -> None:
    (peer,) = start_peers(start_server, tmp_path, 1, index="concurrent", files=1)
    outside = tmp_path / "secret.txt"
    outside.write_text("not shared")
    os.symlink(outside, tmp_path / "peer-0" / "escape.bin")
    os.symlink("f0-0000.bin", tmp_path / "peer-0" / "inside.bin")
    cases = {
        b"../secret.txt": "'..'",
        str(outside).encode(): "absolute path",
        b"escape.bin": "outside the shared folder",
        b"f0\x00.bin": "NUL",
        b"x" * 256: "exceeds the limit of 255",
        b"sub/f0-0000.bin": "plain file name",
        b"": "empty",
        b"missing.bin": "No such file",
    }
    with Client(peer.addr) as c:
        for name, why in cases.items():
            reply = c.request(OP_OBTAIN, s(name))
            assert reply.status == STATUS_BAD_REQUEST and why in reply.reason, (name, reply)
            reply = c.request(OP_REGISTER, register_body("127.0.0.1:1", name))
            if name not in (b"missing.bin", b"escape.bin"):  # the index never reads the disk
                assert reply.status == STATUS_BAD_REQUEST and why in reply.reason, (name, reply)
        # A symlink that stays inside the folder is served.
        reply = c.request(OP_OBTAIN, s("inside.bin"))
        assert reply.status == STATUS_OK
        (size,) = U64.unpack(reply.body)
        while size:
            size -= len(c.sock.recv(size))
        # Truncated and over-long bodies, an unknown operation, a bad peer address.
        for op, body in [
            (OP_OBTAIN, b"\x05\x00ab"),
            (OP_SEARCH, s("a") + b"extra"),
            (OP_REGISTER, s("") + s("a") + bytes(16)),
            (OP_REGISTER, s("p" * 65) + s("a") + bytes(16)),
        ]:
            reply = c.request(op, body)
            assert reply.status == STATUS_BAD_REQUEST, (op, body, reply)
        assert c.request(99).status == STATUS_UNKNOWN_OP
        assert c.request(OP_LIST).status == STATUS_OK
    # An oversized frame closes that connection only: EOF or a reset, not a read timeout.
    with Client(peer.addr) as c:
        c.sock.sendall(struct.pack("<I", 1 << 31))
        assert wait_closed(c.sock), "the peer kept the oversized frame's connection open"
    assert peer.alive()
    with Client(peer.addr) as c:
        assert c.request(OP_LIST).status == STATUS_OK


def test_unknown_config_keys_are_refused(knee_node: str, tmp_path: Path) -> None:
    bad = {"server": {"role": "peer", "index": "none", "share_dir": str(tmp_path), "x": 1}}
    proc = subprocess.run(
        [knee_node, "serve", "share", "--config", json.dumps(bad)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 2 and "unknown field `x`" in proc.stderr


@pytest.mark.parametrize("change", ["same size", "shorter"])
def test_a_file_changed_after_registration_is_a_reported_mismatch(
    knee_node: str, processes: Processes, start_server: StartServer, tmp_path: Path, change: str
) -> None:
    index = start_server("share", {"role": "index", "index": "sqlite-global-lock"})
    (peer,) = start_peers(start_server, tmp_path, 1, index="none", files=2, size=10_000)
    common = {"peers": [peer.addr], "index": index.addr, "peer_index": 0, "ops": 10}
    run_client(knee_node, processes, tmp_path, "reg", phases=["register"], **common)
    for path in (tmp_path / "peer-0").iterdir():
        data = bytearray(path.read_bytes())
        if change == "same size":
            data[5000] ^= 0xFF
        else:
            del data[-10:]
        path.write_bytes(bytes(data))
    done, rec, log = run_client(knee_node, processes, tmp_path, "get", phases=["obtain"], **common)
    obtains = rec[rec["op"] == OP_OBTAIN]
    assert len(obtains) == 10
    assert (obtains["status"] == 3).all()  # error, never ok
    assert ((obtains["flags"] & FLAG_CHECKSUM_MISMATCH) != 0).all()
    assert done["checksum_mismatches"] == 10
    assert "checksum mismatch" in log
