//! The worker pool: each worker takes a queued item, makes its grayscale, logs it as
//! processed and replies to its sender.

use std::io::Write;
use std::sync::atomic::Ordering;

use super::Shared;
use crate::systems::slices::codec::{self, ItemHeader, Reply};
use crate::systems::slices::gray;
use crate::systems::slices::pnlog::{self, Record};
use crate::systems::slices::session;
use crate::{clock, stdio};

/// Items a gray dump holds at most: enough to check the arithmetic, bounded on disk.
const GRAY_DUMP_MAX: u32 = 64;

impl Shared {
    /// Tests only (`gray_dump_path`): appends the item's image and its grayscale.
    fn dump_gray(&self, h: &ItemHeader, image: &[u8], gray_out: &[u8]) {
        let mut dump = self.gray_dump.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((file, written)) = dump.as_mut() {
            if *written < GRAY_DUMP_MAX {
                *written += 1;
                let mut record = Vec::with_capacity(4 + image.len() + gray_out.len());
                record.extend_from_slice(&h.width.to_le_bytes());
                record.extend_from_slice(&h.height.to_le_bytes());
                record.extend_from_slice(image);
                record.extend_from_slice(gray_out);
                if let Err(e) = file.write_all(&record) {
                    stdio::log(&format!("gray dump: {e}"));
                }
            }
        }
    }

    pub(super) fn worker(&self) {
        let mut gray_out = Vec::new();
        let mut reply = Vec::with_capacity(codec::REPLY_HEADER_BYTES + 8);
        loop {
            let job = {
                let mut st = self.lock();
                loop {
                    // At the stop, what is still queued stays there and is logged as held:
                    // past capacity, draining it could take minutes.
                    if st.stop_workers {
                        return;
                    }
                    if let Some(j) = st.queue.pop_front() {
                        st.busy += 1;
                        break j;
                    }
                    st = self.work.wait(st).unwrap_or_else(|p| p.into_inner());
                }
            };
            let start_ns = clock::now_ns();
            let image = job.h.image(&job.bytes);
            let mut checksum = gray::work_repeat(image, self.cfg.work_repeat, &mut gray_out);
            let every = self.cfg.wrong_reply_every;
            if every > 0 && job.h.id.is_multiple_of(every) {
                checksum ^= 1;
            }
            let done_ns = clock::now_ns();
            let h = &job.h;
            self.dump_gray(h, image, &gray_out);
            self.log
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .append(&Record {
                    pn: self.cfg.pn,
                    slice: h.slice,
                    sender: h.sender,
                    kind: pnlog::PROCESSED,
                    id: h.id,
                    epoch: job.epoch,
                    done_ns,
                });
            reply.clear();
            Reply {
                sender: h.sender,
                pn: self.cfg.pn,
                id: h.id,
                slice: h.slice,
                epoch: job.epoch,
                timestamp_ns: h.timestamp_ns,
                queue_ns: start_ns.saturating_sub(job.accepted_ns),
                service_ns: done_ns - start_ns,
                gray_checksum: checksum,
            }
            .encode(&mut reply);
            self.c.bytes_tx.fetch_add(reply.len() as u64, Ordering::Relaxed);
            if let Err(e) = session::put(&self.session, &self.keys.replies(h.sender), reply.clone()) {
                self.c.reply_errors.fetch_add(1, Ordering::Relaxed);
                stdio::log(&e);
            }
            self.c.processed.fetch_add(1, Ordering::Relaxed);
            self.lock().busy -= 1;
        }
    }

    pub(super) fn threads(&self) -> usize {
        if self.cfg.threads > 0 {
            self.cfg.threads
        } else {
            available_cores()
        }
    }
}

/// The cores this process may run on: std reads its CPU affinity and its cgroup's CPU
/// quota (v1 `cpu.cfs_quota_us` or v2 `cpu.max`, rounded down, at least 1), so a PN capped
/// at a quarter core runs one worker (tests/test_slices.py checks it).
pub fn available_cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}
