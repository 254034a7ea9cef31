//! `knee-node serve share`: a peer (shared folder, obtain, list, and in the distributed
//! design an index partition) or the central index. One thread per connection, a bounded
//! number of connections; a `stats` line every second as every knee server prints.

use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;

use super::codec::{self, Entry};
use super::files::{self, SharedFile};
use super::index::{Index, ShardedIndex};
use super::names::{check_name, open_shared};
use super::obtain::send_file;
use super::sqlite_index::SqliteIndex;
use super::{OP_LIST, OP_OBTAIN, OP_REGISTER, OP_SEARCH, OP_UNREGISTER};
use crate::serve::ServerStats;
use crate::wire::BodyReader;
use crate::wire::{write_frame, FrameError, FrameReader, ReplyHeader, RequestHeader, WireStatus};
use crate::{clock, signals, stdio};

/// Control frames are small: a name, an address, a few integers (a list of 100,000 files
/// fits too). The obtain body is not a frame: it streams after the reply.
const MAX_CONTROL_FRAME_BYTES: usize = 64 << 20;
const MAX_FILES: usize = 100_000;
const MAX_FILE_BYTES: u64 = 64 << 30;

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

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ShareServerConfig {
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
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Options {
    #[serde(default = "crate::config_defaults::listen")]
    listen: String,
    #[serde(default = "crate::config_defaults::max_frame_bytes")]
    max_frame_bytes: usize,
    #[serde(default = "crate::config_defaults::max_connections")]
    max_connections: usize,
    server: ShareServerConfig,
}

struct Share {
    dir: PathBuf,
    /// Set once generation is over (the list is empty until then).
    files: std::sync::OnceLock<Vec<SharedFile>>,
}

struct State {
    index: Option<Box<dyn Index>>,
    share: Option<Share>,
    stats: ServerStats,
    max_frame_bytes: usize,
}

pub fn serve(config: &serde_json::Value) -> Result<(), String> {
    let opts: Options = serde_json::from_value(config.clone()).map_err(|e| format!("serve config: {e}"))?;
    let cfg = &opts.server;
    let index: Option<Box<dyn Index>> = match (cfg.role, cfg.index) {
        (_, IndexKind::Concurrent) => Some(Box::new(ShardedIndex::new())),
        (Role::Index, IndexKind::SqliteGlobalLock) => Some(Box::new(SqliteIndex::open(
            cfg.db_path.as_deref().unwrap_or(":memory:"),
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
                dir,
                files: std::sync::OnceLock::new(),
            })
        }
        (Role::Peer, None) => return Err("a peer needs share_dir".into()),
        (Role::Index, _) => None,
    };
    let listener =
        TcpListener::bind(&opts.listen).map_err(|e| format!("listening on {}: {e}", opts.listen))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    crate::wire::arrival::enable_rx_timestamps(&listener);
    let state = Arc::new(State {
        index,
        share,
        stats: ServerStats::default(),
        max_frame_bytes: opts.max_frame_bytes.min(MAX_CONTROL_FRAME_BYTES),
    });
    stdio::emit(&serde_json::json!({
        "event": "ready", "addr": addr.to_string(), "pid": std::process::id(), "t_ns": clock::now_ns(),
    }));
    // Files are generated after `ready`, so that peers generate in parallel and a 1 GB file
    // does not hold up the runner's ready wait; `list` says when they are there.
    if state.share.is_some() {
        let state = state.clone();
        let (peer, count, size, seed) = (cfg.peer_index, cfg.files, cfg.file_bytes, cfg.seed);
        std::thread::spawn(move || {
            let Some(share) = &state.share else { return };
            match files::generate(&share.dir, peer, count, size, seed) {
                Ok(list) => {
                    let _ = share.files.set(list);
                }
                Err(e) => {
                    stdio::log(&format!("error: generating the shared files: {e}"));
                    std::process::exit(2);
                }
            }
        });
    }
    spawn_reporter(state.clone());
    std::thread::spawn(|| loop {
        std::thread::sleep(Duration::from_millis(50));
        if signals::stop_requested() {
            std::process::exit(0);
        }
    });
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        let open = state.stats.connections.load(Ordering::Relaxed) as usize;
        if open >= opts.max_connections {
            stdio::log(&format!(
                "refusing a connection: {open} open, the limit is {}",
                opts.max_connections
            ));
            continue;
        }
        state.stats.connections.fetch_add(1, Ordering::Relaxed);
        let state = state.clone();
        std::thread::Builder::new()
            .name("conn".into())
            .spawn(move || connection(stream, &state))
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

fn spawn_reporter(state: Arc<State>) {
    std::thread::spawn(move || loop {
        std::thread::sleep(Duration::from_secs(1));
        let s = &state.stats;
        let get = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
        stdio::emit(&serde_json::json!({
            "event": "stats", "t_ns": clock::now_ns(),
            "requests": get(&s.requests), "errors": get(&s.errors), "overloaded": 0,
            "bytes_rx": get(&s.bytes_rx), "bytes_tx": get(&s.bytes_tx),
            "connections": get(&s.connections), "bad_frames": get(&s.bad_frames), "queue_len": 0,
            "files_ready": state.share.as_ref().is_none_or(|s| s.files.get().is_some()),
        }));
    });
}

fn connection(stream: TcpStream, state: &State) {
    let peer = stream
        .peer_addr()
        .map(|a| a.to_string())
        .unwrap_or_else(|_| "?".into());
    if let Err(e) = frames(&stream, state) {
        if !matches!(e, FrameError::Closed) {
            state.stats.bad_frames.fetch_add(1, Ordering::Relaxed);
            stdio::log(&format!("closing connection from {peer}: {e}"));
        }
    }
    let _ = stream.shutdown(Shutdown::Both);
    state.stats.connections.fetch_sub(1, Ordering::Relaxed);
}

fn frames(stream: &TcpStream, state: &State) -> Result<(), FrameError> {
    stream.set_nodelay(true).map_err(FrameError::Io)?;
    crate::wire::arrival::enable_rx_timestamps(stream);
    let mut out = stream.try_clone().map_err(FrameError::Io)?;
    let mut reader = FrameReader::new(state.max_frame_bytes);
    let mut src = crate::wire::arrival::StampedSocket(stream);
    let (mut reply, mut scratch) = (Vec::new(), Vec::new());
    loop {
        let Some((payload, read_stamp_ns)) = reader.read_frame_stamped(&mut src)? else {
            continue;
        };
        // Arrival as in the generic server (serve/connection.rs): the kernel's receive stamp
        // of the read that completed the frame, never later than now.
        let taken_ns = clock::now_ns();
        let arrived_ns = read_stamp_ns.map_or(taken_ns, |t| t.min(taken_ns));
        state
            .stats
            .bytes_rx
            .fetch_add(payload.len() as u64 + 4, Ordering::Relaxed);
        let Some((header, body)) = RequestHeader::decode(payload) else {
            return Err(FrameError::Malformed(format!(
                "{} bytes is shorter than a request header",
                payload.len()
            )));
        };
        reply.clear();
        let (status, file) = handle(state, header.op, body, &mut reply);
        state.stats.requests.fetch_add(1, Ordering::Relaxed);
        if status != WireStatus::Ok {
            state.stats.errors.fetch_add(1, Ordering::Relaxed);
        }
        let done_ns = clock::now_ns();
        let h = ReplyHeader {
            request_id: header.request_id,
            status: status as u16,
            server_ns: done_ns - arrived_ns,
            queue_ns: taken_ns - arrived_ns,
            service_ns: done_ns - taken_ns,
            ..Default::default()
        };
        write_frame(&mut out, &mut scratch, &[&h.encode(), &reply]).map_err(FrameError::Io)?;
        state
            .stats
            .bytes_tx
            .fetch_add(scratch.len() as u64, Ordering::Relaxed);
        if let Some((mut file, size_bytes)) = file {
            // A failed stream leaves the client short of bytes: close the connection.
            send_file(&mut out, &mut file, size_bytes).map_err(FrameError::Io)?;
            state.stats.bytes_tx.fetch_add(size_bytes, Ordering::Relaxed);
        }
    }
}

type Stream = Option<(std::fs::File, u64)>;

/// Serves one request: its status, the reply body in `reply`, and for an obtain the file to
/// stream after the reply.
fn handle(state: &State, op: u16, body: &[u8], reply: &mut Vec<u8>) -> (WireStatus, Stream) {
    let result = match op {
        OP_REGISTER | OP_UNREGISTER | OP_SEARCH => match &state.index {
            Some(index) => index_op(&**index, op, body, reply).map(|()| None),
            None => {
                return refuse(
                    reply,
                    WireStatus::UnknownOp,
                    "this peer holds no index (central design)",
                )
            }
        },
        OP_OBTAIN | OP_LIST => match &state.share {
            Some(share) if op == OP_OBTAIN => obtain(share, body, reply).map(Some),
            Some(share) => list(share, body, reply).map(|()| None),
            None => return refuse(reply, WireStatus::UnknownOp, "the index server shares no files"),
        },
        _ => {
            return refuse(
                reply,
                WireStatus::UnknownOp,
                &format!("share has no operation {op}"),
            )
        }
    };
    match result {
        Ok(stream) => (WireStatus::Ok, stream),
        Err(reason) => refuse(reply, WireStatus::BadRequest, &reason),
    }
}

fn refuse(reply: &mut Vec<u8>, status: WireStatus, reason: &str) -> (WireStatus, Stream) {
    reply.clear();
    reply.extend_from_slice(reason.as_bytes());
    (status, None)
}

fn index_op(index: &dyn Index, op: u16, body: &[u8], reply: &mut Vec<u8>) -> Result<(), String> {
    let mut c = BodyReader::new(body);
    match op {
        OP_REGISTER => {
            let peer = codec::read_peer(&mut c)?;
            let name = check_name(c.bytes16("name")?)?.to_string();
            let (size_bytes, checksum) = (c.u64("size")?, c.u64("checksum")?);
            c.end()?;
            index.register(Entry {
                peer,
                name,
                size_bytes,
                checksum,
            })
        }
        OP_UNREGISTER => {
            let peer = codec::read_peer(&mut c)?;
            let name = check_name(c.bytes16("name")?)?;
            c.end()?;
            reply.push(u8::from(index.unregister(&peer, name)?));
            Ok(())
        }
        _ => {
            let name = check_name(c.bytes16("name")?)?;
            c.end()?;
            codec::search_reply(reply, &index.search(name)?);
            Ok(())
        }
    }
}

fn obtain(share: &Share, body: &[u8], reply: &mut Vec<u8>) -> Result<(std::fs::File, u64), String> {
    let mut c = BodyReader::new(body);
    let name = check_name(c.bytes16("name")?)?;
    c.end()?;
    let file = open_shared(&share.dir, name)?;
    let size_bytes = file.metadata().map_err(|e| format!("{name:?}: {e}"))?.len();
    codec::put_u64(reply, size_bytes);
    Ok((file, size_bytes))
}

fn list(share: &Share, body: &[u8], reply: &mut Vec<u8>) -> Result<(), String> {
    BodyReader::new(body).end()?;
    let files = share.files.get();
    reply.push(u8::from(files.is_some()));
    let files = files.map(Vec::as_slice).unwrap_or_default();
    reply.extend_from_slice(&(files.len() as u32).to_le_bytes());
    for f in files {
        codec::put_str16(reply, &f.name);
        codec::put_u64(reply, f.size_bytes);
        codec::put_u64(reply, f.checksum);
    }
    Ok(())
}
