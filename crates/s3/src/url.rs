//! `s3://BUCKET/KEY` and `s3://BUCKET/PREFIX/`: S3's rule for bucket
//! names over `object`'s locations.

use object::ObjectUrl;

/// The scheme that marks a location as S3's.
pub const SCHEME: &str = "s3://";

/// Whether `s` names an S3 location rather than a path or a host.
pub fn is_s3(s: &str) -> bool {
    s.starts_with(SCHEME)
}

/// Parses `s3://BUCKET[/KEY]`. Bucket names follow S3's rules (3–63
/// characters of lowercase letters, digits, '.', '-'; dots allowed for
/// stores that take them); keys are at most 1,024 bytes.
pub fn parse(s: &str) -> Result<ObjectUrl, String> {
    ObjectUrl::parse(s, SCHEME, 1, 1024, |bucket| {
        let ok = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '.' || c == '-';
        let fine = (3..=63).contains(&bucket.len()) && bucket.chars().all(ok);
        (!fine).then(|| {
            format!(
                "{bucket:?} is not a bucket name (3 to 63 lowercase letters, digits, '.' or '-'); write s3://BUCKET/KEY"
            )
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms() {
        let u = parse("s3://data/a/b.bin").unwrap();
        assert_eq!((u.bucket.as_str(), u.key.as_str()), ("data", "a/b.bin"));
        assert_eq!(parse("s3://data").unwrap().to_string(), "s3://data/");
        for bad in [
            "s3://",
            "s3://ab",
            "s3://Upper/x",
            "s3://b_c/x",
            "s3://data//x",
            "s3://data/a/../x",
            "/tmp/x",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
        assert!(is_s3("s3://x") && !is_s3("host:/x"));
    }
}
