//! Packed control messages (P-34): two or more control messages carried in
//! one sealed frame and compressed together. A tree's manifest is tens of
//! thousands of entries whose paths share most of their bytes; one frame
//! and one tag per entry would cost more than the entries themselves.
//!
//! This module joins and splits the uncompressed form; the drivers
//! compress it (zstd) and carry it as [`Msg::Packed`].

use crate::buf::{DecodeError, Reader};
use crate::msg::Msg;
pub use crate::packed_limit::MAX_PACKED;

/// The uncompressed form of `msgs`: each as `u32 length | body`.
pub fn join(msgs: &[Msg]) -> Vec<u8> {
    let mut raw = Vec::new();
    for m in msgs {
        append(&mut raw, &m.encode());
    }
    raw
}

/// Appends one encoded message to the uncompressed form.
pub fn append(raw: &mut Vec<u8>, body: &[u8]) {
    raw.extend_from_slice(&(body.len() as u32).to_le_bytes());
    raw.extend_from_slice(body);
}

/// Bytes a message of `body_len` bytes takes in the joined form.
pub fn joined_len(body_len: usize) -> usize {
    4 + body_len
}

/// Splits the uncompressed form back into messages. Fails on a truncated
/// or trailing message, on fewer than two messages, and on a packed
/// message inside a packed message.
pub fn split(raw: &[u8]) -> Result<Vec<Msg>, DecodeError> {
    if raw.len() > MAX_PACKED {
        return Err(DecodeError::TooLong {
            what: "packed messages",
            len: raw.len(),
            max: MAX_PACKED,
        });
    }
    let mut r = Reader::new(raw);
    let mut out = Vec::new();
    while r.remaining() > 0 {
        let body = r.var_bytes("packed message", MAX_PACKED)?;
        let m = Msg::decode(body)?;
        if matches!(m, Msg::Packed { .. }) {
            return Err(DecodeError::Invalid(
                "packed message inside a packed message",
            ));
        }
        out.push(m);
    }
    if out.len() < 2 {
        return Err(DecodeError::Invalid("packed message count"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::msg::tests::arb_msg;
    use proptest::prelude::*;

    fn unpacked() -> impl Strategy<Value = Msg> {
        arb_msg().prop_filter("a packed message cannot be packed", |m| {
            !matches!(m, Msg::Packed { .. })
        })
    }

    proptest! {
        #[test]
        fn joined_messages_split_back(msgs in proptest::collection::vec(unpacked(), 2..20)) {
            let raw = join(&msgs);
            prop_assert_eq!(raw.len(), msgs.iter().map(|m| joined_len(m.encode().len())).sum::<usize>());
            prop_assert_eq!(split(&raw).unwrap(), msgs);
        }

        #[test]
        fn splitting_never_panics(b in proptest::collection::vec(any::<u8>(), 0..400)) {
            let _ = split(&b);
        }

        #[test]
        fn mutated_packs_never_panic(msgs in proptest::collection::vec(unpacked(), 2..6), at: usize, byte: u8) {
            let mut raw = join(&msgs);
            let i = at % raw.len();
            raw[i] = byte;
            let _ = split(&raw);
        }
    }

    #[test]
    fn nested_single_and_truncated_packs_are_refused() {
        let one = join(&[Msg::Welcome]);
        assert!(split(&one).is_err());
        assert!(split(&[]).is_err());
        let nested = Msg::Packed {
            raw_len: 9,
            data: vec![1, 2, 3],
        };
        assert!(split(&join(&[Msg::Welcome, nested])).is_err());
        let two = join(&[Msg::Welcome, Msg::FileDone { file: 3 }]);
        assert!(split(&two[..two.len() - 1]).is_err());
        let mut long = two.clone();
        long.extend_from_slice(&[0, 0]);
        assert!(split(&long).is_err());
        // A length past the end is refused, not trusted.
        let mut lie = two;
        lie[..4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(split(&lie).is_err());
    }
}
