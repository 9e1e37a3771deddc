//! RFC 1123 dates (`Sun, 06 Nov 1994 08:49:37 GMT`): `x-ms-date` on every
//! request, `Last-Modified` in answers and listings. Civil dates from days
//! and back by Howard Hinnant's algorithms.

use std::time::{SystemTime, UNIX_EPOCH};

const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// `t` as an RFC 1123 date, in GMT.
pub fn rfc1123(t: SystemTime) -> String {
    let secs = t
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    format_secs(secs)
}

/// Seconds since the epoch as an RFC 1123 date.
pub fn format_secs(secs: i64) -> String {
    let days = secs.div_euclid(86_400);
    let s = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{}, {d:02} {} {y:04} {:02}:{:02}:{:02} GMT",
        DAYS[days.rem_euclid(7) as usize],
        MONTHS[(m - 1) as usize],
        s / 3600,
        s / 60 % 60,
        s % 60
    )
}

/// Seconds since the epoch of an RFC 1123 date; none if it is not one.
pub fn parse(s: &str) -> Option<i64> {
    let rest = s.trim().split_once(", ").map_or(s.trim(), |(_, r)| r);
    let mut w = rest.split_ascii_whitespace();
    let d: u32 = w.next()?.parse().ok()?;
    let mon = w.next()?;
    let m = MONTHS.iter().position(|x| x.eq_ignore_ascii_case(mon))? as u32 + 1;
    let y: i64 = w.next()?.parse().ok()?;
    let mut hms = w.next()?.split(':').map(|p| p.parse::<i64>().ok());
    let (h, mi, se) = (hms.next()??, hms.next()??, hms.next()??);
    if !(1..=31).contains(&d) || h > 23 || mi > 59 || se > 60 || hms.next().is_some() {
        return None;
    }
    if !matches!(w.next(), Some("GMT") | Some("UTC") | None) {
        return None;
    }
    Some(days_from_civil(y, m, d) * 86_400 + h * 3600 + mi * 60 + se)
}

fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = i64::from((m + 9) % 12);
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn known_dates() {
        assert_eq!(format_secs(784_111_777), "Sun, 06 Nov 1994 08:49:37 GMT");
        assert_eq!(parse("Sun, 06 Nov 1994 08:49:37 GMT"), Some(784_111_777));
        assert_eq!(format_secs(0), "Thu, 01 Jan 1970 00:00:00 GMT");
        assert_eq!(format_secs(951_782_400), "Tue, 29 Feb 2000 00:00:00 GMT");
        assert_eq!(parse("Fri, 31 Dec 1999 23:59:59 GMT"), Some(946_684_799));
        for bad in [
            "",
            "yesterday",
            "Sun, 06 Foo 1994 08:49:37 GMT",
            "Sun, 06 Nov 1994 25:49:37 GMT",
        ] {
            assert_eq!(parse(bad), None, "{bad}");
        }
    }

    proptest! {
        #[test]
        fn round_trips(secs in -10_000_000_000i64..100_000_000_000) {
            prop_assert_eq!(parse(&format_secs(secs)), Some(secs));
        }

        #[test]
        fn parse_never_panics(s in ".{0,40}") {
            let _ = parse(&s);
        }
    }
}
