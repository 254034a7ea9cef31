//! The request message: built once, at node start, from JSON through the method's input
//! type (prost-reflect's `DynamicMessage` and its protobuf JSON mapping: field names as in
//! the .proto or in lowerCamelCase, int64 as numbers or strings, bytes as base64, enums by
//! name or number), encoded once, and framed as gRPC's length-prefixed message: a
//! compressed flag (0) and the length, 4 bytes big-endian, then the bytes.

use prost::Message;
use prost_reflect::{DynamicMessage, MessageDescriptor};

/// A request message larger than this is refused: it is built once and sent whole with
/// every call (gRPC servers refuse over 4 MiB by default).
pub const MAX_MESSAGE_BYTES: usize = 16 << 20;
/// The gRPC message prefix: the compressed flag and the length.
pub const PREFIX_BYTES: usize = 5;

/// `json` (an object, as text) as a `desc` message's encoded bytes, or one line on what
/// does not match (a field name, a type).
pub fn encode(desc: &MessageDescriptor, json: &str) -> Result<Vec<u8>, String> {
    let mut de = serde_json::Deserializer::from_str(json);
    let mut track = serde_path_to_error::Track::new();
    let parsed = DynamicMessage::deserialize(
        desc.clone(),
        serde_path_to_error::Deserializer::new(&mut de, &mut track),
    );
    let msg = parsed.and_then(|m| de.end().map(|()| m)).map_err(|e| {
        let text = e.to_string().split_whitespace().collect::<Vec<_>>().join(" ");
        let path = track.path().to_string();
        let at = if path == "." {
            String::new()
        } else {
            format!("field {path}: ")
        };
        format!("data does not match {}: {at}{text}", desc.full_name())
    })?;
    let bytes = msg.encode_to_vec();
    if bytes.len() > MAX_MESSAGE_BYTES {
        return Err(format!(
            "data: the message is {} bytes, over {} MiB",
            bytes.len(),
            MAX_MESSAGE_BYTES >> 20
        ));
    }
    Ok(bytes)
}

/// `message` as one gRPC length-prefixed message (uncompressed).
pub fn frame(message: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(PREFIX_BYTES + message.len());
    out.push(0);
    out.extend_from_slice(&(message.len() as u32).to_be_bytes());
    out.extend_from_slice(message);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost_reflect::DescriptorPool;

    fn desc() -> MessageDescriptor {
        let d = crate::scratch::fresh_dir("grpc-msg");
        std::fs::write(
            d.join("m.proto"),
            "syntax = \"proto3\"; package t;\nenum Kind { A = 0; B = 1; }\nmessage M { string text = 1; int32 sleep_ms = 2; bytes pad = 3; int64 big = 4; Kind kind = 5; repeated string tags = 6; }",
        )
        .unwrap();
        let mut c = protox::Compiler::new([&d]).unwrap();
        c.open_file(d.join("m.proto")).unwrap();
        let pool: DescriptorPool = c.descriptor_pool();
        pool.get_message_by_name("t.M").unwrap()
    }

    #[test]
    fn json_is_encoded_as_protobuf_does() {
        let d = desc();
        let b = encode(
            &d,
            r#"{"text": "hi", "sleepMs": 5, "pad": "AAE=", "big": "7", "kind": "B", "tags": ["x"]}"#,
        )
        .unwrap();
        // 1: "hi"; 2: 5; 3: 00 01; 4: 7; 5: 1; 6: "x"
        assert_eq!(
            b,
            [0x0a, 2, b'h', b'i', 0x10, 5, 0x1a, 2, 0, 1, 0x20, 7, 0x28, 1, 0x32, 1, b'x']
        );
        assert_eq!(encode(&d, r#"{"sleep_ms": 5}"#).unwrap(), [0x10, 5]);
        assert_eq!(encode(&d, "{}").unwrap(), Vec::<u8>::new());
    }

    #[test]
    fn json_that_does_not_match_is_one_line() {
        let d = desc();
        for (json, words) in [
            (r#"{"txt": "hi"}"#, "txt"),
            (r#"{"sleep_ms": "many"}"#, "field sleep_ms: invalid digit"),
            (r#"{"text": 3}"#, "string"),
            (r#"{"kind": "Z"}"#, "Z"),
            (r#"{"text": "a"} x"#, "trailing"),
            ("[1]", "data does not match t.M"),
        ] {
            let e = encode(&d, json).unwrap_err();
            assert!(e.starts_with("data does not match t.M: "), "{e}");
            assert!(e.contains(words), "{json}: {e}");
            assert!(!e.contains('\n'));
        }
    }

    #[test]
    fn frames_are_length_prefixed() {
        assert_eq!(frame(b"abc"), [0, 0, 0, 0, 3, b'a', b'b', b'c']);
        assert_eq!(frame(b""), [0, 0, 0, 0, 0]);
    }
}
