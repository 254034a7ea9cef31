"""What knee-node writes into the samples of each system, as plain data: operation codes and
their names (the `op` column), flag bits (the `flags` column) and fixed sizes.

Each value is written once in Python: `knee.systems` (which plans the nodes) and the analysis
and report (which read a run directory) both import it from here. The values mirror
crates/knee-node/src/systems/<system>; `knee-node describe` is the reference. No imports, no
logic: plain data only. `tests/test_contract.py` holds every constant here to `knee-node describe`,
by name: `<SYSTEM>_OPS` ({code: name}), `<SYSTEM>_FLAG_<NAME>` and `<SYSTEM>_<SIZE NAME>`.
"""

from __future__ import annotations

# ------------------------------------------------------------------ echo (echo.rs)

ECHO_OPS = {1: "echo"}

# ------------------------------------------------------------------ matrix (matrix/mod.rs)

MATRIX_OPS = {1: "power"}
#: Reply flag: the result came from the server's result cache.
MATRIX_FLAG_CACHE_HIT = 1

# ------------------------------------------------------------------ chat (chat/mod.rs)

#: Sample `op` codes and their names.
CHAT_OPS = {1: "login", 2: "logout", 3: "join", 4: "post", 5: "fetch", 6: "audit"}
#: The operations that change the database (deduplicated and audited).
CHAT_WRITE_OPS = (1, 2, 3, 4)
#: Reply flag: the replica asked is not the primary.
CHAT_FLAG_NOT_PRIMARY = 1
#: Reply flag: a retried request that was already applied; the stored result came back.
CHAT_FLAG_DUPLICATE = 2

# ------------------------------------------------------------------ share (share/mod.rs)

#: Sample `op` codes of the client's operations and their names.
SHARE_OPS = {1: "register", 2: "unregister", 3: "search", 4: "obtain"}
#: Sample flag: a download whose checksum differs from the index's.
SHARE_FLAG_CHECKSUM_MISMATCH = 1
#: Sample flag: the owner of the key was down; its replica answered (distributed design).
SHARE_FLAG_REPLICA = 2
#: Sample flag: a search made to find a peer for an obtain (not a search-phase operation).
SHARE_FLAG_FOR_OBTAIN = 4
#: Sample flag: a search that found nobody although only registered names are searched.
SHARE_FLAG_NOT_FOUND = 8

# ------------------------------------------------------------------ stream (stream/*.rs)

#: Sample `op` code of a block request (the only operation).
STREAM_OP_BLOCK = 0
STREAM_OPS = {STREAM_OP_BLOCK: "block"}
#: Most block services one point may have (server.services is a list of them).
STREAM_MAX_SERVICES = 64
#: Sample flag: the block was already done (the losing copy of a hedged request).
STREAM_FLAG_REDUNDANT = 1
#: Sample flag: a retransmission after a timeout.
STREAM_FLAG_RETRANSMISSION = 2
#: Sample flag: a copy sent to a second service (hedging).
STREAM_FLAG_HEDGED = 4
#: A block is 16 x 16 RGB pixels, 3 bytes each.
STREAM_BLOCK_SIDE_PX = 16
STREAM_BLOCK_BYTES = STREAM_BLOCK_SIDE_PX * STREAM_BLOCK_SIDE_PX * 3

# ------------------------------------------------------------------ slices (slices/*.rs)

#: Sample `op` code of an item (the only operation); the sample's `flags` hold the item's
#: publications (min(attempts, 65535)), `service` the PN that served it, `arg` its slice
#: and `detail_ns` the epoch of the slice in the reply.
SLICES_OP_ITEM = 0
SLICES_OPS = {SLICES_OP_ITEM: "item"}
#: ClientTopic header: magic u16, version u8, kind u8, slice u32, sender u32, id u64,
#: attempt u16, width u16, height u16, pad u16, timestamp_ns u64; then the RGB bytes.
SLICES_ITEM_HEADER_BYTES = 36
#: ServerTopic header: magic, version, kind, sender u32, pn u32, id u64, slice u32, pad u32,
#: epoch u64, timestamp_ns u64, queue_ns u64, service_ns u64, gray_checksum u64; then "OK".
SLICES_REPLY_HEADER_BYTES = 68
#: A PN's log of processed items: pn u32, slice u32, sender u32, kind u32 (0 processed,
#: 1 held in its queue when it stopped), id u64, epoch u64, done_ns u64 (little-endian).
SLICES_PN_LOG_RECORD_BYTES = 40
#: Largest server.slices and driver.image_bytes the nodes accept, and a control message's
#: largest size (a handoff's owed ids).
SLICES_MAX_SLICES = 65_536
SLICES_MAX_IMAGE_BYTES = 4 << 20
SLICES_MAX_CONTROL_BYTES = 4 << 20
#: PNs a point may plan: each is a process with its own Zenoh session.
SLICES_MAX_PNS = 64

# ------------------------------------------------------------------ http (http/*.rs)

#: An http sample's `op` is its entry in `[[driver.requests]]` (no fixed names), its
#: `flags` the HTTP status code, its `service` 1 when the response carried the Server-Timing
#: entries of the server time, its `queue_ns` the time it waited for its connection to be
#: made (TCP connect and TLS handshake; 0: the connection was open), and its `arg` why it
#: failed (0: it did not):
HTTP_ARGS = {
    1: "malformed",
    2: "header_too_large",
    3: "body_too_large",
    4: "bad_chunk",
    5: "closed_before_reply",
    6: "closed_mid_reply",
    7: "extra_bytes",
    8: "timeout",
    9: "connect",
    10: "send",
    11: "upgrade",
    12: "connect_timeout",
    13: "tls",
    14: "max_outstanding",
    15: "stopped",
}
#: Entries of the request table (each a sample op), requests of one requests file, and a
#: request body's largest size.
HTTP_MAX_ENTRIES = 256
HTTP_MAX_FILE_LINES = 1_000_000
HTTP_MAX_REQUEST_BODY_BYTES = 16 << 20
