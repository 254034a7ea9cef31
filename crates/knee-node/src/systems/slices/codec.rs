//! The slices messages: Item (the report's ClientTopic) and Reply (ServerTopic) in a fixed
//! little-endian binary layout, and the control messages between PNs and the LB in postcard
//! (serde's compact binary format), bounded. Every decode returns a reason instead of
//! panicking: these bytes come off the network.

use serde::{Deserialize, Serialize};

pub const MAGIC: [u8; 2] = *b"KS";
pub const VERSION: u8 = 1;
pub const KIND_ITEM: u8 = 1;
pub const KIND_REPLY: u8 = 2;
pub const KIND_ACKS: u8 = 3;
/// magic 2, version 1, kind 1, slice 4, sender 4, id 8, attempt 2, width 2, height 2, acks 2,
/// timestamp_ns 8; then the image, then `acks` ids (u64) the sender was answered for.
pub const ITEM_HEADER_BYTES: usize = 36;
/// Acks an item carries at most: a client answered about as fast as it sends has one or two
/// per item; more wait for its next items, or go in an `Acks` message when `ack_ms` is up.
pub const MAX_ITEM_ACKS: usize = 64;
/// magic 2, version 1, kind 1, sender 4, pn 4, id 8, slice 4, pad 4, epoch 8, timestamp_ns 8,
/// queue_ns 8, service_ns 8, gray_checksum 8.
pub const REPLY_HEADER_BYTES: usize = 68;
/// The largest image a node takes (RGB bytes): far above the report's 7-9 KB, small enough
/// that one item cannot take a PN's memory.
pub const MAX_IMAGE_BYTES: usize = 4 << 20;
/// A reply's message ("OK") is short; anything longer is malformed.
pub const MAX_MESSAGE_BYTES: usize = 64;
/// Control messages are small (a 500-slice handoff with one sender's watermarks is about
/// 0.6 KB); a larger one is refused before it is parsed.
pub const MAX_CONTROL_BYTES: usize = 4 << 20;
/// A control message starts with these: bytes of another format (or of an older knee) are
/// refused with a reason instead of being read as a message by chance.
pub const CONTROL_MAGIC: [u8; 2] = *b"KC";
/// 3: slices as runs, a handoff's columns as runs and id differences (2: plain columns;
/// 1: a list of slices).
pub const CONTROL_VERSION: u8 = 3;
/// Slices in a run: enough for the report's Table 3 (1,000) with room to spare.
pub const MAX_SLICES: u32 = 65_536;

/// A ClientTopic item: which slice, who sent it, and the colour image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ItemHeader {
    pub slice: u32,
    pub sender: u32,
    pub id: u64,
    pub attempt: u16,
    pub width: u16,
    pub height: u16,
    pub timestamp_ns: u64,
}

impl ItemHeader {
    pub fn image_bytes(&self) -> usize {
        self.width as usize * self.height as usize * 3
    }

    /// Appends the header then `rgb` (which must be `image_bytes()` long) to `out`.
    pub fn encode(&self, rgb: &[u8], out: &mut Vec<u8>) {
        self.encode_acked(rgb, &[], out);
    }

    /// `encode` with the ids of this sender it was answered for after the image (at most
    /// `MAX_ITEM_ACKS`): every PN hears every item, so they are how the PNs learn of
    /// replies without a message of their own (see `Acks`).
    pub fn encode_acked(&self, rgb: &[u8], acked: &[u64], out: &mut Vec<u8>) {
        debug_assert!(acked.len() <= MAX_ITEM_ACKS);
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&[VERSION, KIND_ITEM]);
        out.extend_from_slice(&self.slice.to_le_bytes());
        out.extend_from_slice(&self.sender.to_le_bytes());
        out.extend_from_slice(&self.id.to_le_bytes());
        out.extend_from_slice(&self.attempt.to_le_bytes());
        out.extend_from_slice(&self.width.to_le_bytes());
        out.extend_from_slice(&self.height.to_le_bytes());
        out.extend_from_slice(&(acked.len() as u16).to_le_bytes());
        out.extend_from_slice(&self.timestamp_ns.to_le_bytes());
        out.extend_from_slice(rgb);
        for id in acked {
            out.extend_from_slice(&id.to_le_bytes());
        }
    }

    /// The image of an item `decode` accepted as this header's.
    pub fn image<'a>(&self, bytes: &'a [u8]) -> &'a [u8] {
        bytes
            .get(ITEM_HEADER_BYTES..ITEM_HEADER_BYTES + self.image_bytes())
            .unwrap_or_default()
    }

    /// The acked ids of an item `decode` accepted as this header's (its sender's).
    pub fn acked<'a>(&self, bytes: &'a [u8]) -> impl Iterator<Item = u64> + 'a {
        bytes
            .get(ITEM_HEADER_BYTES + self.image_bytes()..)
            .unwrap_or_default()
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default()))
    }

    /// Decodes an item of a run with `slices` slices; its parts are `image(bytes)` and
    /// `acked(bytes)`.
    pub fn decode(bytes: &[u8], slices: u32) -> Result<ItemHeader, String> {
        let r = Reader::new(bytes, ITEM_HEADER_BYTES, KIND_ITEM)?;
        let h = ItemHeader {
            slice: r.u32(4),
            sender: r.u32(8),
            id: r.u64(12),
            attempt: r.u16(20),
            width: r.u16(22),
            height: r.u16(24),
            timestamp_ns: r.u64(28),
        };
        if h.image_bytes() > MAX_IMAGE_BYTES {
            return Err(format!(
                "image of {} bytes, the limit is {MAX_IMAGE_BYTES}",
                h.image_bytes()
            ));
        }
        let acks = r.u16(26) as usize;
        if acks > MAX_ITEM_ACKS {
            return Err(format!("{acks} acks, the limit per item is {MAX_ITEM_ACKS}"));
        }
        let needs = ITEM_HEADER_BYTES + h.image_bytes() + 8 * acks;
        if bytes.len() != needs {
            return Err(format!(
                "item of {} bytes, its {}x{} image and {acks} acks: it needs {needs}",
                bytes.len(),
                h.width,
                h.height,
            ));
        }
        if slices == 0 || h.id % slices as u64 != h.slice as u64 {
            return Err(format!("slice {} is not id {} mod {slices}", h.slice, h.id));
        }
        Ok(h)
    }
}

/// A ServerTopic reply: the item it answers, who served it, at which epoch, and its times.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    pub sender: u32,
    pub pn: u32,
    pub id: u64,
    pub slice: u32,
    pub epoch: u64,
    /// The item's timestamp, echoed.
    pub timestamp_ns: u64,
    pub queue_ns: u64,
    pub service_ns: u64,
    pub gray_checksum: u64,
}

pub const REPLY_MESSAGE: &[u8] = b"OK";

impl Reply {
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&[VERSION, KIND_REPLY]);
        out.extend_from_slice(&self.sender.to_le_bytes());
        out.extend_from_slice(&self.pn.to_le_bytes());
        out.extend_from_slice(&self.id.to_le_bytes());
        out.extend_from_slice(&self.slice.to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        for v in [
            self.epoch,
            self.timestamp_ns,
            self.queue_ns,
            self.service_ns,
            self.gray_checksum,
        ] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(REPLY_MESSAGE);
    }

    pub fn decode(bytes: &[u8]) -> Result<Reply, String> {
        let r = Reader::new(bytes, REPLY_HEADER_BYTES, KIND_REPLY)?;
        if bytes.len() > REPLY_HEADER_BYTES + MAX_MESSAGE_BYTES {
            return Err(format!(
                "reply of {} bytes, the limit is {}",
                bytes.len(),
                REPLY_HEADER_BYTES + MAX_MESSAGE_BYTES
            ));
        }
        Ok(Reply {
            sender: r.u32(4),
            pn: r.u32(8),
            id: r.u64(12),
            slice: r.u32(20),
            epoch: r.u64(28),
            timestamp_ns: r.u64(36),
            queue_ns: r.u64(44),
            service_ns: r.u64(52),
            gray_checksum: r.u64(60),
        })
    }
}

/// magic 2, version 1, kind 1, pad 4, sender 4, count 4.
pub const ACKS_HEADER_BYTES: usize = 16;
/// Ids in one `Acks` message: what a client was answered for in `ack_ms` at most, so this
/// many is far above it at the report's rates (a fuller list goes in parts).
pub const MAX_ACKS: usize = 8192;

/// The ids a client was answered for (knee's addition to the report's topics). A client is
/// the one that knows a reply got out, so a PN that takes over a crashed PN's slices
/// replays none of its ring items that a client was answered for. Every PN hears them
/// instead of every reply: on the client's next items (`ItemHeader::encode_acked`), and
/// in this message on `P/acks/<sender>` only for those no item took within `ack_ms` (a
/// client that sends slower than it is answered, or has stopped sending).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Acks {
    pub sender: u32,
    pub ids: Vec<u64>,
}

impl Acks {
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&[VERSION, KIND_ACKS]);
        out.extend_from_slice(&0u32.to_le_bytes());
        out.extend_from_slice(&self.sender.to_le_bytes());
        // At most MAX_ACKS ids (the client sends more in parts).
        out.extend_from_slice(&(self.ids.len() as u32).to_le_bytes());
        for id in &self.ids {
            out.extend_from_slice(&id.to_le_bytes());
        }
    }

    pub fn decode(bytes: &[u8]) -> Result<Acks, String> {
        let r = Reader::new(bytes, ACKS_HEADER_BYTES, KIND_ACKS)?;
        let count = r.u32(12) as usize;
        if count > MAX_ACKS {
            return Err(format!("{count} acks, the limit is {MAX_ACKS}"));
        }
        if bytes.len() != ACKS_HEADER_BYTES + 8 * count {
            return Err(format!(
                "acks of {} bytes, {count} ids need {}",
                bytes.len(),
                ACKS_HEADER_BYTES + 8 * count
            ));
        }
        let ids = bytes[ACKS_HEADER_BYTES..]
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default()))
            .collect();
        Ok(Acks {
            sender: r.u32(8),
            ids,
        })
    }
}

/// A checked header: `bytes` is at least `header` long with the magic, version and `kind`.
struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    fn new(bytes: &'a [u8], header: usize, kind: u8) -> Result<Self, String> {
        if bytes.len() < header {
            return Err(format!(
                "{} bytes, shorter than the {header}-byte header",
                bytes.len()
            ));
        }
        if bytes[..2] != MAGIC {
            return Err(format!("bad magic {:02x}{:02x}", bytes[0], bytes[1]));
        }
        if bytes[2] != VERSION {
            return Err(format!("version {}, this node speaks {VERSION}", bytes[2]));
        }
        if bytes[3] != kind {
            return Err(format!("kind {}, expected {kind}", bytes[3]));
        }
        Ok(Reader { bytes })
    }
    fn array<const N: usize>(&self, at: usize) -> [u8; N] {
        let mut a = [0u8; N];
        a.copy_from_slice(&self.bytes[at..at + N]);
        a
    }
    fn u16(&self, at: usize) -> u16 {
        u16::from_le_bytes(self.array(at))
    }
    fn u32(&self, at: usize) -> u32 {
        u32::from_le_bytes(self.array(at))
    }
    fn u64(&self, at: usize) -> u64 {
        u64::from_le_bytes(self.array(at))
    }
}

/// Per sender, the last id a slice's owners accepted, sorted by sender. Inline for one
/// sender (knee's client is one): a handoff of 500 slices then decodes without 500
/// allocations. On the wire it is a sequence, as a `Vec` would be.
pub type Watermark = smallvec::SmallVec<[(u32, u64); 1]>;

/// (slice, epoch): one slice's ownership at an epoch.
pub type SliceEpoch = (u32, u64);

/// Slices with their epochs as runs `(first slice, how many, epoch)` of consecutive slices
/// at one epoch. A join moves blocks of slices that moved together before (so share an
/// epoch): a 500-slice give is one run, not 500 pairs to encode, send and decode.
///
/// Bounded when decoded: every run has at least one slice and ends at or below
/// `MAX_SLICES`, and all runs together hold at most `MAX_SLICES` slices, so walking them
/// is bounded by the slice count whatever the bytes say.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SliceRuns {
    runs: Vec<(u32, u32, u64)>,
    len: u32,
}

impl SliceRuns {
    pub fn new() -> SliceRuns {
        SliceRuns::default()
    }

    /// Appends a slice: it extends the last run when it is that run's next slice at the
    /// same epoch (so slices pushed in ascending order make the fewest runs).
    pub fn push(&mut self, slice: u32, epoch: u64) {
        self.len = self.len.saturating_add(1);
        if let Some((first, n, e)) = self.runs.last_mut() {
            if *e == epoch && first.checked_add(*n) == Some(slice) {
                *n += 1;
                return;
            }
        }
        self.runs.push((slice, 1, epoch));
    }

    pub fn len(&self) -> usize {
        self.len as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The runs, `(first slice, how many, epoch)`.
    pub fn runs(&self) -> &[(u32, u32, u64)] {
        &self.runs
    }

    pub fn iter(&self) -> impl Iterator<Item = SliceEpoch> + '_ {
        self.runs
            .iter()
            .flat_map(|&(first, n, epoch)| (first..first.saturating_add(n)).map(move |s| (s, epoch)))
    }

    /// Every run holds 1 or more slices below `MAX_SLICES`, and all together at most
    /// `MAX_SLICES` (`decode_control` checks it).
    fn check(&self) -> Result<(), String> {
        let mut len: u64 = 0;
        for &(first, n, _) in &self.runs {
            if n == 0 || first as u64 + n as u64 > MAX_SLICES as u64 {
                return Err(format!(
                    "slice run {first}+{n}: runs hold 1 or more slices below {MAX_SLICES}"
                ));
            }
            len += n as u64;
        }
        if len > MAX_SLICES as u64 {
            return Err(format!("{len} slices in one message, the limit is {MAX_SLICES}"));
        }
        Ok(())
    }
}

impl FromIterator<SliceEpoch> for SliceRuns {
    fn from_iter<I: IntoIterator<Item = SliceEpoch>>(iter: I) -> SliceRuns {
        let mut runs = SliceRuns::new();
        for (slice, epoch) in iter {
            runs.push(slice, epoch);
        }
        runs
    }
}

impl Serialize for SliceRuns {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.runs.serialize(s)
    }
}

/// Read as sent; `decode_control` then checks the runs (`Check`), with a reason.
impl<'de> Deserialize<'de> for SliceRuns {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<SliceRuns, D::Error> {
        let runs = Vec::<(u32, u32, u64)>::deserialize(d)?;
        let len = runs.iter().map(|&(_, n, _)| n as u64).sum::<u64>();
        Ok(SliceRuns {
            runs,
            len: len.min(u32::MAX as u64) as u32,
        })
    }
}

/// What a decoded control message must hold beyond its shape, checked by `decode_control`
/// before anyone reads it (postcard would drop the reason of an error raised while
/// decoding).
pub trait Check {
    fn check(&self) -> Result<(), String> {
        Ok(())
    }
}

impl Check for ToLb {}

impl Check for ToPn {
    fn check(&self) -> Result<(), String> {
        match self {
            ToPn::Assign { slices, .. } | ToPn::Give { slices, .. } | ToPn::Revoke { slices } => {
                slices.check()
            }
            ToPn::Want { .. } => Ok(()),
        }
    }
}

impl Check for Handoff {
    fn check(&self) -> Result<(), String> {
        self.slices.check()
    }
}

/// A column of values as runs `(value, how many)`: a handoff's per-slice counts and its
/// watermark senders repeat over long stretches (one client: every slice has one entry,
/// of one sender).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default)]
pub struct Runs(pub Vec<(u32, u32)>);

impl Runs {
    pub fn push(&mut self, value: u32) {
        match self.0.last_mut() {
            Some((v, n)) if *v == value && *n < u32::MAX => *n += 1,
            _ => self.0.push((value, 1)),
        }
    }

    /// How many values, and their sum (u128: no overflow whatever the bytes say); None
    /// when a run is empty.
    fn totals(&self) -> Option<(u128, u128)> {
        let mut count = 0u128;
        let mut sum = 0u128;
        for &(v, n) in &self.0 {
            if n == 0 {
                return None;
            }
            count += n as u128;
            sum += v as u128 * n as u128;
        }
        Some((count, sum))
    }
}

/// PN -> LB, on `P/ctl/lb`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub enum ToLb {
    /// A PN is up and receiving items: it may be given slices.
    Hello { pn: u32 },
    /// Every `heartbeat_ms`: its load.
    Heartbeat {
        pn: u32,
        queue_len: u64,
        processed_per_s: f64,
        owned: u32,
    },
    /// A planned leave: move my slices elsewhere (I drain what I accepted, then exit).
    Leave { pn: u32 },
    /// The PN now owns these slices (after an assign or a handoff).
    Took { pn: u32, t_ns: u64, slices: Vec<Took> },
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Took {
    pub slice: u32,
    pub epoch: u64,
    /// The giver's last accepted id (the largest of its watermarks), if it had one.
    pub giver_last_id: Option<u64>,
    /// The first id this PN accepted for the slice from its ring, if any.
    pub taker_first_id: Option<u64>,
}

/// LB -> PN (and a taker's `Want` to its giver), on `P/ctl/pn/<pn>`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub enum ToPn {
    /// Own these slices now, with no giver: the first assignment, or a crashed owner's
    /// slices (`crash`: the dead PN's work is unknown, so dedupe by what this PN saw).
    Assign { slices: SliceRuns, crash: bool },
    /// Stop accepting these slices now and hand them to `to` at the given epochs.
    Give { to: u32, slices: SliceRuns },
    /// These slices moved on at a higher epoch while this PN was thought dead: drop them.
    Revoke { slices: SliceRuns },
    /// From a taker (`from`) to the PN that gave it slices, not from the LB: items of
    /// those slices, (sender, id), that no owner accepted and the taker never heard. The
    /// giver forwards those it heard, or hears within its ring's age, on `P/fwd/<from>`.
    Want { from: u32, items: Vec<(u32, u64)> },
}

/// Giver -> taker, on `P/ctl/handoff/<taker>`: each slice given, at its epoch, with its
/// watermark and owed ids, in columns (`HandoffBuilder` writes them, `CheckedHandoff`
/// reads them slice by slice).
///
/// The columns are compact because a join is: its slices are runs, almost every slice has
/// one watermark entry of the same sender, and one client's watermarks of consecutive
/// slices differ by about 1, so the ids go as differences (a zigzag varint of a byte or
/// two each). A 500-slice handoff is about 0.6 KB (2.5 KB as plain columns, version 2;
/// 40 KB of structs as a list, version 1), and the giver writes it and the taker reads it
/// without a per-slice value in between.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct Handoff {
    pub from: u32,
    pub slices: SliceRuns,
    /// Per slice (in `slices` order), how many watermark entries it has.
    pub watermark_counts: Runs,
    /// The watermark entries' senders, every slice's after the one's before.
    pub watermark_senders: Runs,
    /// Each entry's id minus the previous entry's (the first's minus 0), wrapping.
    pub watermark_ids: Vec<i64>,
    /// Per slice, how many owed ids it has (almost always 0).
    pub owed_counts: Runs,
    pub owed: Vec<(u32, u64)>,
}

impl Handoff {
    /// A handoff of these slices (tests and tools; a giver writes with `HandoffBuilder`).
    pub fn new(from: u32, slices: &[HandoffSlice]) -> Handoff {
        let mut b = HandoffBuilder::new(from);
        for h in slices {
            b.push(h.slice, h.epoch, &h.watermark, &h.owed);
        }
        b.finish()
    }

    /// The columns checked to agree, for reading slice by slice.
    pub fn checked(self) -> Result<CheckedHandoff, String> {
        self.slices.check()?;
        let n = self.slices.len() as u128;
        let counts = |runs: &Runs, what: &str| {
            runs.totals()
                .ok_or_else(|| format!("handoff: an empty run of {what} counts"))
        };
        let (wm_slices, wm_entries) = counts(&self.watermark_counts, "watermark")?;
        let (owed_slices, owed_ids) = counts(&self.owed_counts, "owed")?;
        if wm_slices != n || owed_slices != n {
            return Err(format!(
                "handoff: {n} slices but watermark counts for {wm_slices} and owed counts for \
                 {owed_slices}"
            ));
        }
        let (senders, _) = counts(&self.watermark_senders, "sender")?;
        if wm_entries != senders
            || senders != self.watermark_ids.len() as u128
            || owed_ids != self.owed.len() as u128
        {
            return Err(format!(
                "handoff: counts of {wm_entries} watermark entries and {owed_ids} owed ids, \
                 {senders} senders, {} ids and {} owed ids sent",
                self.watermark_ids.len(),
                self.owed.len()
            ));
        }
        // The entries themselves: as many as the ids sent, which the message size bounds.
        let mut watermarks = Vec::with_capacity(self.watermark_ids.len());
        let mut ids = self.watermark_ids.iter();
        let mut id = 0u64;
        for &(sender, k) in &self.watermark_senders.0 {
            for delta in ids.by_ref().take(k as usize) {
                id = id.wrapping_add(*delta as u64);
                watermarks.push((sender, id));
            }
        }
        Ok(CheckedHandoff {
            from: self.from,
            slices: self.slices,
            watermark_counts: self.watermark_counts,
            watermarks,
            owed_counts: self.owed_counts,
            owed: self.owed,
        })
    }
}

/// Writes a `Handoff`'s columns one slice at a time.
pub struct HandoffBuilder {
    h: Handoff,
    last_id: u64,
}

impl HandoffBuilder {
    pub fn new(from: u32) -> HandoffBuilder {
        HandoffBuilder {
            h: Handoff {
                from,
                ..Handoff::default()
            },
            last_id: 0,
        }
    }

    /// Adds a slice; its watermark is sorted by sender (a ledger keeps it so).
    pub fn push(&mut self, slice: u32, epoch: u64, watermark: &[(u32, u64)], owed: &[(u32, u64)]) {
        let h = &mut self.h;
        h.slices.push(slice, epoch);
        // A slice's watermark has one entry per sender and its owed set at most
        // MAX_OWED_PER_SLICE ids: both far below 2^32.
        h.watermark_counts.push(watermark.len() as u32);
        for &(sender, id) in watermark {
            h.watermark_senders.push(sender);
            h.watermark_ids.push(id.wrapping_sub(self.last_id) as i64);
            self.last_id = id;
        }
        h.owed_counts.push(owed.len() as u32);
        h.owed.extend_from_slice(owed);
    }

    pub fn len(&self) -> usize {
        self.h.slices.len()
    }

    pub fn is_empty(&self) -> bool {
        self.h.slices.is_empty()
    }

    pub fn finish(self) -> Handoff {
        self.h
    }
}

/// A handoff whose columns agree (`Handoff::checked`): its slices, read in order.
#[derive(Debug)]
pub struct CheckedHandoff {
    pub from: u32,
    slices: SliceRuns,
    watermark_counts: Runs,
    watermarks: Vec<(u32, u64)>,
    owed_counts: Runs,
    owed: Vec<(u32, u64)>,
}

impl CheckedHandoff {
    pub fn len(&self) -> usize {
        self.slices.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slices.is_empty()
    }

    /// Each slice with its own watermark entries and owed ids.
    pub fn iter(&self) -> impl Iterator<Item = HandoffSliceRef<'_>> + '_ {
        let mut wm = RunCursor::new(&self.watermark_counts);
        let mut ow = RunCursor::new(&self.owed_counts);
        let (mut at_wm, mut at_owed) = (0usize, 0usize);
        self.slices.iter().map(move |(slice, epoch)| {
            let (w, o) = (wm.next_value() as usize, ow.next_value() as usize);
            // The checks made the counts add up to the columns' lengths: `get` only keeps
            // a mistake here from becoming a panic.
            let watermark = self.watermarks.get(at_wm..at_wm + w).unwrap_or(&[]);
            let owed = self.owed.get(at_owed..at_owed + o).unwrap_or(&[]);
            (at_wm, at_owed) = (at_wm + w, at_owed + o);
            HandoffSliceRef {
                slice,
                epoch,
                watermark,
                owed,
            }
        })
    }
}

/// Steps through a `Runs` column one value at a time.
struct RunCursor<'a> {
    runs: std::slice::Iter<'a, (u32, u32)>,
    value: u32,
    left: u32,
}

impl<'a> RunCursor<'a> {
    fn new(runs: &'a Runs) -> RunCursor<'a> {
        RunCursor {
            runs: runs.0.iter(),
            value: 0,
            left: 0,
        }
    }

    /// The next value (0 past the end: the checks rule that out).
    fn next_value(&mut self) -> u32 {
        while self.left == 0 {
            match self.runs.next() {
                Some(&(v, n)) => (self.value, self.left) = (v, n),
                None => return 0,
            }
        }
        self.left -= 1;
        self.value
    }
}

/// One slice of a checked handoff, borrowed from its columns.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HandoffSliceRef<'a> {
    pub slice: u32,
    pub epoch: u64,
    pub watermark: &'a [(u32, u64)],
    pub owed: &'a [(u32, u64)],
}

impl HandoffSliceRef<'_> {
    pub fn to_owned(self) -> HandoffSlice {
        HandoffSlice {
            slice: self.slice,
            epoch: self.epoch,
            watermark: self.watermark.iter().copied().collect(),
            owed: self.owed.to_vec(),
        }
    }
}

/// One slice's handoff as a value: what the giver accepted (it drains those itself) and
/// what it owes.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct HandoffSlice {
    pub slice: u32,
    pub epoch: u64,
    /// Per sender, the last id the slice's owners accepted (the giver's and the ones before).
    pub watermark: Watermark,
    /// Ids at or below the watermark that no owner processed (dropped on a full queue):
    /// still to do, by the taker, when the client re-publishes them.
    pub owed: Vec<(u32, u64)>,
}

impl HandoffSlice {
    pub fn as_ref(&self) -> HandoffSliceRef<'_> {
        HandoffSliceRef {
            slice: self.slice,
            epoch: self.epoch,
            watermark: &self.watermark,
            owed: &self.owed,
        }
    }
}

/// A control message from its bytes, bounded.
///
/// JSON cost about 0.4 ms a join at 500 slices (encoding and decoding the give, the handoff
/// and the took), a third of a 1,000-slice join; postcard does the same in under 0.1 ms.
pub fn decode_control<T: for<'de> Deserialize<'de> + Check>(bytes: &[u8]) -> Result<T, String> {
    if bytes.len() > MAX_CONTROL_BYTES {
        return Err(format!(
            "control message of {} bytes, the limit is {MAX_CONTROL_BYTES}",
            bytes.len()
        ));
    }
    let body = match bytes {
        [m0, m1, v, body @ ..] if [*m0, *m1] == CONTROL_MAGIC => {
            if *v != CONTROL_VERSION {
                return Err(format!(
                    "control message version {v}, this knee-node reads {CONTROL_VERSION}"
                ));
            }
            body
        }
        _ => return Err("control message: not one (no KC magic)".to_string()),
    };
    match postcard::take_from_bytes::<T>(body) {
        Ok((msg, [])) => msg.check().map(|()| msg),
        Ok((_, rest)) => Err(format!("control message: {} bytes after its end", rest.len())),
        Err(e) => Err(format!("control message: {e}")),
    }
}

pub fn encode_control<T: Serialize>(msg: &T) -> Vec<u8> {
    let out = Vec::from([CONTROL_MAGIC[0], CONTROL_MAGIC[1], CONTROL_VERSION]);
    // The control types serialize to postcard without fail (no maps with non-string keys,
    // no unsupported serde features): an error here would be a bug, sent as an empty body
    // that every receiver refuses and counts.
    postcard::to_extend(msg, out).unwrap_or_default()
}

/// The width x height of an `image_bytes` RGB image (a multiple of 3): as square as its
/// pixel count allows, each side at most 65,535.
pub fn image_shape(image_bytes: usize) -> Result<(u16, u16), String> {
    if image_bytes == 0 || !image_bytes.is_multiple_of(3) || image_bytes > MAX_IMAGE_BYTES {
        return Err(format!(
            "image_bytes must be a multiple of 3 in 3..={MAX_IMAGE_BYTES}, got {image_bytes}"
        ));
    }
    let pixels = image_bytes / 3;
    let mut w = (pixels as f64).sqrt() as usize;
    while w > 1 && !pixels.is_multiple_of(w) {
        w -= 1;
    }
    let h = pixels / w.max(1);
    match (u16::try_from(w.max(1)), u16::try_from(h)) {
        (Ok(w), Ok(h)) => Ok((w, h)),
        _ => Err(format!(
            "image_bytes {image_bytes}: no width x height within 65535"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;

    fn item(rng: &mut Rng, slices: u32) -> (ItemHeader, Vec<u8>) {
        let id = rng.next_u64() >> 8;
        let (width, height) = (rng.range_u32(1, 40) as u16, rng.range_u32(1, 40) as u16);
        let h = ItemHeader {
            slice: (id % slices as u64) as u32,
            sender: rng.next_u64() as u32,
            id,
            attempt: rng.next_u64() as u16,
            width,
            height,
            timestamp_ns: rng.next_u64(),
        };
        let rgb = (0..h.image_bytes()).map(|_| rng.next_u64() as u8).collect();
        (h, rgb)
    }

    #[test]
    fn items_and_replies_round_trip() {
        let mut rng = Rng::new(1);
        for _ in 0..2000 {
            let slices = rng.range_u32(1, 1000);
            let (h, rgb) = item(&mut rng, slices);
            let mut out = Vec::new();
            h.encode(&rgb, &mut out);
            assert_eq!(ItemHeader::decode(&out, slices).unwrap(), h);
            assert_eq!(&out[ITEM_HEADER_BYTES..], &rgb[..]);
            assert_eq!(h.acked(&out).count(), 0);
            let acked: Vec<u64> = (0..rng.range_u32(0, MAX_ITEM_ACKS as u32))
                .map(|_| rng.next_u64())
                .collect();
            let mut with = Vec::new();
            h.encode_acked(&rgb, &acked, &mut with);
            assert_eq!(ItemHeader::decode(&with, slices).unwrap(), h);
            assert_eq!(h.image(&with), &rgb[..]);
            assert_eq!(h.acked(&with).collect::<Vec<_>>(), acked);
            let r = Reply {
                sender: h.sender,
                pn: rng.next_u64() as u32,
                id: h.id,
                slice: h.slice,
                epoch: rng.next_u64(),
                timestamp_ns: h.timestamp_ns,
                queue_ns: rng.next_u64(),
                service_ns: rng.next_u64(),
                gray_checksum: rng.next_u64(),
            };
            let mut out = Vec::new();
            r.encode(&mut out);
            assert_eq!(out.len(), REPLY_HEADER_BYTES + REPLY_MESSAGE.len());
            assert_eq!(Reply::decode(&out).unwrap(), r);
        }
    }

    #[test]
    fn acks_round_trip_and_bad_ones_are_refused() {
        let acks = Acks {
            sender: 7,
            ids: vec![3, 13, u64::MAX],
        };
        let mut b = Vec::new();
        acks.encode(&mut b);
        assert_eq!(b.len(), ACKS_HEADER_BYTES + 24);
        assert_eq!(Acks::decode(&b).unwrap(), acks);
        assert!(Acks::decode(&b[..b.len() - 1]).unwrap_err().contains("need"));
        let mut many = b.clone();
        many[12..16].copy_from_slice(&(MAX_ACKS as u32 + 1).to_le_bytes());
        assert!(Acks::decode(&many).unwrap_err().contains("limit"));
        let mut reply = b.clone();
        reply[3] = KIND_REPLY;
        assert!(Acks::decode(&reply).unwrap_err().contains("kind"));
        let empty = Acks {
            sender: 1,
            ids: vec![],
        };
        let mut e = Vec::new();
        empty.encode(&mut e);
        assert_eq!(Acks::decode(&e).unwrap(), empty);
    }

    #[test]
    fn bad_items_are_refused_with_a_reason() {
        let mut rng = Rng::new(2);
        let (h, rgb) = item(&mut rng, 10);
        let mut good = Vec::new();
        h.encode(&rgb, &mut good);
        let reason = |bytes: &[u8], slices| ItemHeader::decode(bytes, slices).unwrap_err();
        assert!(reason(&good[..good.len() - 1], 10).contains("needs"));
        assert!(reason(&good[..10], 10).contains("shorter"));
        assert!(reason(&good, 7).contains("mod") || h.id % 7 == h.slice as u64);
        let mut bad = good.clone();
        bad[0] = b'X';
        assert!(reason(&bad, 10).contains("magic"));
        let mut bad = good.clone();
        bad[3] = KIND_REPLY;
        assert!(reason(&bad, 10).contains("kind"));
        let mut big = good.clone();
        big[22..26].copy_from_slice(&[0xff; 4]);
        assert!(reason(&big, 10).contains("limit"));
        // An acks count the bytes do not hold, or above the limit.
        let mut acked = Vec::new();
        h.encode_acked(&rgb, &[5, 15], &mut acked);
        assert!(reason(&acked[..acked.len() - 8], 10).contains("needs"));
        let mut many = acked.clone();
        many[26..28].copy_from_slice(&(MAX_ITEM_ACKS as u16 + 1).to_le_bytes());
        assert!(reason(&many, 10).contains("limit per item"));
        assert!(Reply::decode(&good).is_err());
    }

    #[test]
    fn decoding_random_bytes_never_panics() {
        let mut rng = Rng::new(3);
        let (h, rgb) = item(&mut rng, 10);
        let mut good = Vec::new();
        h.encode(&rgb, &mut good);
        for n in 0..20_000 {
            let len = rng.range_u32(0, 200) as usize;
            let mut bytes: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
            if n % 2 == 0 && len >= 4 {
                // A valid prefix, so that decoding goes past the magic.
                bytes[..2].copy_from_slice(&MAGIC);
                bytes[2] = VERSION;
                bytes[3] = if n % 4 == 0 { KIND_ITEM } else { KIND_REPLY };
            }
            let _ = ItemHeader::decode(&bytes, rng.range_u32(0, 20));
            let _ = Reply::decode(&bytes);
            let _ = Acks::decode(&bytes);
            let _ = decode_control::<ToLb>(&bytes);
            let _ = decode_control::<ToPn>(&bytes);
            let _ = decode_control::<Handoff>(&bytes);
        }
        // Flipping any one byte of a good item gives a result, never a panic.
        for i in 0..good.len() {
            let mut b = good.clone();
            b[i] ^= 0xA5;
            let _ = ItemHeader::decode(&b, 10);
        }
    }

    #[test]
    fn control_messages_round_trip_and_unknown_ones_are_refused() {
        let msgs = vec![
            ToLb::Hello { pn: 1 },
            ToLb::Heartbeat {
                pn: 2,
                queue_len: 3,
                processed_per_s: 4.5,
                owned: 5,
            },
            ToLb::Leave { pn: 3 },
            ToLb::Took {
                pn: 1,
                t_ns: 9,
                slices: vec![Took {
                    slice: 1,
                    epoch: 2,
                    giver_last_id: Some(3),
                    taker_first_id: None,
                }],
            },
        ];
        for m in msgs {
            assert_eq!(decode_control::<ToLb>(&encode_control(&m)).unwrap(), m);
        }
        let give = ToPn::Give {
            to: 4,
            slices: [(1, 2), (3, 4), (4, 4)].into_iter().collect(),
        };
        assert_eq!(decode_control::<ToPn>(&encode_control(&give)).unwrap(), give);
        let slices = vec![
            HandoffSlice {
                slice: 2,
                epoch: 3,
                watermark: [(7, 100), (8, 40)].into_iter().collect(),
                owed: vec![(7, 90)],
            },
            HandoffSlice {
                slice: 5,
                epoch: 1,
                watermark: [(7, 103)].into_iter().collect(),
                owed: vec![],
            },
            HandoffSlice {
                slice: 6,
                epoch: 1,
                watermark: [(7, 2)].into_iter().collect(),
                owed: vec![],
            },
        ];
        let h = Handoff::new(1, &slices);
        assert_eq!(h.slices.runs(), &[(2, 1, 3), (5, 2, 1)]);
        assert_eq!(h.watermark_senders.0, vec![(7, 1), (8, 1), (7, 2)]);
        let back = decode_control::<Handoff>(&encode_control(&h)).unwrap();
        assert_eq!(back, h);
        let read: Vec<HandoffSlice> = back.checked().unwrap().iter().map(|s| s.to_owned()).collect();
        assert_eq!(read, slices);
        // Columns that disagree are refused with the reason, not read past.
        let mut short = h.clone();
        short.owed_counts.0.pop();
        assert!(short.checked().unwrap_err().contains("owed counts for 1"));
        let mut over = h.clone();
        over.watermark_counts.0[0].0 = u32::MAX;
        assert!(over.checked().unwrap_err().contains("watermark entries"));
        let mut empty_run = h.clone();
        empty_run.owed_counts.0.push((0, 0));
        assert!(empty_run.checked().unwrap_err().contains("empty run"));
        // Slice runs past MAX_SLICES, or holding more than MAX_SLICES in all, are refused
        // as they are decoded.
        let runs = |r: Vec<(u32, u32, u64)>| {
            let body = postcard::to_allocvec(&ToPn::Revoke {
                slices: SliceRuns { runs: r, len: 0 },
            })
            .unwrap();
            decode_control::<ToPn>(&[&CONTROL_MAGIC[..], &[CONTROL_VERSION], &body].concat())
        };
        assert!(runs(vec![(MAX_SLICES - 1, 2, 1)])
            .unwrap_err()
            .contains("slice run"));
        assert!(runs(vec![(0, 0, 1)]).unwrap_err().contains("slice run"));
        assert!(runs(vec![(0, MAX_SLICES, 1), (0, 1, 1)])
            .unwrap_err()
            .contains("limit"));
        assert_eq!(
            runs(vec![(0, MAX_SLICES, 1)]).unwrap(),
            ToPn::Revoke {
                slices: (0..MAX_SLICES).map(|s| (s, 1)).collect()
            }
        );
        // Unknown kinds (a variant index past the last), trailing bytes, a short message,
        // another format or version: each refused with its reason.
        let hello = encode_control(&ToLb::Hello { pn: 1 });
        let mut unknown = hello.clone();
        unknown[3] = 9;
        assert!(decode_control::<ToLb>(&unknown).is_err());
        let mut trailing = hello.clone();
        trailing.push(0);
        assert!(decode_control::<ToLb>(&trailing)
            .unwrap_err()
            .contains("after its end"));
        assert!(decode_control::<ToLb>(&hello[..3]).is_err());
        assert!(decode_control::<ToLb>(br#"{"kind": "hello", "pn": 1}"#)
            .unwrap_err()
            .contains("magic"));
        let mut newer = hello.clone();
        newer[2] = CONTROL_VERSION + 1;
        assert!(decode_control::<ToLb>(&newer).unwrap_err().contains("version"));
        // A `took` (variant 3, pn 1, t_ns 0) whose slice count (a varint of 2^32 - 1) is far
        // beyond the bytes present fails without allocating it.
        let huge = [&hello[..3], &[3, 1, 0, 0xff, 0xff, 0xff, 0xff, 0x0f]].concat();
        assert!(decode_control::<ToLb>(&huge).is_err());
        assert!(decode_control::<ToLb>(&vec![b' '; MAX_CONTROL_BYTES + 1])
            .unwrap_err()
            .contains("limit"));
    }

    #[test]
    fn slices_pushed_in_order_at_one_epoch_make_one_run() {
        let mut r = SliceRuns::new();
        for s in 500..1000 {
            r.push(s, 3);
        }
        assert_eq!((r.runs(), r.len()), (&[(500, 500, 3)][..], 500));
        // A new epoch, a gap, or a step back starts a run; iteration gives every pair.
        let pairs = [(1, 2), (2, 2), (3, 4), (5, 4), (4, 4)];
        let r: SliceRuns = pairs.into_iter().collect();
        assert_eq!(r.runs(), &[(1, 2, 2), (3, 1, 4), (5, 1, 4), (4, 1, 4)]);
        assert_eq!(r.iter().collect::<Vec<_>>(), pairs);
        assert!(r.check().is_ok());
        // The last slice below the bound is fine; one past it is refused.
        assert!([(MAX_SLICES - 1, 1)]
            .into_iter()
            .collect::<SliceRuns>()
            .check()
            .is_ok());
        let over = SliceRuns {
            runs: vec![(MAX_SLICES, 1, 1)],
            len: 1,
        };
        assert!(over.check().is_err());
        // Iterating unchecked runs past u32 never overflows (it stops at u32::MAX).
        let wild = SliceRuns {
            runs: vec![(u32::MAX - 1, 5, 1)],
            len: 5,
        };
        assert_eq!(wild.iter().count(), 1);
    }

    #[test]
    fn image_shapes_multiply_to_the_size() {
        for bytes in [3, 8190, 8193, 7 * 1024 * 3, MAX_IMAGE_BYTES - 1] {
            let (w, h) = image_shape(bytes).unwrap();
            assert_eq!(w as usize * h as usize * 3, bytes, "{bytes}");
        }
        // 65,537 is prime: 1 x 65,537 does not fit a u16 side.
        assert!(image_shape(3 * 65_537).is_err());
        assert!(image_shape(8192).is_err());
        assert!(image_shape(0).is_err());
    }
}
