//! A PN's log of processed items, the exactly-once checker's input: fixed 40-byte
//! little-endian records `pn u32, slice u32, sender u32, kind u32, id u64, epoch u64,
//! done_ns u64`, buffered and flushed at least every 100 ms (a killed PN loses at most its
//! last flush; the checker treats such items as ones the dead PN may have processed).
//! `kind` is [`PROCESSED`], or [`HELD`] for an item the PN had accepted and not yet
//! processed when it stopped: past capacity its queue outlives the run, and those items
//! are the run's end, not a loss.

use std::fs::File;
use std::io::Write;

use crate::clock;

pub const RECORD_BYTES: usize = 40;
/// A record's fields in file order, each with its numpy type (what `Record::encode`
/// writes; `knee-node describe` gives it to the checker).
pub const LAYOUT: [(&str, &str); 7] = [
    ("pn", "<u4"),
    ("slice", "<u4"),
    ("sender", "<u4"),
    ("kind", "<u4"),
    ("id", "<u8"),
    ("epoch", "<u8"),
    ("done_ns", "<u8"),
];
/// `kind`: the item was processed and its reply published.
pub const PROCESSED: u32 = 0;
/// `kind`: the item was in the PN's queue when it stopped (`done_ns`: the stop).
pub const HELD: u32 = 1;
const FLUSH_EVERY_NS: u64 = 100_000_000;
/// Flushed sooner when this much is buffered (about 1,600 records).
const FLUSH_AT_BYTES: usize = 64 << 10;

pub struct Record {
    pub pn: u32,
    pub slice: u32,
    pub sender: u32,
    pub kind: u32,
    pub id: u64,
    pub epoch: u64,
    pub done_ns: u64,
}

impl Record {
    pub fn encode(&self, out: &mut Vec<u8>) {
        for v in [self.pn, self.slice, self.sender, self.kind] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        for v in [self.id, self.epoch, self.done_ns] {
            out.extend_from_slice(&v.to_le_bytes());
        }
    }
}

pub struct PnLog {
    file: File,
    buf: Vec<u8>,
    last_flush_ns: u64,
    pub error: Option<String>,
}

impl PnLog {
    pub fn create(path: &str) -> Result<PnLog, String> {
        Ok(PnLog {
            file: File::create(path).map_err(|e| format!("creating {path}: {e}"))?,
            buf: Vec::with_capacity(FLUSH_AT_BYTES + RECORD_BYTES),
            last_flush_ns: clock::now_ns(),
            error: None,
        })
    }

    pub fn append(&mut self, r: &Record) {
        r.encode(&mut self.buf);
        self.flush_if_due(r.done_ns);
    }

    pub fn flush_if_due(&mut self, now_ns: u64) {
        if self.buf.len() >= FLUSH_AT_BYTES || now_ns.saturating_sub(self.last_flush_ns) >= FLUSH_EVERY_NS {
            self.flush(now_ns);
        }
    }

    pub fn flush(&mut self, now_ns: u64) {
        self.last_flush_ns = now_ns;
        if self.buf.is_empty() {
            return;
        }
        if let Err(e) = self.file.write_all(&self.buf) {
            self.error.get_or_insert(e.to_string());
        }
        self.buf.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_written_at_64_kib_or_after_100_ms() {
        let path = std::env::temp_dir().join(format!("knee-pnlog-{}", std::process::id()));
        let mut log = PnLog::create(path.to_str().unwrap()).unwrap();
        let t0 = log.last_flush_ns;
        let ms = 1_000_000;
        let on_disk = || std::fs::metadata(&path).unwrap().len() as usize;
        let record = |done_ns| Record {
            pn: 0,
            slice: 0,
            sender: 0,
            kind: PROCESSED,
            id: 1,
            epoch: 0,
            done_ns,
        };
        // Within 100 ms: buffered until 64 KiB.
        let fit = (64 << 10) / RECORD_BYTES;
        for _ in 0..fit {
            log.append(&record(t0 + 99 * ms));
        }
        assert_eq!(
            on_disk(),
            0,
            "{} bytes buffered, under 64 KiB",
            fit * RECORD_BYTES
        );
        log.append(&record(t0 + 99 * ms));
        assert_eq!(on_disk(), (fit + 1) * RECORD_BYTES, "64 KiB reached: written");
        // One record, 100 ms after that write: written too.
        log.append(&record(t0 + 199 * ms - 1));
        assert_eq!(on_disk(), (fit + 1) * RECORD_BYTES);
        log.append(&record(t0 + 199 * ms));
        assert_eq!(on_disk(), (fit + 3) * RECORD_BYTES);
        std::fs::remove_file(path).unwrap();
    }

    #[test]
    fn a_record_is_40_bytes_at_fixed_offsets() {
        let mut out = Vec::new();
        Record {
            pn: 1,
            slice: 2,
            sender: 3,
            kind: HELD,
            id: 4,
            epoch: 5,
            done_ns: 6,
        }
        .encode(&mut out);
        assert_eq!(out.len(), RECORD_BYTES);
        let sizes = LAYOUT.map(|(_, t)| t[2..].parse::<usize>().unwrap());
        assert_eq!(sizes.iter().sum::<usize>(), RECORD_BYTES, "the described layout");
        assert_eq!((LAYOUT[2].0, out[8]), ("sender", 3));
        assert_eq!(out[12], 1);
        assert_eq!(u64::from_le_bytes(out[16..24].try_into().unwrap()), 4);
        assert_eq!(out[32], 6);
    }
}
