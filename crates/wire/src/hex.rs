//! Lowercase hexadecimal, as keys are written in greetings (P-27) and key
//! files.

pub fn encode(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Exactly 64 hex digits as 32 bytes.
pub fn decode32(s: &str) -> Option<[u8; 32]> {
    if s.len() != 64 || !s.is_ascii() {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

/// Any even number of hex digits, at most `max` bytes' worth.
pub fn decode(s: &str, max: usize) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) || s.len() > 2 * max || !s.is_ascii() {
        return None;
    }
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn round_trip() {
        let b = [0xa5u8; 32];
        assert_eq!(super::decode32(&super::encode(&b)), Some(b));
        assert_eq!(super::decode32("zz"), None);
        assert_eq!(super::decode32(&"g".repeat(64)), None);
        assert_eq!(super::decode("0aff", 2), Some(vec![10, 255]));
        assert_eq!(super::decode("0aff", 1), None);
        assert_eq!(super::decode("0af", 2), None);
        assert_eq!(super::decode("", 2), Some(vec![]));
    }
}
