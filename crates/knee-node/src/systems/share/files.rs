//! A peer's shared files: generated from a seeded RNG in 1 MiB chunks (never a whole file
//! in memory), their xxh3-64 checksums computed in the same pass.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use xxhash_rust::xxh3::Xxh3;

use crate::rng::Rng;

/// Chunk of generation and of buffered copies.
pub const CHUNK_BYTES: usize = 1 << 20;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SharedFile {
    pub name: String,
    pub size_bytes: u64,
    pub checksum: u64,
}

/// The name of peer `peer`'s file `i`: every client can name any peer's files.
pub fn file_name(peer: usize, i: usize) -> String {
    format!("f{peer}-{i:04}.bin")
}

/// Writes `count` files of `size_bytes` into `dir` (created if needed).
///
/// Each file is written in `<dir>.partial/` and renamed into `dir` once whole: a restarted
/// peer regenerates its files while it already serves, and must serve the previous life's
/// (identical) copy meanwhile, never a truncated one. share-chaos saw a few obtains of a
/// just-restarted peer refused by checksum for that reason before.
pub fn generate(
    dir: &Path,
    peer: usize,
    count: usize,
    size_bytes: u64,
    seed: u64,
) -> Result<Vec<SharedFile>, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let mut partial = dir.as_os_str().to_owned();
    partial.push(".partial");
    let partial = PathBuf::from(partial);
    std::fs::create_dir_all(&partial).map_err(|e| format!("creating {}: {e}", partial.display()))?;
    let mut chunk = vec![0u8; CHUNK_BYTES];
    (0..count)
        .map(|i| {
            let name = file_name(peer, i);
            let path = partial.join(&name);
            let mut rng = Rng::new(seed ^ ((peer as u64) << 32) ^ i as u64);
            let mut file = File::create(&path).map_err(|e| format!("creating {}: {e}", path.display()))?;
            let mut hasher = Xxh3::new();
            let mut left = size_bytes;
            while left > 0 {
                let n = left.min(CHUNK_BYTES as u64) as usize;
                for word in chunk[..n].chunks_mut(8) {
                    let v = rng.next_u64().to_le_bytes();
                    word.copy_from_slice(&v[..word.len()]);
                }
                hasher.update(&chunk[..n]);
                file.write_all(&chunk[..n])
                    .map_err(|e| format!("writing {}: {e}", path.display()))?;
                left -= n as u64;
            }
            drop(file);
            let done = dir.join(&name);
            std::fs::rename(&path, &done)
                .map_err(|e| format!("renaming {} to {}: {e}", path.display(), done.display()))?;
            Ok(SharedFile {
                name,
                size_bytes,
                checksum: hasher.digest(),
            })
        })
        .collect()
}
