//! Link options as people write them: `--delay 75` (ms, one way),
//! `--rate 1G`, `--loss 0.1` (percent). A value `X/Y` sets the a→b and b→a
//! directions separately; a single value sets both.

use std::time::Duration;

use netsim::{GilbertElliott, LinkConfig};

/// Splits `X/Y` into its two directions, or repeats a single value.
pub fn per_direction(v: &str) -> (&str, &str) {
    v.split_once('/').unwrap_or((v, v))
}

pub fn millis(v: &str) -> Result<Duration, String> {
    let ms: f64 = v
        .trim()
        .trim_end_matches("ms")
        .parse()
        .map_err(|_| format!("{v:?} is not a time in milliseconds"))?;
    if !(0.0..=3_600_000.0).contains(&ms) {
        return Err(format!("{v} ms is out of range"));
    }
    Ok(Duration::from_secs_f64(ms / 1e3))
}

pub fn percent(v: &str) -> Result<f64, String> {
    let p: f64 = v
        .trim()
        .trim_end_matches('%')
        .parse()
        .map_err(|_| format!("{v:?} is not a percentage"))?;
    if !(0.0..=100.0).contains(&p) {
        return Err(format!("{v}% is out of range"));
    }
    Ok(p / 100.0)
}

pub fn rate_bps(v: &str) -> Result<u64, String> {
    rate::parse_rate(v)
        .map(|bytes| bytes * 8)
        .ok_or_else(|| format!("{v:?} is not a rate like 1G or 100M"))
}

/// `P_GB,P_BG,LOSS_BAD[,LOSS_GOOD]`, all percentages.
pub fn gilbert_elliott(v: &str) -> Result<GilbertElliott, String> {
    let parts: Vec<f64> = v.split(',').map(percent).collect::<Result<_, _>>()?;
    match parts[..] {
        [p_good_to_bad, p_bad_to_good, loss_bad] => Ok(GilbertElliott {
            p_good_to_bad,
            p_bad_to_good,
            loss_bad,
            loss_good: 0.0,
        }),
        [p_good_to_bad, p_bad_to_good, loss_bad, loss_good] => Ok(GilbertElliott {
            p_good_to_bad,
            p_bad_to_good,
            loss_bad,
            loss_good,
        }),
        _ => Err(format!(
            "{v:?}: write Gilbert-Elliott loss as P_GB,P_BG,LOSS_BAD[,LOSS_GOOD] in percent"
        )),
    }
}

/// `START-END` in seconds from the start.
pub fn outage(v: &str) -> Result<(Duration, Duration), String> {
    let (a, b) = v
        .split_once('-')
        .ok_or_else(|| format!("{v:?}: write an outage as START-END in seconds"))?;
    let a: f64 = a.parse().map_err(|_| format!("{v:?}: bad start"))?;
    let b: f64 = b.parse().map_err(|_| format!("{v:?}: bad end"))?;
    if !(a >= 0.0 && b > a) {
        return Err(format!("{v:?}: the end must come after the start"));
    }
    Ok((Duration::from_secs_f64(a), Duration::from_secs_f64(b)))
}

/// Applies one option to both directions' configs.
pub fn apply<T>(
    value: Option<&str>,
    parse: impl Fn(&str) -> Result<T, String>,
    set: impl Fn(&mut LinkConfig, T),
    a2b: &mut LinkConfig,
    b2a: &mut LinkConfig,
) -> Result<(), String> {
    if let Some(v) = value {
        let (x, y) = per_direction(v);
        set(a2b, parse(x)?);
        set(b2a, parse(y)?);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_options() {
        assert_eq!(per_direction("1/2"), ("1", "2"));
        assert_eq!(per_direction("5"), ("5", "5"));
        assert_eq!(millis("75").unwrap(), Duration::from_millis(75));
        assert_eq!(millis("0.1").unwrap(), Duration::from_micros(100));
        assert!(millis("x").is_err());
        assert_eq!(percent("0.1").unwrap(), 0.001);
        assert!(percent("120").is_err());
        assert_eq!(rate_bps("1G").unwrap(), 1_000_000_000);
        assert_eq!(rate_bps("100M").unwrap(), 100_000_000);
        assert_eq!(
            outage("10-20").unwrap(),
            (Duration::from_secs(10), Duration::from_secs(20))
        );
        assert!(outage("20-10").is_err());
        let ge = gilbert_elliott("1,20,100").unwrap();
        assert_eq!(
            (ge.p_good_to_bad, ge.p_bad_to_good, ge.loss_bad),
            (0.01, 0.2, 1.0)
        );
        let (mut a, mut b) = (LinkConfig::default(), LinkConfig::default());
        apply(Some("1/0"), percent, |c, v| c.loss = v, &mut a, &mut b).unwrap();
        assert_eq!((a.loss, b.loss), (0.01, 0.0));
    }
}
