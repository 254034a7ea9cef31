//! The index: which peers hold a file name. A trait with two implementations: the report's
//! SQLite baseline (`sqlite_index.rs`) and this sharded in-memory map, which the central
//! `concurrent` variant and every peer of the distributed design use.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::RwLock;

use super::codec::{Entry, MAX_HOLDERS};

/// Most (name, peer) entries one index holds; a register beyond it is refused (and a
/// node's `max_entries` may set less). Entries are removed only by `unregister`: a peer
/// that dies without unregistering leaves its entries until it registers them again
/// (which replaces them), so this bound, not pruning, is what keeps the index finite.
/// 64 peers x 100,000 files fit in two indexes' worth of the largest point. An entry is at
/// most ~0.7 KB (a 255-byte name twice, as key and in the entry, a 64-byte address and
/// the vector's and map's overhead): at most ~2.8 GB in the worst case, ~100 B a typical
/// entry (a 12-byte name, a 15-byte address).
pub const MAX_ENTRIES: usize = 4_000_000;

pub trait Index: Send + Sync {
    /// Adds or replaces `peer`'s entry for `name`.
    fn register(&self, e: Entry) -> Result<(), String>;
    /// Removes `peer`'s entry for `name`; whether there was one.
    fn unregister(&self, peer: &str, name: &str) -> Result<bool, String>;
    /// The peers holding `name` (at most `MAX_HOLDERS`).
    fn search(&self, name: &str) -> Result<Vec<Entry>, String>;
    /// Entries held (for the `index_entries` stats field).
    fn entry_count(&self) -> usize;
}

/// Shards by a hash of the name, each behind its own RwLock: searches (the common case)
/// share a shard, and operations on different names rarely meet on one lock.
pub struct ShardedIndex {
    shards: Vec<RwLock<HashMap<String, Vec<Entry>>>>,
    entries: AtomicUsize,
    max_entries: usize,
}

const SHARDS: usize = 64;

impl ShardedIndex {
    pub fn new(max_entries: usize) -> Self {
        ShardedIndex {
            shards: (0..SHARDS).map(|_| RwLock::new(HashMap::new())).collect(),
            entries: AtomicUsize::new(0),
            max_entries: max_entries.min(MAX_ENTRIES),
        }
    }

    fn shard(&self, name: &str) -> &RwLock<HashMap<String, Vec<Entry>>> {
        let h = xxhash_rust::xxh3::xxh3_64(name.as_bytes());
        &self.shards[(h % SHARDS as u64) as usize]
    }
}

impl Index for ShardedIndex {
    fn register(&self, e: Entry) -> Result<(), String> {
        let mut map = self.shard(&e.name).write().unwrap_or_else(|p| p.into_inner());
        let holders = map.entry(e.name.clone()).or_default();
        if let Some(old) = holders.iter_mut().find(|h| h.peer == e.peer) {
            *old = e;
            return Ok(());
        }
        if holders.len() >= MAX_HOLDERS {
            return Err(format!("{:?} already has {MAX_HOLDERS} holders", e.name));
        }
        if self.entries.fetch_add(1, Ordering::Relaxed) >= self.max_entries {
            self.entries.fetch_sub(1, Ordering::Relaxed);
            return Err(format!("index full ({} entries)", self.max_entries));
        }
        holders.push(e);
        Ok(())
    }

    fn unregister(&self, peer: &str, name: &str) -> Result<bool, String> {
        let mut map = self.shard(name).write().unwrap_or_else(|p| p.into_inner());
        let Some(holders) = map.get_mut(name) else {
            return Ok(false);
        };
        let before = holders.len();
        holders.retain(|h| h.peer != peer);
        let removed = holders.len() < before;
        if holders.is_empty() {
            map.remove(name);
        }
        if removed {
            self.entries.fetch_sub(1, Ordering::Relaxed);
        }
        Ok(removed)
    }

    fn search(&self, name: &str) -> Result<Vec<Entry>, String> {
        let map = self.shard(name).read().unwrap_or_else(|p| p.into_inner());
        Ok(map.get(name).cloned().unwrap_or_default())
    }

    fn entry_count(&self) -> usize {
        self.entries.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    pub fn entry(peer: &str, name: &str) -> Entry {
        Entry {
            peer: peer.into(),
            name: name.into(),
            size_bytes: 1024,
            checksum: 42,
        }
    }

    /// A full index (3 entries) refuses a new entry, still replaces an existing one, and
    /// takes a new one again after an unregister.
    pub fn bounded(index: &dyn Index) {
        for name in ["a", "b", "c"] {
            index.register(entry("p:1", name)).unwrap();
        }
        let err = index.register(entry("p:1", "d")).unwrap_err();
        assert!(err.contains("index full (3 entries)"), "{err}");
        index.register(entry("p:1", "a")).unwrap();
        assert_eq!(index.entry_count(), 3);
        assert!(index.unregister("p:1", "b").unwrap());
        index.register(entry("p:1", "d")).unwrap();
        assert_eq!(index.entry_count(), 3);
        assert_eq!(index.search("d").unwrap(), vec![entry("p:1", "d")]);
    }

    /// The behaviour both implementations must have.
    pub fn contract(index: &dyn Index) {
        index.register(entry("a:1", "x")).unwrap();
        index.register(entry("b:2", "x")).unwrap();
        index.register(entry("a:1", "x")).unwrap(); // again: replaces
        let mut peers: Vec<String> = index.search("x").unwrap().into_iter().map(|e| e.peer).collect();
        peers.sort();
        assert_eq!(peers, ["a:1", "b:2"]);
        assert!(index.unregister("a:1", "x").unwrap());
        assert!(!index.unregister("a:1", "x").unwrap());
        assert_eq!(index.search("x").unwrap(), vec![entry("b:2", "x")]);
        assert!(index.search("nothing").unwrap().is_empty());
    }

    #[test]
    fn sharded_index_keeps_the_contract() {
        contract(&ShardedIndex::new(MAX_ENTRIES));
    }

    #[test]
    fn sharded_index_refuses_past_its_bound_and_replaces_within_it() {
        bounded(&ShardedIndex::new(3));
    }
}
