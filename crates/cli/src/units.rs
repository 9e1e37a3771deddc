//! Sizes and ages as the command line takes them (`10G`, `500M`;
//! `90s`, `12h`, `7d`), for every command's options.

/// An age as rclone writes one: a number and s, m, h, d or w.
pub fn parse_age(s: &str) -> Result<std::time::Duration, String> {
    let t = s.trim();
    let unit = match t.chars().last() {
        Some('s') => 1,
        Some('m') => 60,
        Some('h') => 3600,
        Some('d') => 86400,
        Some('w') => 7 * 86400,
        _ => 0,
    };
    let num = if unit == 0 { t } else { &t[..t.len() - 1] };
    num.parse::<u64>()
        .ok()
        .and_then(|v| v.checked_mul(unit.max(1)))
        .map(std::time::Duration::from_secs)
        .ok_or_else(|| format!("{s:?} is not an age; write it like 90s, 30m, 12h, 7d or 2w"))
}

/// A size: a number and K, M, G or T (powers of 1024), or bytes.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (num, shift) = match t.chars().last().map(|c| c.to_ascii_uppercase()) {
        Some('K') => (&t[..t.len() - 1], 10),
        Some('M') => (&t[..t.len() - 1], 20),
        Some('G') => (&t[..t.len() - 1], 30),
        Some('T') => (&t[..t.len() - 1], 40),
        _ => (t, 0),
    };
    num.parse::<u64>()
        .ok()
        .and_then(|v| v.checked_mul(1 << shift))
        .ok_or_else(|| format!("{s:?} is not a size; write it like 10G, 500M or 4096"))
}
