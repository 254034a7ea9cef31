//! Intake: items and acks off the network, decided under the state lock, and the
//! subscriptions that bring them (control messages go to the control thread).

use std::borrow::Cow;
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};

use zenoh::Wait;

use super::{Job, Shared};
use crate::clock;
use crate::systems::slices::codec::{self, ItemHeader};
use crate::systems::slices::ledger::{RingItem, Verdict};

impl Shared {
    pub(super) fn job(&self, h: ItemHeader, bytes: Vec<u8>, epoch: u64) -> Job {
        Job {
            h,
            bytes,
            epoch,
            accepted_ns: clock::now_ns(),
        }
    }

    /// An item from the network: decided under the lock.
    fn on_item(&self, bytes: &[u8]) {
        let c = &self.c;
        c.items_rx.fetch_add(1, Ordering::Relaxed);
        c.bytes_rx.fetch_add(bytes.len() as u64, Ordering::Relaxed);
        let h = match ItemHeader::decode(bytes, self.cfg.slices) {
            Ok(h) => h,
            Err(why) => {
                c.dropped_bad.fetch_add(1, Ordering::Relaxed);
                self.bad_items
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .note(&why);
                return;
            }
        };
        let mut st = self.lock();
        if self.cfg.static_slices.is_none() {
            for id in h.acked(bytes) {
                st.acked.insert((h.sender, id));
            }
        }
        match st.ledger.decide(h.slice, h.sender, h.id) {
            Verdict::Accept => {
                let epoch = st.ledger.epoch(h.slice);
                let job = self.job(h, bytes.to_vec(), epoch);
                if st.enqueue(job, self.cfg.queue_max, c) {
                    self.work.notify_one();
                }
                let wants = st.wants();
                drop(st);
                self.ask(wants);
            }
            Verdict::NotOwned => {
                // A taker missed it: it goes to the taker too (and stays in the ring).
                let taker = if st.wanted.is_empty() {
                    None
                } else {
                    st.wanted.remove(&(h.sender, h.id)).map(|(taker, _)| taker)
                };
                if self.cfg.static_slices.is_none() {
                    let copy = st.ring.copy_of(bytes);
                    st.ring.push(RingItem {
                        slice: h.slice,
                        sender: h.sender,
                        id: h.id,
                        arrived_ns: clock::now_ns(),
                        bytes: copy,
                    });
                }
                drop(st);
                if let Some(taker) = taker {
                    self.forward(taker, vec![bytes.to_vec()]);
                }
            }
            Verdict::Already => {
                c.already.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// A client's acks that no item of its carried in time: the ids it was answered for
    /// (a crash takeover does none of them again).
    fn on_acks(&self, bytes: &[u8]) {
        match codec::Acks::decode(bytes) {
            Ok(a) => {
                let mut st = self.lock();
                for id in a.ids {
                    st.acked.insert((a.sender, id));
                }
            }
            Err(why) => {
                self.c.dropped_bad.fetch_add(1, Ordering::Relaxed);
                self.bad_items
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .note(format!("acks: {why}"));
            }
        }
    }
}

pub(super) enum Control {
    Pn(Vec<u8>),
    Handoff(Vec<u8>),
}

type Subscriber = zenoh::pubsub::Subscriber<()>;

/// Subscribes `f` to `key`, each sample's payload given to it (`what`: the key in an error).
fn listen<F>(shared: &Shared, key: String, what: &str, f: F) -> Result<Subscriber, String>
where
    F: Fn(Cow<[u8]>) + Send + Sync + 'static,
{
    shared
        .session
        .declare_subscriber(key)
        .callback(move |sample| f(sample.payload().to_bytes()))
        .wait()
        .map_err(|e| format!("subscribing to {what}: {e}"))
}

pub(super) fn subscribe(
    shared: &Arc<Shared>,
    ctl: mpsc::SyncSender<Control>,
) -> Result<Vec<Subscriber>, String> {
    let s = shared.clone();
    let items = listen(shared, shared.keys.items(), "items", move |b| s.on_item(&b))?;
    let s = shared.clone();
    let acks = listen(shared, shared.keys.all_acks(), "acks", move |b| s.on_acks(&b))?;
    let key = shared.keys.pn(shared.cfg.pn);
    let tx = ctl.clone();
    let pn = listen(shared, key.clone(), &key, move |b| {
        let _ = tx.send(Control::Pn(b.into_owned()));
    })?;
    let key = shared.keys.handoff(shared.cfg.pn);
    let handoff = listen(shared, key.clone(), &key, move |b| {
        let _ = ctl.send(Control::Handoff(b.into_owned()));
    })?;
    let s = shared.clone();
    let forwarded = listen(
        shared,
        shared.keys.fwd(shared.cfg.pn),
        "forwarded items",
        move |b| s.on_item(&b),
    )?;
    let mut subs = vec![items, pn, handoff];
    if shared.cfg.static_slices.is_none() {
        subs.push(acks);
        subs.push(forwarded);
    }
    Ok(subs)
}
