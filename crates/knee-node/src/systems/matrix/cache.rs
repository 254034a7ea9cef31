//! A FIFO result cache of bounded size, keyed by (P, the matrix's exact bytes).
//!
//! FIFO as in the report: the oldest insertion is evicted, however often it was hit. The
//! key holds the whole matrix, so two matrices never share an entry through a hash collision.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

type Key = Arc<(u32, Vec<u8>)>;

pub struct FifoCache {
    capacity: usize,
    inner: Mutex<Inner>,
}

struct Inner {
    map: HashMap<Key, Arc<Vec<u8>>>,
    order: VecDeque<Key>,
}

impl FifoCache {
    pub fn new(capacity: usize) -> Self {
        FifoCache {
            capacity,
            inner: Mutex::new(Inner {
                map: HashMap::new(),
                order: VecDeque::new(),
            }),
        }
    }

    /// The cached reply body for (p, matrix), if any.
    pub fn get(&self, p: u32, matrix_bytes: &[u8]) -> Option<Arc<Vec<u8>>> {
        let key = (p, matrix_bytes.to_vec());
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.map.get(&key).cloned()
    }

    /// Stores a reply body, evicting the oldest entry when full. Re-inserting a present key
    /// (two workers computed it at once) keeps its place in the FIFO order.
    pub fn insert(&self, p: u32, matrix_bytes: &[u8], reply: Arc<Vec<u8>>) {
        if self.capacity == 0 {
            return;
        }
        let key: Key = Arc::new((p, matrix_bytes.to_vec()));
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if inner.map.contains_key(&key) {
            return;
        }
        if inner.order.len() >= self.capacity {
            if let Some(oldest) = inner.order.pop_front() {
                inner.map.remove(&oldest);
            }
        }
        inner.order.push_back(key.clone());
        inner.map.insert(key, reply);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.inner.lock().map(|i| i.map.len()).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evicts_in_insertion_order_regardless_of_hits() {
        let c = FifoCache::new(2);
        let m = b"matrix".to_vec();
        c.insert(1, &m, Arc::new(vec![1]));
        c.insert(2, &m, Arc::new(vec![2]));
        assert!(c.get(1, &m).is_some()); // a hit does not refresh entry 1 (FIFO, not LRU)
        c.insert(3, &m, Arc::new(vec![3]));
        assert!(c.get(1, &m).is_none());
        assert_eq!(c.get(2, &m).as_deref(), Some(&vec![2]));
        assert_eq!(c.get(3, &m).as_deref(), Some(&vec![3]));
        assert_eq!(c.len(), 2);
        assert!(c.get(3, b"other").is_none());
    }

    #[test]
    fn zero_capacity_stores_nothing() {
        let c = FifoCache::new(0);
        c.insert(1, b"m", Arc::new(vec![1]));
        assert!(c.get(1, b"m").is_none());
    }
}
