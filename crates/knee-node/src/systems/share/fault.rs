//! Fault injection for the chaos tests (`server.corrupt_every`): a peer that serves every Nth
//! obtain with one byte flipped, so that the client's checksum check can be seen to refuse
//! it. Off (0) in every experiment but `share-chaos`.

use std::fs::File;
use std::io::{Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;

use crate::events::{self, NodeEvent};

/// One stdout line per obtain served corrupted, printed before the file goes out: the
/// checker's exact count (the `stats` lines are a second apart, and a killed peer prints no
/// last one). Only when `corrupt_every` is set, so bounded by the obtains of the test.
#[derive(Serialize)]
struct Corrupted<'a> {
    name: &'a str,
    n: u64,
}

impl NodeEvent for Corrupted<'_> {
    const NAME: &'static str = "corrupted";
}

/// Decides which obtains are corrupted and counts them (the `corrupted` stats field).
pub struct Corrupter {
    every: u64,
    /// The corrupted copies are written here, outside the shared folder, and unlinked as
    /// soon as they are open: nothing corrupt is ever visible to `obtain` by name.
    dir: PathBuf,
    obtains: AtomicU64,
    corrupted: AtomicU64,
}

impl Corrupter {
    pub fn new(every: u64, share_dir: &Path) -> Self {
        let mut dir = share_dir.as_os_str().to_owned();
        dir.push(".corrupt");
        Corrupter {
            every,
            dir: PathBuf::from(dir),
            obtains: AtomicU64::new(0),
            corrupted: AtomicU64::new(0),
        }
    }

    pub fn corrupted(&self) -> u64 {
        self.corrupted.load(Ordering::Relaxed)
    }

    /// `file` as served: itself, or (every `every`th obtain) an unlinked copy with the byte
    /// in its middle flipped. An empty file cannot be corrupted and is served as it is.
    pub fn serve(&self, name: &str, file: File, size_bytes: u64) -> Result<File, String> {
        if self.every == 0 || size_bytes == 0 {
            return Ok(file);
        }
        let n = self.obtains.fetch_add(1, Ordering::Relaxed) + 1;
        if !n.is_multiple_of(self.every) {
            return Ok(file);
        }
        let copy = self
            .flipped_copy(file, size_bytes, n)
            .map_err(|e| format!("corrupt_every: {e}"))?;
        self.corrupted.fetch_add(1, Ordering::Relaxed);
        events::emit(&Corrupted { name, n });
        Ok(copy)
    }

    fn flipped_copy(&self, mut file: File, size_bytes: u64, n: u64) -> std::io::Result<File> {
        std::fs::create_dir_all(&self.dir)?;
        let path = self.dir.join(format!("{n}.bin"));
        let mut copy = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)?;
        std::fs::remove_file(&path)?; // open, unlinked: gone when the transfer ends
        std::io::copy(&mut file, &mut copy)?;
        let at = size_bytes / 2;
        let mut byte = [0u8; 1];
        copy.read_exact_at(&mut byte, at)?;
        copy.write_all_at(&[byte[0] ^ 0xff], at)?;
        copy.seek(SeekFrom::Start(0))?;
        Ok(copy)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    #[test]
    fn every_nth_obtain_differs_in_one_byte_and_the_others_are_intact() {
        let dir = std::env::temp_dir().join(format!("knee-corrupt-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let original = dir.join("f");
        File::create(&original).unwrap().write_all(&[7u8; 100]).unwrap();
        let c = Corrupter::new(3, &dir.join("share"));
        let mut served = Vec::new();
        for _ in 0..6 {
            let mut f = c.serve("f", File::open(&original).unwrap(), 100).unwrap();
            let mut bytes = Vec::new();
            f.read_to_end(&mut bytes).unwrap();
            served.push(bytes);
        }
        let differing: Vec<usize> = (0..6).filter(|&i| served[i] != [7u8; 100]).collect();
        assert_eq!(differing, [2, 5]);
        assert_eq!(served[2].iter().filter(|&&b| b != 7).count(), 1);
        assert_eq!(c.corrupted(), 2);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
