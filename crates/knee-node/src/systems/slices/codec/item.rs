//! The data path: Item (the report's ClientTopic), Reply (ServerTopic) and Acks in a fixed
//! little-endian binary layout. Every decode returns an `ItemError` instead of panicking:
//! these bytes come off the network.

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

/// Why an item, reply or acks message was refused. Its text is what a PN logs (throttled)
/// and counts in `dropped_bad`; tests match on the variant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ItemError {
    /// Shorter than the fixed header.
    Short {
        len: usize,
        header: usize,
    },
    Magic([u8; 2]),
    Version(u8),
    Kind {
        got: u8,
        expected: u8,
    },
    /// The header's width x height is above `MAX_IMAGE_BYTES`.
    ImageTooBig {
        image_bytes: usize,
    },
    /// The header's acks count is above `MAX_ITEM_ACKS`.
    TooManyItemAcks {
        acks: usize,
    },
    /// The item's length is not its header, image and acks.
    ItemLength {
        len: usize,
        width: u16,
        height: u16,
        acks: usize,
        needs: usize,
    },
    /// The slice is not the id mod the run's slice count (or the run has no slices).
    WrongSlice {
        slice: u32,
        id: u64,
        slices: u32,
    },
    /// A reply's message is longer than `MAX_MESSAGE_BYTES`.
    ReplyTooLong {
        len: usize,
    },
    /// An acks message's count is above `MAX_ACKS`.
    TooManyAcks {
        count: usize,
    },
    /// An acks message's length is not its header and ids.
    AcksLength {
        len: usize,
        count: usize,
        needs: usize,
    },
}

impl std::fmt::Display for ItemError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ItemError::Short { len, header } => {
                write!(f, "{len} bytes, shorter than the {header}-byte header")
            }
            ItemError::Magic([m0, m1]) => write!(f, "bad magic {m0:02x}{m1:02x}"),
            ItemError::Version(v) => write!(f, "version {v}, this node speaks {VERSION}"),
            ItemError::Kind { got, expected } => write!(f, "kind {got}, expected {expected}"),
            ItemError::ImageTooBig { image_bytes } => {
                write!(f, "image of {image_bytes} bytes, the limit is {MAX_IMAGE_BYTES}")
            }
            ItemError::TooManyItemAcks { acks } => {
                write!(f, "{acks} acks, the limit per item is {MAX_ITEM_ACKS}")
            }
            ItemError::ItemLength {
                len,
                width,
                height,
                acks,
                needs,
            } => write!(
                f,
                "item of {len} bytes, its {width}x{height} image and {acks} acks: it needs {needs}"
            ),
            ItemError::WrongSlice { slice, id, slices } => {
                write!(f, "slice {slice} is not id {id} mod {slices}")
            }
            ItemError::ReplyTooLong { len } => write!(
                f,
                "reply of {len} bytes, the limit is {}",
                REPLY_HEADER_BYTES + MAX_MESSAGE_BYTES
            ),
            ItemError::TooManyAcks { count } => write!(f, "{count} acks, the limit is {MAX_ACKS}"),
            ItemError::AcksLength { len, count, needs } => {
                write!(f, "acks of {len} bytes, {count} ids need {needs}")
            }
        }
    }
}

impl std::error::Error for ItemError {}

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
    pub fn decode(bytes: &[u8], slices: u32) -> Result<ItemHeader, ItemError> {
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
            return Err(ItemError::ImageTooBig {
                image_bytes: h.image_bytes(),
            });
        }
        let acks = r.u16(26) as usize;
        if acks > MAX_ITEM_ACKS {
            return Err(ItemError::TooManyItemAcks { acks });
        }
        let needs = ITEM_HEADER_BYTES + h.image_bytes() + 8 * acks;
        if bytes.len() != needs {
            return Err(ItemError::ItemLength {
                len: bytes.len(),
                width: h.width,
                height: h.height,
                acks,
                needs,
            });
        }
        if slices == 0 || h.id % slices as u64 != h.slice as u64 {
            return Err(ItemError::WrongSlice {
                slice: h.slice,
                id: h.id,
                slices,
            });
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

    pub fn decode(bytes: &[u8]) -> Result<Reply, ItemError> {
        let r = Reader::new(bytes, REPLY_HEADER_BYTES, KIND_REPLY)?;
        if bytes.len() > REPLY_HEADER_BYTES + MAX_MESSAGE_BYTES {
            return Err(ItemError::ReplyTooLong { len: bytes.len() });
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

    pub fn decode(bytes: &[u8]) -> Result<Acks, ItemError> {
        let r = Reader::new(bytes, ACKS_HEADER_BYTES, KIND_ACKS)?;
        let count = r.u32(12) as usize;
        if count > MAX_ACKS {
            return Err(ItemError::TooManyAcks { count });
        }
        if bytes.len() != ACKS_HEADER_BYTES + 8 * count {
            return Err(ItemError::AcksLength {
                len: bytes.len(),
                count,
                needs: ACKS_HEADER_BYTES + 8 * count,
            });
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
    fn new(bytes: &'a [u8], header: usize, kind: u8) -> Result<Self, ItemError> {
        if bytes.len() < header {
            return Err(ItemError::Short {
                len: bytes.len(),
                header,
            });
        }
        if bytes[..2] != MAGIC {
            return Err(ItemError::Magic([bytes[0], bytes[1]]));
        }
        if bytes[2] != VERSION {
            return Err(ItemError::Version(bytes[2]));
        }
        if bytes[3] != kind {
            return Err(ItemError::Kind {
                got: bytes[3],
                expected: kind,
            });
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
