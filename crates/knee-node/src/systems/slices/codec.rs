//! The slices messages: Item (the report's ClientTopic) and Reply (ServerTopic) in a fixed
//! little-endian binary layout, and the control messages between PNs and the LB in postcard
//! (serde's compact binary format), bounded. Every decode returns a reason instead of
//! panicking: these bytes come off the network.

use serde::{Deserialize, Serialize};

pub const MAGIC: [u8; 2] = *b"KS";
pub const VERSION: u8 = 1;
pub const KIND_ITEM: u8 = 1;
pub const KIND_REPLY: u8 = 2;
/// magic 2, version 1, kind 1, slice 4, sender 4, id 8, attempt 2, width 2, height 2, pad 2,
/// timestamp_ns 8.
pub const ITEM_HEADER_BYTES: usize = 36;
/// magic 2, version 1, kind 1, sender 4, pn 4, id 8, slice 4, pad 4, epoch 8, timestamp_ns 8,
/// queue_ns 8, service_ns 8, gray_checksum 8.
pub const REPLY_HEADER_BYTES: usize = 68;
/// The largest image a node takes (RGB bytes): far above the report's 7-9 KB, small enough
/// that one item cannot take a PN's memory.
pub const MAX_IMAGE_BYTES: usize = 4 << 20;
/// A reply's message ("OK") is short; anything longer is malformed.
pub const MAX_MESSAGE_BYTES: usize = 64;
/// Control messages are small (a 500-slice handoff with one sender's watermarks is about
/// 9 KB); a larger one is refused before it is parsed.
pub const MAX_CONTROL_BYTES: usize = 4 << 20;
/// A control message starts with these: bytes of another format (or of an older knee) are
/// refused with a reason instead of being read as a message by chance.
pub const CONTROL_MAGIC: [u8; 2] = *b"KC";
/// 2: a handoff's slices in columns (1: a list of slices).
pub const CONTROL_VERSION: u8 = 2;
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
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&[VERSION, KIND_ITEM]);
        out.extend_from_slice(&self.slice.to_le_bytes());
        out.extend_from_slice(&self.sender.to_le_bytes());
        out.extend_from_slice(&self.id.to_le_bytes());
        out.extend_from_slice(&self.attempt.to_le_bytes());
        out.extend_from_slice(&self.width.to_le_bytes());
        out.extend_from_slice(&self.height.to_le_bytes());
        out.extend_from_slice(&0u16.to_le_bytes());
        out.extend_from_slice(&self.timestamp_ns.to_le_bytes());
        out.extend_from_slice(rgb);
    }

    /// Decodes an item of a run with `slices` slices; the image is `&bytes[ITEM_HEADER_BYTES..]`.
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
        if bytes.len() != ITEM_HEADER_BYTES + h.image_bytes() {
            return Err(format!(
                "item of {} bytes, its {}x{} image needs {}",
                bytes.len(),
                h.width,
                h.height,
                ITEM_HEADER_BYTES + h.image_bytes()
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
    Assign { slices: Vec<SliceEpoch>, crash: bool },
    /// Stop accepting these slices now and hand them to `to` at the given epochs.
    Give { to: u32, slices: Vec<SliceEpoch> },
    /// These slices moved on at a higher epoch while this PN was thought dead: drop them.
    Revoke { slices: Vec<SliceEpoch> },
    /// From a taker (`from`) to the PN that gave it slices, not from the LB: items of
    /// those slices, (sender, id), that no owner accepted and the taker never heard. The
    /// giver forwards those it heard, or hears within its ring's age, on `P/fwd/<from>`.
    Want { from: u32, items: Vec<(u32, u64)> },
}

/// Giver -> taker, on `P/ctl/handoff/<taker>`: the `HandoffSlice`s in columns, the i-th
/// slice's watermark entries and owed ids following those of the slices before it.
///
/// A list of slices (version 1) cost a 500-slice join's taker 21 us to decode, warm, in a
/// 40 KB vector of small structs; the columns decode in 5 us into 14 KB, and are read
/// slice by slice (`slices`) without a vector of them.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct Handoff {
    pub from: u32,
    pub slices: Vec<u32>,
    pub epochs: Vec<u64>,
    pub watermark_counts: Vec<u32>,
    pub watermarks: Vec<(u32, u64)>,
    pub owed_counts: Vec<u32>,
    pub owed: Vec<(u32, u64)>,
}

impl Handoff {
    pub fn new(from: u32, slices: &[HandoffSlice]) -> Handoff {
        let n = slices.len();
        let mut h = Handoff {
            from,
            slices: Vec::with_capacity(n),
            epochs: Vec::with_capacity(n),
            watermark_counts: Vec::with_capacity(n),
            watermarks: Vec::with_capacity(n),
            owed_counts: Vec::with_capacity(n),
            owed: Vec::new(),
        };
        for hs in slices {
            h.slices.push(hs.slice);
            h.epochs.push(hs.epoch);
            // A slice's watermark and owed set are far below 2^32 entries (senders, and
            // MAX_OWED_PER_SLICE).
            h.watermark_counts.push(hs.watermark.len() as u32);
            h.watermarks.extend_from_slice(&hs.watermark);
            h.owed_counts.push(hs.owed.len() as u32);
            h.owed.extend_from_slice(&hs.owed);
        }
        h
    }

    /// The slices, one at a time, once the columns are checked to agree.
    pub fn slices(self) -> Result<HandoffSlices, String> {
        let n = self.slices.len();
        if [
            self.epochs.len(),
            self.watermark_counts.len(),
            self.owed_counts.len(),
        ] != [n; 3]
        {
            return Err(format!(
                "handoff: {n} slices but {} epochs, {} watermark counts, {} owed counts",
                self.epochs.len(),
                self.watermark_counts.len(),
                self.owed_counts.len()
            ));
        }
        let total = |counts: &[u32]| counts.iter().map(|&c| c as u64).sum::<u64>();
        let (w, o) = (total(&self.watermark_counts), total(&self.owed_counts));
        if w != self.watermarks.len() as u64 || o != self.owed.len() as u64 {
            return Err(format!(
                "handoff: counts of {w} watermark entries and {o} owed ids, {} and {} sent",
                self.watermarks.len(),
                self.owed.len()
            ));
        }
        Ok(HandoffSlices {
            slices: self.slices.into_iter(),
            epochs: self.epochs.into_iter(),
            watermark_counts: self.watermark_counts.into_iter(),
            watermarks: self.watermarks.into_iter(),
            owed_counts: self.owed_counts.into_iter(),
            owed: self.owed.into_iter(),
        })
    }
}

/// A checked handoff's slices, in order (`Handoff::slices`).
pub struct HandoffSlices {
    slices: std::vec::IntoIter<u32>,
    epochs: std::vec::IntoIter<u64>,
    watermark_counts: std::vec::IntoIter<u32>,
    watermarks: std::vec::IntoIter<(u32, u64)>,
    owed_counts: std::vec::IntoIter<u32>,
    owed: std::vec::IntoIter<(u32, u64)>,
}

impl Iterator for HandoffSlices {
    type Item = HandoffSlice;

    fn next(&mut self) -> Option<HandoffSlice> {
        let slice = self.slices.next()?;
        let (epoch, w, o) = (
            self.epochs.next()?,
            self.watermark_counts.next()? as usize,
            self.owed_counts.next()? as usize,
        );
        Some(HandoffSlice {
            slice,
            epoch,
            watermark: self.watermarks.by_ref().take(w).collect(),
            owed: self.owed.by_ref().take(o).collect(),
        })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.slices.size_hint()
    }
}

impl ExactSizeIterator for HandoffSlices {}

/// One slice's handoff: what the giver accepted (it drains those itself) and what it owes.
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

/// A control message from its bytes, bounded.
///
/// JSON cost about 0.4 ms a join at 500 slices (encoding and decoding the give, the handoff
/// and the took), a third of a 1,000-slice join; postcard does the same in under 0.1 ms.
pub fn decode_control<T: for<'de> Deserialize<'de>>(bytes: &[u8]) -> Result<T, String> {
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
    match postcard::take_from_bytes(body) {
        Ok((msg, [])) => Ok(msg),
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
            slices: vec![(1, 2), (3, 4)],
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
        ];
        let h = Handoff::new(1, &slices);
        let back = decode_control::<Handoff>(&encode_control(&h)).unwrap();
        assert_eq!(back, h);
        assert_eq!(back.slices().unwrap().collect::<Vec<_>>(), slices);
        // Columns that disagree are refused with the reason, not read past.
        let mut short = h.clone();
        short.epochs.pop();
        assert!(short.slices().err().unwrap().contains("1 epochs"));
        let mut over = h.clone();
        over.watermark_counts[1] = u32::MAX;
        assert!(over.slices().err().unwrap().contains("watermark entries"));
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
