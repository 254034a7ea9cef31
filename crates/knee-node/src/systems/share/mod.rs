//! share (report 002): peer-to-peer file sharing with a central or a distributed index.
//!
//! Nodes (`docs/share.md`):
//! - `serve share` with `role = "peer"`: generates its shared files (seeded, streamed, with
//!   their xxh3 checksums) into its shared folder, serves `obtain` (a reply header, then the
//!   file streamed with `sendfile(2)`) and `list`; in the distributed design it also holds
//!   an index partition (and the replica of the previous partition).
//! - `serve share` with `role = "index"`: the central index, `sqlite-global-lock` (the
//!   report's baseline) or `concurrent` (a sharded in-memory map).
//! - `load share`: the client of one peer. It registers its peer's files, searches, obtains
//!   from a peer that search returned (verifying the checksum carried by the index) and
//!   unregisters, recording one sample per operation.

pub mod client;
pub mod codec;
mod conn;
mod fault;
mod files;
pub(crate) mod index;
mod names;
mod route;
pub mod server;
mod sqlite_index;

/// Peers a spec may plan for one point (each a server and a client process), below what a
/// node accepts (`client::MAX_PEERS`). No node reads it; the contract carries it to the
/// spec's rules.
pub const MAX_PLANNED_PEERS: u64 = 64;

pub const SYSTEM: super::System = super::System {
    name: "share",
    serve: |opts| super::framed(opts, server::build(super::parse(&opts.server, "server")?)?),
    client: client::role,
    contract: || {
        use crate::contract::Key;
        use crate::load::config::{MAX_DURATION_S, MAX_WAIT_MS};
        // `list` is not here: the client asks its own peer once, unrecorded, before the start.
        crate::contract::SystemContract::new()
            .op("register", OP_REGISTER)
            .op("unregister", OP_UNREGISTER)
            .op("search", OP_SEARCH)
            .op("obtain", OP_OBTAIN)
            .flag("checksum_mismatch", FLAG_CHECKSUM_MISMATCH)
            .flag("replica", FLAG_REPLICA)
            .flag("for_obtain", FLAG_FOR_OBTAIN)
            .flag("not_found", FLAG_NOT_FOUND)
            .constant("max_planned_peers", MAX_PLANNED_PEERS)
            .column("arg", "arg", "obtain: the file's size in KiB")
            .column(
                "flags",
                "flags",
                "checksum_mismatch, replica, for_obtain, not_found",
            )
            .column(
                "service",
                "service",
                "the index partition (255: the central index)",
            )
            .reads::<server::ShareServerConfig>("server")
            .key("server.role", Key::one_of(&["peer", "index"]).required())
            .key(
                "server.index",
                Key::one_of(&["sqlite-global-lock", "concurrent", "none"]).required(),
            )
            .key("server.db_path", Key::str())
            .key("server.share_dir", Key::str())
            .key("server.peer_index", Key::int(0, client::MAX_PEERS - 1).default(0))
            .key(
                "server.files",
                Key::int(0, server::MAX_FILES).default(0).checked(),
            )
            .key(
                "server.file_bytes",
                Key::int(0, server::MAX_FILE_BYTES).default(0).checked(),
            )
            .key("server.seed", Key::int(0, u64::MAX).default(0))
            .key(
                "server.max_entries",
                Key::int(1, index::MAX_ENTRIES)
                    .default(index::MAX_ENTRIES)
                    .checked(),
            )
            .key("server.corrupt_every", Key::int_from(0).default(0))
            .reads::<client::ClientConfig>("client")
            .key("client.peer_index", Key::int(0, client::MAX_PEERS - 1).required())
            .key("client.peers", Key::list(Some(client::MAX_PEERS)).required())
            .key("client.index", Key::str())
            .key("client.ops", Key::int(1, client::MAX_OPS).required())
            .key(
                "client.phases",
                Key::list(Some(4)).default(client::default_phases()),
            )
            .key("client.search_peers", Key::list(Some(client::MAX_PEERS)))
            .key("client.seed", Key::int(0, u64::MAX).default(0))
            .key(
                "client.timeout_ms",
                Key::float(0, MAX_WAIT_MS)
                    .above()
                    .default(client::default_timeout_ms()),
            )
            .key(
                "client.duration_s",
                Key::float(0, MAX_DURATION_S).above().required(),
            )
            .key("client.warmup_s", Key::float(0, MAX_DURATION_S).default(0.0))
            .key("client.download_dir", Key::str())
            .key("client.samples_path", Key::str().required())
            .key("client.histogram_path", Key::str().required())
    },
};

/// Operation codes on the wire and in the samples' `op` column.
pub const OP_REGISTER: u16 = 1;
pub const OP_UNREGISTER: u16 = 2;
pub const OP_SEARCH: u16 = 3;
pub const OP_OBTAIN: u16 = 4;
/// A peer's own files with their sizes and checksums (its client registers them).
pub const OP_LIST: u16 = 5;

/// Sample flags (bits of the `flags` column).
pub const FLAG_CHECKSUM_MISMATCH: u16 = 1;
/// The owner of the key was down; its replica answered (distributed design).
pub const FLAG_REPLICA: u16 = 2;
/// A search made to find a peer for an obtain (not a search-phase operation).
pub const FLAG_FOR_OBTAIN: u16 = 4;
/// A search that found nobody although the workload only searches registered names.
pub const FLAG_NOT_FOUND: u16 = 8;

/// `service` column of index operations answered by the central index.
pub const SERVICE_CENTRAL: u8 = 255;
