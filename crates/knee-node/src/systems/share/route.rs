//! The distributed index's partitioning: the owner of a name is xxh3(name) mod the number
//! of peers, and its entry is replicated on the next peer.

pub fn owner(name: &str, peers: usize) -> usize {
    (xxhash_rust::xxh3::xxh3_64(name.as_bytes()) % peers.max(1) as u64) as usize
}

pub fn replica(owner: usize, peers: usize) -> usize {
    (owner + 1) % peers.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_spread_over_every_peer() {
        let mut counts = [0usize; 4];
        for i in 0..4000 {
            counts[owner(&format!("f{}-{i:04}.bin", i % 8), 4)] += 1;
        }
        assert!(counts.iter().all(|&c| c > 800), "{counts:?}");
        assert_eq!(replica(3, 4), 0);
    }
}
