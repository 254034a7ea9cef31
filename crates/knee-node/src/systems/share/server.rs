//! `knee-node serve share`: a peer (shared folder, obtain, list, and in the distributed
//! design an index partition) or the central index, as a `serve::Handler` on the generic
//! server: one thread per connection (obtain streams its file on it), a bounded number of
//! connections, and `files_ready` in every `stats` line.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Serialize};

use super::codec;
use super::fault::Corrupter;
use super::files::{self, SharedFile};
use super::index::{Index, ShardedIndex, MAX_ENTRIES};
use super::names::open_shared;
use super::sqlite_index::SqliteIndex;
use super::{OP_LIST, OP_OBTAIN, OP_REGISTER, OP_SEARCH, OP_UNREGISTER};
use crate::serve::{FileTail, Handler, Outcome, Stop};
use crate::systems::ServerParts;
use crate::wire::{BodyReader, WireStatus};

/// Control frames are small: a name, an address, a few integers (a list of 100,000 files
/// fits too). The obtain body is not a frame: it streams after the reply.
const MAX_CONTROL_FRAME_BYTES: usize = 64 << 20;
pub(crate) const MAX_FILES: usize = 100_000;
pub(crate) const MAX_FILE_BYTES: u64 = 64 << 30;

#[derive(Deserialize, Clone, Copy, PartialEq, Debug)]
#[serde(rename_all = "lowercase")]
enum Role {
    Peer,
    Index,
}

#[derive(Deserialize, Clone, Copy, PartialEq, Debug)]
enum IndexKind {
    #[serde(rename = "sqlite-global-lock")]
    SqliteGlobalLock,
    #[serde(rename = "concurrent")]
    Concurrent,
    /// A peer of the central design holds no index.
    #[serde(rename = "none")]
    None,
}

/// `server` of a share node's config.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShareServerConfig {
    role: Role,
    /// `index`: sqlite-global-lock | concurrent; `peer`: concurrent (distributed) | none.
    index: IndexKind,
    /// sqlite-global-lock: the database file (":memory:" for none).
    #[serde(default)]
    db_path: Option<String>,
    /// peer: its shared folder, and the files knee generates there.
    #[serde(default)]
    share_dir: Option<String>,
    #[serde(default)]
    peer_index: usize,
    #[serde(default)]
    files: usize,
    #[serde(default)]
    file_bytes: u64,
    #[serde(default)]
    seed: u64,
    /// Most entries the index holds (`index::MAX_ENTRIES` unless smaller; the tests use a
    /// small bound to see it refuse).
    #[serde(default = "default_max_entries")]
    max_entries: usize,
    /// Fault injection: every Nth obtain is served with one byte flipped (0: never).
    #[serde(default)]
    corrupt_every: u64,
}

fn default_max_entries() -> usize {
    MAX_ENTRIES
}

/// share's fields of the `stats` line.
#[derive(Serialize, Default, Debug)]
pub struct ShareStats {
    /// The peer's files are generated (always true for the index).
    files_ready: bool,
    /// Entries in this node's index (0 without one): bounded by `max_entries`.
    index_entries: usize,
    /// Obtains served corrupted by `corrupt_every` (0 when off).
    corrupted: u64,
}

/// A peer's shared folder and the files it generates there.
struct Share {
    dir: PathBuf,
    peer_index: usize,
    count: usize,
    size_bytes: u64,
    seed: u64,
    /// Set once generation is over (the list is empty until then); shared with the
    /// generating thread.
    files: Arc<OnceLock<Vec<SharedFile>>>,
    corrupter: Corrupter,
}

struct ShareServer {
    index: Option<Box<dyn Index>>,
    share: Option<Share>,
}

pub fn build(cfg: ShareServerConfig) -> Result<ServerParts<ShareStats>, String> {
    if cfg.max_entries == 0 || cfg.max_entries > MAX_ENTRIES {
        return Err(format!("max_entries must be 1..={MAX_ENTRIES}"));
    }
    let index: Option<Box<dyn Index>> = match (cfg.role, cfg.index) {
        (_, IndexKind::Concurrent) => Some(Box::new(ShardedIndex::new(cfg.max_entries))),
        (Role::Index, IndexKind::SqliteGlobalLock) => Some(Box::new(SqliteIndex::open(
            cfg.db_path.as_deref().unwrap_or(":memory:"),
            cfg.max_entries,
        )?)),
        (Role::Peer, IndexKind::None) => None,
        (role, kind) => return Err(format!("a {role:?} cannot have index {kind:?}")),
    };
    let share = match (cfg.role, &cfg.share_dir) {
        (Role::Peer, Some(dir)) => {
            if cfg.files > MAX_FILES || cfg.file_bytes > MAX_FILE_BYTES {
                return Err(format!("files <= {MAX_FILES} and file_bytes <= {MAX_FILE_BYTES}"));
            }
            std::fs::create_dir_all(dir).map_err(|e| format!("creating {dir}: {e}"))?;
            let dir = PathBuf::from(dir)
                .canonicalize()
                .map_err(|e| format!("share_dir {dir}: {e}"))?;
            Some(Share {
                corrupter: Corrupter::new(cfg.corrupt_every, &dir),
                dir,
                peer_index: cfg.peer_index,
                count: cfg.files,
                size_bytes: cfg.file_bytes,
                seed: cfg.seed,
                files: Arc::new(OnceLock::new()),
            })
        }
        (Role::Peer, None) => return Err("a peer needs share_dir".into()),
        (Role::Index, _) => None,
    };
    Ok(ServerParts {
        handler: Arc::new(ShareServer { index, share }),
        // Requests are served on their connection's thread: an obtain's file then streams
        // on it, and a slow download holds up only its own connection.
        threads: 0,
        max_queue: 0,
    })
}

impl Handler<ShareStats> for ShareServer {
    fn handle(&self, op: u16, body: &[u8], reply: &mut Vec<u8>) -> Outcome {
        let result = match op {
            OP_REGISTER | OP_UNREGISTER | OP_SEARCH => match &self.index {
                Some(index) => index_op(&**index, op, body, reply).map(|()| None),
                None => {
                    return Outcome::refused(
                        reply,
                        WireStatus::UnknownOp,
                        "this peer holds no index (central design)",
                    )
                }
            },
            OP_OBTAIN | OP_LIST => match &self.share {
                Some(share) if op == OP_OBTAIN => obtain(share, body, reply).map(Some),
                Some(share) => list(share, body, reply).map(|()| None),
                None => {
                    return Outcome::refused(reply, WireStatus::UnknownOp, "the index server shares no files")
                }
            },
            _ => return Outcome::unknown_op(reply, "share", op),
        };
        match result {
            Ok(tail) => Outcome {
                tail,
                ..Outcome::ok()
            },
            Err(reason) => Outcome::bad_request(reply, &reason),
        }
    }

    fn max_frame_bytes(&self) -> usize {
        MAX_CONTROL_FRAME_BYTES
    }

    /// Files are generated after `ready`, so that peers generate in parallel and a 1 GB
    /// file does not hold up the runner's ready wait; `list` says when they are there.
    fn started(&self, stop: &Stop) {
        let Some(share) = &self.share else { return };
        let (dir, files, stop) = (share.dir.clone(), share.files.clone(), stop.clone());
        let (peer, count, size, seed) = (share.peer_index, share.count, share.size_bytes, share.seed);
        std::thread::spawn(move || match files::generate(&dir, peer, count, size, seed) {
            Ok(list) => {
                let _ = files.set(list);
            }
            Err(e) => stop.fail(format!("generating the shared files: {e}")),
        });
    }

    fn stats_extra(&self) -> ShareStats {
        ShareStats {
            files_ready: self.share.as_ref().is_none_or(|s| s.files.get().is_some()),
            index_entries: self.index.as_ref().map_or(0, |i| i.entry_count()),
            corrupted: self.share.as_ref().map_or(0, |s| s.corrupter.corrupted()),
        }
    }
}

fn index_op(index: &dyn Index, op: u16, body: &[u8], reply: &mut Vec<u8>) -> Result<(), String> {
    match op {
        OP_REGISTER => index.register(codec::decode_register(body)?),
        OP_UNREGISTER => {
            let (peer, name) = codec::decode_unregister(body)?;
            reply.push(u8::from(index.unregister(&peer, name)?));
            Ok(())
        }
        _ => {
            let name = codec::decode_name(body)?;
            codec::search_reply(reply, &index.search(name)?);
            Ok(())
        }
    }
}

/// The reply says the size; the file follows it, sent by the server.
fn obtain(share: &Share, body: &[u8], reply: &mut Vec<u8>) -> Result<FileTail, String> {
    let name = codec::decode_name(body)?;
    let file = open_shared(&share.dir, name)?;
    let size_bytes = file.metadata().map_err(|e| format!("{name:?}: {e}"))?.len();
    let file = share.corrupter.serve(name, file, size_bytes)?;
    codec::put_u64(reply, size_bytes);
    Ok(FileTail { file, size_bytes })
}

fn list(share: &Share, body: &[u8], reply: &mut Vec<u8>) -> Result<(), String> {
    BodyReader::new(body).end()?;
    let files = share.files.get();
    codec::list_reply(reply, files.map(Vec::as_slice));
    Ok(())
}
