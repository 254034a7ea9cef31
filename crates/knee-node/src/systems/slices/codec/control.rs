//! The control messages between PNs and the LB in postcard (serde's compact binary
//! format) behind a magic and version, bounded. Every decode returns a `ControlError`
//! instead of panicking: these bytes come off the network.

use serde::{Deserialize, Serialize};

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

/// Why a control message was refused. Its text is what the LB or a PN logs (throttled) and
/// counts in `bad_control`; tests match on the variant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ControlError {
    /// Longer than `MAX_CONTROL_BYTES`.
    TooLong {
        len: usize,
    },
    /// No `CONTROL_MAGIC` in front: another format, or not a message.
    NoMagic,
    Version(u8),
    /// Bytes left after the message.
    Trailing {
        bytes: usize,
    },
    /// postcard could not read the message.
    Postcard(postcard::Error),
    /// A run of no slices, or one past `MAX_SLICES`.
    SliceRun {
        first: u32,
        n: u32,
    },
    /// More than `MAX_SLICES` slices in all.
    TooManySlices {
        len: u64,
    },
    /// A handoff column with a run of zero.
    EmptyCountRun {
        what: &'static str,
    },
    /// A handoff's per-slice count columns do not cover its slices.
    CountsDisagree {
        slices: u128,
        watermark_slices: u128,
        owed_slices: u128,
    },
    /// A handoff's counts do not match the entries it sent.
    EntriesDisagree {
        watermark_entries: u128,
        owed_ids: u128,
        senders: u128,
        ids_sent: usize,
        owed_sent: usize,
    },
}

impl std::fmt::Display for ControlError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ControlError::TooLong { len } => write!(
                f,
                "control message of {len} bytes, the limit is {MAX_CONTROL_BYTES}"
            ),
            ControlError::NoMagic => write!(f, "control message: not one (no KC magic)"),
            ControlError::Version(v) => write!(
                f,
                "control message version {v}, this knee-node reads {CONTROL_VERSION}"
            ),
            ControlError::Trailing { bytes } => {
                write!(f, "control message: {bytes} bytes after its end")
            }
            ControlError::Postcard(e) => write!(f, "control message: {e}"),
            ControlError::SliceRun { first, n } => write!(
                f,
                "slice run {first}+{n}: runs hold 1 or more slices below {MAX_SLICES}"
            ),
            ControlError::TooManySlices { len } => {
                write!(f, "{len} slices in one message, the limit is {MAX_SLICES}")
            }
            ControlError::EmptyCountRun { what } => {
                write!(f, "handoff: an empty run of {what} counts")
            }
            ControlError::CountsDisagree {
                slices,
                watermark_slices,
                owed_slices,
            } => write!(
                f,
                "handoff: {slices} slices but watermark counts for {watermark_slices} and owed \
                 counts for {owed_slices}"
            ),
            ControlError::EntriesDisagree {
                watermark_entries,
                owed_ids,
                senders,
                ids_sent,
                owed_sent,
            } => {
                write!(
                    f,
                    "handoff: counts of {watermark_entries} watermark entries and {owed_ids} owed \
                     ids, {senders} senders, {ids_sent} ids and {owed_sent} owed ids sent"
                )
            }
        }
    }
}

impl std::error::Error for ControlError {}

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
    pub(super) runs: Vec<(u32, u32, u64)>,
    pub(super) len: u32,
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
    pub(super) fn check(&self) -> Result<(), ControlError> {
        let mut len: u64 = 0;
        for &(first, n, _) in &self.runs {
            if n == 0 || first as u64 + n as u64 > MAX_SLICES as u64 {
                return Err(ControlError::SliceRun { first, n });
            }
            len += n as u64;
        }
        if len > MAX_SLICES as u64 {
            return Err(ControlError::TooManySlices { len });
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
    fn check(&self) -> Result<(), ControlError> {
        Ok(())
    }
}

impl Check for ToLb {}

impl Check for ToPn {
    fn check(&self) -> Result<(), ControlError> {
        match self {
            ToPn::Assign { slices, .. } | ToPn::Give { slices, .. } | ToPn::Revoke { slices } => {
                slices.check()
            }
            ToPn::Want { .. } => Ok(()),
        }
    }
}

impl Check for Handoff {
    fn check(&self) -> Result<(), ControlError> {
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
    Took {
        pn: u32,
        t_ns: u64,
        slices: Vec<TakenSlice>,
    },
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TakenSlice {
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
    pub fn checked(self) -> Result<CheckedHandoff, ControlError> {
        self.slices.check()?;
        let n = self.slices.len() as u128;
        let counts =
            |runs: &Runs, what: &'static str| runs.totals().ok_or(ControlError::EmptyCountRun { what });
        let (wm_slices, wm_entries) = counts(&self.watermark_counts, "watermark")?;
        let (owed_slices, owed_ids) = counts(&self.owed_counts, "owed")?;
        if wm_slices != n || owed_slices != n {
            return Err(ControlError::CountsDisagree {
                slices: n,
                watermark_slices: wm_slices,
                owed_slices,
            });
        }
        let (senders, _) = counts(&self.watermark_senders, "sender")?;
        if wm_entries != senders
            || senders != self.watermark_ids.len() as u128
            || owed_ids != self.owed.len() as u128
        {
            return Err(ControlError::EntriesDisagree {
                watermark_entries: wm_entries,
                owed_ids,
                senders,
                ids_sent: self.watermark_ids.len(),
                owed_sent: self.owed.len(),
            });
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

/// A control message from its bytes, bounded. Postcard, not JSON: JSON's cost was a large
/// share of a join (docs/slices.md, "Messages").
pub fn decode_control<T: for<'de> Deserialize<'de> + Check>(bytes: &[u8]) -> Result<T, ControlError> {
    if bytes.len() > MAX_CONTROL_BYTES {
        return Err(ControlError::TooLong { len: bytes.len() });
    }
    let body = match bytes {
        [m0, m1, v, body @ ..] if [*m0, *m1] == CONTROL_MAGIC => {
            if *v != CONTROL_VERSION {
                return Err(ControlError::Version(*v));
            }
            body
        }
        _ => return Err(ControlError::NoMagic),
    };
    match postcard::take_from_bytes::<T>(body) {
        Ok((msg, [])) => msg.check().map(|()| msg),
        Ok((_, rest)) => Err(ControlError::Trailing { bytes: rest.len() }),
        Err(e) => Err(ControlError::Postcard(e)),
    }
}

pub fn encode_control<T: Serialize>(msg: &T) -> Vec<u8> {
    let out = Vec::from([CONTROL_MAGIC[0], CONTROL_MAGIC[1], CONTROL_VERSION]);
    // The control types serialize to postcard without fail (no maps with non-string keys,
    // no unsupported serde features): an error here would be a bug, sent as an empty body
    // that every receiver refuses and counts.
    postcard::to_extend(msg, out).unwrap_or_default()
}
