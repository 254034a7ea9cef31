//! Tests' scratch folders: one of its own per call (tests run in parallel: none reads a
//! file another is writing), under the system's temporary folder.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A new folder named for `tag`, this process and a count, made (empty if it is new).
pub fn fresh_dir(tag: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let d = std::env::temp_dir().join(format!("knee-{tag}-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}
